#pragma once
// Reaper: the daemon's single reaper of child processes.
//
// Start() makes the daemon a child subreaper (PR_SET_CHILD_SUBREAPER), so that grandchildren
// orphaned by a trial's main process are re-parented to the daemon instead of init. One
// asio::signal_set waits for SIGCHLD; each delivery runs a wait4(-1, WNOHANG) loop that
// reaps every exited child and routes its status and resource usage to whoever Watch()ed that
// pid. Unwatched pids
// (adopted grandchildren, a child whose exec failed) are reaped and logged, and their statuses
// kept for a while (the last kKeptUnwatched of them): a trial forked by a fork server becomes
// the daemon's child before the daemon learns its pid, and may end before then
// (TakeUnwatched). Nothing else in the process may call waitpid: two reapers race and lose exit
// statuses.
//
// Thread-safety: not thread-safe; runs on the event-loop thread.

#include <sys/resource.h>
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/logging.h"
#include "common/status.h"

namespace triald::launcher {

class Reaper {
 public:
  // `usage` is what wait4 reports for the child: its own usage plus that of the descendants it
  // waited for itself (user and system time summed; ru_maxrss the largest single process, KiB).
  using ExitFn = std::function<void(int wait_status, const struct rusage& usage)>;

  Reaper(boost::asio::io_context& io, common::Logger logger);

  // Becomes subreaper and starts waiting for SIGCHLD. Call before the first fork.
  common::Status Start();

  // `on_exit` runs (on the event loop) when `pid` is reaped. At most one watcher per pid.
  void Watch(pid_t pid, ExitFn on_exit);
  void Unwatch(pid_t pid);
  // Whether `pid` is watched (a trial's main process not yet reaped).
  bool Watching(pid_t pid) const { return watchers_.count(pid) != 0; }

  // The status of `pid` if it was reaped while nobody watched it (the latest such), taken out
  // of the kept ones; nullopt otherwise.
  struct Kept {
    pid_t pid = 0;
    int wait_status = 0;
    struct rusage usage = {};
  };
  std::optional<Kept> TakeUnwatched(pid_t pid);
  static constexpr size_t kKeptUnwatched = 1024;

  // One wait4 loop; returns how many children were reaped. Called on SIGCHLD, and usable
  // directly (e.g. at shutdown).
  int ReapNow();

  uint64_t orphans_reaped() const { return orphans_reaped_; }

 private:
  void Arm();

  boost::asio::io_context& io_;
  common::Logger logger_;
  boost::asio::signal_set signals_;
  std::unordered_map<pid_t, ExitFn> watchers_;
  std::deque<Kept> kept_;  // unwatched statuses, oldest first, at most kKeptUnwatched
  uint64_t orphans_reaped_ = 0;
  bool started_ = false;
};

}  // namespace triald::launcher
