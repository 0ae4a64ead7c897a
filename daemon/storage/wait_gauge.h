#pragma once
// WaitGauge: since when the storage has been waiting for its server, for threads other than the
// one that waits. The PostgreSQL backend marks each wait on the server's socket (from the
// moment it polls until the server answers, the call timeout passes or the watchdog gives up);
// the control socket's thread reads it to tell a loop held by storage from a loop merely busy
// (control/server.h answers `status` from the last reply only in the first case).
//
// Thread-safety: Begin and End on the waiting thread; WaitingFor from any thread.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace triald::storage {

class WaitGauge {
 public:
  void Begin() { since_ns_.store(NowNs(), std::memory_order_relaxed); }
  void End() { since_ns_.store(0, std::memory_order_relaxed); }
  // How long the wait in progress has lasted; nullopt when none is.
  std::optional<std::chrono::nanoseconds> WaitingFor() const {
    const int64_t since = since_ns_.load(std::memory_order_relaxed);
    if (since == 0) return std::nullopt;
    return std::chrono::nanoseconds(std::max<int64_t>(0, NowNs() - since));
  }

  // Marks a wait for its scope; a null gauge marks nothing.
  class Scope {
   public:
    explicit Scope(WaitGauge* gauge) : gauge_(gauge) {
      if (gauge_ != nullptr) gauge_->Begin();
    }
    ~Scope() {
      if (gauge_ != nullptr) gauge_->End();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    WaitGauge* gauge_;
  };

 private:
  static int64_t NowNs() {
    // Never 0 in practice (the steady clock counts from boot), which marks "no wait".
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::atomic<int64_t> since_ns_{0};
};

}  // namespace triald::storage
