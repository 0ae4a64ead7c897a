#pragma once
// Scheduler: turns studies into trials and trials into processes.
//
// It owns the in-memory state of every active study (its sweep, sampler, pruner and a cache of
// its trials that mirrors storage), asks the sampler for parameters, records each state change
// in Storage before acting on it, launches trials through the Launcher, routes their reports
// (intermediate values, attributes, final values) and records how each one ended
// (scheduler/trial_outcome.h classifies it):
//   COMPLETE  a final value was reported and the main process exited 0
//   PRUNED    the pruner stopped it (value = the intermediate value of its largest step):
//             the pruner is asked after every "report" line, with the trial's values including
//             that one; a yes stops it like a timeout (SIGTERM to its group, kill_grace, then
//             SIGKILL), its later reports are dropped, and its slot goes to the next trial as
//             soon as its processes are gone
//   FAIL      reason exit | signal | oom | timeout | stalled | protocol | spawn | lost | cancelled
//             | shutdown (oom: the launcher saw the trial fail after running out of its memory
//             limit; stalled: no line on its channel for [study] stall_timeout; spawn: only when
//             a started trial could not be recorded as RUNNING)
// A trial that cannot be started (Launcher::Launch fails) does not end: it stays WAITING, first
// in its study's line, and the study backs off (scheduler/spawn_backoff.h: 0.1 s doubling to
// 30 s, a `spawn_failed` event each time; held, with the reason in `status` and a `study_held`
// event, after 3 persistent failures in a row; a `spawn_recovered` event when a trial starts
// again). So n_trials is never used up by failures to start.
// Starting can be asynchronous (a study with [objective] fork_server: launcher.h): a launched
// trial holds its slot while it starts, but is recorded RUNNING (MarkRunning, with its process)
// only when the launcher says it started; until then storage has it WAITING, so a daemon that
// dies meanwhile leaves an ordinary WAITING trial, started again after Recover. A start that
// fails later is handled as a failed Launch() (waits again, back-off, never FAIL); one called
// off by a cancel ends CANCELLED like the study's waiting trials, by a shutdown stays WAITING.
// The study's fork server is released when the study leaves the active set (complete,
// cancelled: once none of its trials is starting or running), when it is deleted and at
// shutdown; the launcher's fork server events become study events (fork_server_started,
// fork_server_exited, fork_server_off) and fork_server_status() feeds `trialctl status`.
// A study of n_trials ends with exactly n_trials finished configurations (fewer only when a grid
// runs out or the study is cancelled).
//
// Retries ([study] retries, retry_on): a trial that FAILs for a reason in retry_on (also `lost`,
// found by Recover) is followed by a new WAITING trial with the same parameters whose retry_of
// names it, while its configuration has had fewer than `retries` retries. The failed trial and
// its retry are stored in one commit. A retried trial no longer counts toward n_trials; its
// retry does, so n_trials counts configurations, not attempts. A retry is started with
// TRIALD_RESUME_DIR naming the failed attempt's trial folder when that folder is on this node
// and fit to hand out (scheduler/resume_dir.h); a `resume_folder` event on the retry says which
// folder, or why there is none.
//
// GPUs ([study] gpus_per_trial = k > 0): each trial holds one slot on each of k different GPUs
// of the GpuPool for its whole life and gets CUDA_VISIBLE_DEVICES naming them (empty for CPU
// trials). Its slots go back through the pool's draining (GpuPool::StartDraining): they are given
// out again once the driver shows none of the trial's processes holding memory, or after the pool's
// timeout, recorded as a `gpu_leak` event. Fairness: studies are served round-robin; the first GPU
// study in that order whose trial does not fit in the free GPUs holds a reservation, and no other
// GPU trial starts until it has started (CPU trials are never held back), so a trial that needs
// many GPUs is not starved by a stream of smaller ones. A sweep asking for more GPUs than the pool
// has is refused at submit. Peak GPU memory: every PollDevices sums, per running GPU trial, the
// GPU memory the probe shows its processes holding (pids matched by process group), keeps the
// largest sum, and samples once more at exit; a sweep measuring peak_gpu_memory is refused at
// submit when the pool has no probe.
//
// Measured metrics ([study] resource_constraints, objectives): after ClassifyExit, the trial's
// measured resources become constraint values and extra objective values
// (scheduler/measured_metrics.h).
//
// Shared storage (several daemons, one PostgreSQL database): each daemon is a node, and every
// node runs every study it can. What makes them agree (claims under the study's lock, leases,
// heartbeats, dead nodes' trials ended as FAIL(lost), trial ends kept while the database is
// away) is the NodeCoordinator's (scheduler/shared_coordinator.h); on a storage of its own the
// scheduler gets a LocalCoordinator that does nothing, and asks the same questions.
// `parallelism` and max_workers are per node. SharedTick() (every heartbeat interval) lets the
// coordinator beat and follow the other nodes, and joins the studies they submitted; the
// daemon has those reads made off the event loop (SchedulerOptions::storage_reads).
//
// A study whose sampler fails starts nothing more and ends FAILED once its running trials are
// over, with a study_failed event saying why (`trialctl status` shows it); one whose sampler has
// nothing more to propose (a grid) ends COMPLETE. Storage refusing writes for a reason of its
// own (a full disk, an I/O error, a database away) ends nothing: the daemon holds (no trial
// starts), keeps the trial ends it could not store, stops the trials whose start it could not
// store, and resumes by itself when a probe write succeeds (scheduler/storage_outage.h).
//
// What stays here is the policy: which trial starts next and where (Pump, CanStart, NextTrial:
// round-robin over studies, the GPU reservation), a trial's start and exit, FinishTrial, the
// retry decision, when a study ends, and shutdown. Its parts, in daemon/scheduler/ (target
// triald_scheduler_parts):
//   study_runtime.h       an active study: its cache, sweep, sampler, pruner and back-off
//   study_loader.h        a study made ready to run: submitted (admitted, stored) or loaded
//   background_sampler.h  a sampler whose samples take long (GP) run on a thread of its own
//   admission.h           whether a sweep may run here (submit, and each reload)
//   stored_studies.h      shared storage: the active studies following the stored ones
//   running_trials.h      this node's launched trials: process, channel, GPU slots
//   trial_starter.h       a claimed trial launched: its spec, a retry's resume folder
//   client_asks.h         ask and tell: a kind = "client" study starts a trial only when asked
//   study_control.h       the control verbs (cancel, pause, resume, extend, set, delete, enqueue)
//   control_change.h      pause, resume, extend, set parallelism, cancel: one decision, stored
//                         on the loop or, on shared storage, by the servers' reads off it
//   study_recorder.h      the one step of a study change: store, mirror, event, log
//   recovery.h            the trials a previous daemon left running, ended as lost
//   trial_channel.h       a running trial's channel: reports, caps, suggest, should_prune
//   report_caps.h         the per-trial caps on what a trial reports (steps, attributes)
//   storage_batch.h       the storage changes of one event in one commit (and a study's lock)
//   storage_outage.h      storage refusing writes: hold, probe, resume
//   pending_finishes.h    trial ends kept until storage takes them
//   pending_writes.h      the channels' writes kept until storage takes them
//   lazy_writer.h         shared storage: the channels' writes made on a thread of their own
//   storage_reads.h       shared storage: the node protocol's reads, and own trials' starts
//                         and ends, made off the event loop
//   retry_policy.h        what a finished trial's end asks for: a retry, or retries exhausted
//   trial_gpus.h          the GPU slots one trial holds, and their one way back
//   trial_outcome.h       how a trial ended, from what was observed (a pure function)
//   launch_spec.h         what a trial's process is given: command, limits, environment
//   enqueued_params.h     the parameters of a trial queued by hand (Enqueue)
//   gpu_drains.h          the slots of ended trials while they drain, and GPU leaks
//   node_coordinator.h    the questions asked of the node protocol; shared_coordinator.h
//   study_cache.h         a study's trials and counts, shared with the coordinator
//   leftover_processes.h  the recovery-time kill of a previous daemon's processes
//   spawn_backoff.h       the wait after a trial could not be started
//   spawn_failures.h      failed starts across studies: back-off, events, the next wake-up
//   study_fork_servers.h  the studies' fork servers: their events, state and release
//   resume_dir.h          the failed attempt's folder a retry may resume from
//   measured_metrics.h    measured resources as constraints and objectives (a pure function)
//   scheduler_env.h       every call to the operating system (file system, passwd, malloc)
//   scheduler_hosts.h     the scheduler's side of CoordinatorHost and ControlHost (scheduler.cc's)
//
// The scheduler never forks, sleeps, reads /proc, the file system or the clock directly:
// Launcher, Storage, Clock, LeftoverProcesses and SchedulerEnv are injected, so
// tests/daemon/scheduler_*_test.cc drive it with fakes (tests/daemon/scheduler_harness.h).
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
#include "daemon/scheduler/control_change.h"
#include "daemon/scheduler/leftover_processes.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/pending_writes.h"
#include "daemon/scheduler/resume_dir.h"
#include "daemon/scheduler/running_trials.h"
#include "daemon/scheduler/scheduler_env.h"
#include "daemon/scheduler/spawn_backoff.h"
#include "daemon/scheduler/storage_outage.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

