#include "daemon/scheduler/shared_coordinator.h"

#include <algorithm>
#include <cstdio>

#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {
using common::Result;
using common::Status;
using model::TrialRecord;
using model::TrialState;

bool LeaseHolds(double now, double lease_from, double node_timeout_s) {
  return now - lease_from < kLeaseFraction * node_timeout_s;
}

double FenceAfterSeconds(double node_timeout_s, double heartbeat_interval_s,
                         double call_timeout_s) {
  return std::max(heartbeat_interval_s,
                  node_timeout_s - call_timeout_s - heartbeat_interval_s - 1.0);
}

SharedCoordinator::SharedCoordinator(CoordinatorOptions options) : options_(std::move(options)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
}

Status SharedCoordinator::Join() {
  const std::string& me = options_.storage->node();
  // A node name is one daemon's: refuse to start as a node another daemon (elsewhere: another
  // instance) still beats for. The same daemon restarted has the same instance.
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::NodeRecord> nodes,
                          options_.storage->GetNodes(options_.clock->WallSeconds()));
  for (const model::NodeRecord& n : nodes) {
    if (n.name != me || n.instance == options_.storage->instance()) continue;
    if (n.AliveWithin(options_.node_timeout_s)) {
      return common::FailedPrecondition(
          "node name \"" + me + "\" is in use by another triald (" + n.instance +
          ", last heartbeat " + std::to_string(static_cast<int>(n.silent_for)) +
          " s ago); give each daemon its own --node-name (or, if that daemon is gone, start "
          "again once it has been silent for --node-timeout, " +
          std::to_string(static_cast<int>(options_.node_timeout_s)) + " s)");
    }
    options_.logger->warn("node name {} was last used by {} ({:.0f} s ago); taking it over", me,
                          n.instance, n.silent_for);
  }
  // Beat first: a node that has just started is alive, whatever its previous beats say.
  const double started = options_.clock->MonotonicSeconds();
  Status hb = options_.storage->Heartbeat(options_.clock->WallSeconds());
  if (!hb.ok()) return hb.WithContext("recording this node's heartbeat");
  lease_from_ = started;
  Status dead = RefreshDeadNodes();
  if (!dead.ok()) return dead.WithContext("reading the nodes' heartbeats");
  return Status::Ok();
}

bool SharedCoordinator::IsOwn(const TrialRecord& trial) const {
  return trial.node == options_.storage->node();
}

bool SharedCoordinator::EndedElsewhere(const Status& st) const {
  return st.code() == common::Code::kFailedPrecondition;
}

bool SharedCoordinator::LeaveToOthers(const model::StudyRecord& study, const Status& why) {
  const double now = options_.clock->MonotonicSeconds();
  auto [it, first] = not_loaded_.try_emplace(study.name);
  NotLoaded& n = it->second;
  const bool same = !first && n.why == why.message();
  n.delay = first ? kLoadRetryFirstSeconds : std::min(n.delay * 2, kLoadRetryMaxSeconds);
  n.retry_at = now + n.delay;
  n.why = why.message();
  if (!same) {
    options_.logger->warn("study {}: not run on this node for now: {}; trying again in {} s",
                          study.name, n.why, n.delay);
  } else {
    options_.logger->debug("study {}: still not loadable: {}; trying again in {} s", study.name,
                           n.why, n.delay);
  }
  return true;
}

bool SharedCoordinator::LeftToOthers(const std::string& study_name) const {
  auto it = not_loaded_.find(study_name);
  return it != not_loaded_.end() && options_.clock->MonotonicSeconds() < it->second.retry_at;
}

SharedCoordinator::ReadFrom SharedCoordinator::ReadFromNow(const StudyCache& study) {
  ReadFrom from;
  from.study_id = study.record.id;
  from.known = static_cast<int>(study.trials.size());
  for (const TrialRecord& t : study.trials) {
    if (!model::IsFinished(t.state)) from.open.push_back(t.number);
  }
  from.epoch = study.sync_epoch;
  return from;
}

