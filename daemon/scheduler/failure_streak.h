#pragma once
// FailureStreak: fail-fast, the policy of [study] max_failures_in_a_row = K. A study whose
// trials keep failing the same way (an objective that raises at import, a missing module, a
// typo in the command) stops after K of them instead of spending its whole n_trials: once K
// trials in a row (in the order they finished, its first trials included) failed the same way,
// OnFinished says why, once, and the scheduler ends the study FAILED with that reason (its
// waiting trials do not start, none of these failures is retried; trials already running go
// on to their end).
//
// "The same way" is model::FailKey: the failure reason and the failure's one line
// (model::FailSummary) with its numbers masked, so "ValueError: lr 0.3 too large" and "...lr
// 0.7 too large" are one way and "exited with code 1" after "killed by SIGSEGV" is another.
// A COMPLETE or PRUNED trial ends a streak. Failures that are not the objective's (the study
// cancelled, triald's shutdown, a trial lost with a node, a preemption, a start that failed)
// neither count nor end one.
//
// After a restart the streak is rebuilt from the stored trials (Rebuild), so a study stopped
// just before triald did is stopped again at its next failure, not given K more.
//
// Thread-safety: a plain value; the scheduler's event-loop thread owns it.

#include <optional>
#include <string>
#include <vector>

#include "daemon/model/records.h"

namespace triald::daemon {

class FailureStreak {
 public:
  explicit FailureStreak(int limit = 0) : limit_(limit) {}

  // Trial `t` finished (its state and fail as stored): why the study must stop, the first time
  // the streak reaches the limit; nullopt otherwise (and always with limit 0).
  std::optional<std::string> OnFinished(const model::TrialRecord& t);
  // The streak of `trials` (any order: they are taken by finished_at, then number), as if each
  // had been given to OnFinished; never says to stop.
  void Rebuild(const std::vector<model::TrialRecord>& trials);

  int count() const { return count_; }
  // Whether a failure with `reason` says something of the objective (counted).
  static bool Counts(const std::string& reason);

 private:
  int limit_;
  int count_ = 0;
  std::string key_;
  bool fired_ = false;
};

}  // namespace triald::daemon
