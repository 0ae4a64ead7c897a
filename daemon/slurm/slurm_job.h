#pragma once
// The Slurm executor's mechanism, without running anything: the srun command a trial becomes,
// the frames that carry a trial's three streams through srun's one stdout, and what Slurm's
// own record of a job (scontrol show job -o) says about how it ended.
//
// A trial of a study with [executor] kind = "slurm" (daemon/README.md, "Running on Slurm") is,
// on this host, `triald-slurm-relay submit` (the bridge) run by the launcher like any trial:
// fds 0-3, its own process group, the study's limits. The bridge runs `srun ...
// triald-slurm-relay run -- COMMAND` and so Slurm's own authenticated I/O forwarding carries
// everything: on the node, the relay starts COMMAND with the trial channel at fd 3 and sends its
// stdout, stderr and channel back as frames on its stdout; what the bridge reads on fd 3 (the
// daemon's answers) goes to the relay's stdin and on to the worker's fd 3. No listener anywhere.
//
// Thread-safety: pure functions and a plain value type; no shared state.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/daemon_config.h"
#include "config/sweep.h"

namespace triald::slurm {

// ---- Frames (relay's stdout → bridge) ----
// One line each: the tag (1 byte), the payload with '%', '\n', '\r' and NUL written as %25,
// %0A, %0D and %00, then '\n'. Lines, because srun passes a task's stdout on line by line (and
// --unbuffered would give the task a terminal, which is no place for bytes).
enum class FrameTag : char {
  kStdout = 'O',
  kStderr = 'E',
  kChannel = 'C',  // bytes of the trial channel, worker → daemon
  kInfo = 'I',     // the job as the node sees it: JSON {"job_id","node","gpus"}
  kExit = 'X',     // the worker's wait status as decimal text; the last frame
};
inline constexpr size_t kMaxFramePayload = 1 << 20;

std::string EncodeFrame(FrameTag tag, std::string_view payload);

struct Frame {
  FrameTag tag;
  std::string payload;
};

// Splits a byte stream into frames. An unknown tag, a bad escape or a payload over
// kMaxFramePayload is an error (the stream is not a relay's); an incomplete line waits for the
// next Feed.
class FrameDecoder {
 public:
  common::Status Feed(std::string_view bytes, std::vector<Frame>* out);
  bool mid_frame() const { return !buf_.empty(); }

 private:
  std::string buf_;
};

// ---- The srun command ----
struct SrunRequest {
  config::SlurmExecutorConfig executor;
  std::string srun = "srun";  // the program (absolute path where known)
  std::string job_name;       // JobName(), what a restarted daemon looks for
  std::string comment;        // shown by squeue -o %k
  std::string workdir;        // the trial's folder on the node (a shared filesystem)
  int gpus = 0;               // [study] gpus_per_trial
  uint64_t memory_bytes = 0;  // [study] memory_limit; 0: Slurm's default
  double trial_timeout_s = 0;
  double kill_grace_s = 0;
  std::string relay;                 // triald-slurm-relay, at the same path on the node
  std::vector<std::string> command;  // the trial's executable (absolute) and its arguments
};

// The job's time limit in whole minutes (srun --time), 0: none given (the partition's).
int64_t TimeLimitMinutes(const config::SlurmExecutorConfig& executor, double trial_timeout_s,
                         double kill_grace_s);

// A study's [executor] with what it leaves out taken from the daemon's [slurm] defaults.
config::SlurmExecutorConfig WithDefaults(config::SlurmExecutorConfig executor,
                                         const config::SlurmDefaults& defaults);

// srun's argv (argv[0] = request.srun): one task on one node, quiet, the
// environment of the bridge exported, the sweep's settings, then the relay and the command.
std::vector<std::string> SrunArgv(const SrunRequest& request);

// The job name of trial `trial_id` started by node `node`: "triald.NODE.tTRIAL_ID". Slurm names
// allow any character but a few; the node name is reduced to [A-Za-z0-9_.-].
std::string JobName(const std::string& node, int64_t trial_id);
// The prefix every job name of `node` starts with.
std::string JobNamePrefix(const std::string& node);

// ---- How a job ended ----
// The fields of one job in `scontrol show job -o` (KEY=VALUE separated by spaces; the values of
// the few keys that may hold spaces, such as Command, are cut at the first one, and unused).
std::map<std::string, std::string> ParseScontrolJob(std::string_view line);

// Whether `state` (JobState) is one a job stays in only while it waits or runs.
bool JobStateIsActive(const std::string& state);

// The failure reason a trial gets from its job's final state, or nullopt when Slurm did not end
// it (COMPLETED, FAILED: the worker's own exit says how it ended; CANCELLED by triald itself):
//   PREEMPTED → "preempted", NODE_FAIL and BOOT_FAIL → "node_failure", TIMEOUT and DEADLINE →
//   "slurm_time_limit", OUT_OF_MEMORY → "slurm_oom", CANCELLED by someone else →
//   "slurm_cancelled".
std::optional<std::string> FailureReason(const std::string& state, bool cancelled_by_triald);

// The reasons FailureReason gives (config::RetryableReasons() lists them for retry_on).
const std::vector<const char*>& FailureReasons();

// ---- Slurm's accounting ----
// What `sacct --noheader --parsable2 --format=JobID,MaxRSS,TotalCPU,Elapsed -j ID` says of a
// job: the largest MaxRSS of its steps, the job's TotalCPU and Elapsed. Unset where sacct left a
// field empty.
struct JobAccounting {
  std::optional<uint64_t> max_rss_bytes;
  std::optional<double> total_cpu_s;
  std::optional<double> elapsed_s;
};
common::Result<JobAccounting> ParseSacct(std::string_view text);
// "[DD-][HH:]MM:SS[.mmm]" (Slurm's durations) in seconds.
std::optional<double> ParseSlurmDuration(std::string_view text);

// ---- Running Slurm's commands ----
// Runs `argv` (argv[0] a path or a name looked up in PATH) with posix_spawn (safe in a process
// with threads), stdin from /dev/null, stderr to this process's, and returns its stdout (at most
// 1 MiB). An error when it cannot start, exits non-zero (naming its code) or runs past
// `timeout_s` (it is then killed).
// With `quiet`, its stderr goes to /dev/null instead.
common::Result<std::string> RunForOutput(const std::vector<std::string>& argv, double timeout_s,
                                         bool quiet = false);

}  // namespace triald::slurm
