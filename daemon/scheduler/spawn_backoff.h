#pragma once
// SpawnBackoff: one study's policy for trials that could not be started (Launcher::Launch
// failed). A failure to start is never a trial's end: the trial stays WAITING (its parameters,
// enqueued ones included, are kept) and the study waits before the next attempt, so a spawn
// problem cannot burn n_trials.
//
// Causes (ClassifySpawnError, from the launcher's step and errno):
//   transient   EAGAIN, EMFILE, ENFILE, ENOMEM (a process or descriptor limit, memory), ETXTBSY
//               (the command is being written, as in a deploy), and a cgroup that cannot be
//               created or joined, whatever its errno: these go away by themselves.
//   persistent  everything else, ENOENT, EACCES, ENOTDIR, ENOEXEC first (the command or the
//               workdir is missing or not executable), and a failure to become the study's
//               submitter (SpawnStep::kCredentials: EPERM, or no account on this host): a
//               person has to act.
// Both wait: kInitialDelay after the first failure in a row, doubling up to kMaxDelay. After
// kHoldAfter persistent failures in a row the study is held: `trialctl status` shows the reason
// until a trial starts again; it is still retried at the capped back-off and continues by
// itself once the cause is gone. A trial that starts resets everything.
//
// The clock is the caller's (monotonic seconds), so the policy is tested without one.
//
// Thread-safety: a plain value; the scheduler's event-loop thread owns it.

#include <string>

#include "daemon/launcher/launcher.h"

namespace triald::daemon {

enum class SpawnCause { kTransient, kPersistent };
SpawnCause ClassifySpawnError(const launcher::SpawnError& error);
// "transient" or "persistent".
const char* SpawnCauseName(SpawnCause cause);

class SpawnBackoff {
 public:
  static constexpr double kInitialDelay = 0.1;  // seconds
  static constexpr double kMaxDelay = 30;       // seconds
  static constexpr int kHoldAfter = 3;          // persistent failures in a row

  // What a failure changed.
  struct Failure {
    SpawnCause cause = SpawnCause::kTransient;
    int failures = 0;       // in a row, this one included
    double delay_s = 0;     // until the next attempt
    bool held_now = false;  // this failure put the study on hold
  };
  // Records a failed start at `now`; `message` is what the launcher said.
  Failure OnFailure(const launcher::SpawnError& error, const std::string& message, double now);
  // Records a start. True when the study was backing off (or held) until now.
  bool OnStart();

  // Whether a trial may be started at `now`.
  bool Ready(double now) const { return failures_ == 0 || now >= retry_at_; }
  bool backing_off() const { return failures_ > 0; }
  bool held() const { return held_; }
  int failures() const { return failures_; }
  double retry_at() const { return retry_at_; }
  // The last failure: the launcher's message, and its cause.
  const std::string& reason() const { return reason_; }
  SpawnCause cause() const { return cause_; }

  // What `trialctl status` shows of a study that is backing off.
  struct Snapshot {
    bool held = false;
    int failures = 0;
    SpawnCause cause = SpawnCause::kTransient;
    std::string reason;
    double retry_in_s = 0;  // from `now`; 0 when due
  };
  Snapshot Take(double now) const;

 private:
  int failures_ = 0;    // in a row
  int persistent_ = 0;  // persistent ones in a row (a transient one or a start resets it)
  bool held_ = false;
  double retry_at_ = 0;
  std::string reason_;
  SpawnCause cause_ = SpawnCause::kTransient;
};

// The spawn_failed event of trial `number`: what failed (`message`, the launcher's words), how
// often in a row, and when the next attempt is.
std::string DescribeSpawnFailure(const SpawnBackoff::Failure& failure, int number,
                                 const std::string& message);

}  // namespace triald::daemon
