#include "daemon/scheduler/study_control.h"

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <limits>

#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/control_change.h"
#include "daemon/scheduler/enqueued_params.h"
#include "daemon/scheduler/storage_batch.h"
#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {

using common::Result;
using common::Status;
using model::StudyState;

Result<model::StudyRecord> StudyControl::StudyFor(const std::string& name) const {
  if (options_.host->shutting_down()) return common::Unavailable("triald is shutting down");
  Result<model::StudyRecord> found = options_.storage->GetStudy(name);
  if (!found.ok() && found.status().code() == common::Code::kNotFound) return NoStudyNamed(name);
  return found;
}

Status StudyControl::Cancel(const std::string& name) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, options_.storage->GetStudy(name));
  const ControlChange change{ControlChange::Kind::kCancel, name};
  model::StudyRecord checked = rec;
  TRIALD_RETURN_IF_ERROR(DecideControl(change, checked, nullptr, "").status());
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
  TRIALD_ASSIGN_OR_RETURN(ControlDecision d, DecideControl(change, rec, nullptr, ""));
  StudyRuntime* study = options_.host->ActiveStudy(rec.id);
  TRIALD_RETURN_IF_ERROR(options_.recorder->SetState(rec, study, rec.state, d.kind, d.detail));
  if (study == nullptr) return Status::Ok();
  // Every WAITING trial, whichever node claimed it. Running trials of other nodes stop at their
  // next tick.
  TRIALD_RETURN_IF_ERROR(options_.coordinator->GatherWaiting(*study));
  while (!study->waiting.empty()) {
    int number = study->waiting.front();
    study->waiting.pop_front();
    options_.host->FinishTrial(*study, number, CancelledBeforeStart(), /*own=*/false);
  }
  options_.host->StopTrials(*study);
  // Committed before Pump, whose transactions are its own (each locking one study).
  Status committed = batch.Commit();
  options_.host->Pump();
  return committed.ok() ? Status::Ok() : committed.WithContext("storing the cancel");
}

Result<model::StudyRecord> StudyControl::Pause(const std::string& name, bool paused) {
  const char* verb = paused ? "pause" : "resume";
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  StorageBatch batch(options_.storage, options_.logger);
  // Shared storage: under the study's lock, as a claim is, so no node starts a trial of a
  // study it has not seen paused.
  TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
  TRIALD_ASSIGN_OR_RETURN(
      ControlDecision d,
      DecideControl({paused ? ControlChange::Kind::kPause : ControlChange::Kind::kResume, name},
                    rec, nullptr, ""));
  TRIALD_RETURN_IF_ERROR(
      options_.recorder->SetControl(rec, options_.host->ActiveStudy(rec.id), d.kind, d.detail));
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the " + std::string(verb));
  options_.host->Pump();
  return rec;
}

Result<model::StudyRecord> StudyControl::Extend(const std::string& name, int n_trials) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
  storage::TrialCounts counts;
  if (rec.state != StudyState::kCancelled && rec.state != StudyState::kFailed) {
    TRIALD_ASSIGN_OR_RETURN(counts, options_.storage->CountTrials(rec.id));
  }
  TRIALD_ASSIGN_OR_RETURN(
      ControlDecision d,
      DecideControl({ControlChange::Kind::kExtend, name, n_trials}, rec, &counts, ""));
  StudyRuntime* study = options_.host->ActiveStudy(rec.id);
  if (d.reopen) {
    // Recorded with study_extended below.
    TRIALD_RETURN_IF_ERROR(
        options_.recorder->SetState(rec, study, StudyState::kRunning, /*kind=*/"", ""));
  }
  TRIALD_RETURN_IF_ERROR(options_.recorder->SetControl(rec, study, d.kind, d.detail));
  if (study == nullptr && d.reopen) {
    // Loaded again like a study joined at a tick (its trials read from storage).
    Status activated = options_.host->Activate(rec, std::nullopt);
    if (!activated.ok()) {
      return activated.WithContext("study \"" + name + "\" extended, but cannot run here");
    }
  }
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the extension");
  options_.host->Pump();
  return rec;
}

