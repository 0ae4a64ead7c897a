#pragma once
// Daemon: wires the components of triald together and runs its one event loop. Beside it run
// threads that never touch the scheduler or storage: the control socket's (control/server.h,
// `ping` answered there from control/ping_board.h) and the dashboard's (http/server.h), the
// cgroup leaves', background samplers' and PostgreSQL's watchdog.
//
// Start-up order: lock the state directory (one daemon per directory), open storage, become
// the child subreaper, recover what a previous daemon left running, then listen on the
// control socket and announce readiness. SIGTERM/SIGINT: stop accepting requests, stop every
// running trial (SIGTERM, grace, SIGKILL to each group), reap everything, record each trial's
// end, exit 0.
//
// Thread-safety: Run() is called once, from main().

#include <optional>
#include <string>
#include <vector>

#include "common/logging.h"
#include "config/daemon_config.h"

namespace triald::daemon {

struct DaemonOptions {
  std::string state_dir;
  std::string socket_path;  // default: state_dir/triald.sock
  // Control-socket access (daemon/control/access.h, daemon/README.md "Security"): members of
  // socket_group (name or gid; empty: the daemon's primary group) may connect, and submit when
  // the daemon is root (their trials then run as themselves); members of trust_group (empty:
  // none) may submit to a non-root daemon too, their trials running as its user. With
  // read_open the socket is 0666 and anyone may use the read verbs.
  std::string socket_group;
  std::string trust_group;
  bool socket_read_open = false;
  // A client's time to send a complete request (from connecting or its previous reply), or to
  // read a piece of a reply.
  double request_timeout_s = 5;
  // Control connections (ControlServerOptions): all together, 32 of them kept for root and the
  // daemon's uid; and per other uid.
  int max_connections = 512;
  int max_user_connections = 32;
  int max_workers = 0;  // 0: one per CPU
  // Run each trial in its own cgroup where a writable cgroup v2 hierarchy is found
  // (daemon/launcher/cgroup.h); false (--no-cgroups): process groups only.
  bool use_cgroups = true;
  // Measure each trial's peak memory and CPU time (daemon/README.md, "Resource accounting");
  // false (--no-resource-accounting, [daemon] resource_accounting = false): wall time only.
  bool resource_accounting = true;
  common::Logger logger;
  // After a shutdown request, the longest wait for trials to end before exiting anyway (they
  // are then recovered as FAIL(lost) at the next start).
  double shutdown_timeout_s = 120;
  // Devices (config/daemon_config.h): the GPU indices given to trials (nullopt: every GPU NVML
  // reports; none without NVML), trials per GPU, the NVML library ("": $TRIALD_NVML_LIBRARY,
  // else libnvidia-ml.so.1; a library named explicitly must load) and the longest wait for an
  // ended trial's GPU memory to be freed before its slot is given out anyway.
  std::optional<std::vector<int>> gpus;
  int slots_per_gpu = 1;
  std::string nvml_library;
  double gpu_release_timeout_s = 60;
  // How often the driver is asked about running GPU trials (their processes and the GPU memory
  // they hold: peak_gpu_memory_bytes is the largest sum seen, plus one sample at exit) and about
  // draining slots. Seconds, > 0.
  double gpu_sample_interval_s = 0.5;
  // Storage: "" for SQLite in state_dir (the default), or "postgresql://USER@HOST:PORT/DB" to
  // share studies with the other daemons on that database (daemon/scheduler.h). Node name: ""
  // for the host name. A node silent for node_timeout_s is dead; heartbeats (and the reading
  // of other nodes' changes) come every heartbeat_interval_s.
  std::string storage_url;
  std::string node_name;
  double heartbeat_interval_s = 2;
  double node_timeout_s = 30;
  // The dashboard (daemon/http/): "" for none (the default), else where it listens ("HOST:PORT",
  // daemon/http/address.h); reading it follows socket_read_open (daemon/http/api.h).
  std::string http;
  // Pilot mode: stop, as at SIGTERM, once the node has had no work for this long
  // (Scheduler::HasWork); 0: never.
  double exit_when_idle_s = 0;
  // What a Slurm study's [executor] leaves out (triald --config [slurm]; daemon/slurm/).
  config::SlurmDefaults slurm_defaults;
};

// Runs until a shutdown signal; returns the process exit code.
int RunDaemon(const DaemonOptions& options);

}  // namespace triald::daemon
