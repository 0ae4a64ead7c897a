#include "daemon/launcher/vfork_spawn.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/process_util.h"

namespace triald::launcher::internal {

namespace {

// The child's side, between vfork and exec: system calls only, on the daemon's memory; the
// only writes are to `*error` and, through `setup`, `*setup.step`.
[[noreturn]] void InChild(const char* executable, char* const* argv, SpawnStdio stdio,
                          const ChildSetup& setup, volatile int* error) {
  int e = 0;
  if (::dup2(stdio.in, STDIN_FILENO) < 0 || ::dup2(stdio.out, STDOUT_FILENO) < 0 ||
      ::dup2(stdio.err, STDERR_FILENO) < 0) {
    e = errno;
  }
  if (e == 0) e = setup.Run();
  if (e == 0) {
    ::execve(executable, argv, const_cast<char* const*>(setup.envp));
    e = errno;
  }
  *error = e;
  ::_exit(127);  // not exit(): the daemon's atexit handlers must not run here
}

}  // namespace

Spawned VforkSpawn(const std::string& executable, const std::vector<std::string>& args,
                   SpawnStdio stdio, const ChildSetup& setup) {
  // Everything the child reads is built before the vfork.
  std::vector<char*> argv;
  argv.reserve(args.size() + 2);
  argv.push_back(const_cast<char*>(executable.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  volatile int error = 0;
  *setup.step = SpawnStep::kFork;
  const uint64_t boot_before = common::BootTimeNs();
  const pid_t pid = ::vfork();
  if (pid == 0) InChild(executable.c_str(), argv.data(), stdio, setup, &error);
  const int fork_errno = errno;
  const uint64_t boot_after = common::BootTimeNs();
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);

  Spawned out;
  if (pid < 0) {
    out.error = fork_errno;
    return out;
  }
  if (error != 0) {
    // The child failed before or at exec and has exited with 127: reap it here, so nothing
    // else ever sees a process that never ran the worker.
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    out.error = error;
    return out;
  }
  out.pid = pid;
  out.start_time = common::StartTimeBetween(boot_before, boot_after);
  return out;
}

}  // namespace triald::launcher::internal