Status SharedCoordinator::Sync(StudyCache& study) {
  const ReadFrom from = ReadFromNow(study);
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> changed,
                          options_.storage->GetTrialsSince(from.study_id, from.known, from.open));
  Apply(study, std::move(changed), /*off_loop=*/false);
  return Status::Ok();
}

void SharedCoordinator::Apply(StudyCache& study, std::vector<TrialRecord> changed, bool off_loop) {
  const std::string& me = options_.storage->node();
  for (TrialRecord& t : changed) {
    if (t.number < 0) continue;
    if (static_cast<size_t>(t.number) >= study.trials.size()) study.trials.resize(t.number + 1);
    TrialRecord& known = study.trials[t.number];
    if (!model::IsFinished(t.state) && !model::IsFinished(known.state) && known.node == me &&
        t.node == me) {
      // This node's own open trial. Read off the loop, the read may predate its start (stored
      // and then set in memory on the loop): memory holds it as it is.
      if (off_loop) continue;
      // Its start may not be stored yet either (MarkRunningOffLoop): started in memory, it stays
      // started.
      if (known.state == TrialState::kRunning && t.state == TrialState::kWaiting) {
        t.state = known.state;
        t.process = known.process;
        t.started_at = known.started_at;
      }
      // What its channel took may not be stored yet (the lazy writer's queue, or writes kept
      // during an outage), so what memory holds wins.
      for (auto& [step, value] : known.intermediate) t.intermediate[step] = value;
      for (auto& [key, json] : known.attrs) t.attrs[key] = json;
      for (auto& [name, param] : known.params) t.params.insert_or_assign(name, param);
    }
    known = std::move(t);
  }
  study.synced_at = options_.clock->MonotonicSeconds();
  study.sync_epoch = NextSyncEpoch();
  options_.host->StopTrialsEndedElsewhere(study);
  study.Recount(options_.storage->node());
}

void SharedCoordinator::Adopt(StudyCache& study, const model::StudyRecord& stored) {
  // Control after submit (pause, extend, set parallelism), from any node.
  if (stored.paused != study.record.paused || stored.n_trials != study.record.n_trials ||
      stored.parallelism != study.record.parallelism) {
    options_.logger->info(
        "study {}: {}, n_trials {}, parallelism {} through another node", study.record.name,
        stored.paused ? "paused" : "not paused", stored.n_trials,
        stored.parallelism > 0 ? std::to_string(stored.parallelism) : std::string("the sweep's"));
    study.record.paused = stored.paused;
    study.record.n_trials = stored.n_trials;
    study.record.parallelism = stored.parallelism;
  }
  if (stored.state == study.record.state) return;
  study.record.state = stored.state;
  study.record.finished_at = stored.finished_at;
  options_.logger->info("study {}: {} through another node", study.record.name,
                        model::StudyStateName(stored.state));
  if (stored.state != model::StudyState::kCancelled) return;
  options_.host->StopStudyTrials(study);
}

Status SharedCoordinator::LockAndSync(StudyCache& study) {
  Result<model::StudyRecord> rec = options_.storage->LockStudy(study.record.id);
  Status st = rec.status();
  if (st.ok()) {
    Adopt(study, *rec);
    st = Sync(study);
  }
  if (!st.ok()) {
    options_.logger->error("study {}: locking it and reading other nodes' trials: {}",
                           study.record.name, st.message());
  }
  return st;
}

Status SharedCoordinator::LockIn(StudyCache& study, const StorageBatch& batch) {
  if (!batch.began()) return common::Unavailable("no transaction");
  return LockAndSync(study);
}

Result<std::unique_ptr<StorageBatch>> SharedCoordinator::Lock(StudyCache& study) {
  auto batch = std::make_unique<StorageBatch>(options_.storage, options_.logger);
  TRIALD_RETURN_IF_ERROR(LockIn(study, *batch));
  return batch;
}

Result<model::StudyRecord> SharedCoordinator::LockForControl(const model::StudyRecord& read) {
  // Under the lock: no node claims a trial of it meanwhile, and a second verb sees the first.
  return options_.storage->LockStudy(read.id);
}