struct SchedulerOptions {
  storage::Storage* storage = nullptr;
  launcher::Launcher* launcher = nullptr;
  const common::Clock* clock = nullptr;
  common::Logger logger;
  std::string state_dir;  // trial folders live under state_dir/studies/<study>/trials/<n>
  // Trials running on this host at once, all studies together. Trials that run elsewhere
  // ([executor] kind = "slurm") are bounded by their studies' parallelism only.
  int max_workers = 1;
  size_t log_head_bytes = 1 << 20;
  size_t log_tail_bytes = 1 << 20;
  // Environment every worker starts from ("KEY=VALUE"); the sweep's env and the TRIALD_*
  // variables are added on top.
  std::vector<std::string> base_env;
  // Draws a seed for sweeps that give none (the drawn seed is stored with the study).
  std::function<uint64_t()> seed_source;
  // The built-in worker run by [objective] kind = "lm" (absolute path).
  std::string trial_worker;
  // Whether the launcher runs trials as their studies' submitters (a root daemon;
  // launcher/run_as.h): a retry's resume folder must then be the submitter's, else the daemon's.
  bool trials_as_submitters = false;
  // Builds each study's pruner; empty means pruner::MakePruner. Tests put a scripted pruner
  // here to drive the scheduler's side of pruning.
  std::function<common::Result<std::unique_ptr<pruner::Pruner>>(const config::PrunerConfig&)>
      make_pruner;
  // GPU slots (not owned); nullptr: no GPUs, and sweeps with gpus_per_trial > 0 are refused.
  devices::GpuPool* gpus = nullptr;
  // Whether a study whose trials run elsewhere ([executor] kind other than "local") can run
  // there (StudyAdmission::Options::check_executor); empty: such studies are refused.
  std::function<common::Status(const config::SweepSpec&, const std::string& where)> check_executor;
  // Shared storage: a node silent for longer than this is dead (shared_coordinator.h).
  double node_timeout_s = 30;
  // Shared storage: this node kills its own trials after this long without a heartbeat reaching
  // the database (CoordinatorOptions::fence_after_s; 0: the lease).
  double fence_after_s = 0;
  // Ends a previous daemon's trial processes at recovery (not owned); nullptr: the real one,
  // which scans /proc (ProcLeftoverProcesses).
  LeftoverProcesses* leftovers = nullptr;
  // Runs after each Pump(), i.e. whenever running_count() or queued_count() may have changed,
  // and whenever the storage hold begins, is probed or ends (storage_outage()): the daemon's
  // systemd STATUS= line and what `ping` answers (control/ping_board.h). May read the scheduler's
  // counts and hold; must not change the scheduler.
  std::function<void()> on_change;
  // Asks for Pump() to be called after `delay_s` seconds (a study waits after a failed start);
  // each call replaces the previous request. Must not call back into the scheduler. Empty: the
  // caller pumps by other means (tests: advance the clock, then Pump()).
  std::function<void(double delay_s)> wake_after;
  // Runs `fn` on the scheduler's event loop soon; may be called from any thread (the daemon:
  // asio::post). A study's background sampler (background_sampler.h) asks for a Pump() through
  // it when a sample is ready. Empty: samplers run on the event loop (tests without one).
  std::function<void(std::function<void()> fn)> post;
  // Builds each study's sampler; empty means sampler::MakeSampler. Tests put a failing or
  // counting sampler here.
  std::function<common::Result<std::unique_ptr<sampler::Sampler>>(const config::SamplerConfig&,
                                                                  const config::SearchSpace&)>
      make_sampler;
  // Every call to the operating system (not owned); nullptr: the real one
  // (SystemSchedulerEnv()).
  SchedulerEnv* env = nullptr;
  // A storage connection of its own (the same database as `storage`) for the trials' lazily
  // durable writes, made by a thread (lazy_writer.h) so that a report never waits for the
  // database on the event loop; needs `post`. Null: they are written on the event loop (the
  // daemon on SQLite, where they ride with the next commit).
  std::shared_ptr<storage::Storage> trial_write_storage;
  // Shared storage: the multi-node protocol's reads (heartbeats, other nodes' studies and
  // trials) made off the event loop (storage_reads.h; the daemon: a thread with a connection of
  // its own). Null: on the event loop.
  std::shared_ptr<StorageReads> storage_reads;
};

