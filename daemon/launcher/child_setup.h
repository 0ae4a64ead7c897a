#pragma once
// The child's setup between vfork and exec, shared by the trial launcher and the fork server's
// start (process_launcher.h describes each step; vfork_spawn.h runs it). The vfork child shares the
// daemon's memory until exec, so the hook makes system calls only: it allocates nothing and writes
// no shared state but `*step`.
//
// Thread-safety: used by the event-loop thread only; the hook itself runs in the vfork child.

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/launcher/launcher.h"

namespace triald::launcher {

// The descriptor number the worker's end of the trial channel gets in every worker (and the
// fork server's end of its channel in the server).
inline constexpr int kReportFd = 3;

namespace internal {

// What the child does between vfork and exec, in this order. The child shares the daemon's
// memory until exec, so Run makes system calls only: it allocates nothing and writes no shared
// state but `*step`.
struct ChildSetup {
  const char* const* envp;
  const char* workdir;
  int report_fd;
  pid_t parent;
  int cgroup_procs_fd;     // -1: no cgroup
  int pids_v1_procs_fd;    // -1: no v1 pids leaf
  int memory_v1_procs_fd;  // -1: no v1 memory leaf (accounting)
  rlim_t address_space;    // 0: no RLIMIT_AS
  // The user to become (run_as): setgroups, setgid, setuid, in that order. Raw system calls:
  // glibc's wrappers would try to change the credentials of every thread of the daemon (whose
  // memory the vfork child shares), while the child has one thread and the call is per thread.
  bool switch_user;
  uid_t uid;
  gid_t gid;
  const gid_t* groups;
  size_t n_groups;
  // The step the child is at, in the daemon's memory (the vfork child shares it): after a
  // failure it says whether setup, the user switch, chdir or exec failed.
  SpawnStep* step;

  // The steps after the standard streams are in place (vfork_spawn.h); 0, or the errno of the
  // step that failed.
  int Run() const {
    *step = SpawnStep::kCgroup;
    // Into the trial's cgroup before anything else, so nothing the worker forks escapes it.
    if (cgroup_procs_fd >= 0 && ::write(cgroup_procs_fd, "0", 1) != 1) return errno;
    if (pids_v1_procs_fd >= 0 && ::write(pids_v1_procs_fd, "0", 1) != 1) return errno;
    if (memory_v1_procs_fd >= 0 && ::write(memory_v1_procs_fd, "0", 1) != 1) return errno;
    *step = SpawnStep::kChild;
    if (address_space > 0) {
      struct rlimit limit = {address_space, address_space};
      if (::setrlimit(RLIMIT_AS, &limit) != 0) return errno;
    }
    if (::setpgid(0, 0) != 0) return errno;
    // Become the trial's user before PR_SET_PDEATHSIG: the kernel clears the parent-death
    // signal whenever the credentials change.
    if (switch_user) {
      *step = SpawnStep::kCredentials;
      if (::syscall(SYS_setgroups, n_groups, groups) != 0) return errno;
      if (::syscall(SYS_setgid, gid) != 0) return errno;
      if (::syscall(SYS_setuid, uid) != 0) return errno;
      *step = SpawnStep::kChild;
    }
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return errno;
    // The daemon may have died between vfork and prctl; then nobody would ever stop us.
    if (::getppid() != parent) ::_exit(127);
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    // The daemon blocked every signal around the vfork (vfork_spawn.cc); the worker starts
    // with none blocked, its handlers the defaults set just above.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (report_fd == kReportFd) {
      if (::fcntl(kReportFd, F_SETFD, 0) != 0) return errno;
    } else if (::dup2(report_fd, kReportFd) < 0) {  // dup2 clears FD_CLOEXEC on the copy
      return errno;
    }
    *step = SpawnStep::kWorkdir;
    if (::chdir(workdir) != 0) return errno;
    *step = SpawnStep::kChild;
    // Close every other descriptor ourselves. The daemon opens everything close-on-exec, but a
    // library may not (Asio's sockets are not), and a descriptor inherited from whoever
    // started the daemon may lack close-on-exec.
    if (::close_range(kReportFd + 1, ~0U, 0) != 0) {
      if (errno != ENOSYS) return errno;
      struct rlimit open_files = {};  // a kernel older than 5.9: one close per possible number
      if (::getrlimit(RLIMIT_NOFILE, &open_files) != 0) return errno;
      for (rlim_t fd = kReportFd + 1; fd < open_files.rlim_cur; ++fd) ::close(static_cast<int>(fd));
    }
    *step = SpawnStep::kExec;
    return 0;
  }
};

}  // namespace internal
}  // namespace triald::launcher
