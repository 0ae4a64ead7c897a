#pragma once
// StudyRuntime: one active study as the scheduler runs it: the StudyCache (its record, trials
// and counts, shared with the coordinator) plus what only this node needs to run it: its parsed
// sweep, sampler and pruner, its back-off after failed starts, and the Pareto front size it
// last computed. The scheduler owns every StudyRuntime (by study id) and hands its parts
// references; a StudyRuntime's address is stable while the study is active.
//
// Thread-safety: a plain value; the scheduler's event-loop thread owns it.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "config/sweep.h"
#include "daemon/pruner/pruner.h"
#include "daemon/sampler/sampler.h"
#include "daemon/scheduler/failure_streak.h"
#include "daemon/scheduler/spawn_backoff.h"
#include "daemon/scheduler/study_cache.h"

namespace triald::daemon {

struct StudyRuntime : StudyCache {
  config::SweepSpec spec;
  std::unique_ptr<sampler::Sampler> sampler;
  // [sampler] kind = "auto": what it chose and why (auto_sampler.h), recorded as the event
  // sampler_chosen at submit; "" for another kind.
  std::string sampler_choice;
  // Set in a Pump() pass that found the next trial's relative sample still being computed in
  // the background (Sampler::RelativeReady): the study starts nothing more in that pass.
  bool awaiting_sample = false;
  std::unique_ptr<pruner::Pruner> pruner;
  SpawnBackoff spawn;    // after trials failed to start
  FailureStreak streak;  // fail-fast ([study] max_failures_in_a_row)
  // The sample drawn with a new trial's parameters (sampler::StartTrial), until the trial
  // starts and its channel takes it for the trial's suggests: the relative sample is computed
  // once per trial.
  std::map<int, sampler::TrialSample> drawn;
  // Why the study cannot go on (its sampler or storage failed, or its trials kept failing the
  // same way): set once, with `exhausted`; the study then ends FAILED with this reason instead
  // of COMPLETE.
  std::string failure;
  // [objective] kind = "client": the connection of the `ask` being served (Scheduler::Ask),
  // set only while it is; the trial started for it takes it (LaunchSpec::client).
  std::shared_ptr<common::UniqueFd> ask;
  // ParetoFrontSize(): the size last computed, and the number of finished trials then.
  int64_t front_size = 0;
  int64_t front_finished = -1;

  // The study's parallelism: its stored override (Scheduler::SetParallelism), else its sweep's.
  int parallelism() const {
    return record.parallelism > 0 ? record.parallelism : spec.study.parallelism;
  }
  // The size of the Pareto front of the feasible COMPLETE trials (several objectives),
  // recomputed only when a trial has finished since the last call.
  int64_t ParetoFrontSize();
  // How many retries the configuration of `trial` has had: the length of the retry_of chain
  // behind it, less the trials put back after a stop of triald (requeue_on_shutdown).
  int RetriesBehind(const model::TrialRecord& trial) const;
  // The numbers of the trials `trial` retries, oldest first (the first is the configuration's
  // first attempt, the last the one it replaces); empty for a first attempt.
  std::vector<int> RetryHistory(const model::TrialRecord& trial) const;
  // What the sampler is shown of the study.
  sampler::StudyView view() const {
    return sampler::StudyView{spec.study.direction, &spec.space, &trials, spec.study.directions};
  }
};

// The studies a scheduler runs, by id (the scheduler owns them; Pump serves them round-robin in
// this order).
using ActiveStudies = std::map<int64_t, std::unique_ptr<StudyRuntime>>;

}  // namespace triald::daemon