class GpuDrains;
class LazyWriter;
class SpawnFailures;
class StudyControl;
class StudyForkServers;
class StudyLoader;
class StudyRecorder;
class TrialGpus;
class TrialStarter;
struct StudyRuntime;
struct PreparedStudy;
struct DeleteHold;
struct DeleteStored;

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();

  // After a daemon restart: reloads active studies and ends trials the previous daemon left
  // RUNNING as FAIL(lost), killing any of their processes still alive. Call before Pump().
  common::Status Recover();

  // Validates and stores a sweep submitted by `submitter`, then starts its trials. Errors name
  // the file and key. With source.resume or [study] load_if_exists, a study of the sweep's name
  // that exists is continued instead (StudyControl::Resume: its submitter, root or triald's
  // user; the same directions, space and objective; the file's n_trials more trials).
  common::Result<model::StudyRecord> Submit(const config::SweepSource& source,
                                            const model::Submitter& submitter = {});
  // Submit in two halves, so that its checks need not run on the event loop. Admit: the sweep
  // parsed and checked as Submit checks it (the submitter's rights first: a root daemon's child
  // runs as the submitter, for up to kSubmitCheckSeconds; a Slurm study's partition); nothing
  // is stored. It changes nothing in the scheduler and may be called from any thread while the
  // scheduler lives (the daemon's SchedulerEnv and GpuPool are safe to; a test's fakes may not
  // be). SubmitAdmitted (the event loop): the rest of Submit for the spec Admit returned.
  common::Result<config::SweepSpec> Admit(const config::SweepSource& source,
                                          const model::Submitter& submitter) const;
  common::Result<model::StudyRecord> SubmitAdmitted(const config::SweepSource& source,
                                                    config::SweepSpec spec,
                                                    const model::Submitter& submitter);
  // Shared storage, Delete with its storage calls elsewhere (the servers' reads thread), in
  // three steps (scheduler/study_delete.h): HoldForDelete (the event loop, no storage; refused
  // while shutting down) says what this node's memory holds against deleting study `name` and,
  // for a study active here,
  // starts no trial of it until FollowDelete or ReleaseDelete; StoreDelete decides and stores
  // the deletion with the caller's connection; FollowDelete (the loop, no storage) forgets the
  // study, purges its folder and starts what the freed slots allow; ReleaseDelete (the loop)
  // lets the study go on when StoreDelete refused or failed.
  common::Result<DeleteHold> HoldForDelete(const std::string& name);
  common::Result<int64_t> FollowDelete(const DeleteStored& stored, bool purge);
  void ReleaseDelete(const DeleteHold& hold);

  // Whether SubmitAdmitted of `source` as admitted (`spec`) makes a new study whatever storage
  // holds: neither submit --resume nor [study] load_if_exists. Such a submission may store its
  // study elsewhere: PrepareSubmitted (the event loop, no storage) builds it, as SubmitAdmitted
  // would (errors name the sweep file); StudyLoader::StoreSubmitted stores it with a connection
  // of the caller's (shared storage: the servers' reads thread); AddSubmitted (the event loop,
  // no storage) runs it. A study a tick of this node joined meanwhile (it found it stored) runs
  // as joined; a daemon shutting down meanwhile leaves it stored, to run after its restart or on
  // another node. Either way the stored record is returned.
  static bool MakesNewStudy(const config::SweepSource& source, const config::SweepSpec& spec);
  common::Result<PreparedStudy> PrepareSubmitted(const config::SweepSource& source,
                                                 config::SweepSpec spec,
                                                 const model::Submitter& submitter);
  model::StudyRecord AddSubmitted(PreparedStudy prepared, model::StudyRecord stored);

  // Stops the study's running trials (FAIL(cancelled)) and starts no more.
  common::Status Cancel(const std::string& study_name);

  // Control after submit (trialctl pause, resume, extend, set, delete; study_control.h does
  // the work, under NodeCoordinator::LockForControl). Each change is stored
  // (model::StudyRecord: paused, n_trials, parallelism; a restart keeps it), recorded as a study
  // event, and on shared storage obeyed by every node: at its next claim (taken under the
  // study's lock, which re-reads the study) and its next tick. Errors: kNotFound (no such
  // study), kFailedPrecondition (the study's state does not allow it; the message says why),
  // kInvalidArgument (a bad value, naming what was expected), kUnavailable (shutting down).
  //
  // Pause (paused = true): starts no trial of the study (running ones go on; trials may still
  // be enqueued, and start at resume); event study_paused. Resume (false): starts them again;
  // event study_resumed. The study must be RUNNING, and not already so.
  common::Result<model::StudyRecord> Pause(const std::string& study_name, bool paused);
  // Sets the study's n_trials to `n_trials`, which must exceed its finished trials and be at
  // least the configurations it has (finished, running and waiting); a COMPLETE study becomes
  // RUNNING again (and not paused) and its trials start; a CANCELLED or FAILED one is refused.
  // Event study_extended.
  common::Result<model::StudyRecord> Extend(const std::string& study_name, int n_trials);
  // Replaces the sweep's [study] parallelism (>= 1) for this study from its next launch on;
  // lowering it stops nothing that runs; a CANCELLED or FAILED study is refused. Event
  // study_parallelism.
  common::Result<model::StudyRecord> SetParallelism(const std::string& study_name, int parallelism);
  // Names the study's objectives after submit (Optuna's study.set_metric_names; [study]
  // metric_names at submit): one distinct name per objective, or none. Event study_metric_names.
  common::Result<model::StudyRecord> SetMetricNames(const std::string& study_name,
                                                    const std::vector<std::string>& names);
  // Removes a study that has no running trial (else kFailedPrecondition) with its trials and
  // everything stored with them (Storage::DeleteStudy); `purge` also removes its folder under
  // the state directory (trial folders and logs of this node). Event study_deleted (stored
  // without a study, naming it). Returns how many trials were deleted.
  common::Result<int64_t> Delete(const std::string& study_name, bool purge);
  // Pause, resume, extend, set parallelism or cancel as a server's reads' thread stored it off
  // the event loop on shared storage (StoreControl, scheduler/control_change.h): this node's
  // memory follows at once (StudyControl::Follow); errors as Extend's when a COMPLETE study
  // extended cannot run here.
  common::Status FollowControl(const ControlStored& stored);

  // Queues a trial with fixed parameters, as Optuna's enqueue_trial: `params` maps parameter
  // names to values as a user writes them ("0.01", "64", "adamw"), each parsed against the
  // parameter's distribution; parameters not given are drawn by the study's sampler for the
  // trial's number. The trial is stored WAITING at once (it counts toward n_trials) and starts
  // before any newly sampled trial, enqueued trials first come first served; it may start
  // before this returns. Errors: kNotFound (no such study), kFailedPrecondition (the study is
  // not RUNNING, or already has its n_trials trials), kInvalidArgument (an unknown parameter,
  // or a value its distribution does not contain; the message names it and what was
  // expected), kUnavailable (shutting down). A define-by-run study (kind = "python") also takes
  // values for parameters its objective suggests (enqueued_params.h). With `skip_if_exists`
  // (Optuna's enqueue_trial(skip_if_exists=True)), a trial that already has every given value
  // (waiting, running or finished; enqueued values not suggested yet count) is returned instead
  // and nothing is queued; *skipped says which happened.
  common::Result<model::TrialRecord> Enqueue(const std::string& study_name,
                                             const std::map<std::string, std::string>& params,
                                             bool skip_if_exists = false, bool* skipped = nullptr);
  // Enqueue with its storage calls off the event loop (shared storage with writes off it:
  // NodeCoordinator::EnqueueOffLoop), for a study active here whose record the caller has
  // checked (RUNNING) elsewhere: decided on the cached copy, stored under the study's lock by
  // the protocol's reads' thread, and decided again on what that read when storage had changed
  // (at most StudyControl::kEnqueueTries times). `done` runs on the loop (perhaps before this
  // returns) with the trial, or the error Enqueue would give, and whether it was skipped. False:
  // not taken (no writes off the loop here): the caller uses Enqueue.
  using EnqueuedDone = std::function<void(common::Result<model::TrialRecord>, bool skipped)>;
  bool EnqueueOffLoop(const std::string& study_name, std::map<std::string, std::string> params,
                      bool skip_if_exists, EnqueuedDone done);

  // Ask and tell (scheduler/client_asks.h): starts a trial of the study named `study_name`
  // ([objective] kind = "client") now, to run in the program on `connection` (the control
  // server's; the trial's launcher takes it and writes the reply, LaunchSpec::client), or says
  // why not: kNotFound (no such study), kFailedPrecondition (not kind = "client", not RUNNING,
  // paused, its parallelism or n_trials reached; the message says which and what to do),
  // kUnavailable (shutting down, storage refusing writes). On an error `connection` is
  // dropped; the control server answers on its own descriptor.
  common::Status Ask(const std::string& study_name, std::shared_ptr<common::UniqueFd> connection);

  // Starts as many trials as the limits allow.
  void Pump();

  // Starts no more trials and stops every running one; `on_idle` runs once none is left.
  void BeginShutdown(std::function<void()> on_idle);

  // The daemon calls it every heartbeat interval: on shared storage, beats, follows the other
  // nodes (their studies, trials and deaths) and starts what it can (with storage_reads, once
  // the tick's reads are back); otherwise does nothing.
  void SharedTick();

  // GPU bookkeeping, called periodically by the daemon while gpu_work() is true: records the
  // processes of running GPU trials that hold GPU memory (matched by process group) and the
  // largest sum of their memory so far (the trial's peak_gpu_memory_bytes, sampled once more
  // when it ends), hands back drained slots (recording leaks) and starts trials that were
  // waiting for them.
  void PollDevices();
  bool gpu_work() const;

  int running_count() const { return running_->size(); }
  // Whether this node has work: a trial running (or starting), or an active study that could
  // start one here (running and not paused, with a trial waiting or configurations left; a
  // study backing off after failed starts counts). A node without may go (--exit-when-idle).
  bool HasWork() const;
  int queued_count() const;
  int active_study_count() const { return static_cast<int>(studies_.size()); }
  // An active study whose trials could not be started lately (still backing off, or held);
  // nullopt otherwise.
  std::optional<SpawnBackoff::Snapshot> spawn_status(int64_t study_id) const;
  // An active study whose sweep uses a fork server ([objective] fork_server): its state as the
  // launcher tells it (state "not started" before its first launch); nullopt otherwise.
  std::optional<launcher::ForkServerStatus> fork_server_status(int64_t study_id) const;
  // Whether storage refuses writes (a full disk, an I/O error, a database away): then no trial
  // starts until a probe succeeds (storage_outage.h).
  const StorageOutage& storage_outage() const { return outage_; }
  const PendingWrites& pending_writes() const { return pending_writes_; }
  // The trials' writes waiting in the lazy writer (0 without one).
  size_t lazy_writes_queued() const;
  // The active study named `name` as this node knows it in memory (its record and trials), or
  // null: what `status` answers with when storage cannot (an outage).
  const StudyCache* active_study(const std::string& name) const;
  // Seconds until the next probe of a held storage (0 when not held).
  double storage_retry_in() const;
  // An active study with several objectives: the size of the Pareto front of its feasible
  // COMPLETE trials, from the trials the scheduler holds (no storage read), recomputed only
  // when a trial has finished since the last call; nullopt for a study that is not active or
  // has one objective.
  std::optional<int64_t> pareto_front_size(int64_t study_id);
  // This node's running trials with the GPU slots each holds (the dashboard shows them).
  using RunningView = RunningTrialView;
  std::vector<RunningView> running_trials() const;

 private:
  class Host;
  class Control;

  // The sampler's parameters for the study's next trial number (and the trial's sample, kept
  // for its define-by-run suggests); nullopt when it has none: exhausted (a grid) or failed,
  // recorded as an event, and the study ends when nothing else runs.
  std::optional<sampler::TrialSample> DrawParams(StudyRuntime& study);
  // What to start next, picked on the cache: the oldest waiting trial (not one launched here
  // already), else the sample of a new one from the sampler while the study has fewer than
  // n_trials configurations; nullopt: none.
  struct Pick {
    std::optional<int> waiting;
    std::optional<sampler::TrialSample> sample;  // a new trial's
  };
  std::optional<Pick> PickNext(StudyRuntime& study);
  // The trial to start next (the coordinator claims it on the loop): PickNext's waiting trial,
  // or its new one, stored now; nullopt: none.
  std::optional<int> NextTrial(StudyRuntime& study);
  // Storage refused to store a new trial (`st`): an outage holds the daemon; a final refusal
  // fails the study; otherwise logged (it is tried again).
  void OnCreateRefused(StudyRuntime& study, const common::Status& st);
  // The study cannot go on (`why`): it starts nothing more and ends FAILED.
  void FailStudy(StudyRuntime& study, const std::string& why);
  // Fail-fast (FailureStreak): FailStudy, and its WAITING trials end without starting.
  void StopFailingStudy(StudyRuntime& study, const std::string& why);
  // MaybeCompleteStudy, as a decision of its own (under the study's lock when shared).
  void LockedMaybeComplete(StudyRuntime& study);
  bool CanStart(const StudyRuntime& study) const;
  // The active study named `name`, or null.
  StudyRuntime* FindActive(const std::string& name) const;
  // Whether the study's trials run on this host (max_workers bounds them) or elsewhere.
  static bool RunsHere(const StudyRuntime& study);
  // Trials running on this host now.
  int local_running() const;
  // Starts the study's next trial on `gpus` (acquired for it; given back if no trial starts).
  // Returns whether a trial was launched, or its claim handed to the coordinator (ClaimOffLoop).
  bool StartTrial(StudyRuntime& study, TrialGpus gpus);
  // Shared storage with writes off the loop (NodeCoordinator::ClaimOffLoop): the study's next
  // trial is picked here, claimed (or created) off the event loop, and launched by OnClaimed;
  // its slot and `gpus` are held meanwhile (claims_). False: nothing to claim now.
  bool ClaimOffLoop(StudyRuntime& study, TrialGpus gpus);
  // A claim ClaimOffLoop handed over is back: the trial launched (unless the study or this node
  // stopped meanwhile: its claim is given back then, ReleaseOffLoop), or the pick made again on
  // what was read (stale), or the failure taken as a refused write; then Pump().
  void OnClaimed(int64_t study_id, ClaimMade made);
  // Launches the claimed trial `number` (`created`: a new one) on `gpus`; false when it could
  // not be started (it waits again).
  bool LaunchClaimed(StudyRuntime& study, int number, bool created, TrialGpus gpus);
  // Trial `number` could not be started: it waits again, first in line, and the study backs off.
  void OnSpawnFailure(StudyRuntime& study, int number, const launcher::SpawnError& error,
                      const std::string& message);
  // A launched trial runs (at once for exec, later for a fork): recorded RUNNING with its
  // process. False when that could not be stored (the trial is then stopped, FAIL(spawn)).
  bool OnStarted(int64_t trial_id, const model::ProcessIdentity& id);
  // Shared storage: a trial's RUNNING, stored off the event loop (MarkRunningOffLoop), is back.
  // An outage holds the daemon and the trial runs on; a refusal stops the trial, FAIL(spawn).
  void OnRunningStored(int64_t trial_id, const common::Status& st);
  // Storage refused to record trial `number`'s start for itself (`st`): the trial is stopped at
  // once and ends FAIL(spawn).
  void StopUnrecorded(StudyRuntime& study, int64_t trial_id, int number, const common::Status& st);
  // A launched trial ended without ever starting (launcher.h: never_started): a failed start
  // (it waits again, the study backs off), or a start called off by cancel or shutdown.
  void OnNeverStarted(int64_t trial_id, const launcher::ProcessOutcome& outcome);
  // Queues a retry of the finished trial `number` when the study's policy asks for one, and
  // puts back a trial that a stop of triald ended ([study] requeue_on_shutdown).
  void MaybeRetry(StudyRuntime& study, int number);
  // This node's own trial's end (or, `reaped`, a dead node's) handed to the coordinator to be
  // stored off the event loop (NodeCoordinator::FinishOffLoop), with its retry decided now; false
  // when it stores ends on the loop.
  bool FinishOffLoop(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                     std::optional<EndReaped> reaped = std::nullopt);
  // An end FinishOffLoop handed over is back: mirrored (its retry, the failure streak, the
  // study's completion), kept (its writes with it), or dropped; then Pump().
  // `study`: nullptr when it is no longer active.
  void OnEndStored(StudyRuntime* study, const EndWrite& end, EndStored stored);
  void OnExit(int64_t trial_id, const launcher::ProcessOutcome& outcome);
  // `own`: the trial is this node's (shared storage: dropped when another node has ended or
  // taken it over); false when ending another node's trial (a dead node's, or a cancelled
  // study's WAITING ones).
  void FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                   bool own = true);
  // Ends the study, COMPLETE (or FAILED, with study.failure) once nothing of it is left to run.
  // Shared storage with writes off the loop: stored off the loop, decided again under the
  // study's lock (NodeCoordinator::EndStudyOffLoop), and mirrored when it is back.
  void MaybeCompleteStudy(StudyRuntime& study);
  // The studies as a tick read them (CoordinatorHost::FollowStored).
  void FollowStored(const std::vector<model::StudyRecord>& stored);
  // Drops studies that have ended and have nothing running; true when any was dropped.
  bool DropEndedStudies();
  // A write refused (`st`): an outage holds the daemon (storage_outage.h), logged once.
  void OnStorageRefused(const common::Status& st);
  // While held: probes the storage with a durable write when one is due (shared storage: on the
  // protocol's reads' connection, off the loop, one at a time); OnProbe then resumes on success,
  // storing the trial ends kept meanwhile.
  void ProbeStorage();
  void OnProbe(const common::Status& probe);
  // The pass's commit failed: nothing of its trials is stored, so they are stopped and
  // forgotten (new ones) or wait again (claimed ones).
  void UndoPass();

  SchedulerOptions options_;
  std::unique_ptr<SchedulerEnv> own_env_;             // when options_.env is nullptr
  std::unique_ptr<LeftoverProcesses> own_leftovers_;  // when options_.leftovers is nullptr
  std::unique_ptr<Host> host_;                        // the coordinator's view of this scheduler
  std::unique_ptr<NodeCoordinator> coordinator_;      // local or shared (node_coordinator.h)
  std::unique_ptr<StudyRecorder> recorder_;           // every study change and event
  std::unique_ptr<StudyLoader> loader_;               // studies submitted, or loaded to run
  std::unique_ptr<TrialStarter> starter_;             // launches a claimed trial
  std::unique_ptr<SpawnFailures> spawn_failures_;     // back-off and events of failed starts
  std::unique_ptr<StudyForkServers> fork_servers_;    // the studies' fork servers
  std::unique_ptr<Control> control_host_;             // the control verbs' view of this scheduler
  std::unique_ptr<StudyControl> control_;             // the control verbs
  std::map<int64_t, std::unique_ptr<StudyRuntime>> studies_;  // active studies by id
  std::unique_ptr<RunningTrials> running_;                    // this node's launched trials
  int64_t last_served_study_ = 0;                             // round-robin position of Pump()
  int64_t gpu_reserved_for_ = 0;  // study whose GPU trial waits for slots (0: none)
  PendingWrites pending_writes_;  // the channels' writes storage refused (pending_writes.h)
  // The channels' writes on a thread of their own (lazy_writer.h); null: on the event loop.
  std::unique_ptr<LazyWriter> lazy_writer_;
  StorageOutage outage_;  // storage refusing writes: nothing starts (storage_outage.h)
  // The trials Pump's open pass launched: stopped and forgotten when the pass's commit fails.
  struct PassLaunch {
    StudyRuntime* study = nullptr;
    int number = 0;
    int64_t trial_id = 0;
    bool created = false;  // a new trial (else a WAITING one it claimed)
  };
  std::vector<PassLaunch> pass_launches_;
  // Claims off the event loop not back yet, by study id (one per study at a time): the slot
  // (`runs_here`: it counts toward max_workers) and GPU slots held for the trial, and a new
  // trial's sample.
  struct ClaimInFlight {
    TrialGpus gpus;
    std::optional<sampler::TrialSample> sample;
    bool runs_here = false;
  };
  std::map<int64_t, ClaimInFlight> claims_;
  std::unique_ptr<GpuDrains> gpu_drains_;  // with a GPU pool: ended trials' slots
  bool shutting_down_ = false;
  bool probe_in_flight_ = false;  // ProbeStorage's write off the loop is not back yet
  std::function<void()> on_idle_;
  bool pumping_ = false;
};

}  // namespace triald::daemon