Status StudyControl::Follow(const ControlStored& stored) {
  model::StudyRecord rec = stored.rec;
  const ControlDecision& d = stored.decision;
  for (const std::string& e : stored.errors) {
    options_.logger->error("study {}: {}: {}", rec.name, d.kind, e);
  }
  StudyRuntime* study = options_.host->ActiveStudy(rec.id);
  // As StudyRecorder mirrors a change stored on the loop (a tick may have brought it already).
  options_.recorder->MirrorControl(rec, study, d.kind, d.detail);
  if (rec.state == StudyState::kCancelled || d.reopen) {  // the decisions that change the state
    options_.recorder->Mirror(rec, study, rec.state, stored.at, "", "");
  }
  if (study != nullptr && !stored.ended.empty()) {
    // Those this node has read; a tick brings the others.
    for (int number : stored.ended) {
      if (number < 0 || static_cast<size_t>(number) >= study->trials.size()) continue;
      model::TrialRecord& known = study->trials[number];
      if (!model::IsFinished(known.state)) MirrorEnd(known, CancelledBeforeStart(), stored.at);
    }
    study->Recount(options_.storage->node());
  }
  if (study != nullptr && rec.state == StudyState::kCancelled) options_.host->StopTrials(*study);
  Status result = Status::Ok();
  if (study == nullptr && d.reopen) {
    Status activated = options_.host->Activate(rec, stored.trials);
    if (!activated.ok()) {
      result = activated.WithContext("study \"" + rec.name + "\" extended, but cannot run here");
    }
  }
  options_.host->Pump();
  return result;
}

Result<model::StudyRecord> StudyControl::Resume(const config::SweepSpec& spec,
                                                const model::Submitter& submitter, bool trusted) {
  const std::string& name = spec.study.name;
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  if (!trusted &&
      !(submitter.known() && rec.submitter.known() && submitter.uid == rec.submitter.uid)) {
    return common::PermissionDenied("study \"" + name + "\" was submitted by " +
                                    (rec.submitter.known()
                                         ? "uid " + std::to_string(rec.submitter.uid)
                                         : std::string("an unknown user")) +
                                    "; only its submitter, root or triald's user may resume it");
  }
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec stored,
                          config::ParseSweep({rec.spec_toml, rec.spec_path, rec.submit}));
  if (std::string mismatch = StudyAdmission::ResumeMismatch(stored, spec); !mismatch.empty()) {
    return common::FailedPrecondition(
        "cannot resume study \"" + name + "\": " + mismatch +
        "; expected the directions, space and objective it was submitted with (submit it "
        "under another name with --name, or delete it first)");
  }
  TRIALD_ASSIGN_OR_RETURN(storage::TrialCounts counts, options_.storage->CountTrials(rec.id));
  const int64_t configurations = counts.total() - counts.retries;
  const int before = rec.n_trials;
  const StudyState was = rec.state;
  rec.n_trials = static_cast<int>(
      std::min<int64_t>(configurations + spec.study.n_trials, std::numeric_limits<int>::max()));
  StudyRuntime* study = options_.host->ActiveStudy(rec.id);
  const bool reopen = was != StudyState::kRunning;
  if (reopen) {
    rec.paused = false;
    TRIALD_RETURN_IF_ERROR(
        options_.recorder->SetState(rec, study, StudyState::kRunning, /*kind=*/"", ""));
  }
  TRIALD_RETURN_IF_ERROR(options_.recorder->SetControl(
      rec, study, "study_resubmitted",
      "submitted again (--resume / load_if_exists): n_trials " + std::to_string(before) + " -> " +
          std::to_string(rec.n_trials) +
          (reopen ? " (" + std::string(model::StudyStateName(was)) + " -> RUNNING)" : "")));
  if (study == nullptr && reopen) {
    Status activated = options_.host->Activate(rec, std::nullopt);
    if (!activated.ok()) {
      return activated.WithContext("study \"" + name + "\" resumed, but cannot run here");
    }
  }
  if (StudyRuntime* active = options_.host->ActiveStudy(rec.id); active != nullptr && reopen) {
    active->streak = FailureStreak(active->spec.study.max_failures_in_a_row);
    active->failure.clear();
    active->exhausted = false;
  }
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the resumption");
  options_.host->Pump();
  return rec;
}

Result<model::StudyRecord> StudyControl::SetParallelism(const std::string& name, int parallelism) {
  const ControlChange change{ControlChange::Kind::kParallelism, name, parallelism};
  if (parallelism < 1) {
    model::StudyRecord unread;
    unread.name = name;
    return DecideControl(change, unread, nullptr, "").status();
  }
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
  StudyRuntime* study = options_.host->ActiveStudy(rec.id);
  TRIALD_ASSIGN_OR_RETURN(
      ControlDecision d,
      DecideControl(change, rec, nullptr,
                    study != nullptr ? std::to_string(study->parallelism()) : std::string()));
  TRIALD_RETURN_IF_ERROR(options_.recorder->SetControl(rec, study, d.kind, d.detail));
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the parallelism");
  options_.host->Pump();
  return rec;
}