Status SharedCoordinator::GatherWaiting(StudyCache& study) {
  TRIALD_RETURN_IF_ERROR(Sync(study));
  study.waiting.clear();
  for (const TrialRecord& t : study.trials) {
    if (t.state == TrialState::kWaiting) study.waiting.push_back(t.number);
  }
  return Status::Ok();
}

std::optional<int> SharedCoordinator::ClaimNext(StudyCache& study,
                                                const std::function<std::optional<int>()>& pick) {
  // A node that may already count as dead elsewhere (it was frozen, or cut off) claims nothing
  // until its next heartbeat.
  if (!LeaseValid()) return std::nullopt;
  StorageBatch batch(options_.storage, options_.logger);
  if (!batch.began() || !LockAndSync(study).ok()) return std::nullopt;
  std::optional<int> picked = pick();
  if (!picked) return std::nullopt;
  const int number = *picked;
  TrialRecord& trial = study.trials[number];
  Status st = options_.storage->ClaimTrial(trial.id);
  if (!st.ok()) {
    options_.logger->error("study {} trial {}: claiming it: {}", study.record.name, number,
                           st.message());
    return std::nullopt;
  }
  trial.node = options_.storage->node();
  study.waiting.erase(std::remove(study.waiting.begin(), study.waiting.end(), number),
                      study.waiting.end());
  st = batch.Commit();
  if (!st.ok()) {
    // The claim is not durable: another node may take the trial, so this one must not run it.
    options_.logger->error("study {} trial {}: committing the claim: {}", study.record.name, number,
                           st.message());
    return std::nullopt;
  }
  // The lease again, right before the process starts; the claim stays this node's.
  if (!LeaseValid()) return std::nullopt;
  return number;
}

bool SharedCoordinator::OpenElsewhere(const StudyCache& study) const {
  return std::any_of(study.trials.begin(), study.trials.end(),
                     [](const TrialRecord& t) { return !model::IsFinished(t.state); });
}

void SharedCoordinator::RefreshForPruning(StudyCache& study) {
  if (options_.clock->MonotonicSeconds() - study.synced_at < kPruneSyncSeconds) return;
  if (options_.reads == nullptr) {
    Status synced = Sync(study);
    if (!synced.ok()) {
      options_.logger->error("study {}: reading other nodes' trials: {}", study.record.name,
                             synced.message());
    }
    return;
  }
  if (study.read_in_flight) return;
  study.read_in_flight = true;
  options_.reads->Submit([this, from = ReadFromNow(study)](storage::Storage& storage) {
    Result<std::vector<TrialRecord>> changed =
        storage.GetTrialsSince(from.study_id, from.known, from.open);
    return StorageReads::Done([this, from, changed = std::move(changed)]() mutable {
      StudyCache* study = options_.host->FindStudy(from.study_id);
      if (study == nullptr) return;  // ended meanwhile
      study->read_in_flight = false;
      if (!changed.ok()) {
        // Tried again kPruneSyncSeconds from now, not at each report meanwhile.
        study->synced_at = options_.clock->MonotonicSeconds();
        options_.logger->error("study {}: reading other nodes' trials: {}", study->record.name,
                               changed.status().message());
        return;
      }
      // Read again on the loop since (a claim, an end): that read is newer.
      if (study->sync_epoch != from.epoch) return;
      Apply(*study, std::move(changed).value(), /*off_loop=*/true);
    });
  });
}

