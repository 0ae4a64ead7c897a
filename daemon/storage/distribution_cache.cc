#include "daemon/storage/distribution_cache.h"

namespace triald::storage {

common::Result<std::shared_ptr<const config::Distribution>> DistributionCache::Parse(
    const std::string& json) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(json);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.dist;
    }
    ++parses_;
  }
  // Parsed outside the lock: a long list of choices must not hold up other readers.
  common::Result<config::Distribution> parsed = config::DistributionFromJson(json);
  if (!parsed.ok()) return parsed.status();
  auto dist = std::make_shared<const config::Distribution>(std::move(parsed).value());
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(json) == 0 && json.size() <= kMaxBytes) {
    lru_.push_front(json);
    entries_.emplace(json, Entry{dist, lru_.begin()});
    bytes_ += json.size();
    while (entries_.size() > kMaxEntries || bytes_ > kMaxBytes) {
      const std::string& oldest = lru_.back();
      bytes_ -= oldest.size();
      entries_.erase(oldest);
      lru_.pop_back();
    }
  }
  return std::shared_ptr<const config::Distribution>(dist);
}

size_t DistributionCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t DistributionCache::parses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return parses_;
}

}  // namespace triald::storage
