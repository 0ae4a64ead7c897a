#include "daemon/scheduler/study_cache.h"

#include <atomic>
#include <set>

namespace triald::daemon {

uint64_t NextSyncEpoch() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void StudyCache::Recount(const std::string& node) {
  finished = 0;
  retries_created = 0;
  waiting.clear();
  std::set<int64_t> retried_ids;
  for (const model::TrialRecord& t : trials) {
    if (model::IsFinished(t.state)) ++finished;
    if (t.state == model::TrialState::kWaiting && (t.node.empty() || t.node == node)) {
      waiting.push_back(t.number);
    }
    if (t.retry_of) {
      ++retries_created;
      retried_ids.insert(*t.retry_of);
    }
  }
  retried = static_cast<int>(retried_ids.size());
}

StudyCache::Saved StudyCache::Save(int number) const {
  return Saved{trials.size(), trials[number], record};
}

void StudyCache::Restore(int number, const Saved& saved) {
  trials.resize(saved.size);
  trials[number] = saved.trial;
  record = saved.record;
}

}  // namespace triald::daemon
