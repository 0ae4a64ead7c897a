#include "daemon/scheduler/control_change.h"

#include <algorithm>

#include "config/sweep.h"
#include "daemon/scheduler/storage_batch.h"
#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {

using common::Result;
using common::Status;
using model::StudyState;

Status NoStudyNamed(const std::string& name) {
  return common::NotFound("no study named \"" + name + "\" (see `trialctl studies`)");
}

namespace {

std::string State(StudyState s) { return model::StudyStateName(s); }

Result<ControlDecision> DecidePause(bool paused, model::StudyRecord& rec) {
  const std::string verb = paused ? "pause" : "resume";
  if (rec.state != StudyState::kRunning) {
    return common::FailedPrecondition("cannot " + verb + " study \"" + rec.name + "\": it is " +
                                      State(rec.state) + "; expected a RUNNING study");
  }
  if (rec.paused == paused) {
    return common::FailedPrecondition("study \"" + rec.name + "\" is " +
                                      (paused ? "already paused" : "not paused"));
  }
  rec.paused = paused;
  if (paused) return ControlDecision{"study_paused", "no new trials start; running ones go on"};
  return ControlDecision{"study_resumed", "trials start again"};
}

Result<ControlDecision> DecideExtend(int n_trials, model::StudyRecord& rec,
                                     const storage::TrialCounts& counts) {
  const std::string& name = rec.name;
  if (rec.state == StudyState::kCancelled || rec.state == StudyState::kFailed) {
    return common::FailedPrecondition("cannot extend study \"" + name + "\": it is " +
                                      State(rec.state) + "; expected a RUNNING or COMPLETE study");
  }
  const int64_t finished = counts.finished();
  const int64_t configurations = counts.total() - counts.retries;
  if (n_trials <= finished) {
    return common::InvalidArgument(
        "study \"" + name + "\": --n-trials " + std::to_string(n_trials) + " is not above its " +
        std::to_string(finished) + " finished trials; expected more than " +
        std::to_string(finished));
  }
  if (n_trials < configurations) {
    return common::InvalidArgument(
        "study \"" + name + "\": --n-trials " + std::to_string(n_trials) + " is below its " +
        std::to_string(configurations) + " trials finished, running or waiting; expected " +
        std::to_string(configurations) + " or more");
  }
  ControlDecision d;
  d.kind = "study_extended";
  d.reopen = rec.state == StudyState::kComplete;
  d.detail = "n_trials " + std::to_string(rec.n_trials) + " -> " + std::to_string(n_trials) +
             (d.reopen ? " (COMPLETE -> RUNNING)" : "");
  rec.n_trials = n_trials;
  if (d.reopen) {
    rec.paused = false;  // a study paused as it completed: extending it is asking it to run
    rec.state = StudyState::kRunning;
    rec.finished_at = 0;
  }
  return d;
}

Result<ControlDecision> DecideParallelism(int parallelism, model::StudyRecord& rec,
                                          const std::string& parallelism_now) {
  if (parallelism < 1) {
    return common::InvalidArgument("parallelism " + std::to_string(parallelism) + " for study \"" +
                                   rec.name + "\"; expected 1 or more");
  }
  if (rec.state == StudyState::kCancelled || rec.state == StudyState::kFailed) {
    return common::FailedPrecondition("cannot set the parallelism of study \"" + rec.name +
                                      "\": it is " + State(rec.state));
  }
  std::string before = parallelism_now;
  if (before.empty()) {
    before = rec.parallelism > 0 ? std::to_string(rec.parallelism) : "the sweep's";
  }
  rec.parallelism = parallelism;
  return ControlDecision{
      "study_parallelism",
      "parallelism " + before + " -> " + std::to_string(parallelism) + " (at the next launch)"};
}

Result<ControlDecision> DecideMetricNames(const std::vector<std::string>& names,
                                          model::StudyRecord& rec) {
  const std::string& name = rec.name;
  const size_t n = rec.directions.empty() ? 1 : rec.directions.size();
  if (!names.empty() && names.size() != n) {
    return common::InvalidArgument(
        "metric names for study \"" + name + "\": " + std::to_string(names.size()) +
        " given, the study has " + std::to_string(n) + " objective" + (n == 1 ? "" : "s") +
        "; expected one name per objective, in the order of directions");
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& m = names[i];
    if (!config::IsMetricName(m)) {
      return common::InvalidArgument("metric name " + std::to_string(i) + " of study \"" + name +
                                     "\": expected 1 to 64 characters of UTF-8 on one line");
    }
    if (std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i), m) !=
        names.begin() + static_cast<std::ptrdiff_t>(i)) {
      return common::InvalidArgument("metric name \"" + m +
                                     "\" given twice; expected distinct names");
    }
    list += (list.empty() ? "" : ", ") + m;
  }
  rec.submit.metric_names = names;
  return ControlDecision{"study_metric_names", list.empty() ? "none" : list};
}

}  // namespace

