#pragma once
// Launcher: starts one trial as its own process (group) and reports what it says and how it
// ended. The scheduler sees only this interface, so its logic is tested with a fake launcher
// and no fork; ProcessLauncher (process_launcher.h) is the real one.
//
// Life of a TrialProcess:
//   Launch() ─▶ on_message(...)* ─▶ on_exit(outcome) exactly once.
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
#include <string>
#include <vector>

#include "common/process_util.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "proto/report.h"

namespace triald::launcher {

// kStall: the trial sent no line on its channel for stall_timeout_s (LaunchSpec).
enum class StopReason { kNone, kTimeout, kPrune, kCancel, kShutdown, kProtocol, kStall };
const char* StopReasonName(StopReason reason);

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
};

struct TrialCallbacks {
  std::function<void(const proto::ReportMessage&)> on_message;
  std::function<void(const ProcessOutcome&)> on_exit;
};

class TrialProcess {
 public:
  virtual ~TrialProcess() = default;
  virtual const model::ProcessIdentity& identity() const = 0;
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

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts the process. An error means no process runs; the scheduler then keeps the trial
  // waiting and backs off (scheduler/spawn_backoff.h).
  virtual LaunchResult Launch(const LaunchSpec& spec, TrialCallbacks callbacks) = 0;
};

}  // namespace triald::launcher
