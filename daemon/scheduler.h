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
//   FAIL      reason exit | signal | oom | timeout | protocol | spawn | lost | cancelled | shutdown
//             (oom: the launcher saw the trial fail after running out of its memory limit)
// A study of n_trials ends with exactly n_trials finished configurations (fewer only when a grid
// runs out or the study is cancelled).
//
// Retries ([study] retries, retry_on): a trial that FAILs for a reason in retry_on (also `lost`,
// found by Recover) is followed by a new WAITING trial with the same parameters whose retry_of
// names it, while its configuration has had fewer than `retries` retries. The failed trial and
// its retry are stored in one commit. A retried trial no longer counts toward n_trials; its
// retry does, so n_trials counts configurations, not attempts.
//
// GPUs ([study] gpus_per_trial = k > 0): each trial holds one slot on each of k different GPUs
// of the GpuPool for its whole life and gets CUDA_VISIBLE_DEVICES naming them (empty for CPU
// trials). Its slots go back through the pool's draining (GpuPool::Release): they are given out
// again once the driver shows none of the trial's processes holding memory, or after the
// pool's timeout, recorded as a `gpu_leak` event. Fairness: studies are served round-robin; the
// first GPU study in that order whose trial does not fit in the free GPUs holds a reservation,
// and no other GPU trial starts until it has started (CPU trials are never held back), so a
// trial that needs many GPUs is not starved by a stream of smaller ones. A sweep asking for
// more GPUs than the pool has is refused at submit.
//
// Shared storage (several daemons, one PostgreSQL database; daemon/storage/storage.h): each
// daemon is a node. A study submitted through any node is run by every node that can run it
// (its objective prepares there and its GPUs fit; a node that cannot leaves it to the others).
// Every decision about a study's trials is taken under the study's lock with the shared history
// read afresh (GetTrialsSince), so:
//   - a trial is claimed by one node only: the oldest claimable WAITING trial (unclaimed, or
//     claimed by this node before a restart), else a new one from the sampler, which sees every
//     trial of every node, running ones included (constant liar), and n_trials is never
//     exceeded; the claim commits before the process starts, and MarkRunning records the node;
//   - a node whose heartbeat is older than node_timeout_s is dead: the live node that notices
//     first ends its RUNNING trials, and the WAITING ones it had claimed (it may have started
//     one just before going silent), as FAIL(lost), and retries them per policy: a trial number
//     never runs on two nodes;
//   - a node that comes back finds its trials ended (finished trials are immutable): it stops
//     their processes and records nothing for them, so nothing is resurrected or reported
//     twice;
//   - the node that ends a study's last trial completes the study; a cancel through any node
//     stops the trials of every node (each stops its own at its next tick).
// `parallelism` and max_workers are per node. SharedTick() (every heartbeat interval) beats,
// follows other nodes' studies and trials and reaps dead nodes; pruning decisions read other
// nodes' intermediate values at most kPruneSyncSeconds old.
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
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "config/sweep.h"
#include "daemon/devices/gpu_pool.h"
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
  // GPU slots (not owned); nullptr: no GPUs, and sweeps with gpus_per_trial > 0 are refused.
  devices::GpuPool* gpus = nullptr;
  // Shared storage: a node silent for longer than this is dead (see above).
  double node_timeout_s = 30;
  // Runs after each Pump(), i.e. whenever running_count() or queued_count() may have changed
  // (the daemon's systemd STATUS= line). Must not call back into the scheduler.
  std::function<void()> on_change;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();

  // After a daemon restart: reloads active studies and ends trials the previous daemon left
  // RUNNING as FAIL(lost), killing any of their processes still alive. Call before Pump().
  common::Status Recover();

  // Validates and stores a sweep, then starts its trials. Errors name the file and key.
  common::Result<model::StudyRecord> Submit(const config::SweepSource& source);

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
  common::Result<model::TrialRecord> Enqueue(const std::string& study_name,
                                             const std::map<std::string, std::string>& params);

  // Starts as many trials as the limits allow.
  void Pump();

  // Starts no more trials and stops every running one; `on_idle` runs once none is left.
  void BeginShutdown(std::function<void()> on_idle);

  // Shared storage only; the daemon calls it every heartbeat interval (see above).
  void SharedTick();

  // GPU bookkeeping, called periodically by the daemon while gpu_work() is true: records the
  // processes of running GPU trials that hold GPU memory, hands back drained slots (recording
  // leaks) and starts trials that were waiting for them.
  void PollDevices();
  bool gpu_work() const;

  int running_count() const { return static_cast<int>(running_.size()); }
  int queued_count() const;
  int active_study_count() const { return static_cast<int>(studies_.size()); }

 private:
  struct StudyRuntime;
  struct RunningTrial;

  common::Result<std::unique_ptr<StudyRuntime>> BuildRuntime(const model::StudyRecord& record,
                                                             config::SweepSpec spec);
  // Parses, prepares and builds a stored study and loads its trials.
  common::Result<std::unique_ptr<StudyRuntime>> LoadStudy(const model::StudyRecord& record);
  bool shared() const { return options_.storage->shared(); }
  // Shared storage: reads the trials other nodes changed since this node last looked, stops
  // this node's trials that another node ended, and recounts. No-op otherwise.
  common::Status Sync(StudyRuntime& study);
  void Recount(StudyRuntime& study);
  // A stored study state another node set (cancelled or completed): adopts it.
  void AdoptStudyState(StudyRuntime& study, const model::StudyRecord& stored);
  // The sampler's parameters for the study's next trial number; nullopt when it has none (the
  // study is then exhausted, recorded as an event, and completed when nothing else runs).
  std::optional<model::ParamMap> DrawParams(StudyRuntime& study);
  // Shared storage: under the study's lock, claims the trial to start next (see above); the
  // claim is committed when this returns a number.
  std::optional<int> ClaimNext(StudyRuntime& study);
  // Shared storage: under the study's lock, ends the trials dead nodes ran or had claimed.
  void ReapDeadNodes(StudyRuntime& study);
  // Records this node's heartbeat; on success the lease runs from just before it.
  void Beat();
  // Whether this node may claim and start trials: its last heartbeat is recent enough that no
  // other node can count it dead yet (always true on a storage of its own).
  bool LeaseValid() const;
  // Re-reads which nodes have been silent for longer than node_timeout_s (dead_nodes_).
  common::Status RefreshDeadNodes();
  // Shared storage: records the trial ends kept while the database could not be reached.
  void RetryPendingFinishes();
  // Shared storage, inside a batch: takes the study's lock, adopts its stored state and reads
  // what the other nodes changed (Sync). Logs and returns the first error.
  common::Status LockAndSync(StudyRuntime& study);
  // MaybeCompleteStudy, under the study's lock when shared.
  void LockedMaybeComplete(StudyRuntime& study);
  bool CanStart(const StudyRuntime& study) const;
  // Starts the study's next trial on `gpu_slots` (acquired for it; given back if no trial
  // starts). Returns whether the slots were used by a running trial.
  bool StartTrial(StudyRuntime& study, std::vector<devices::GpuSlot> gpu_slots = {});
  launcher::LaunchSpec MakeLaunchSpec(const StudyRuntime& study, const model::TrialRecord& trial,
                                      const std::vector<devices::GpuSlot>& gpu_slots) const;
  // Checks a sweep's gpus_per_trial against the pool; errors name `where`.
  common::Status CheckGpus(const config::SweepSpec& spec, const std::string& where) const;
  // Queues a retry of the finished trial `number` when the study's policy asks for one.
  void MaybeRetry(StudyRuntime& study, int number);
  // Hands drained GPU slots back; true when any came back.
  bool CollectDrainedGpus();
  void OnMessage(int64_t trial_id, const proto::ReportMessage& message);
  void OnExit(int64_t trial_id, const launcher::ProcessOutcome& outcome);
  // `own`: the trial is this node's (shared storage: dropped when another node has ended or
  // taken it over); false when ending another node's trial (a dead node's, or a cancelled
  // study's WAITING ones).
  void FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                   bool own = true);
  void MaybeCompleteStudy(StudyRuntime& study);
  void Event(const StudyRuntime* study, const model::TrialRecord* trial, const std::string& kind,
             const std::string& detail);
  std::string TrialDir(const std::string& study, int number) const;

  SchedulerOptions options_;
  std::map<int64_t, std::unique_ptr<StudyRuntime>> studies_;  // active studies by id
  std::map<int64_t, std::unique_ptr<RunningTrial>> running_;  // by trial id
  int64_t last_served_study_ = 0;                             // round-robin position of Pump()
  int64_t gpu_reserved_for_ = 0;               // study whose GPU trial waits for slots (0: none)
  std::map<int64_t, int64_t> draining_study_;  // trial id -> study id, while its slots drain
  bool shutting_down_ = false;
  std::function<void()> on_idle_;
  bool pumping_ = false;
  struct PendingFinish {
    int64_t study_id = 0;
    int number = 0;
    model::TrialOutcome outcome;
    bool own = true;
  };
  std::vector<PendingFinish> pending_finishes_;  // shared: trial ends not yet stored
  std::set<std::string> dead_nodes_;             // shared: nodes found silent at the last look
  double lease_from_ = -1e300;                   // shared: monotonic time before the last heartbeat
  std::map<std::string, std::string> not_loaded_;  // shared: studies this node cannot run: why
};

// Ends what a previous daemon on `state_dir` left behind: every process whose environment
// places it under state_dir/studies/ (TRIALD_TRIAL_DIR), and every member of a `lost` trial's
// recorded process group whose leader still has the recorded start time (a pid is reused, a
// start time is not). SIGKILL, then a bounded wait for them to vanish (they are no longer our
// children, so others reap them). Returns how many processes were found.
int KillLeftoverTrialProcesses(const std::string& state_dir,
                               const std::vector<model::ProcessIdentity>& lost);

}  // namespace triald::daemon
