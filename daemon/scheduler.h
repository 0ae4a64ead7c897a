#pragma once
// Scheduler: turns studies into trials and trials into processes.
//
// It owns the in-memory state of every active study (its sweep, sampler, pruner and a cache of
// its trials that mirrors storage), asks the sampler for parameters, records each state change
// in Storage before acting on it, launches trials through the Launcher, routes their reports
// (intermediate values, attributes, final values) and classifies how each one ended:
//   COMPLETE  a final value was reported and the main process exited 0
//   PRUNED    the pruner stopped it (value = the intermediate value of its largest step):
//             the pruner is asked after every "report" line, with the trial's values including
//             that one; a yes stops it like a timeout (SIGTERM to its group, kill_grace, then
//             SIGKILL), its later reports are dropped, and its slot goes to the next trial as
//             soon as its processes are gone
//   FAIL      reason exit | signal | timeout | protocol | spawn | lost | cancelled | shutdown
// A study of n_trials ends with exactly n_trials finished trials (fewer only when a grid runs
// out or the study is cancelled).
//
// The scheduler never forks, sleeps or reads the clock directly: Launcher, Storage and Clock
// are injected, so tests/daemon/scheduler_test.cc drives it with fakes.
//
// Thread-safety: not thread-safe; the daemon calls it from its event-loop thread only.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "config/sweep.h"
#include "daemon/launcher/launcher.h"
#include "daemon/pruner/pruner.h"
#include "daemon/sampler/sampler.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

struct SchedulerOptions {
  storage::Storage* storage = nullptr;
  launcher::Launcher* launcher = nullptr;
  const common::Clock* clock = nullptr;
  common::Logger logger;
  std::string state_dir;  // trial folders live under state_dir/studies/<study>/trials/<n>
  int max_workers = 1;    // trials running at once, all studies together
  size_t log_head_bytes = 1 << 20;
  size_t log_tail_bytes = 1 << 20;
  // Environment every worker starts from ("KEY=VALUE"); the sweep's env and the TRIALD_*
  // variables are added on top.
  std::vector<std::string> base_env;
  // Draws a seed for sweeps that give none (the drawn seed is stored with the study).
  std::function<uint64_t()> seed_source;
  // The built-in worker run by [objective] kind = "lm" (absolute path).
  std::string trial_worker;
  // Builds each study's pruner; empty means pruner::MakePruner. Tests put a scripted pruner
  // here to drive the scheduler's side of pruning.
  std::function<common::Result<std::unique_ptr<pruner::Pruner>>(const config::PrunerConfig&)>
      make_pruner;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();

  // After a daemon restart: reloads active studies and ends trials the previous daemon left
  // RUNNING as FAIL(lost), killing any of their processes still alive. Call before Pump().
  common::Status Recover();

  // Validates and stores a sweep, then starts its trials. Errors name the file and key.
  common::Result<storage::StudyRecord> Submit(const config::SweepSource& source);

  // Stops the study's running trials (FAIL(cancelled)) and starts no more.
  common::Status Cancel(const std::string& study_name);

  // Queues a trial with fixed parameters, as Optuna's enqueue_trial: `params` maps parameter
  // names to values as a user writes them ("0.01", "64", "adamw"), each parsed against the
  // parameter's distribution; parameters not given are drawn by the study's sampler for the
  // trial's number. The trial is stored WAITING at once (it counts toward n_trials) and starts
  // before any newly sampled trial, enqueued trials first come first served; it may start
  // before this returns. Errors: kNotFound (no such study), kFailedPrecondition (the study is
  // not RUNNING, or already has its n_trials trials), kInvalidArgument (an unknown parameter,
  // or a value its distribution does not contain; the message names it and what was
  // expected), kUnavailable (shutting down).
  common::Result<storage::TrialRecord> Enqueue(const std::string& study_name,
                                               const std::map<std::string, std::string>& params);

  // Starts as many trials as the limits allow.
  void Pump();

  // Starts no more trials and stops every running one; `on_idle` runs once none is left.
  void BeginShutdown(std::function<void()> on_idle);

  int running_count() const { return static_cast<int>(running_.size()); }
  int queued_count() const;
  int active_study_count() const { return static_cast<int>(studies_.size()); }

 private:
  struct StudyRuntime;
  struct RunningTrial;

  common::Result<std::unique_ptr<StudyRuntime>> BuildRuntime(const storage::StudyRecord& record,
                                                             config::SweepSpec spec);
  bool CanStart(const StudyRuntime& study) const;
  void StartTrial(StudyRuntime& study);
  launcher::LaunchSpec MakeLaunchSpec(const StudyRuntime& study,
                                      const storage::TrialRecord& trial) const;
  void OnMessage(int64_t trial_id, const proto::ReportMessage& message);
  void OnExit(int64_t trial_id, const launcher::ProcessOutcome& outcome);
  void FinishTrial(StudyRuntime& study, int number, const storage::TrialOutcome& outcome);
  void MaybeCompleteStudy(StudyRuntime& study);
  void Event(const StudyRuntime* study, const storage::TrialRecord* trial, const std::string& kind,
             const std::string& detail);
  std::string TrialDir(const std::string& study, int number) const;

  SchedulerOptions options_;
  std::map<int64_t, std::unique_ptr<StudyRuntime>> studies_;  // active studies by id
  std::map<int64_t, std::unique_ptr<RunningTrial>> running_;  // by trial id
  int64_t last_served_study_ = 0;                             // round-robin position of Pump()
  bool shutting_down_ = false;
  std::function<void()> on_idle_;
  bool pumping_ = false;
};

// Ends what a previous daemon on `state_dir` left behind: every process whose environment
// places it under state_dir/studies/ (TRIALD_TRIAL_DIR), and every member of a `lost` trial's
// recorded process group whose leader still has the recorded start time (a pid is reused, a
// start time is not). SIGKILL, then a bounded wait for them to vanish (they are no longer our
// children, so others reap them). Returns how many processes were found.
int KillLeftoverTrialProcesses(const std::string& state_dir,
                               const std::vector<storage::ProcessIdentity>& lost);

}  // namespace triald::daemon