void SharedCoordinator::ReapDeadNodes(StudyCache& study) {
  // Its RUNNING trials, and those it claimed: it may have started one just before it went
  // silent, so a claimed trial is never handed to another node under the same number.
  auto on_dead = [&](const TrialRecord& t) {
    return !model::IsFinished(t.state) && !t.node.empty() && dead_nodes_.count(t.node) > 0;
  };
  if (std::none_of(study.trials.begin(), study.trials.end(), on_dead)) return;
  if (options_.clock->MonotonicSeconds() < reap_after_) return;
  if (options_.reads != nullptr) {
    // Off the loop: each end in a transaction of its own that checks, under the study's lock,
    // that the trial is still open and the node's, and the node still silent (StoreEnd). A host
    // that stores its ends on the loop refuses the first, and the loop's way below follows.
    bool handed = true;
    for (const TrialRecord& t : study.trials) {
      if (!on_dead(t) || reaping_.count(t.id) > 0) continue;
      model::TrialOutcome out = LostWithNode(t, options_.storage->node());
      EndReaped reaped{t.node, options_.node_timeout_s, out.fail.detail};
      handed = options_.host->FinishReapedOffLoop(study, t.number, out, reaped);
      if (!handed) break;
      reaping_.insert(t.id);
      options_.logger->warn("study {} trial {}: lost with node {}", study.record.name, t.number,
                            t.node);
    }
    if (handed) return;
  }
  StorageBatch batch(options_.storage, options_.logger);
  if (!batch.began() || !LockAndSync(study).ok()) return;
  // Still silent now, under the lock: a node that has just come back keeps its trials.
  Status st = RefreshDeadNodes();
  if (!st.ok()) {
    options_.logger->error("reading the nodes' heartbeats: {}", st.message());
    return;
  }
  std::vector<int> numbers;
  for (const TrialRecord& t : study.trials) {
    if (on_dead(t)) numbers.push_back(t.number);
  }
  for (int number : numbers) {
    const TrialRecord t = study.trials[number];
    model::TrialOutcome out = LostWithNode(t, options_.storage->node());
    options_.logger->warn("study {} trial {}: lost with node {}", study.record.name, number,
                          t.node);
    options_.host->RecordEvent(study, &t, "trial_lost", out.fail.detail);
    options_.host->FinishTrial(study, number, out, /*own=*/false);
  }
}

bool SharedCoordinator::Beat() {
  const double started = options_.clock->MonotonicSeconds();
  Status hb = options_.storage->Heartbeat(options_.clock->WallSeconds());
  if (!hb.ok()) {
    options_.logger->error("recording this node's heartbeat: {}", hb.message());
    lapsed_ = true;
    return false;
  }
  OnBeat(started);
  return true;
}

void SharedCoordinator::OnBeat(double started) {
  // The beat reached the server after `started`: no other node can count this one dead before
  // started + node_timeout_s.
  lease_from_ = std::max(lease_from_, started);
  if (lapsed_) {
    lapsed_ = false;
    reap_after_ = started + options_.node_timeout_s;
    options_.logger->info(
        "heartbeats reach the database again; other nodes found silent are not counted dead "
        "for the next {} s (they may have been cut off from it as this node was)",
        options_.node_timeout_s);
  }
}

bool SharedCoordinator::LeaseValid() const {
  return LeaseHolds(options_.clock->MonotonicSeconds(), lease_from_, options_.node_timeout_s);
}

Status SharedCoordinator::RefreshDeadNodes() {
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::NodeRecord> nodes,
                          options_.storage->GetNodes(options_.clock->WallSeconds()));
  ApplyNodes(nodes);
  return Status::Ok();
}

void SharedCoordinator::ApplyNodes(const std::vector<model::NodeRecord>& nodes) {
  const std::string& me = options_.storage->node();
  std::set<std::string> dead;
  for (const model::NodeRecord& n : nodes) {
    if (n.name == me || n.AliveWithin(options_.node_timeout_s)) continue;
    dead.insert(n.name);
    if (dead_nodes_.count(n.name) == 0) {
      options_.logger->warn("node {}: no heartbeat for {:.1f} s (timeout {} s): treated as dead",
                            n.name, n.silent_for, options_.node_timeout_s);
    }
  }
  for (const std::string& name : dead_nodes_) {
    if (dead.count(name) == 0) options_.logger->info("node {}: heartbeats again", name);
  }
  dead_nodes_ = std::move(dead);
}

