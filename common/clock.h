#pragma once
// Clock: the daemon's only source of wall time (for records) and monotonic time (for
// durations). Injected so that scheduling logic is tested with a fake clock.
//
// Thread-safety: SystemClock is thread-safe; implementations must state their own.

#include <chrono>

namespace triald::common {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch (stored in records).
  virtual double WallSeconds() const = 0;
  // Monotonic seconds from an arbitrary origin (durations, ETA).
  virtual double MonotonicSeconds() const = 0;
};

class SystemClock final : public Clock {
 public:
  double WallSeconds() const override;
  double MonotonicSeconds() const override;
};

}  // namespace triald::common
