#pragma once
// SlurmCluster: what the daemon asks of the Slurm cluster it submits to, outside any one trial:
// at submit, whether a study's [executor] can run there (Slurm's client is installed, the
// partition exists, it has the GPUs the study asks for); at start, the jobs an earlier run of
// this node left behind, which it cancels (a trial that ran when the daemon stopped is recorded
// lost and retried, as on one host: daemon/README.md, "Running on Slurm").
//
// Each call runs one of Slurm's commands (sinfo, squeue, scancel) and waits for it, at most
// `command_timeout_s`: a few milliseconds on a healthy cluster. The daemon calls them on its
// event loop at submit and at start only, never per trial.
//
// Thread-safety: const methods; thread-safe.

#include <string>
#include <vector>

#include "common/status.h"
#include "config/daemon_config.h"
#include "config/sweep.h"

namespace triald::slurm {

class SlurmCluster {
 public:
  struct Options {
    std::string srun;   // absolute; empty: Slurm's client is not installed
    std::string relay;  // triald-slurm-relay, absolute
    double command_timeout_s = 10;
    config::SlurmDefaults defaults;  // triald --config [slurm]
  };
  explicit SlurmCluster(Options options) : options_(std::move(options)) {}

  // Whether the study `spec` of a sweep from `where` can run on this cluster; the message names
  // the key ("where: [executor] partition = "gpu": no such partition; sinfo lists debug").
  common::Status Check(const config::SweepSpec& spec, const std::string& where) const;

  // Cancels every job whose name starts with JobNamePrefix(node); returns their ids.
  common::Result<std::vector<std::string>> CancelLeftovers(const std::string& node) const;

  // Slurm's command `name` (sinfo, squeue, scancel), next to srun.
  std::string Command(const std::string& name) const;

 private:
  Options options_;
};

}  // namespace triald::slurm