void SharedCoordinator::FenceIfSilent() {
  const double fence_after = options_.fence_after_s > 0 ? options_.fence_after_s
                                                        : kLeaseFraction * options_.node_timeout_s;
  const double silent = options_.clock->MonotonicSeconds() - lease_from_;
  if (silent < fence_after) {
    if (fenced_) options_.logger->warn("heartbeats reach the database again");
    fenced_ = false;
    return;
  }
  if (fenced_) return;
  fenced_ = true;
  char why[256];
  std::snprintf(why, sizeof why,
                "no heartbeat of it reached the database for %.1f s (it fences itself after "
                "%.1f s; other nodes count it dead after %.0f s)",
                silent, fence_after, options_.node_timeout_s);
  options_.logger->critical("this node kills its running trials: {}", why);
  options_.host->FenceOwnTrials(why);
}

void SharedCoordinator::OnTick(bool shutting_down) {
  if (options_.reads != nullptr) {
    if (tick_in_flight_) {
      // The last tick's beat is not back (a frozen database): the fence does not wait for it.
      FenceIfSilent();
      return;
    }
    // Otherwise the beat decides, when it is back (OnTickRead): a node whose loop could not
    // tick for a while (a suspended host) beats before it counts its silence.
    tick_in_flight_ = true;
    std::vector<ReadFrom> studies;
    std::set<int64_t> active;
    std::set<std::string> left;  // left to the others, their retry not due
    if (!shutting_down) {
      for (StudyCache* study : options_.host->Studies()) {
        studies.push_back(ReadFromNow(*study));
        active.insert(study->record.id);
      }
      for (const auto& [name, n] : not_loaded_) {
        if (LeftToOthers(name)) left.insert(name);
      }
    }
    const double started = options_.clock->MonotonicSeconds();
    const double wall = options_.clock->WallSeconds();
    options_.reads->Submit([this, studies = std::move(studies), active = std::move(active),
                            left = std::move(left), started, wall,
                            shutting_down](storage::Storage& storage) {
      TickRead read;
      read.started = started;
      read.shutting_down = shutting_down;
      read.beat = storage.Heartbeat(wall);
      // A database the beat did not reach would make every other read wait in turn.
      if (read.beat.ok() && !shutting_down) {
        read.nodes = storage.GetNodes(wall);
        read.studies = storage.ListStudies();
        for (const ReadFrom& from : studies) {
          if (!read.studies.ok()) break;
          read.trials.emplace(
              from.study_id, std::make_pair(from.epoch, storage.GetTrialsSince(
                                                            from.study_id, from.known, from.open)));
        }
        if (read.studies.ok()) {
          for (const model::StudyRecord& rec : *read.studies) {
            if (rec.state != model::StudyState::kRunning || active.count(rec.id) > 0 ||
                left.count(rec.name) > 0) {
              continue;
            }
            read.to_join.emplace(rec.id, storage.GetTrials(rec.id));
          }
        }
      }
      return StorageReads::Done(
          [this, read = std::move(read)]() mutable { OnTickRead(std::move(read)); });
    });
    return;
  }
  // Beats while shutting down too: its trials are still this node's until they end. A beat that
  // did not reach the database may have waited for the call timeout (FenceAfterSeconds counts
  // it).
  const bool beat = Beat();
  FenceIfSilent();
  // A database the beat did not reach would make every other call of the tick wait for the
  // call timeout in turn (the kept trial ends one by one): they wait for the next tick.
  if (!beat) return;
  pending_.Retry(*options_.host);
  if (shutting_down) return;
  Status nodes = RefreshDeadNodes();
  if (!nodes.ok()) options_.logger->error("reading the nodes' heartbeats: {}", nodes.message());
  Result<std::vector<model::StudyRecord>> stored = options_.storage->ListStudies();
  if (!stored.ok()) {
    options_.logger->error("listing studies: {}", stored.status().message());
    return;
  }
  options_.host->FollowStored(*stored);
}

