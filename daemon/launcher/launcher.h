#pragma once
// Launcher: starts one trial as its own process (group) and reports what it says and how it
// ended. The scheduler sees only this interface, so its logic is tested with a fake launcher
// and no fork; ProcessLauncher (process_launcher.h) is the real one.
//
// Life of a TrialProcess:
//   Launch() ─▶ [on_started(identity)] ─▶ on_message(...)* ─▶ on_exit(outcome) exactly once.
// An exec'd trial is started when Launch() returns (started() is true; no on_started). A trial
// forked by its study's fork server (LaunchSpec::fork_server) starts later: on_started comes
// once the server has forked it and the daemon has placed it (cgroup, limits) and told it to
// go; until then identity() is empty. A launch that fails after Launch() returned ends with
// on_exit whose outcome has never_started set (spawn_error and spawn_message say why): no user
// code ran, and the caller treats it as a failed Launch().
// The trial channel is two-way: a worker's request (suggest, should_prune) reaches on_message
// like any report line, and the receiver answers it with Answer().
// on_exit comes only when the trial is over: its main process has been reaped, its process
// group (and, in cgroup mode, its cgroup) is empty (strays left by a finished main process are
// stopped first), and its output has been drained. After on_exit the TrialProcess may be destroyed;
// destroying it earlier kills the whole group at once.
//
// Thread-safety: all calls and callbacks happen on the daemon's event-loop thread.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/process_util.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "proto/report.h"

