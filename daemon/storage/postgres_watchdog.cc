#include "daemon/storage/postgres_watchdog.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace triald::storage {
namespace {
constexpr auto kSlice = std::chrono::milliseconds(50);

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}
}  // namespace

PostgresWatchdog::PostgresWatchdog(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

PostgresWatchdog::~PostgresWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  Drop();
}

std::optional<std::string> PostgresWatchdog::Unresponsive() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!unanswered_since_) return std::nullopt;
  const double waited = std::chrono::duration<double>(Clock::now() - *unanswered_since_).count();
  if (waited < options_.unresponsive_after_s) return std::nullopt;
  char why[160];
  std::snprintf(why, sizeof why,
                "has not answered for %.1f s (a SELECT 1 every %.2g s; unresponsive after %.2g s)",
                waited, options_.interval_s, options_.unresponsive_after_s);
  return std::string(why);
}

void PostgresWatchdog::Run() {
  while (!stop_) {
    const Clock::time_point began = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!unanswered_since_) unanswered_since_ = began;
    }
    if (Probe()) {
      std::lock_guard<std::mutex> lock(mu_);
      unanswered_since_.reset();
      ++answered_;
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_until(lock, began + Seconds(options_.interval_s), [this] { return stop_.load(); });
  }
}

bool PostgresWatchdog::Wait(short events, Clock::time_point until) const {
  for (;;) {
    if (stop_) return false;
    const auto now = Clock::now();
    if (now >= until) return false;
    const auto left =
        std::min<Clock::duration>(until - now, std::chrono::duration_cast<Clock::duration>(kSlice));
    pollfd pfd{PQsocket(conn_), events, 0};
    int n = ::poll(
        &pfd, 1,
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // libpq finds the socket's error
  }
}

void PostgresWatchdog::Drop() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
}

bool PostgresWatchdog::Probe() {
  const Clock::time_point give_up = Clock::now() + Seconds(options_.give_up_after_s);
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    Drop();
    // The storage's parameters, the session named as the watchdog's ("triald:NODE watchdog").
    std::string name = "triald watchdog";
    for (const auto& [k, v] : options_.conninfo) {
      if (k == "application_name") name = v + " watchdog";
    }
    std::vector<const char*> kw, vals;
    for (const auto& [k, v] : options_.conninfo) {
      kw.push_back(k.c_str());
      vals.push_back(k == "application_name" ? name.c_str() : v.c_str());
    }
    kw.push_back(nullptr);
    vals.push_back(nullptr);
    conn_ = PQconnectStartParams(kw.data(), vals.data(), /*expand_dbname=*/1);
    if (conn_ == nullptr || PQstatus(conn_) == CONNECTION_BAD) {
      Drop();
      return true;  // failed at once: nothing waits on this server
    }
    int fd = PQsocket(conn_);
    if (fd >= 0) (void)::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    for (PostgresPollingStatusType st = PGRES_POLLING_WRITING;;) {
      if (st == PGRES_POLLING_OK) break;
      if (st == PGRES_POLLING_FAILED) {
        Drop();
        return true;
      }
      if (!Wait(st == PGRES_POLLING_READING ? POLLIN : POLLOUT, give_up)) {
        Drop();
        return false;
      }
      st = PQconnectPoll(conn_);
      fd = PQsocket(conn_);
      if (fd >= 0) (void)::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    }
    if (PQsetnonblocking(conn_, 1) != 0) {
      Drop();
      return true;
    }
  }
  if (PQsendQuery(conn_, "SELECT 1") != 1) {
    Drop();
    return true;
  }
  for (;;) {
    int r = PQflush(conn_);
    if (r == 0) break;
    if (r < 0 || !Wait(POLLOUT | POLLIN, give_up)) {
      Drop();
      return r < 0;
    }
    if (PQconsumeInput(conn_) != 1) {
      Drop();
      return true;
    }
  }
  while (PQisBusy(conn_) == 1) {
    if (!Wait(POLLIN, give_up)) {
      Drop();
      return false;
    }
    if (PQconsumeInput(conn_) != 1) {
      Drop();
      return true;
    }
  }
  while (PGresult* res = PQgetResult(conn_)) PQclear(res);
  return true;
}

}  // namespace triald::storage