void SharedCoordinator::OnTickRead(TickRead read) {
  tick_in_flight_ = false;
  if (!read.beat.ok()) {
    options_.logger->error("recording this node's heartbeat: {}", read.beat.message());
    lapsed_ = true;
    FenceIfSilent();
    return;
  }
  OnBeat(read.started);
  FenceIfSilent();
  pending_.Retry(*options_.host);
  if (read.shutting_down) return;
  if (read.nodes.ok()) {
    ApplyNodes(*read.nodes);
  } else {
    options_.logger->error("reading the nodes' heartbeats: {}", read.nodes.status().message());
  }
  if (!read.studies.ok()) {
    options_.logger->error("listing studies: {}", read.studies.status().message());
    return;
  }
  tick_trials_ = std::move(read.trials);
  tick_to_join_ = std::move(read.to_join);
  following_read_ = true;
  options_.host->FollowStored(*read.studies);
  following_read_ = false;
  tick_trials_.clear();
  tick_to_join_.clear();
}

std::optional<Result<std::vector<TrialRecord>>> SharedCoordinator::TrialsToJoin(int64_t study_id) {
  if (!following_read_) return std::nullopt;
  auto it = tick_to_join_.find(study_id);
  if (it == tick_to_join_.end()) return std::nullopt;
  Result<std::vector<TrialRecord>> read = std::move(it->second);
  tick_to_join_.erase(it);
  return read;
}

bool SharedCoordinator::Follow(StudyCache& study) {
  Status st = Status::Ok();
  if (following_read_) {
    // What the tick read off the loop. A study it did not read was loaded by this tick (read in
    // full); one read again on the loop since (a claim, an end) has newer trials than these.
    auto it = tick_trials_.find(study.record.id);
    if (it != tick_trials_.end()) {
      auto& [epoch, changed] = it->second;
      if (!changed.ok()) {
        st = changed.status();
      } else if (epoch == study.sync_epoch) {
        Apply(study, std::move(changed).value(), /*off_loop=*/true);
      }
    }
  } else {
    st = Sync(study);
  }
  if (!st.ok()) {
    options_.logger->error("study {}: reading other nodes' trials: {}", study.record.name,
                           st.message());
    return false;
  }
  ReapDeadNodes(study);
  return true;
}

bool SharedCoordinator::BeginFinish(StudyCache& study, int number,
                                    const model::TrialOutcome& outcome, bool own,
                                    const StorageBatch& batch) {
  // When the database cannot be reached, the end is kept and recorded at a later tick (the
  // trial stays unfinished in the cache meanwhile, so the study cannot complete without it).
  Status locked = LockIn(study, batch);
  if (!locked.ok()) {
    pending_.Keep(study, number, outcome, own, locked.message(), options_.logger);
    return false;
  }
  const TrialRecord& stored = study.trials[number];
  if (model::IsFinished(stored.state) ||
      (own && !stored.node.empty() && stored.node != options_.storage->node())) {
    // Another node ended it, or took it over, while this one was silent: it is theirs now, and
    // nothing is reported twice.
    options_.logger->warn(
        "study {} trial {}: {} by another node ({}); this node's outcome "
        "({}) is dropped",
        study.record.name, number,
        model::IsFinished(stored.state)
            ? std::string("ended as ") + model::TrialStateName(stored.state)
            : std::string("taken over"),
        stored.node, model::TrialStateName(outcome.state));
    return false;
  }
  return true;
}

bool SharedCoordinator::KeepFailedFinish(StudyCache& study, int number,
                                         const model::TrialOutcome& outcome, bool own,
                                         const Status& st) {
  if (st.code() == common::Code::kFailedPrecondition) return false;
  pending_.Keep(study, number, outcome, own, st.message(), options_.logger);
  return true;
}

void SharedCoordinator::CommitFinish(StudyCache& study, int number,
                                     const model::TrialOutcome& outcome, bool own,
                                     StorageBatch& batch, const StudyCache::Saved& before) {
  Status st = batch.Commit();
  if (st.ok()) return;
  // Nothing of it is stored: the cache forgets the end, the retry and the completion.
  study.Restore(number, before);
  study.Recount(options_.storage->node());
  pending_.Keep(study, number, outcome, own, st.message(), options_.logger);
}

}  // namespace triald::daemon
