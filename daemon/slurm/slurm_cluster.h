#pragma once
// SlurmCluster: what the daemon asks of the Slurm cluster it submits to, outside any one trial:
// at submit, whether a study's [executor] can run there (Slurm's client is installed, the
// partition exists and is up, it has the GPUs the study asks for); at start, the jobs an earlier
// run of this node left behind, which it cancels (a trial that ran when the daemon stopped is
// recorded lost and retried, as on one host: daemon/README.md, "Running on Slurm").
//
// The check at submit never waits on Slurm, but once: it reads a snapshot of `sinfo` that a
// thread of its own refreshes every refresh_s, started by the first check (which waits for the
// first answer, at most first_wait_s). A snapshot older than stale_after_s (sinfo stopped
// answering) refuses the study, saying so. CancelLeftovers runs squeue and scancel and waits for
// them (at most command_timeout_s each): the daemon calls it at start, before its event loop.
//
// Thread-safety: Check from any thread (the control server's admissions thread at submit, the
// event loop when a stored study is loaded again): what it reads of the snapshot, and the
// prober's start, are under the mutex the prober shares; CancelLeftovers from one thread.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "config/daemon_config.h"
#include "config/sweep.h"
#include "daemon/slurm/slurm_job.h"

namespace triald::slurm {

class SlurmCluster {
 public:
  struct Options {
    std::string srun;   // absolute; empty: Slurm's client is not installed
    std::string relay;  // triald-slurm-relay, absolute
    double command_timeout_s = 10;
    config::SlurmDefaults defaults;  // triald --config [slurm]
    double refresh_s = 30;           // how often the snapshot is refreshed
    double first_wait_s = 2;         // the first check's wait for the first answer
    double stale_after_s = 90;       // an older snapshot refuses
    double probe_timeout_s = 5;      // one sinfo at most
    // Runs one of Slurm's commands (RunForOutput; tests put a fake here).
    std::function<common::Result<std::string>(const std::vector<std::string>&, double)> run =
        [](const std::vector<std::string>& argv, double timeout_s) {
          return RunForOutput(argv, timeout_s, /*quiet=*/true);
        };
  };
  explicit SlurmCluster(Options options) : options_(std::move(options)) {}
  ~SlurmCluster();  // stops the prober (within its current sinfo at most)
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Whether the study `spec` of a sweep from `where` can run on this cluster; the message names
  // the key ("where: [executor] partition = "gpu": no such partition (sinfo lists debug)").
  common::Status Check(const config::SweepSpec& spec, const std::string& where);

  // Cancels every job whose name starts with JobNamePrefix(node); returns their ids.
  common::Result<std::vector<std::string>> CancelLeftovers(const std::string& node) const;

  // Slurm's command `name` (sinfo, squeue, scancel), next to srun.
  std::string Command(const std::string& name) const;

 private:
  using Clock = std::chrono::steady_clock;
  void ProberLoop();

  Options options_;
  std::mutex mu_;
  std::condition_variable wake_;    // the prober's sleep; stop_ ends it
  std::condition_variable probed_;  // an answer (or an error) came
  bool stop_ = false;
  uint64_t probes_ = 0;  // sinfo calls ended, answered or not
  std::string sinfo_;    // the last answer
  std::optional<Clock::time_point> answered_at_;
  std::string last_error_;  // of the last call, when it failed
  std::thread prober_;
};

// Whether `spec` can run on the cluster whose `sinfo --format=%P|%a|%G` printed `sinfo`
// (SlurmCluster::Check without Slurm).
common::Status CheckAgainstSinfo(const config::SweepSpec& spec, const std::string& where,
                                 const config::SlurmDefaults& defaults, const std::string& sinfo);

}  // namespace triald::slurm
