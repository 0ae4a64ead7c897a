#include "daemon/scheduler/spawn_backoff.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <sstream>

namespace triald::daemon {

SpawnCause ClassifySpawnError(const launcher::SpawnError& error) {
  if (error.step == launcher::SpawnStep::kCgroup) return SpawnCause::kTransient;
  switch (error.error_number) {
    case EAGAIN:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ETXTBSY:
      return SpawnCause::kTransient;
    default:
      return SpawnCause::kPersistent;
  }
}

const char* SpawnCauseName(SpawnCause cause) {
  return cause == SpawnCause::kTransient ? "transient" : "persistent";
}

SpawnBackoff::Failure SpawnBackoff::OnFailure(const launcher::SpawnError& error,
                                              const std::string& message, double now) {
  Failure f;
  f.cause = ClassifySpawnError(error);
  ++failures_;
  persistent_ = f.cause == SpawnCause::kPersistent ? persistent_ + 1 : 0;
  // 0.1 s doubling: the exponent is capped before the power so it cannot overflow.
  const int doublings = std::min(failures_ - 1, 30);
  f.delay_s = std::min(kMaxDelay, kInitialDelay * std::ldexp(1.0, doublings));
  retry_at_ = now + f.delay_s;
  f.failures = failures_;
  if (!held_ && persistent_ >= kHoldAfter) {
    held_ = true;
    f.held_now = true;
  }
  reason_ = message;
  cause_ = f.cause;
  return f;
}

SpawnBackoff::Snapshot SpawnBackoff::Take(double now) const {
  Snapshot s;
  s.held = held_;
  s.failures = failures_;
  s.cause = cause_;
  s.reason = reason_;
  s.retry_in_s = std::max(0.0, retry_at_ - now);
  return s;
}

bool SpawnBackoff::OnStart() {
  const bool was = failures_ > 0;
  failures_ = 0;
  persistent_ = 0;
  held_ = false;
  retry_at_ = 0;
  reason_.clear();
  return was;
}

std::string DescribeSpawnFailure(const SpawnBackoff::Failure& f, int number,
                                 const std::string& message) {
  std::ostringstream delay;
  delay << f.delay_s;
  return "trial " + std::to_string(number) + " could not start (" + SpawnCauseName(f.cause) + ", " +
         std::to_string(f.failures) + " in a row): " + message + "; next attempt in " +
         delay.str() + " s";
}

}  // namespace triald::daemon
