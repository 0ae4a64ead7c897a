#pragma once
// StorageOutage: the daemon's policy when storage refuses its writes for a reason of the
// storage's own: a full disk, an I/O error, a read-only file system (kIo), or a database that
// cannot be reached (kUnavailable). A refused write of that kind never becomes a trial's end, a
// relaunch or a lost result:
//   - the daemon is held: no study starts a trial (Scheduler::CanStart), `status`, `studies`,
//     `ping`, `watch`, the dashboard and the log say why (held(), reason());
//   - what it knew is kept in memory: a trial's end that could not be stored is kept and stored
//     again later (the coordinator's pending ends), and trials whose start could not be stored
//     are stopped and forgotten (nothing of them is stored, so nothing is lost; they start
//     again once storage is back);
//   - it probes the storage with a write at a back-off (kInitialDelay doubling to kMaxDelay) and
//     resumes by itself when a probe succeeds, storing the kept ends first.
// Other refusals (a finished trial changed, an unknown trial) are decisions of the storage, not
// outages, and are handled where they happen.
//
// The clock is the caller's (monotonic seconds), so the policy is tested without one.
//
// Thread-safety: a plain value; the scheduler's event-loop thread owns it.

#include <string>

#include "common/status.h"

namespace triald::daemon {

class StorageOutage {
 public:
  static constexpr double kInitialDelay = 1;  // seconds to the first probe
  static constexpr double kMaxDelay = 30;     // seconds between probes at most

  // Whether `st`, a refused write, is an outage (kIo, kUnavailable).
  static bool IsOutage(const common::Status& st);

  // A write was refused at `now` with `st`: true when it is an outage, which holds the daemon
  // (the first probe kInitialDelay later).
  bool OnFailure(const common::Status& st, double now);
  // A probe failed at `now`: the next one waits twice as long (at most kMaxDelay).
  void OnProbeFailure(double now);
  // A probe (or any write) succeeded: true when the daemon was held until now.
  bool OnSuccess();

  bool held() const { return held_; }
  // The first refusal of this outage ("database or disk is full", ...).
  const std::string& reason() const { return reason_; }
  // How many refusals this outage has seen.
  int failures() const { return failures_; }
  // Whether a probe is due at `now`, and the seconds until it is (0 when due or not held).
  bool ProbeDue(double now) const { return held_ && now >= retry_at_; }
  double RetryIn(double now) const { return held_ && retry_at_ > now ? retry_at_ - now : 0; }

 private:
  bool held_ = false;
  std::string reason_;
  int failures_ = 0;
  double delay_ = 0;
  double retry_at_ = 0;
};

}  // namespace triald::daemon
