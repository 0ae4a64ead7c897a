// SharedCoordinator (shared_coordinator.h): what it stores off the event loop, on the
// protocol's reads' thread and connection (storage_reads.h): this node's own trials' starts,
// ends, claims and claims given back, a dead node's trials' ends, and a study's end. Each job
// that decides under the study's lock runs in one transaction of its own (BeginLocked) and hands
// the loop what it read.

#include <algorithm>

#include "daemon/scheduler/enqueued_params.h"
#include "daemon/scheduler/shared_coordinator.h"

namespace triald::daemon {
using common::Result;
using common::Status;
using model::TrialRecord;
using model::TrialState;

void SharedCoordinator::MarkRunningOffLoop(int64_t trial_id, const model::ProcessIdentity& process,
                                           double at, std::function<void(Status)> done) {
  options_.reads->Submit([trial_id, process, at, done = std::move(done)](storage::Storage& s) {
    Status st = s.MarkRunning(trial_id, process, at);
    return StorageReads::Done([st, done] { done(st); });
  });
}

void SharedCoordinator::FinishOffLoop(StudyCache& study, EndWrite end, EndDone done) {
  ++study.pending_finishes;  // the study stays in memory, and cannot complete, until it is back
  ++ends_in_flight_;
  options_.reads->Submit([this, from = ReadFromNow(study), me = options_.storage->node(),
                          end = std::move(end),
                          done = std::move(done)](storage::Storage& storage) mutable {
    EndRead read = StoreEnd(storage, from, me, end);
    return StorageReads::Done(
        [this, from, end = std::move(end), read = std::move(read),
         done = std::move(done)]() mutable { OnEndRead(from, end, std::move(read), done); });
  });
}

Result<model::StudyRecord> SharedCoordinator::BeginLocked(
    storage::Storage& storage, const ReadFrom& from, Result<std::vector<TrialRecord>>* changed) {
  Status st = storage.BeginBatch();
  if (!st.ok()) return st;
  Result<model::StudyRecord> rec = storage.LockStudy(from.study_id);
  if (rec.ok()) {
    *changed = storage.GetTrialsSince(from.study_id, from.known, from.open);
    if (changed->ok()) return rec;
    rec = changed->status();
  }
  // A transaction that failed stores nothing: the commit ends it (storage.h).
  (void)storage.CommitBatch();
  return rec.status();
}

SharedCoordinator::EndRead SharedCoordinator::StoreEnd(storage::Storage& storage,
                                                       const ReadFrom& from, const std::string& me,
                                                       EndWrite& end) {
  EndRead read;
  EndStored& stored = read.stored;
  // Its writes still in the lazy writer's queue first (waiting for its batch in flight when that
  // holds one of them), before this transaction locks anything the batch may wait for.
  std::vector<PendingWrites::Write> writes = std::move(end.writes);
  if (end.take_queued) {
    for (PendingWrites::Write& w : end.take_queued()) writes.push_back(std::move(w));
  }
  // A failure stores nothing: the writes go back to the caller, all of them (a write made twice
  // changes nothing), and the end is kept.
  auto failed = [&](Status st) {
    stored.status = std::move(st);
    stored.writes = std::move(writes);
    return std::move(read);
  };
  Result<model::StudyRecord> rec = BeginLocked(storage, from, &read.changed);
  if (!rec.ok()) return failed(rec.status());
  // CommitBatch of a batch whose connection was lost or whose transaction failed stores nothing
  // (storage.h); one that failed on a refusal rolls back what it made.
  auto abandon = [&](Status why) {
    (void)storage.CommitBatch();
    return failed(std::move(why));
  };
  Status st;
  auto dropped = [&]() {
    // Another node ended it, or took it over, while this one was silent: theirs now. The commit
    // releases the lock (nothing was written that matters: the trial's writes are refused).
    stored.dropped = true;
    Status committed = storage.CommitBatch();
    if (!committed.ok()) read.changed = committed;
    return std::move(read);
  };
  // Whose it must still be: this node's (or nobody's yet), or the dead node's exactly (a claim
  // given back meanwhile leaves a waiting trial that is nobody's to end).
  const std::string& owner = end.reaped ? end.reaped->node : me;
  for (const TrialRecord& t : *read.changed) {
    if (t.number != end.number) continue;
    const bool theirs = end.reaped ? t.node == owner : (t.node.empty() || t.node == owner);
    if (model::IsFinished(t.state) || !theirs) return dropped();
  }
  if (end.reaped) {
    // Still silent now, under the lock: a node that has just come back keeps its trials.
    Result<std::vector<model::NodeRecord>> nodes = storage.GetNodes(end.at);
    if (!nodes.ok()) return abandon(nodes.status());
    for (const model::NodeRecord& n : *nodes) {
      if (n.name == owner && n.AliveWithin(end.reaped->node_timeout_s)) return dropped();
    }
  }
  for (const PendingWrites::Write& w : writes) {
    st = PendingWrites::Apply(storage, w);
    if (st.ok()) continue;
    if (PendingWrites::IsOutage(st)) return abandon(st);
    ++stored.refused_writes;  // refused for itself: a parameter stored already
  }
  st = storage.FinishTrial(end.trial_id, end.outcome, end.at);
  if (st.code() == common::Code::kFailedPrecondition) return dropped();
  if (!st.ok()) return abandon(st);
  auto event = [&](std::optional<int64_t> trial_id, const std::string& kind,
                   const std::string& detail) {
    Status e = storage.AppendEvent(from.study_id, trial_id, kind, detail, end.at);
    if (!e.ok()) ++stored.event_errors;
    return e;
  };
  if (end.reaped) {
    st = event(end.trial_id, "trial_lost", end.reaped->lost);
    if (PendingWrites::IsOutage(st)) return abandon(st);
  }
  st = event(end.trial_id, "trial_finished", end.finished);
  if (PendingWrites::IsOutage(st)) return abandon(st);
  if (end.exhausted) {
    st = event(end.trial_id, "retries_exhausted", *end.exhausted);
    if (PendingWrites::IsOutage(st)) return abandon(st);
  }
  // A study cancelled or ended through another node meanwhile retries nothing.
  if (end.retry && rec->state == model::StudyState::kRunning) {
    Result<TrialRecord> created =
        storage.CreateTrial(from.study_id, end.retry->params, end.at, end.trial_id);
    if (!created.ok() && PendingWrites::IsOutage(created.status())) {
      return abandon(created.status());
    }
    if (!created.ok()) {
      stored.retry_error = created.status().message();  // the end is stored without it
    } else {
      st = event(created->id, end.retry->kind, end.retry->what(created->number));
      if (PendingWrites::IsOutage(st)) return abandon(st);
      stored.retry = std::move(created).value();
    }
  }
  st = storage.CommitBatch();
  if (!st.ok()) {
    stored.retry.reset();
    return failed(st);
  }
  return read;
}

void SharedCoordinator::OnEndRead(const ReadFrom& from, const EndWrite& end, EndRead read,
                                  const EndDone& done) {
  --ends_in_flight_;
  if (end.reaped) reaping_.erase(end.trial_id);
  StudyCache* study = options_.host->FindStudy(from.study_id);
  if (study == nullptr) {
    done(nullptr, end, std::move(read.stored));  // forgotten meanwhile: nothing to mirror
    return;
  }
  --study->pending_finishes;
  EndStored& stored = read.stored;
  // What the end's transaction read under the lock, unless a read of the study was applied since
  // it began (a claim's, a tick's): that one may be newer.
  if (read.changed.ok() && study->sync_epoch == from.epoch) {
    Apply(*study, std::move(read.changed).value(), /*off_loop=*/true);
  }
  if (stored.refused_writes > 0) {
    options_.logger->warn("study {} trial {}: {} of its writes refused with its end (dropped)",
                          study->record.name, end.number, stored.refused_writes);
  }
  if (stored.event_errors > 0) {
    options_.logger->error("study {} trial {}: {} event(s) of its end could not be stored",
                           study->record.name, end.number, stored.event_errors);
  }
  if (!stored.retry_error.empty()) {
    options_.logger->error("study {} trial {}: storing its retry: {}", study->record.name,
                           end.number, stored.retry_error);
  }
  if (stored.dropped && end.reaped) {
    options_.logger->info(
        "study {} trial {}: not ended as lost with node {}: it ended, or the node beats again",
        study->record.name, end.number, end.reaped->node);
  } else if (stored.dropped) {
    options_.logger->warn(
        "study {} trial {}: ended or taken over by another node; this node's outcome ({}) is "
        "dropped",
        study->record.name, end.number, model::TrialStateName(end.outcome.state));
  } else if (!stored.status.ok() && end.reaped) {
    // Not kept: the next tick that finds the node dead ends the trial again.
    options_.logger->error("study {} trial {}: storing its end as lost with node {}: {}",
                           study->record.name, end.number, end.reaped->node,
                           stored.status.message());
  } else if (!stored.status.ok()) {
    // Kept for a later tick, as an end the loop could not store (KeepFailedFinish).
    pending_.Keep(*study, end.number, end.outcome, /*own=*/true, stored.status.message(),
                  options_.logger);
  }
  done(study, end, std::move(stored));
}

bool SharedCoordinator::ClaimOffLoop(StudyCache& study, ClaimPick pick, ClaimDone done) {
  // A node that may already count as dead elsewhere claims nothing until its next heartbeat.
  if (!LeaseValid()) return false;
  ++claims_in_flight_;
  options_.reads->Submit([this, from = ReadFromNow(study), me = options_.storage->node(),
                          pick = std::move(pick), at = options_.clock->WallSeconds(),
                          done = std::move(done)](storage::Storage& storage) mutable {
    ClaimRead read = TakeClaim(storage, from, me, pick, at);
    return StorageReads::Done(
        [this, from, read = std::move(read), done = std::move(done)]() mutable {
          OnClaimRead(from, std::move(read), done);
        });
  });
  return true;
}

void SharedCoordinator::ReleaseOffLoop(StudyCache& study, int number, std::function<void()> done) {
  ++claims_in_flight_;
  const int64_t trial_id = study.trials[number].id;
  options_.reads->Submit([this, study_id = study.record.id, number, trial_id,
                          done = std::move(done)](storage::Storage& storage) {
    Status st = storage.ReleaseClaim(trial_id);
    return StorageReads::Done([this, study_id, number, trial_id, st, done] {
      --claims_in_flight_;
      StudyCache* study = options_.host->FindStudy(study_id);
      const std::string name = study != nullptr ? study->record.name : std::to_string(study_id);
      if (!st.ok()) {
        options_.logger->warn("study {} trial {}: giving back its claim: {}; it stays this node's",
                              name, number, st.message());
      } else if (study != nullptr && static_cast<size_t>(number) < study->trials.size()) {
        TrialRecord& trial = study->trials[number];
        if (trial.id == trial_id && trial.state == TrialState::kWaiting &&
            trial.node == options_.storage->node()) {
          trial.node.clear();
        }
      }
      done();
    });
  });
}

bool SharedCoordinator::EnqueueOffLoop(StudyCache& study, EnqueuePick pick, EnqueueDone done) {
  ++claims_in_flight_;
  options_.reads->Submit([this, from = ReadFromNow(study), pick = std::move(pick),
                          at = options_.clock->WallSeconds(),
                          done = std::move(done)](storage::Storage& storage) mutable {
    EnqueueRead read = StoreEnqueued(storage, from, pick, at);
    return StorageReads::Done(
        [this, from, read = std::move(read), done = std::move(done)]() mutable {
          --claims_in_flight_;
          StudyCache* study = options_.host->FindStudy(from.study_id);
          EnqueueMade& made = read.made;
          if (study == nullptr) {
            done(nullptr, std::move(made));  // forgotten meanwhile
            return;
          }
          if (read.changed.ok() && study->sync_epoch == from.epoch) {
            if (read.record) Adopt(*study, *read.record);
            Apply(*study, std::move(read.changed).value(), /*off_loop=*/true);
          }
          if (made.outcome == EnqueueMade::Outcome::kEnqueued) {
            const TrialRecord& trial = *made.trial;
            const auto number = static_cast<size_t>(trial.number);
            // A newer read may have it already (the next read brings it otherwise: the trials
            // before it are not read yet); it waits for any node's start.
            if (number == study->trials.size()) study->trials.push_back(trial);
            if (number < study->trials.size() && study->trials[number].id == trial.id &&
                study->trials[number].state == TrialState::kWaiting &&
                std::find(study->waiting.begin(), study->waiting.end(), trial.number) ==
                    study->waiting.end()) {
              study->waiting.push_back(trial.number);
            }
          }
          done(study, std::move(made));
        });
  });
  return true;
}

SharedCoordinator::EnqueueRead SharedCoordinator::StoreEnqueued(storage::Storage& storage,
                                                                const ReadFrom& from,
                                                                const EnqueuePick& pick,
                                                                double at) {
  EnqueueRead read;
  EnqueueMade& made = read.made;
  auto failed = [&](Status st) {
    made.outcome = EnqueueMade::Outcome::kFailed;
    made.status = std::move(st);
    return std::move(read);
  };
  Result<model::StudyRecord> rec = BeginLocked(storage, from, &read.changed);
  if (!rec.ok()) return failed(rec.status());
  read.record = *rec;
  // A failed transaction stores nothing (storage.h): the commit ends it.
  auto abandon = [&](Status why) {
    (void)storage.CommitBatch();
    return failed(std::move(why));
  };
  // Nothing was written: the commit only releases the lock.
  auto answered = [&](EnqueueMade::Outcome outcome, std::string why) {
    made.outcome = outcome;
    made.why = std::move(why);
    Status committed = storage.CommitBatch();
    if (!committed.ok()) return failed(committed);
    return std::move(read);
  };
  using Outcome = EnqueueMade::Outcome;
  if (rec->state != model::StudyState::kRunning) {
    return answered(Outcome::kStale,
                    std::string("the study is ") + model::StudyStateName(rec->state));
  }
  if (rec->n_trials != pick.n_trials) {
    return answered(Outcome::kStale, "its n_trials is " + std::to_string(rec->n_trials) + " now");
  }
  const std::vector<TrialRecord>& trials = *read.changed;
  int stored = from.known;
  for (const TrialRecord& t : trials) stored = std::max(stored, t.number + 1);
  if (stored != pick.number) {
    return answered(Outcome::kStale, "the study has " + std::to_string(stored) + " trials, not " +
                                         std::to_string(pick.number));
  }
  // The trials the cache knew finished were checked there; these may have changed since.
  if (!pick.skip_if_has.empty()) {
    for (const TrialRecord& t : trials) {
      if (!HasGivenValues(t, pick.skip_if_has)) continue;
      made.trial = t;
      return answered(Outcome::kSkipped, "trial " + std::to_string(t.number) + " has the values");
    }
  }
  Result<TrialRecord> created = storage.CreateTrial(from.study_id, pick.params, at);
  if (!created.ok()) return abandon(created.status().WithContext("storing the enqueued trial"));
  if (!pick.deferred.empty()) {
    Status st = storage.SetAttr(created->id, kEnqueuedAttr, pick.deferred);
    if (!st.ok()) return abandon(st.WithContext("storing the enqueued trial's values"));
    created->attrs[kEnqueuedAttr] = pick.deferred;
  }
  Status st = storage.AppendEvent(from.study_id, created->id, "trial_enqueued", pick.given, at);
  if (!st.ok()) return abandon(st.WithContext("storing the trial_enqueued event"));
  st = storage.CommitBatch();
  if (!st.ok()) return failed(st.WithContext("committing the enqueued trial"));
  made.outcome = Outcome::kEnqueued;
  made.trial = std::move(created).value();
  return read;
}

void SharedCoordinator::EndStudyOffLoop(StudyCache& study, StudyEndWrite end, StudyEndDone done) {
  ++ends_in_flight_;
  options_.reads->Submit([this, from = ReadFromNow(study), end = std::move(end),
                          done = std::move(done)](storage::Storage& storage) {
    StudyEndRead read = StoreStudyEnd(storage, from, end);
    return StorageReads::Done([this, from, read = std::move(read), done]() mutable {
      --ends_in_flight_;
      StudyCache* study = options_.host->FindStudy(from.study_id);
      if (study == nullptr) {
        done(nullptr, read.status, read.ended);
        return;
      }
      if (read.changed.ok() && study->sync_epoch == from.epoch) {
        if (read.record) Adopt(*study, *read.record);
        Apply(*study, std::move(read.changed).value(), /*off_loop=*/true);
      }
      done(study, read.status, read.ended);
    });
  });
}

SharedCoordinator::StudyEndRead SharedCoordinator::StoreStudyEnd(storage::Storage& storage,
                                                                 const ReadFrom& from,
                                                                 const StudyEndWrite& end) {
  StudyEndRead read;
  Result<model::StudyRecord> rec = BeginLocked(storage, from, &read.changed);
  if (!rec.ok()) {
    read.status = rec.status();
    return read;
  }
  read.record = *rec;
  int stored = from.known;
  bool open = false;
  for (const TrialRecord& t : *read.changed) {
    stored = std::max(stored, t.number + 1);
    open = open || !model::IsFinished(t.state);
  }
  // Not now (nothing written; the commit releases the lock): ended through another node, more
  // trials asked for, or trials the cache lacks or still open.
  const bool now = rec->state == model::StudyState::kRunning && rec->n_trials == end.n_trials &&
                   stored == from.known && !open;
  Status st;
  if (now) {
    st = storage.SetStudyState(from.study_id, end.state, end.at);
    if (st.ok()) {
      Status e = storage.AppendEvent(from.study_id, std::nullopt, end.kind, end.detail, end.at);
      if (PendingWrites::IsOutage(e)) st = e;  // another refusal: stored without its event
    }
  }
  Status committed = storage.CommitBatch();
  read.status = st.ok() ? committed : st;
  read.ended = now && read.status.ok();
  return read;
}

SharedCoordinator::ClaimRead SharedCoordinator::TakeClaim(storage::Storage& storage,
                                                          const ReadFrom& from,
                                                          const std::string& me,
                                                          const ClaimPick& pick, double at) {
  ClaimRead read;
  ClaimMade& made = read.made;
  auto failed = [&](Status st) {
    made.outcome = ClaimMade::Outcome::kFailed;
    made.status = std::move(st);
    return std::move(read);
  };
  Result<model::StudyRecord> rec = BeginLocked(storage, from, &read.changed);
  if (!rec.ok()) return failed(rec.status());
  read.record = *rec;
  // CommitBatch of a batch whose connection was lost or whose transaction failed stores nothing
  // (storage.h). A trial created before a refusal stays, WAITING and unclaimed, for any node.
  auto abandon = [&](Status why) {
    (void)storage.CommitBatch();
    return failed(std::move(why));
  };
  // Nothing was written: the commit only releases the lock.
  auto stale = [&](std::string why) {
    made.outcome = ClaimMade::Outcome::kStale;
    made.why = std::move(why);
    Status committed = storage.CommitBatch();
    if (!committed.ok()) return failed(committed);
    return std::move(read);
  };
  if (rec->state != model::StudyState::kRunning) {
    return stale(std::string("the study is ") + model::StudyStateName(rec->state));
  }
  if (rec->paused) return stale("the study is paused");
  if (rec->n_trials != pick.n_trials) {
    return stale("its n_trials is " + std::to_string(rec->n_trials) + " now");
  }
  const std::vector<TrialRecord>& trials = *read.changed;
  TrialRecord claimed;
  if (pick.waiting) {
    const int number = *pick.waiting;
    // It is open in the cache, so the read has it as stored now.
    auto it = std::find_if(trials.begin(), trials.end(),
                           [&](const TrialRecord& t) { return t.number == number; });
    if (it == trials.end() || it->state != TrialState::kWaiting ||
        (!it->node.empty() && it->node != me)) {
      return stale("trial " + std::to_string(number) + " was claimed or ended meanwhile");
    }
    claimed = *it;
  } else {
    int stored = from.known;
    for (const TrialRecord& t : trials) stored = std::max(stored, t.number + 1);
    if (stored != pick.number) {
      return stale("the study has " + std::to_string(stored) + " trials, not " +
                   std::to_string(pick.number));
    }
    for (const TrialRecord& t : trials) {
      if (t.state == TrialState::kWaiting && t.node.empty()) {
        return stale("trial " + std::to_string(t.number) + " waits unclaimed");
      }
    }
    Result<TrialRecord> created = storage.CreateTrial(from.study_id, pick.params, at);
    if (!created.ok()) return abandon(created.status().WithContext("storing a new trial"));
    if (created->number != pick.number) {
      // Not under this lock; the trial waits, unclaimed, for any node.
      return stale("the new trial is number " + std::to_string(created->number));
    }
    claimed = std::move(created).value();
    made.created = true;
  }
  Status st = storage.ClaimTrial(claimed.id);
  if (!st.ok()) return abandon(st);
  claimed.node = me;
  st = storage.CommitBatch();
  // Not durable: another node may take the trial, so this one must not run it.
  if (!st.ok()) return failed(st.WithContext("committing the claim"));
  made.outcome = ClaimMade::Outcome::kClaimed;
  made.trial = std::move(claimed);
  return read;
}

void SharedCoordinator::OnClaimRead(const ReadFrom& from, ClaimRead read, const ClaimDone& done) {
  --claims_in_flight_;
  StudyCache* study = options_.host->FindStudy(from.study_id);
  ClaimMade& made = read.made;
  if (study == nullptr) {
    done(nullptr, std::move(made));  // forgotten meanwhile
    return;
  }
  // What the claim's transaction read under the lock, unless a read of the study was applied
  // since it began: that one may be newer.
  if (read.changed.ok() && study->sync_epoch == from.epoch) {
    if (read.record) Adopt(*study, *read.record);
    Apply(*study, std::move(read.changed).value(), /*off_loop=*/true);
  }
  if (made.outcome == ClaimMade::Outcome::kClaimed) {
    TrialRecord& claimed = *made.trial;
    const int number = claimed.number;
    if (static_cast<size_t>(number) > study->trials.size()) {
      // A newer read was applied without the trials before it: claimed, and started once a read
      // brings them (it waits, this node's, until then).
      made.outcome = ClaimMade::Outcome::kStale;
      made.why = "trials before " + std::to_string(number) + " are not read yet";
    } else if (static_cast<size_t>(number) < study->trials.size() &&
               model::IsFinished(study->trials[number].state)) {
      // A newer read has it ended (a cancel through this node, a dead node's reaping elsewhere).
      made.outcome = ClaimMade::Outcome::kStale;
      made.why = "trial " + std::to_string(number) + " ended meanwhile";
    } else {
      if (static_cast<size_t>(number) == study->trials.size()) study->trials.emplace_back();
      study->trials[number] = claimed;
      study->waiting.erase(std::remove(study->waiting.begin(), study->waiting.end(), number),
                           study->waiting.end());
      // The lease again, right before the process starts; the claim stays this node's.
      if (!LeaseValid()) {
        study->waiting.push_front(number);
        made.outcome = ClaimMade::Outcome::kFailed;
        made.status = common::Unavailable("this node's lease lapsed before trial " +
                                          std::to_string(number) + " could start");
      }
    }
  }
  done(study, std::move(made));
}

}  // namespace triald::daemon