namespace triald::launcher {

// kStall: the trial sent no line on its channel for stall_timeout_s (LaunchSpec).
enum class StopReason { kNone, kTimeout, kPrune, kCancel, kShutdown, kProtocol, kStall };
const char* StopReasonName(StopReason reason);

// A study's fork server: one process per key, started on the first launch that names it.
struct ForkServerSpec {
  std::string key;                        // one server per key (the study's name)
  std::string executable;                 // absolute path
  std::vector<std::string> argv;          // argv[0] included
  std::vector<std::string> env;           // the server's complete environment
  std::string workdir;                    // the server's cwd
  std::string log_path;                   // its stdout and stderr, capped like a trial's log
  std::vector<std::string> request_argv;  // the fork request's argv (the trial's arguments)
  // The launch specs of one key describe one server; a launch whose server command differs
  // (argv, env, workdir) from the running server's replaces it once idle.
  bool operator==(const ForkServerSpec& o) const {
    return key == o.key && executable == o.executable && argv == o.argv && env == o.env &&
           workdir == o.workdir && log_path == o.log_path && request_argv == o.request_argv;
  }
};

// [executor] kind = "slurm": the trial runs as a Slurm job. The launcher that runs Slurm trials
// (daemon/slurm/slurm_launcher.h) turns such a spec into its bridge's; another launcher refuses
// it.
struct SlurmJob {
  config::SlurmExecutorConfig executor;
  int gpus = 0;          // [study] gpus_per_trial: GRES gpu
  std::string job_name;  // slurm::JobName(): how a restarted daemon finds its jobs
  std::string comment;   // the study and trial, for people reading squeue
};

struct LaunchSpec {
  std::string executable;         // absolute path (resolved by the caller)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
  std::string workdir;            // the child's cwd
  // The trial's own folder (TRIALD_TRIAL_DIR), created if missing; empty: none.
  std::string trial_dir;
  // stdout.log and stderr.log go here: a folder of the daemon's (created 0750, owned by the
  // daemon), never the trial's folder, so the trial cannot replace the files the daemon reads.
  std::string log_dir;
  size_t log_head_bytes = 1 << 20;  // kept from the start of each stream
  size_t log_tail_bytes = 1 << 20;  // kept from the end of each stream
  double timeout_s = 0;             // 0: none
  double kill_grace_s = 10;         // SIGTERM → SIGKILL
  // 0: none. Otherwise the trial is stopped (StopReason::kStall) once its main process has been
  // running this long without a valid line on the trial channel (any type: report, heartbeat,
  // attr, a request); each line restarts the count.
  double stall_timeout_s = 0;
  // Resource limits (0: none). Memory: memory.max of the trial's cgroup where the memory
  // controller is on, else RLIMIT_AS of the main process. Pids: pids.max where a pids
  // controller is available, else not enforced.
  uint64_t memory_limit_bytes = 0;
  int64_t pids_limit = 0;
  // Who submitted the study. A launcher that runs trials as their submitters (a root daemon:
  // ProcessLauncher::Options::run_as_submitter) runs this one as that user; an unknown
  // submitter runs as the daemon's user.
  model::Submitter submitter;
  // Bytes the worker may send on the trial channel in all ([study] max_report_bytes); past it
  // the trial ends FAIL(protocol) naming the cap. 0: no cap.
  uint64_t max_report_bytes = 0;
  // Start the trial as a fork of this server (proto/README.md, "Fork server protocol") rather
  // than by exec; executable and argv above stay the exec path's, used when the launcher has
  // fallen back to exec for the server's key.
  std::optional<ForkServerSpec> fork_server;
  // Run the trial as this Slurm job rather than on this host.
  std::optional<SlurmJob> slurm;
  // [objective] kind = "client": no process; the trial runs in the program that asked for it
  // on this connection (the control verb `ask`: the daemon's end of it, handed over by the
  // control server). The launcher that serves such trials (client_launcher.h) writes the ask's
  // reply and then reads the trial channel from it; another launcher refuses the spec.
  std::shared_ptr<common::UniqueFd> client;
};

// The step of Launch() that failed. The launcher reports it with the step's errno; what to do
// about it (wait, hold the study) is the scheduler's policy (scheduler/spawn_backoff.h).
enum class SpawnStep {
  kPrepare,  // the daemon's side: the trial folder, its log files, pipes, the trial channel
  kCgroup,   // creating the trial's cgroup, or (in the child) joining it
  kFork,     // vfork (clone) itself
  kChild,    // the child's setup before exec: joining the cgroup, limits, process group
  // Becoming the study's submitter (run_as.h): its passwd entry, then, in the child,
  // setgroups, setgid and setuid.
  kCredentials,
  kWorkdir,  // the child's chdir to the workdir
  kExec,     // execve of the command
};
const char* SpawnStepName(SpawnStep step);

// Why no process was started: the step and its errno (0: not known).
struct SpawnError {
  SpawnStep step = SpawnStep::kPrepare;
  int error_number = 0;
};

struct ProcessOutcome {
  common::ExitStatus exit;                     // of the main process
  StopReason stop_reason = StopReason::kNone;  // why the daemon stopped it, if it did
  bool killed = false;                         // SIGKILL was needed after the grace period
  bool strays = false;                         // the main process left others in its group
  std::string protocol_error;  // set when the trial channel carried something invalid
  std::string stderr_tail;     // last few KiB of stderr
  // The trial ran out of its memory limit, as far as the launcher can tell: the cgroup's
  // memory.events counted an oom_kill, or (under RLIMIT_AS) it failed and its stderr tail shows
  // a failed allocation. oom_detail says which evidence.
  bool oom = false;
  std::string oom_detail;
  // What the trial's process tree consumed (model::TrialResources says how each is measured).
  // The launcher fills memory, CPU and wall time; peak_gpu_memory_bytes is the scheduler's.
  model::TrialResources resources;
  // The launch failed after Launch() returned (a forked start: the fork server died, refused,
  // or did not answer in time; or the trial ended before its go): no user code ran. The other
  // fields are then meaningless but stop_reason (a Stop() before the start).
  bool never_started = false;
  SpawnError spawn_error;
  std::string spawn_message;
  // Where the trial ran elsewhere (a Slurm job) and that system ended it: the failure reason
  // (one of config::RetryableReasons(), e.g. "preempted") and what it said.
  std::string executor_failure;
  std::string executor_detail;
  // A trial without a process of its own (a client's, LaunchSpec::client): how it ended, said
  // instead of the exit status ("the client told FAIL"). Empty: the exit status says it.
  std::string ended_by;
};

struct TrialCallbacks {
  // Forked starts only (see above): the trial runs, with this identity.
  std::function<void(const model::ProcessIdentity&)> on_started;
  std::function<void(const proto::ReportMessage&)> on_message;
  std::function<void(const ProcessOutcome&)> on_exit;
};

class TrialProcess {
 public:
  virtual ~TrialProcess() = default;
  // Empty (pid 0) until started().
  virtual const model::ProcessIdentity& identity() const = 0;
  // Whether the trial runs (an exec'd one at once; a forked one from on_started). Stop() or
  // FailProtocol() before then cancels the start: on_exit follows with never_started.
  virtual bool started() const = 0;
  // SIGTERM to the group, then SIGKILL after the grace period. The first reason given is the
  // one reported; later calls do nothing.
  virtual void Stop(StopReason reason) = 0;
  // Leaves the worker kill_grace seconds to end by itself (a cooperative prune: it was told to
  // stop through should_prune), then Stop(reason). If it ends first, the outcome names no stop
  // reason. Only the first call counts; a Stop() meanwhile takes over.
  virtual void StopAfterGrace(StopReason reason) = 0;
  // Queues one answer line (a JSON object, as proto/report.h encodes it; a missing newline is
  // added) to the worker on its trial channel, in order, without blocking: what the socket does
  // not take now is sent when it can. A worker that lets more than kMaxAnswerBacklogBytes pile up
  // unread is stopped (FAIL(protocol)). Answers to a trial that is over, or whose channel is
  // closed, are dropped.
  virtual void Answer(const std::string& line) = 0;
  // Ends the trial FAIL(protocol) with `message` (the first message given is the one kept):
  // for a request the worker made that the daemon refuses. SIGTERM and grace as Stop().
  virtual void FailProtocol(const std::string& message) = 0;
};

// The most answer bytes a worker may leave unread before it is stopped.
inline constexpr size_t kMaxAnswerBacklogBytes = 1 << 20;

// What Launch() returns: the TrialProcess, or the Status a user reads ("exec /x/train.py:
// Permission denied") with spawn_error() saying which step failed and why. A plain Status
// converts with step kPrepare and no errno.
class LaunchResult : public common::Result<std::unique_ptr<TrialProcess>> {
 public:
  LaunchResult(std::unique_ptr<TrialProcess> process)  // NOLINT(runtime/explicit)
      : Result(std::move(process)) {}
  LaunchResult(common::Status status)  // NOLINT(runtime/explicit)
      : Result(std::move(status)) {}
  LaunchResult(common::Status status, SpawnError error)
      : Result(std::move(status)), error_(error) {}

