#include "daemon/scheduler/pending_writes.h"

#include <algorithm>

namespace triald::daemon {

PendingWrites::Write PendingWrites::Write::Intermediate(int64_t trial_id, int64_t step,
                                                        double value) {
  Write w;
  w.kind = Kind::kIntermediate;
  w.trial_id = trial_id;
  w.step = step;
  w.value = value;
  return w;
}

PendingWrites::Write PendingWrites::Write::Attr(int64_t trial_id, std::string key,
                                                std::string json) {
  Write w;
  w.kind = Kind::kAttr;
  w.trial_id = trial_id;
  w.key = std::move(key);
  w.json = std::move(json);
  return w;
}

PendingWrites::Write PendingWrites::Write::Param(int64_t trial_id, std::string name,
                                                 model::ParamValue value) {
  Write w;
  w.kind = Kind::kParam;
  w.trial_id = trial_id;
  w.key = std::move(name);
  w.param = std::move(value);
  return w;
}

bool PendingWrites::IsOutage(const common::Status& st) {
  return st.code() == common::Code::kUnavailable || st.code() == common::Code::kIo;
}

void PendingWrites::Keep(Write w, const common::Logger& logger, size_t elsewhere) {
  if (!writes_.empty() && writes_.size() + elsewhere >= max_writes_) {
    Forget(writes_.front().trial_id);
    writes_.pop_front();
    ++dropped_;
    if (!warned_full_) {
      warned_full_ = true;
      logger->error("{} trial writes wait for storage: dropping the oldest from now on",
                    max_writes_);
    }
  }
  ++per_trial_[w.trial_id];
  writes_.push_back(std::move(w));
}

void PendingWrites::Forget(int64_t trial_id) {
  auto it = per_trial_.find(trial_id);
  if (it != per_trial_.end() && --it->second == 0) per_trial_.erase(it);
}

bool PendingWrites::Has(int64_t trial_id) const { return per_trial_.count(trial_id) > 0; }

std::vector<PendingWrites::Write> PendingWrites::Take(size_t n) {
  std::vector<Write> out;
  while (!writes_.empty() && out.size() < n) {
    Forget(writes_.front().trial_id);
    out.push_back(std::move(writes_.front()));
    writes_.pop_front();
  }
  if (writes_.empty()) warned_full_ = false;
  return out;
}

std::vector<PendingWrites::Write> PendingWrites::TakeTrial(int64_t trial_id) {
  std::vector<Write> out;
  if (!Has(trial_id)) return out;
  std::deque<Write> rest;
  for (Write& w : writes_) {
    if (w.trial_id == trial_id) {
      out.push_back(std::move(w));
    } else {
      rest.push_back(std::move(w));
    }
  }
  writes_.swap(rest);
  per_trial_.erase(trial_id);
  return out;
}

void PendingWrites::PutBack(std::vector<Write> writes) {
  for (const Write& w : writes) ++per_trial_[w.trial_id];
  writes_.insert(writes_.begin(), std::make_move_iterator(writes.begin()),
                 std::make_move_iterator(writes.end()));
}

common::Status PendingWrites::Apply(storage::TrialStore& store, const Write& w) {
  switch (w.kind) {
    case Write::Kind::kIntermediate:
      return store.AddIntermediate(w.trial_id, w.step, w.value);
    case Write::Kind::kAttr:
      return store.SetAttr(w.trial_id, w.key, w.json);
    case Write::Kind::kParam:
      return store.AddTrialParam(w.trial_id, w.key, w.param);
  }
  return common::Internal("unknown kept write");
}

common::Status PendingWrites::Flush(storage::TrialStore& store, const common::Logger& logger,
                                    std::optional<int64_t> trial_id) {
  if (trial_id && !Has(*trial_id)) return common::Status::Ok();
  // One pass, in order: the writes flushed leave, the others (and all from the first outage
  // refusal on) stay in their order.
  std::deque<Write> kept;
  common::Status result = common::Status::Ok();
  for (Write& w : writes_) {
    if (!result.ok() || (trial_id && w.trial_id != *trial_id)) {
      kept.push_back(std::move(w));
      continue;
    }
    common::Status st = Apply(store, w);
    if (!st.ok() && IsOutage(st)) {
      result = st;
      kept.push_back(std::move(w));
      continue;
    }
    if (!st.ok()) logger->warn("a kept trial write is dropped: {}", st.message());
    Forget(w.trial_id);
  }
  writes_.swap(kept);
  if (writes_.empty()) warned_full_ = false;
  return result;
}

}  // namespace triald::daemon
