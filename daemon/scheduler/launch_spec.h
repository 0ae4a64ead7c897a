#pragma once
// Launch spec: what a trial's process gets from its study and the daemon. Its command and
// working directory, its log folder (STATE_DIR/studies/<study>/trials/<n>) and log caps, its
// limits (trial_timeout, kill_grace, memory_limit, pids_limit), and its environment: the
// daemon's base environment, PYTHONUNBUFFERED=1 and OPENBLAS_THREAD_TIMEOUT=kBlasThreadTimeout,
// the sweep's [objective] env on top (which may set either), then the
// TRIALD_* variables (TRIALD_PARAMS as JSON, each value exactly as stored; TRIALD_STUDY,
// TRIALD_TRIAL, TRIALD_TRIAL_DIR, TRIALD_REPORT_FD=3, TRIALD_NODE, TRIALD_N_OBJECTIVES: how many
// values its final line must carry, and TRIALD_RESUME_DIR when a resume folder is given: only
// then, whatever the base environment holds) and the GPU variables
// (CUDA_VISIBLE_DEVICES, empty on a CPU trial; CUDA_DEVICE_ORDER and TRIALD_GPU_SLOTS with GPUs).
// The executable is command[0] looked up in that environment's PATH. With [executor] kind =
// "slurm", the spec also says which Slurm job the trial is (LaunchSpec::slurm: the executor's
// settings, gpus_per_trial, the job name slurm::JobName(node, trial id)).
// With [objective] fork_server, the spec also names the study's fork server (key: the study's
// name; its command from objective_command.h; the environment above without the TRIALD_* and
// GPU variables, and for kind = "lm" with OPENBLAS_NUM_THREADS=1; its log model::ForkServerLog)
// and the fork request's argv.
//
// Thread-safety: pure functions; thread-safe.

#include <cstddef>
#include <string>
#include <vector>

#include "config/sweep.h"
#include "daemon/devices/gpu_pool.h"
#include "daemon/launcher/launcher.h"
#include "daemon/model/records.h"

namespace triald::daemon {

// How long an idle OpenBLAS thread of a trial spins before it sleeps, as the exponent OpenBLAS
// reads from OPENBLAS_THREAD_TIMEOUT when it loads: 2^20 cycles, about 0.4 ms (OpenBLAS's own
// default is 2^28, about 0.1 s). Trials share a host's cores: a thread spinning (sched_yield)
// for 0.1 s after each job takes them from the other trials and from the trial's own OpenMP
// threads, and a forked trial starts its pool afresh, so a short one's threads spin for most of
// its life (proto/README.md, "The worker's environment").
inline constexpr const char* kBlasThreadTimeout = "20";

// What the daemon adds to every trial's spec.
struct LaunchSettings {
  std::string state_dir;
  size_t log_head_bytes = 0;
  size_t log_tail_bytes = 0;
  std::vector<std::string> base_env;  // "KEY=VALUE"
  std::string node;                   // TRIALD_NODE
};

// The PATH a study's command[0] is looked up in: the objective's env PATH, else the base
// environment's ("" when neither has one).
std::string CommandPath(const std::vector<std::string>& base_env,
                        const config::ObjectiveConfig& objective);

// The GPU slots of this host's pool each trial of `spec` holds: [study] gpus_per_trial for a
// study whose trials run here, 0 for one whose trials run elsewhere (a Slurm job's GPUs are
// Slurm's).
int LocalGpusPerTrial(const config::SweepSpec& spec);

// The spec of trial `trial` of study `study_name` run on `gpu_slots`; `resume_dir` (a retry's
// checked resume folder, resume_dir.h; empty: none) becomes TRIALD_RESUME_DIR, and
// `retry_history` (a retry's chain, StudyRuntime::RetryHistory; empty: none) becomes
// TRIALD_RETRY_HISTORY, the numbers comma-separated, oldest first (the Python runner's
// trial.system_attrs "failed_trial" and "retry_history", as Optuna's RetryFailedTrialCallback
// sets them).
launcher::LaunchSpec MakeLaunchSpec(const LaunchSettings& settings, const std::string& study_name,
                                    const config::SweepSpec& spec, const model::TrialRecord& trial,
                                    const std::vector<devices::GpuSlot>& gpu_slots,
                                    const std::string& resume_dir = "",
                                    const std::vector<int>& retry_history = {});

}  // namespace triald::daemon