  // Meaningful only when !ok().
  const SpawnError& spawn_error() const { return error_; }

 private:
  SpawnError error_;
};

// What a fork server's key went through, for the scheduler's study events.
struct ForkServerEvent {
  enum class Kind {
    kStarted,  // ready: detail names its pid and preloaded modules
    kExited,   // ended without being asked to (detail: how, and what became of pending starts)
    kOff,      // the key falls back to exec for good (detail: the reason)
  };
  std::string key;
  Kind kind = Kind::kStarted;
  std::string detail;
};
const char* ForkServerEventName(ForkServerEvent::Kind kind);  // "fork_server_started", ...

// A key's fork server now.
struct ForkServerStatus {
  // "starting" (launched, not ready yet), "on" (ready), "down" (died; restarted at the next
  // launch), "off" (exec for good: reason).
  std::string state;
  pid_t pid = 0;  // while starting or on
  std::vector<std::string> preloaded;
  bool objective_loaded = false;
  int forks = 0;          // while on: forks per trial, 1 (a clone) or 2; 0 if it did not say
  uint64_t forked = 0;    // trials it forked, over every server of the key
  int deaths_in_row = 0;  // deaths since the last successful fork
  std::string reason;     // off: why; down: how it ended
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts the process. An error means no process runs; the scheduler then keeps the trial
  // waiting and backs off (scheduler/spawn_backoff.h).
  virtual LaunchResult Launch(const LaunchSpec& spec, TrialCallbacks callbacks) = 0;

  // ---- Fork servers (LaunchSpec::fork_server); a launcher without them ignores these ----
  // Receives what happens to fork servers (on the event loop, never from inside a call to the
  // launcher). One listener; a later call replaces it.
  virtual void SetForkServerListener(std::function<void(const ForkServerEvent&)> listener) {
    (void)listener;
  }
  // Stops the server of `key` (its study ended); its pending starts fail (never_started). The
  // key's state is forgotten: a later launch starts afresh.
  virtual void ReleaseForkServer(const std::string& key) { (void)key; }
  // Stops every server (the daemon stops).
  virtual void ReleaseAllForkServers() {}
  // The server of `key` as `status` shows it; nullopt when the key has none.
  virtual std::optional<ForkServerStatus> fork_server_status(const std::string& key) const {
    (void)key;
    return std::nullopt;
  }
};

}  // namespace triald::launcher
