// worker::CloneParent (worker/clone_parent.h): the clone is its caller's parent's child, and
// glibc's state in it is what a fork would have left: its own thread id in the thread
// descriptor (pthread_kill of the main thread from another thread reaches it), its robust-futex
// list registered. A failed assumption shows as a failed check, not a crash of this process: the
// "server" and the clone are children, and report through a pipe.
#include "worker/clone_parent.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "tests/support/skip.h"

namespace {

using triald::worker::CloneParent;

std::atomic<int> g_signals{0};
void OnSignal(int) { g_signals.fetch_add(1); }

// What the clone found, written by it to the pipe: one int per check.
struct Report {
  int32_t pid = 0;
  int32_t ppid = 0;
  int32_t glibc_tid_is_own = 0;
  int32_t robust_list_registered = 0;
  int32_t robust_list_empty = 0;
  int32_t pthread_kill_error = -1;
  int32_t signals = 0;
};

[[noreturn]] void CloneChild(const CloneParent& clone, int out) {
  Report r;
  r.pid = ::getpid();
  r.ppid = ::getppid();
  // The kernel wrote the clone's id at the field Probe() found: a probe in the clone finds it.
  std::string why;
  r.glibc_tid_is_own = CloneParent::Probe(&why).has_value() ? 1 : 0;
  void* head = nullptr;
  size_t len = 0;
  r.robust_list_registered =
      ::syscall(SYS_get_robust_list, 0, &head, &len) == 0 && head != nullptr ? 1 : 0;
  r.robust_list_empty = clone.RobustListEmpty() ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGUSR1, &sa, nullptr);
  const pthread_t main_thread = ::pthread_self();
  std::thread poke([&] { r.pthread_kill_error = ::pthread_kill(main_thread, SIGUSR1); });
  poke.join();
  for (int i = 0; i < 100 && g_signals.load() == 0; ++i) ::usleep(1000);
  r.signals = g_signals.load();
  (void)!::write(out, &r, sizeof r);
  ::_exit(0);
}

}  // namespace

TEST_CASE("CloneParent: the clone is the caller's parent's child, with glibc's state its own",
          "[worker][clone_parent]") {
#if !defined(__x86_64__) && !defined(__aarch64__)
  TRIALD_SKIP("clone(CLONE_PARENT) is used on x86_64 and aarch64 only");
#endif
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t server = ::fork();
  REQUIRE(server >= 0);
  if (server == 0) {
    ::close(pipe_fds[0]);
    std::string why;
    std::optional<CloneParent> clone = CloneParent::Probe(&why);
    if (!clone || !clone->RobustListEmpty()) ::_exit(10);
    const pid_t child = (*clone)();
    if (child == 0) CloneChild(*clone, pipe_fds[1]);
    ::_exit(child > 0 ? 0 : 11);
  }
  ::close(pipe_fds[1]);
  int status = 0;
  REQUIRE(::waitpid(server, &status, 0) == server);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);  // 10: no CloneParent here; 11: clone failed
  Report r;
  size_t have = 0;
  while (have < sizeof r) {
    const ssize_t n = ::read(pipe_fds[0], reinterpret_cast<char*>(&r) + have, sizeof r - have);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    have += static_cast<size_t>(n);
  }
  ::close(pipe_fds[0]);
  // This process waits for it: it is our child, not the (gone) server's.
  REQUIRE(::waitpid(r.pid, &status, 0) == r.pid);
  CHECK(WIFEXITED(status));
  CHECK(r.ppid == ::getpid());
  CHECK(r.pid != server);
  CHECK(r.glibc_tid_is_own == 1);
  CHECK(r.robust_list_registered == 1);
  CHECK(r.robust_list_empty == 1);
  CHECK(r.pthread_kill_error == 0);
  CHECK(r.signals == 1);
}

TEST_CASE("CloneParent: clone's refusals that mean never here", "[worker][clone_parent]") {
  CHECK(CloneParent::Unsupported(EINVAL));
  CHECK(CloneParent::Unsupported(ENOSYS));
  CHECK(CloneParent::Unsupported(EPERM));
  CHECK_FALSE(CloneParent::Unsupported(EAGAIN));
  CHECK_FALSE(CloneParent::Unsupported(ENOMEM));
}
