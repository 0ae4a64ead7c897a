#pragma once
// The daemon's own config file (triald --config /etc/triald/triald.toml): where it keeps its
// state and which devices it gives to trials. Every key has a command-line equivalent that
// overrides it.
//
//   [daemon]
//   state_dir = "/var/lib/triald"        # --state-dir
//   socket = "/run/triald/triald.sock"   # --socket
//   log_level = "info"                   # --log-level
//   shutdown_timeout = 120               # --shutdown-timeout (seconds)
//   storage = "postgresql://triald@db:5432/triald"  # --storage (default: SQLite in state_dir)
//   node_name = "gpu-box-1"              # --node-name (default: the host name)
//   heartbeat_interval = 2               # --heartbeat-interval (seconds)
//   node_timeout = 30                    # --node-timeout (seconds)
//   resource_accounting = false          # --no-resource-accounting (default true)
//   http = "127.0.0.1:8080"              # --http: the dashboard (default: off)
//
//   [devices]
//   cpu = 8                              # --max-workers: trials running at once (all kinds)
//   gpus = [0, 1]                        # --gpus 0,1: GPU indices given to trials
//   slots_per_gpu = 1                    # --slots-per-gpu: trials sharing one GPU at once
//   nvml_library = "libnvidia-ml.so.1"   # --nvml-library
//   gpu_release_timeout = 60             # --gpu-release-timeout: longest wait (seconds) for an
//                                        # ended trial's GPU memory to be freed
//   gpu_sample_interval = 0.5            # --gpu-sample-interval: seconds between the samples of
//                                        # running GPU trials' memory (and draining slots)
//
//   [slurm]                              # defaults for studies with [executor] kind = "slurm"
//   partition = "gpu"                    # what a study's [executor] does not say itself
//   account = "ml-team"
//   qos = "normal"
//   constraint = "a100"
//
// Errors name the file, line and column, the key, the value and what was expected, as sweep
// files do. Parsing is pure; safe from any thread.

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace triald::config {

// The longest [devices] gpu_sample_interval (--gpu-sample-interval): 60 seconds.
inline constexpr double kMaxGpuSampleInterval = 60;

struct DevicesConfig {
  int cpu = 0;                           // 0: not set (the daemon uses the CPU count)
  std::optional<std::vector<int>> gpus;  // not set: every GPU NVML reports (none without)
  int slots_per_gpu = 1;                 // >= 1
  std::string nvml_library;              // "": libnvidia-ml.so.1
  double gpu_release_timeout = 60;       // seconds, > 0
  double gpu_sample_interval = 0.5;      // seconds, > 0 and <= 60
};

// [slurm]: what a Slurm study's [executor] leaves out ("": not set).
struct SlurmDefaults {
  std::string partition;
  std::string account;
  std::string qos;
  std::string constraint;
};

struct DaemonConfig {
  std::string state_dir;  // "": not set
  std::string socket;
  std::string log_level;
  double shutdown_timeout = 0;    // 0: not set
  std::string storage;            // "": not set
  std::string node_name;          // "": not set
  double heartbeat_interval = 0;  // 0: not set
  double node_timeout = 0;        // 0: not set
  // Not set: on.
  std::optional<bool> resource_accounting;
  std::string http;  // "": not set (no dashboard); checked by the daemon (daemon/http/address.h)
  DevicesConfig devices;
  SlurmDefaults slurm;
};

// `path` is used in messages and anchors relative state_dir/socket paths.
common::Result<DaemonConfig> ParseDaemonConfig(const std::string& text, const std::string& path);
common::Result<DaemonConfig> ParseDaemonConfigFile(const std::string& path);

// "0,1,3" (the --gpus argument): distinct GPU indices >= 0; "" or "none" is no GPU.
common::Result<std::vector<int>> ParseGpuList(const std::string& text);

}  // namespace triald::config
