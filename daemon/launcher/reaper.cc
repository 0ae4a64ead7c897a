#include "daemon/launcher/reaper.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cerrno>

#include "common/process_util.h"

namespace triald::launcher {

Reaper::Reaper(boost::asio::io_context& io, common::Logger logger)
    : io_(io), logger_(std::move(logger)), signals_(io) {}

common::Status Reaper::Start() {
  if (started_) return common::Status::Ok();
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return common::ErrnoError("prctl(PR_SET_CHILD_SUBREAPER)", errno);
  }
  boost::system::error_code ec;
  signals_.add(SIGCHLD, ec);
  if (ec) return common::Internal("signal_set.add(SIGCHLD): " + ec.message());
  started_ = true;
  Arm();
  ReapNow();  // children that exited before the handler was installed
  return common::Status::Ok();
}

void Reaper::Arm() {
  signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;  // operation_aborted: the Reaper is being destroyed
    ReapNow();
    Arm();
  });
}

void Reaper::Watch(pid_t pid, ExitFn on_exit) { watchers_[pid] = std::move(on_exit); }

void Reaper::Unwatch(pid_t pid) { watchers_.erase(pid); }

std::optional<Reaper::Kept> Reaper::TakeUnwatched(pid_t pid) {
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->pid != pid) continue;
    Kept k = *it;
    kept_.erase(std::next(it).base());
    return k;
  }
  return std::nullopt;
}

int Reaper::ReapNow() {
  int reaped = 0;
  for (;;) {
    int status = 0;
    struct rusage usage = {};
    pid_t pid = ::wait4(-1, &status, WNOHANG, &usage);
    if (pid == 0) break;
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: no children left
    }
    ++reaped;
    auto it = watchers_.find(pid);
    if (it == watchers_.end()) {
      ++orphans_reaped_;
      kept_.push_back(Kept{pid, status, usage});
      if (kept_.size() > kKeptUnwatched) kept_.pop_front();
      logger_->debug("reaped pid {} ({}), not a trial's main process", pid,
                     common::ExitStatus::FromWaitStatus(status).Describe());
      continue;
    }
    ExitFn fn = std::move(it->second);
    watchers_.erase(it);
    fn(status, usage);
  }
  return reaped;
}

}  // namespace triald::launcher
