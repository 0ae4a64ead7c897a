#pragma once
// PendingWrites: the lazily durable writes of running trials (intermediate values, attributes,
// define-by-run parameters) that storage could not take for now (a full disk, a database away
// or frozen), kept in the order they came and written again once it takes writes: every one
// when the scheduler's storage probe succeeds (by the lazy writer, off the event loop, where
// there is one: LazyWriter::WriteFirst), and a trial's own before its end is stored (a
// finished trial takes no more writes). While a trial has kept writes, its later ones are kept
// behind them, so a step reported twice ends with its last value, as without an outage.
//
// Bounded: at most max_writes in all (kMaxWrites unless given); past that the oldest is dropped,
// counted and logged once per outage, so a flood of reports during a long outage costs a bounded
// amount of memory.
//
// The lazy writer (lazy_writer.h) keeps its queue in one too: it takes the oldest out to write
// them (Take), puts back what storage refused (PutBack), and hands a trial's own to its end
// (TakeTrial).
//
// Thread-safety: not thread-safe; the scheduler's thread owns it.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/storage/trial_store.h"

namespace triald::daemon {

class PendingWrites {
 public:
  static constexpr size_t kMaxWrites = 1'000'000;

  explicit PendingWrites(size_t max_writes = kMaxWrites) : max_writes_(max_writes) {}

  struct Write {
    enum class Kind { kIntermediate, kAttr, kParam };
    Kind kind = Kind::kIntermediate;
    int64_t trial_id = 0;
    int64_t step = 0;         // kIntermediate
    double value = 0;         // kIntermediate
    std::string key;          // kAttr: the key; kParam: the parameter's name
    std::string json;         // kAttr
    model::ParamValue param;  // kParam

    static Write Intermediate(int64_t trial_id, int64_t step, double value);
    static Write Attr(int64_t trial_id, std::string key, std::string json);
    static Write Param(int64_t trial_id, std::string name, model::ParamValue value);
  };

  // Whether a refusal with `st` is one to keep the write for (storage unavailable or an I/O
  // error: an outage), not a refusal of the write itself.
  static bool IsOutage(const common::Status& st);

  // Keeps `w` behind the others; `elsewhere` writes held outside (a batch being written) count
  // towards the bound too.
  void Keep(Write w, const common::Logger& logger, size_t elsewhere = 0);
  // The oldest `n` writes (fewer when there are fewer), taken out in order.
  std::vector<Write> Take(size_t n);
  // Trial `trial_id`'s writes, taken out in order.
  std::vector<Write> TakeTrial(int64_t trial_id);
  // Puts `writes` back in front of the others, in their order (taken, then not stored).
  void PutBack(std::vector<Write> writes);
  // Whether trial `trial_id` has kept writes (its next ones go behind them).
  bool Has(int64_t trial_id) const;
  // Writes the kept writes (only trial `trial_id`'s when given), oldest first. Stops at the first
  // outage refusal and returns it, keeping that write and the rest; a write refused for itself
  // (its trial finished elsewhere, a parameter stored already) is logged and dropped.
  common::Status Flush(storage::TrialStore& store, const common::Logger& logger,
                       std::optional<int64_t> trial_id = std::nullopt);
  size_t size() const { return writes_.size(); }
  uint64_t dropped() const { return dropped_; }
  // Makes the write `w` on `store`.
  static common::Status Apply(storage::TrialStore& store, const Write& w);

 private:
  void Forget(int64_t trial_id);  // one write of the trial is gone
  size_t max_writes_;
  std::deque<Write> writes_;
  std::unordered_map<int64_t, size_t> per_trial_;  // trial id -> its kept writes
  uint64_t dropped_ = 0;
  bool warned_full_ = false;
};

}  // namespace triald::daemon
