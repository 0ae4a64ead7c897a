#pragma once
// SlurmLauncher: the Launcher that runs a study's trials as Slurm jobs where the study says so
// ([executor] kind = "slurm", LaunchSpec::slurm), and every other trial through the launcher it
// wraps. A Slurm trial is, on this host, its bridge (`triald-slurm-relay submit`, relay_main.cc)
// started by the wrapped launcher like any trial: the same trial channel, logs, process group,
// trial_timeout, kill_grace and stall_timeout, and the same one on_exit. So cancel, prune and
// timeouts stop a Slurm trial as they stop a local one: SIGTERM to the bridge, which has Slurm
// signal the job; SIGKILL after the grace, which ends srun and with it the job. While the job
// waits in Slurm's queue the trial counts as running (parallelism counts queued trials).
//
// What the bridge learns from Slurm comes on the channel as the attribute "triald.slurm" (job
// id, state, Slurm's reason, node, GPUs), stored with the trial like any attribute. Where Slurm
// ended the job itself, its "ending" (slurm_job.h, FailureReason) becomes the trial's failure
// reason (ProcessOutcome::executor_failure), which retry_on can name.
//
// Thread-safety: as Launcher: the event-loop thread only.

#include <memory>
#include <optional>
#include <string>

#include "config/daemon_config.h"
#include "daemon/launcher/launcher.h"

namespace triald::slurm {

class SlurmLauncher final : public launcher::Launcher {
 public:
  struct Options {
    launcher::Launcher* local = nullptr;  // runs the local trials and the bridges (not owned)
    std::string relay;                    // triald-slurm-relay, absolute (same path on nodes)
    std::string srun;                     // absolute; empty: Slurm is not installed here
    double queue_poll_s = 2;              // how often a queued job's state is asked for
    config::SlurmDefaults defaults;       // triald --config [slurm]
    // Created at the first Slurm trial: this state directory has submitted jobs, so a restart
    // looks for what is left of them (SlurmCluster::CancelLeftovers). Empty: none.
    std::string marker;
  };
  explicit SlurmLauncher(Options options) : options_(std::move(options)) {}

  launcher::LaunchResult Launch(const launcher::LaunchSpec& spec,
                                launcher::TrialCallbacks callbacks) override;

  // The bridge's spec for a Slurm trial's spec (for tests and Launch).
  launcher::LaunchSpec BridgeSpec(const launcher::LaunchSpec& spec) const;

  void SetForkServerListener(
      std::function<void(const launcher::ForkServerEvent&)> listener) override {
    options_.local->SetForkServerListener(std::move(listener));
  }
  void ReleaseForkServer(const std::string& key) override {
    options_.local->ReleaseForkServer(key);
  }
  void ReleaseAllForkServers() override { options_.local->ReleaseAllForkServers(); }
  std::optional<launcher::ForkServerStatus> fork_server_status(
      const std::string& key) const override {
    return options_.local->fork_server_status(key);
  }

 private:
  Options options_;
  bool marked_ = false;
};

// The attribute key the bridge reports under.
inline constexpr char kSlurmAttr[] = "triald.slurm";

// The marker file of `state_dir` (Options::marker).
std::string SlurmMarker(const std::string& state_dir);

// srun's absolute path from PATH `path_env`, or "" when Slurm's client is not installed.
std::string FindSrun(const std::string& path_env);

}  // namespace triald::slurm
