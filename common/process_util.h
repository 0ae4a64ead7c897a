#pragma once
// Process helpers: identities that survive pid reuse, process-group liveness, signal names and
// wait-status descriptions, PATH lookup, and running a short-lived command for its output.
//
// Thread-safety: all functions are thread-safe.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace triald::common {

// The fields of /proc/PID/stat that the daemon reads.
struct ProcStat {
  char state = '?';         // field 3: R, S, D, Z (zombie), ...
  pid_t pgrp = 0;           // field 5: the process group
  uint64_t start_time = 0;  // field 22: clock ticks since boot (see ProcessStartTime)
};
// kNotFound when the pid is gone; kInternal when the line cannot be parsed.
Result<ProcStat> ReadProcStat(pid_t pid);

// Where a process's initial environment block lies in its memory (fields 50 and 51 of
// /proc/PID/stat, env_start and env_end): the bytes /proc/PID/environ shows, whatever the
// process did to its environment since. kNotFound when the pid is gone; kInternal when the
// fields are absent or zero (the kernel shows them only to whoever may ptrace the process).
struct EnvironBlock {
  uintptr_t start = 0;
  uintptr_t end = 0;
};
Result<EnvironBlock> ReadEnvironBlock(pid_t pid);

// Field 22 of /proc/PID/stat: the process start time in clock ticks since boot. Together with
// the pid it names one process for the life of the machine. kNotFound when the pid is gone.
Result<uint64_t> ProcessStartTime(pid_t pid);

// The boot clock (CLOCK_BOOTTIME) now, in ns: the clock of a process's start time.
uint64_t BootTimeNs();
// The start time (ProcessStartTime's clock ticks) of a process created between two readings
// of BootTimeNs() that bracket its fork, when both fall in one clock tick (then it can only be
// that tick: the kernel records a process's start from the boot clock during the fork and shows
// it in /proc/PID/stat rounded down to ticks); 0 when they do not (ask /proc). Saves reading
// /proc/PID/stat after a spawn that took well under a tick.
uint64_t StartTimeBetween(uint64_t boot_ns_before, uint64_t boot_ns_after);

// True when any process (zombies included) is still in process group `pgid`.
bool ProcessGroupExists(pid_t pgid);

// "SIGSEGV" for 11; "SIG<n>" when unknown.
std::string SignalName(int sig);

// A decoded waitpid() status.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled
  bool core_dumped = false;

  static ExitStatus FromWaitStatus(int status);
  // "exited with code 3", "killed by SIGSEGV (core dumped)"
  std::string Describe() const;
};

// Resolves argv[0] the way execvp would: a name with '/' is taken relative to `cwd`; otherwise
// searched in `path_env` (colon-separated). Returns an absolute path to an executable regular
// file, or an error naming what was searched.
Result<std::string> FindExecutable(const std::string& name, const std::string& path_env,
                                   const std::string& cwd);

// A short-lived command run for its output (RunCaptured).
struct CapturedRequest {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in this process's PATH
  // The command's whole environment ("K=V"); nullopt-like empty with inherit_env: this
  // process's own.
  std::vector<std::string> env;
  bool inherit_env = true;
  std::string workdir;          // empty: this process's
  double timeout_s = 10;        // then its process group is killed (SIGKILL)
  size_t max_bytes = 1u << 20;  // kept of each stream (stdout from its start, stderr its end)
  bool capture_stderr = false;  // else it goes where this process's goes (or /dev/null: quiet)
  bool quiet = false;           // stderr to /dev/null (when not captured)
};
struct CapturedRun {
  ExitStatus status;
  bool timed_out = false;
  std::string out;  // stdout, its first max_bytes
  std::string err;  // stderr (capture_stderr), its last max_bytes
  bool ok() const { return !timed_out && !status.signaled && status.code == 0; }
};
// Runs `request` with posix_spawn (safe in a process with threads) in a process group of its
// own, stdin from /dev/null, and waits for it to exit or for its timeout (its group is then
// killed). An error only when it cannot be started; how it ended is in the result.
Result<CapturedRun> RunCaptured(const CapturedRequest& request);

}  // namespace triald::common
