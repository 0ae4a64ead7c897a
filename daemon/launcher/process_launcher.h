#pragma once
// ProcessLauncher: the real Launcher. One vfork+exec per trial (vfork_spawn.h; see "Spawning"
// below) with a child setup hook (child_setup.h) that, between vfork and exec:
//   - puts the child in its own process group (setpgid(0, 0));
//   - sets PR_SET_PDEATHSIG(SIGKILL) and re-checks getppid(), so a child whose daemon died
//     during the vfork exits instead of running unsupervised;
//   - restores default signal dispositions and an empty signal mask (the daemon blocks or
//     ignores some signals; exec would keep the mask and ignored signals);
//   - installs an explicit environment and working directory;
//   - with Options::run_as_submitter, becomes the study's submitter (setgroups, setgid, setuid:
//     run_as.h), after joining the cgroup and before PR_SET_PDEATHSIG, which a credential
//     change would clear; the working directory is then entered as that user;
//   - places the worker's end of the trial channel at fd 3 (TRIALD_REPORT_FD=3).
//   - closes every other descriptor.
// The worker sees exactly 0, 1, 2 and 3. Two layers make sure of it: every descriptor the
// daemon opens is O_CLOEXEC (Asio's sockets are marked by hand), and the hook closes the rest,
// because a descriptor inherited from whoever started the daemon may lack close-on-exec.
// tests/integration/launcher_test.cc and daemon_test.cc prove it with a probe worker.
//
// stdout and stderr are pipes drained continuously into CappedLogs. The trial channel is a Unix
// stream socketpair (the daemon's end non-blocking, both close-on-exec): what the worker writes
// is split into lines (at most proto::kMaxReportLineBytes) and parsed strictly; answers go back
// on the same socket through a bounded queue (TrialProcess::Answer), never blocking the loop. A
// worker that only writes sees it as it would a pipe. Stopping is SIGTERM to
// the group, a grace timer, then SIGKILL to the group. The Reaper delivers the main process's
// exit; the trial is over once its group is empty too.
//
// Cgroup mode (Options::cgroups set; see cgroup.h): each trial also gets its own leaf cgroup,
// created before the vfork; the hook's first act is writing "0" to the leaf's cgroup.procs, so
// the worker and everything it forks (a setsid escapee included) live in it. SIGTERM then also
// goes to every process in the leaf, SIGKILL is cgroup.kill, and the trial is over only when
// the group is empty and cgroup.events says "populated 0" (polled with the group, backing off
// from 2 ms to 100 ms). The leaf is removed when the trial ends. A memory limit is memory.max
// where the memory controller is on; otherwise (and without cgroups) the hook sets RLIMIT_AS.
//
// Resource accounting (Options::resource_accounting): each outcome's resources say what the
// trial's tree consumed, each figure from the best source the host offers, named in
// memory_source and cpu_source. Peak memory: the v2 leaf's memory.peak, else the v1 memory
// leaf's memory.max_usage_in_bytes (cgroup.h), else ru_maxrss of wait4 for the main process (the
// largest single process among it and the descendants it waited for: a lower bound for a tree).
// CPU time: the v2 leaf's cpu.stat usage_usec, else user + system time of that wait4. Wall time:
// from just before the vfork to the end of the tree. Without accounting only wall_s is set.
//
// Spawning uses vfork (vfork_spawn.h): the child borrows the daemon's memory until it execs,
// so no page tables are copied and no copy-on-write faults follow. On this project's test
// machines that doubles trial throughput over fork. The hook above only makes system calls, as
// a vfork child must, and every signal is blocked in the daemon around the vfork.
//
// Thread-safety: event-loop thread only.

#include <boost/asio/io_context.hpp>

#include "common/clock.h"
#include "common/logging.h"
#include "daemon/launcher/cgroup.h"
#include "daemon/launcher/child_setup.h"
#include "daemon/launcher/fork_server.h"
#include "daemon/launcher/launcher.h"
#include "daemon/launcher/reaper.h"
#include "daemon/launcher/run_as.h"

namespace triald::launcher {

class ProcessLauncher final : public Launcher {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;
    Reaper* reaper = nullptr;
    common::Logger logger;
    CgroupTree* cgroups = nullptr;  // null: process groups only
    // Run each trial whose submitter is known as that user (run_as.h); the daemon must be
    // root. A trial with an unknown submitter runs as the daemon's user.
    bool run_as_submitter = false;
    // Where trial folders live (the state directory): with run_as_submitter, the folders from
    // here down to a trial folder are made searchable so its user can reach it.
    std::string trial_root = {};
    // Fill ProcessOutcome::resources (see "Resource accounting" above); false: only wall_s.
    bool resource_accounting = true;
    // Fork servers (fork_server.h): how long a sent fork request may wait for its answer, and
    // a server for its ready, before the server counts as broken.
    double fork_reply_timeout_s = 10;
    double fork_ready_timeout_s = 300;
  };
  explicit ProcessLauncher(Options options);
  ~ProcessLauncher() override;

  // A failure's spawn_error() names the step: the trial folder and descriptors (kPrepare, with
  // the errno of the call that failed, e.g. EMFILE), the cgroup, vfork (EAGAIN, ENOMEM), the
  // child's setup, its chdir to the workdir, or execve (ENOENT, EACCES, ENOEXEC), whose errno
  // the vfork child leaves in the daemon's memory.
  // A spec with fork_server is started by its study's fork server (fork_server.h) unless that
  // key fell back to exec: the pipes, channel, logs and cgroup are made here as for exec, the
  // server forks the trial, and the launcher then watches it in the reaper, places it in its
  // cgroup(s), sets RLIMIT_AS (no memory controller) and writes {"type":"go"} on its channel
  // before on_started. From there on it is a trial like any other.
  LaunchResult Launch(const LaunchSpec& spec, TrialCallbacks callbacks) override;

  void SetForkServerListener(std::function<void(const ForkServerEvent&)> listener) override;
  void ReleaseForkServer(const std::string& key) override;
  void ReleaseAllForkServers() override;
  std::optional<ForkServerStatus> fork_server_status(const std::string& key) const override;

 private:
  Options options_;
  ForkServers forks_;
  RunAsCache run_as_cache_;  // the submitters of the trials started lately (run_as.h)
};

}  // namespace triald::launcher