Result<model::StudyRecord> StudyControl::SetMetricNames(const std::string& name,
                                                        const std::vector<std::string>& names) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  ControlChange change{ControlChange::Kind::kMetricNames, name, 0, names};
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
  TRIALD_ASSIGN_OR_RETURN(ControlDecision d, DecideControl(change, rec, nullptr, ""));
  TRIALD_RETURN_IF_ERROR(
      options_.recorder->SetSubmit(rec, options_.host->ActiveStudy(rec.id), d.kind, d.detail));
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the metric names");
  return rec;
}

DeleteHold StudyControl::HoldOf(const std::string& name, const StudyRuntime* study,
                                bool claim_in_flight) {
  DeleteHold hold;
  hold.study = name;
  if (study != nullptr) {
    hold.study_id = study->record.id;
    hold.running_here = study->running;  // starting ones included
    hold.ends_pending = study->pending_finishes > 0;
    hold.claim_in_flight = claim_in_flight;
  }
  return hold;
}

Result<int64_t> StudyControl::Delete(const std::string& name, bool purge) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  DeleteStored stored;
  {
    StorageBatch batch(options_.storage, options_.logger);
    TRIALD_ASSIGN_OR_RETURN(rec, options_.coordinator->LockForControl(rec));
    TRIALD_ASSIGN_OR_RETURN(storage::TrialCounts counts, options_.storage->CountTrials(rec.id));
    // Claims off the loop are the servers' way (HoldForDelete); here none is in flight.
    const DeleteHold hold = HoldOf(name, options_.host->ActiveStudy(rec.id), false);
    TRIALD_RETURN_IF_ERROR(DecideDelete(name, counts, hold));
    stored.rec = rec;
    stored.deleted_trials = counts.total();
    TRIALD_RETURN_IF_ERROR(options_.storage->DeleteStudy(rec.id));
    // Stored without a study (it is gone), naming it.
    options_.recorder->Event(nullptr, nullptr, "study_deleted",
                             DeletedDetail(name, rec.state, stored.deleted_trials, purge));
    Status committed = batch.Commit();
    if (!committed.ok()) return committed.WithContext("storing the deletion");
  }
  return FollowDelete(stored, purge);
}

Result<int64_t> StudyControl::FollowDelete(const DeleteStored& stored, bool purge) {
  const std::string& name = stored.rec.name;
  for (const std::string& e : stored.errors) options_.logger->error("study {}: {}", name, e);
  options_.host->Forget(stored.rec.id);
  options_.logger->info("study {} deleted ({} trials)", name, stored.deleted_trials);
  if (purge) {
    // Study names are checked at submit (letters, digits, '_', '.', '-', starting with a letter
    // or digit), so this is the study's own folder.
    const std::string folder = model::StudyDir(options_.state_dir, name);
    Status removed = options_.env->RemoveTree(folder);
    if (!removed.ok()) {
      options_.host->Pump();
      return common::IoError("study \"" + name + "\" deleted, but " + removed.message());
    }
  }
  options_.host->Pump();
  return stored.deleted_trials;
}

Result<model::TrialRecord> StudyControl::Enqueue(const std::string& name,
                                                 const std::map<std::string, std::string>& given,
                                                 bool skip_if_exists, bool* skipped) {
  if (skipped != nullptr) *skipped = false;
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyFor(name));
  if (rec.state != StudyState::kRunning) return NotRunning(name, rec.state);
  StudyRuntime* study = options_.host->ActiveStudy(rec.id);
  if (study == nullptr) return NotLoadedHere(name);
  // Shared storage: the count, the draw and the new trial are decided under the study's lock.
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StorageBatch> locked, options_.coordinator->Lock(*study));
  TRIALD_ASSIGN_OR_RETURN(EnqueueDecision decided,
                          DecideEnqueue(*study, name, given, skip_if_exists));
  if (decided.existing) {
    if (skipped != nullptr) *skipped = true;
    return *decided.existing;
  }
  const EnqueuedParams& params = decided.params;
  model::TrialRecord trial;
  {
    StorageBatch batch(options_.storage, options_.logger);
    TRIALD_ASSIGN_OR_RETURN(trial, options_.storage->CreateTrial(study->record.id, params.params,
                                                                 options_.clock->WallSeconds()));
    const std::string deferred = DeferredText(params);
    if (!deferred.empty()) {
      TRIALD_RETURN_IF_ERROR(options_.storage->SetAttr(trial.id, kEnqueuedAttr, deferred));
      trial.attrs[kEnqueuedAttr] = deferred;
    }
    study->trials.resize(std::max<size_t>(study->trials.size(), trial.number + 1));
    study->trials[trial.number] = trial;
    study->waiting.push_back(trial.number);
    options_.recorder->Event(study, &trial, "trial_enqueued", params.given);
    options_.logger->info("study {} trial {} enqueued: {}", name, trial.number, params.given);
  }
  // Shared: committed (releasing the lock) before Pump, whose claims lock the study again.
  if (locked) TRIALD_RETURN_IF_ERROR(locked->Commit());
  options_.host->Pump();
  return trial;
}

