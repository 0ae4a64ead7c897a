#pragma once
// DistributionCache: the parameter distributions read back from storage, parsed once. Every
// stored parameter carries its distribution as JSON text, and every read of a study's trials
// (`trialctl studies`, `status`, `trials`, recovery) meets the same few texts again; a
// categorical with many choices costs a JSON parse and a duplicate check each time, so each
// text is parsed once and kept, keyed by its text.
//
// Bounded: at most kMaxEntries texts and kMaxBytes of text; past either, the least recently
// used entries go (a later read parses them again).
//
// Thread-safety: all methods may be called concurrently (one mutex).

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "config/space.h"

namespace triald::storage {

class DistributionCache {
 public:
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxBytes = 32 * 1024 * 1024;

  // The distribution `json` describes (DistributionFromJson), parsed on the first call for that
  // text; an error is not kept.
  common::Result<std::shared_ptr<const config::Distribution>> Parse(const std::string& json);

  // Texts parsed so far and not evicted (for tests).
  size_t size() const;
  // DistributionFromJson calls made (for tests: a second read of the same text makes none).
  size_t parses() const;

 private:
  struct Entry {
    std::shared_ptr<const config::Distribution> dist;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // guarded by mu_
  std::list<std::string> lru_;                      // guarded by mu_; keys, most recent first
  size_t bytes_ = 0;                                // guarded by mu_: sum of key sizes
  size_t parses_ = 0;                               // guarded by mu_
};

}  // namespace triald::storage
