#pragma once
// Daemon: wires the components of triald together and runs its one event loop.
//
// Start-up order: lock the state directory (one daemon per directory), open storage, become
// the child subreaper, recover what a previous daemon left running, then listen on the
// control socket and announce readiness. SIGTERM/SIGINT: stop accepting requests, stop every
// running trial (SIGTERM, grace, SIGKILL to each group), reap everything, record each trial's
// end, exit 0.
//
// Thread-safety: Run() is called once, from main().

#include <string>

#include "common/logging.h"

namespace triald::daemon {

struct DaemonOptions {
  std::string state_dir;
  std::string socket_path;  // default: state_dir/triald.sock
  int max_workers = 0;      // 0: one per CPU
  common::Logger logger;
  // After a shutdown request, the longest wait for trials to end before exiting anyway (they
  // are then recovered as FAIL(lost) at the next start).
  double shutdown_timeout_s = 120;
};

// Runs until a shutdown signal; returns the process exit code.
int RunDaemon(const DaemonOptions& options);

}  // namespace triald::daemon