void StudyControl::EnqueueOffLoop(int64_t study_id, const std::string& name,
                                  std::map<std::string, std::string> given, bool skip_if_exists,
                                  EnqueuedDone done, int tries) {
  if (options_.host->shutting_down()) {
    return done(common::Unavailable("triald is shutting down"), false);
  }
  StudyRuntime* study = options_.host->ActiveStudy(study_id);
  if (study == nullptr) return done(NotLoadedHere(name), false);
  Result<EnqueueDecision> decided = DecideEnqueue(*study, name, given, skip_if_exists);
  if (!decided.ok()) return done(decided.status(), false);
  if (decided->existing) return done(*decided->existing, true);
  EnqueuePick pick;
  pick.params = decided->params.params;
  pick.deferred = DeferredText(decided->params);
  pick.given = decided->params.given;
  pick.number = static_cast<int>(study->trials.size());
  pick.n_trials = study->record.n_trials;
  if (skip_if_exists) pick.skip_if_has = given;
  auto again = [this, study_id, name, given, skip_if_exists, done, tries]() mutable {
    EnqueueOffLoop(study_id, name, std::move(given), skip_if_exists, std::move(done), tries + 1);
  };
  options_.coordinator->EnqueueOffLoop(
      *study, std::move(pick),
      [this, name, values = decided->params.given, again = std::move(again), done, tries](
          StudyCache*, EnqueueMade made) mutable {
        switch (made.outcome) {
          case EnqueueMade::Outcome::kEnqueued:
            options_.logger->info("study {} trial {} enqueued: {}", name, made.trial->number,
                                  values);
            options_.host->Pump();
            return done(*made.trial, false);
          case EnqueueMade::Outcome::kSkipped:
            options_.logger->info("study {}: enqueue skipped: {}", name, made.why);
            return done(*made.trial, true);
          case EnqueueMade::Outcome::kStale:
            // Decided again on what the transaction read (applied to the cache now).
            if (tries + 1 < kEnqueueTries) return again();
            return done(common::Unavailable("study \"" + name +
                                            "\" changed while the trial was being enqueued (" +
                                            made.why + "); try again"),
                        false);
          case EnqueueMade::Outcome::kFailed:
            options_.host->StorageRefused(made.status);
            return done(made.status, false);
        }
      });
}

Status StudyControl::NotRunning(const std::string& name, StudyState state) {
  return common::FailedPrecondition("study \"" + name + "\" is " + model::StudyStateName(state) +
                                    "; expected a RUNNING study");
}

Status StudyControl::NotLoadedHere(const std::string& name) {
  // Stored as RUNNING but not resumed (its sweep no longer builds): nothing could run it.
  return common::FailedPrecondition("study \"" + name + "\" is not loaded by this triald");
}

std::string StudyControl::DeferredText(const EnqueuedParams& params) {
  if (params.deferred.empty()) return "";
  boost::json::object o;
  for (const auto& [k, v] : params.deferred) o[k] = v;
  return boost::json::serialize(o);
}

Result<StudyControl::EnqueueDecision> StudyControl::DecideEnqueue(
    StudyRuntime& study, const std::string& name, const std::map<std::string, std::string>& given,
    bool skip_if_exists) {
  if (study.record.state != StudyState::kRunning) return NotRunning(name, study.record.state);
  EnqueueDecision d;
  if (skip_if_exists && !given.empty()) {
    for (const model::TrialRecord& t : study.trials) {
      if (HasGivenValues(t, given)) {
        options_.logger->info("study {}: enqueue skipped: trial {} has the values", name, t.number);
        d.existing = t;
        return d;
      }
    }
  }
  if (study.configurations() >= study.record.n_trials) {
    return common::FailedPrecondition("study \"" + name + "\" already has its n_trials = " +
                                      std::to_string(study.record.n_trials) + " trials");
  }
  TRIALD_ASSIGN_OR_RETURN(
      d.params, ResolveEnqueuedParams(name, study.spec, *study.sampler, study.trials, given));
  return d;
}

}  // namespace triald::daemon