Result<ControlDecision> DecideControl(const ControlChange& change, model::StudyRecord& rec,
                                      const storage::TrialCounts* counts,
                                      const std::string& parallelism_now) {
  switch (change.kind) {
    case ControlChange::Kind::kPause:
      return DecidePause(true, rec);
    case ControlChange::Kind::kResume:
      return DecidePause(false, rec);
    case ControlChange::Kind::kExtend:
      if (counts == nullptr) return common::Internal("extend decided without the trials' counts");
      return DecideExtend(change.value, rec, *counts);
    case ControlChange::Kind::kParallelism:
      return DecideParallelism(change.value, rec, parallelism_now);
    case ControlChange::Kind::kCancel:
      if (rec.state != StudyState::kRunning) {
        return common::FailedPrecondition("study \"" + rec.name + "\" is already " +
                                          State(rec.state));
      }
      rec.state = StudyState::kCancelled;
      return ControlDecision{"study_cancelled", ""};
    case ControlChange::Kind::kMetricNames:
      return DecideMetricNames(change.names, rec);
  }
  return common::Internal("unknown control change");
}

namespace {

// The study's WAITING trials (their curves counted, not loaded), a page at a time.
Result<std::vector<model::TrialRecord>> WaitingTrials(storage::Storage& storage, int64_t study_id) {
  constexpr int kPage = 512;
  std::vector<model::TrialRecord> waiting;
  for (int from = 0;; from += kPage) {
    TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> page,
                            storage.GetTrialPage(study_id, from, kPage, storage::Curves::kCount));
    for (model::TrialRecord& t : page) {
      if (t.state == model::TrialState::kWaiting) waiting.push_back(std::move(t));
    }
    if (static_cast<int>(page.size()) < kPage) return waiting;
  }
}

// The change's own writes, inside the transaction; an error stores nothing of it.
Status WriteChange(storage::Storage& storage, const ControlChange& change,
                   const model::StudyRecord& before, ControlStored& stored) {
  const model::StudyRecord& rec = stored.rec;
  if (change.kind == ControlChange::Kind::kMetricNames) {
    TRIALD_RETURN_IF_ERROR(storage.SetStudySubmit(rec.id, rec.submit));
  }
  if (rec.state != before.state) {
    TRIALD_RETURN_IF_ERROR(storage.SetStudyState(rec.id, rec.state, stored.at));
  }
  if (rec.paused != before.paused || rec.n_trials != before.n_trials ||
      rec.parallelism != before.parallelism) {
    TRIALD_RETURN_IF_ERROR(
        storage.SetStudyControl(rec.id, rec.paused, rec.n_trials, rec.parallelism));
  }
  return Status::Ok();
}

}  // namespace

Result<ControlStored> StoreControl(storage::Storage& storage, const ControlChange& change,
                                   double now) {
  TRIALD_RETURN_IF_ERROR(storage.BeginBatch());
  BatchEnd ender(storage);
  Result<model::StudyRecord> named = storage.GetStudy(change.study);
  if (!named.ok()) {
    return named.status().code() == common::Code::kNotFound ? NoStudyNamed(change.study)
                                                            : named.status();
  }
  // Under the lock: no node claims a trial of it meanwhile, and a second verb sees the first.
  TRIALD_ASSIGN_OR_RETURN(const model::StudyRecord before, storage.LockStudy(named->id));
  ControlStored stored;
  stored.rec = before;
  stored.at = now;
  storage::TrialCounts counts;
  if (change.kind == ControlChange::Kind::kExtend) {
    TRIALD_ASSIGN_OR_RETURN(counts, storage.CountTrials(before.id));
  }
  // The parallelism it runs with now, for the event: its own, else its sweep's.
  std::string parallelism_now;
  if (change.kind == ControlChange::Kind::kParallelism && before.parallelism <= 0) {
    Result<config::SweepSpec> spec =
        config::ParseSweep({before.spec_toml, before.spec_path, before.submit});
    if (spec.ok()) parallelism_now = std::to_string(spec->study.parallelism);
  }
  TRIALD_ASSIGN_OR_RETURN(stored.decision,
                          DecideControl(change, stored.rec, &counts, parallelism_now));
  TRIALD_RETURN_IF_ERROR(WriteChange(storage, change, before, stored));
  const ControlDecision& d = stored.decision;
  if (Status st = storage.AppendEvent(before.id, std::nullopt, d.kind, d.detail, now); !st.ok()) {
    stored.errors.push_back("storing event " + d.kind + ": " + st.message());
  }
  if (change.kind == ControlChange::Kind::kCancel) {
    // Every WAITING trial, whichever node claimed it; running trials stop on their nodes, which
    // see the study cancelled.
    Result<std::vector<model::TrialRecord>> waiting = WaitingTrials(storage, before.id);
    if (!waiting.ok()) {
      stored.errors.push_back("reading the waiting trials to end: " + waiting.status().message());
    } else {
      const model::TrialOutcome outcome = CancelledBeforeStart();
      const std::string what = DescribeOutcome(outcome);
      for (const model::TrialRecord& t : *waiting) {
        Status st = storage.FinishTrial(t.id, outcome, now);
        if (!st.ok()) {
          stored.errors.push_back("trial " + std::to_string(t.number) +
                                  ": storing its end: " + st.message());
          continue;
        }
        if (Status ev = storage.AppendEvent(before.id, t.id, "trial_finished", what, now);
            !ev.ok()) {
          stored.errors.push_back("storing event trial_finished: " + ev.message());
        }
        stored.ended.push_back(t.number);
      }
    }
  }
  if (stored.decision.reopen) {
    Result<std::vector<model::TrialRecord>> trials = storage.GetTrials(before.id);
    if (trials.ok()) stored.trials = std::move(trials).value();
  }
  if (Status st = ender.Commit(); !st.ok()) return st;
  return stored;
}

}  // namespace triald::daemon
