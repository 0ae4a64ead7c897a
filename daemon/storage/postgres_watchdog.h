#pragma once
// PostgresWatchdog: tells at once, without a round trip, whether the PostgreSQL server is
// answering, so that the daemon's event loop does not wait on a server that has stopped (frozen,
// a failover that hangs, a network that drops its packets).
//
// A thread of its own keeps a connection of its own and sends `SELECT 1` every `interval_s`.
// The server counts as unresponsive from the moment a probe (its connect included) has waited
// for longer than `unresponsive_after_s` without an answer, until a probe gets one. A probe that
// fails at once (a refused connection, a terminated session) is an answer: that server does not
// make anyone wait, and the storage's own calls report its error. PostgresStorage asks before
// it reconnects and while it waits for a round trip (in slices of 50 ms), and fails the call
// with kUnavailable as soon as the server is unresponsive; the scheduler then holds (the storage
// outage rules) instead of waiting for the call timeout.
//
// Thread-safety: Unresponsive() may be called from any thread; the rest from the owner's.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

struct pg_conn;  // libpq's PGconn

namespace triald::storage {

class PostgresWatchdog {
 public:
  struct Options {
    // libpq connection parameters (keyword, value), as the storage connects.
    std::vector<std::pair<std::string, std::string>> conninfo;
    std::string masked_url;  // for messages
    double interval_s = 0.25;
    double unresponsive_after_s = 1;
    // A probe that got no answer is given up (its connection dropped) after this long.
    double give_up_after_s = 10;
  };
  // Starts the thread; its first probe goes out at once.
  explicit PostgresWatchdog(Options options);
  ~PostgresWatchdog();  // stops the thread within one slice
  PostgresWatchdog(const PostgresWatchdog&) = delete;
  PostgresWatchdog& operator=(const PostgresWatchdog&) = delete;

  // Empty while the server answers; else why it counts as unresponsive ("has not answered for
  // 1.2 s (SELECT 1 every 0.25 s; unresponsive after 1 s)").
  std::optional<std::string> Unresponsive() const;
  // Probes answered since the start (for tests).
  uint64_t answered() const { return answered_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  // One probe: connects when needed, sends SELECT 1 and waits for the answer. True when the
  // server answered (with a result or an error); false when the probe was given up or stopped.
  bool Probe();
  // Waits until the connection's socket is ready for `events`, in slices that watch stop_,
  // until `until`; false when that passed or the watchdog stops.
  bool Wait(short events, Clock::time_point until) const;
  void Drop();

  Options options_;
  ::pg_conn* conn_ = nullptr;  // the watchdog thread's only
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> answered_{0};
  mutable std::mutex mu_;
  std::condition_variable wake_;
  // When the oldest probe still without an answer began (none while the server answers).
  std::optional<Clock::time_point> unanswered_since_;
  std::thread thread_;
};

}  // namespace triald::storage
