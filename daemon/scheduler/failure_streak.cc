#include "daemon/scheduler/failure_streak.h"

#include <algorithm>

namespace triald::daemon {

bool FailureStreak::Counts(const std::string& reason) {
  static const std::vector<std::string> kNotTheObjectives = {
      "cancelled", "shutdown", "lost", "spawn", "preempted", "node_failure", "slurm_cancelled"};
  return std::find(kNotTheObjectives.begin(), kNotTheObjectives.end(), reason) ==
         kNotTheObjectives.end();
}

std::optional<std::string> FailureStreak::OnFinished(const model::TrialRecord& t) {
  if (t.state == model::TrialState::kComplete || t.state == model::TrialState::kPruned) {
    count_ = 0;
    key_.clear();
    return std::nullopt;
  }
  if (t.state != model::TrialState::kFail || !Counts(t.fail.reason)) return std::nullopt;
  const std::string key = model::FailKey(t.fail);
  if (key == key_) {
    ++count_;
  } else {
    key_ = key;
    count_ = 1;
  }
  if (limit_ <= 0 || count_ < limit_ || fired_) return std::nullopt;
  fired_ = true;
  return std::to_string(count_) + " trials in a row failed the same way (" + t.fail.reason + ": " +
         model::FailSummary(t.fail) +
         "); stopped by [study] max_failures_in_a_row = " + std::to_string(limit_) +
         " (0 never stops)";
}

void FailureStreak::Rebuild(const std::vector<model::TrialRecord>& trials) {
  std::vector<const model::TrialRecord*> finished;
  for (const model::TrialRecord& t : trials) {
    if (t.state == model::TrialState::kComplete || t.state == model::TrialState::kPruned ||
        t.state == model::TrialState::kFail) {
      finished.push_back(&t);
    }
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const model::TrialRecord* a, const model::TrialRecord* b) {
                     return a->finished_at != b->finished_at ? a->finished_at < b->finished_at
                                                             : a->number < b->number;
                   });
  const int limit = limit_;
  limit_ = 0;  // counts without firing
  count_ = 0;
  key_.clear();
  for (const model::TrialRecord* t : finished) (void)OnFinished(*t);
  limit_ = limit;
}

}  // namespace triald::daemon
