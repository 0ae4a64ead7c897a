#include "daemon/scheduler/study_runtime.h"

#include <algorithm>

#include "daemon/sampler/pareto.h"

namespace triald::daemon {

int64_t StudyRuntime::ParetoFrontSize() {
  int64_t n = 0;
  for (const model::TrialRecord& t : trials) n += model::IsFinished(t.state) ? 1 : 0;
  if (n != front_finished) {
    front_size =
        static_cast<int64_t>(sampler::pareto::ParetoFront(trials, spec.study.directions).size());
    front_finished = n;
  }
  return front_size;
}

int StudyRuntime::RetriesBehind(const model::TrialRecord& trial) const {
  int attempts = 0;
  for (std::optional<int64_t> prev = trial.retry_of; prev;) {
    auto it = std::find_if(trials.begin(), trials.end(),
                           [&](const model::TrialRecord& t) { return t.id == *prev; });
    // A trial put back after triald's stop (requeue_on_shutdown) is not an attempt.
    if (it == trials.end() || it->fail.reason != "shutdown" || !spec.study.requeue_on_shutdown) {
      ++attempts;
    }
    prev = it == trials.end() ? std::nullopt : it->retry_of;
  }
  return attempts;
}

std::vector<int> StudyRuntime::RetryHistory(const model::TrialRecord& trial) const {
  std::vector<int> numbers;
  for (std::optional<int64_t> prev = trial.retry_of; prev && numbers.size() < trials.size();) {
    auto it = std::find_if(trials.begin(), trials.end(),
                           [&](const model::TrialRecord& t) { return t.id == *prev; });
    if (it == trials.end()) break;
    numbers.push_back(it->number);
    prev = it->retry_of;
  }
  std::reverse(numbers.begin(), numbers.end());
  return numbers;
}

}  // namespace triald::daemon
