#include "daemon/scheduler/lazy_writer.h"

#include <algorithm>
#include <utility>

namespace triald::daemon {

using common::Status;
using TrialWrite = PendingWrites::Write;

LazyWriter::LazyWriter(Options options)
    : options_(std::move(options)), queue_(options_.max_writes) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
  if (options_.batch == 0) options_.batch = 1;
  thread_ = std::thread([this] { Run(); });
}

LazyWriter::~LazyWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // The thread is gone: what is left is written from here, once.
  size_t lost = 0;
  Status why = Status::Ok();
  for (std::vector<TrialWrite> batch = queue_.Take(options_.batch); !batch.empty();
       batch = queue_.Take(options_.batch)) {
    std::vector<TrialWrite> left;
    std::vector<std::pair<int64_t, Status>> refused;
    Status st = WriteBatch(batch, &left, &refused);
    if (!st.ok()) {
      lost += left.size();
      why = st;
    }
  }
  if (lost > 0) {
    options_.logger->error(
        "{} trial writes (intermediate values, attributes, parameters) not "
        "stored at shutdown: {}",
        lost, why.message());
  }
}

void LazyWriter::Write(TrialWrite w) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.Keep(std::move(w), options_.logger, in_flight_);
  }
  wake_.notify_one();
}

void LazyWriter::WriteFirst(std::vector<TrialWrite> writes) {
  if (writes.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.PutBack(std::move(writes));
  }
  wake_.notify_one();
}

std::vector<TrialWrite> LazyWriter::TakeTrial(int64_t trial_id) {
  std::unique_lock<std::mutex> lock(mu_);
  batch_done_.wait(lock, [&] { return in_flight_trials_.count(trial_id) == 0; });
  return queue_.TakeTrial(trial_id);
}

void LazyWriter::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    retry_at_ = Clock::now();
  }
  wake_.notify_one();
}

size_t LazyWriter::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + in_flight_;
}

uint64_t LazyWriter::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.dropped();
}

Status LazyWriter::WriteBatch(std::vector<TrialWrite>& batch, std::vector<TrialWrite>* left,
                              std::vector<std::pair<int64_t, Status>>* refused) {
  storage::Storage& store = *options_.storage;
  auto keep_all = [&](const Status& st) {
    refused->clear();
    *left = std::move(batch);
    return st;
  };
  // The intermediate values and attributes in one call (one statement per kind on PostgreSQL:
  // a round trip, however many), then the parameters one by one (a few per trial); all in one
  // transaction.
  std::vector<storage::TrialStore::LazyWrite> lazy;
  std::vector<size_t> lazy_at;  // their places in `batch`
  for (size_t i = 0; i < batch.size(); ++i) {
    const TrialWrite& w = batch[i];
    if (w.kind == TrialWrite::Kind::kParam) continue;
    storage::TrialStore::LazyWrite l;
    l.trial_id = w.trial_id;
    l.attr = w.kind == TrialWrite::Kind::kAttr;
    l.step = w.step;
    l.value = w.value;
    l.key = w.key;
    l.json = w.json;
    lazy.push_back(std::move(l));
    lazy_at.push_back(i);
  }
  Status st = store.BeginBatch();
  if (!st.ok()) return keep_all(st);
  if (!lazy.empty()) {
    std::vector<size_t> not_open;
    st = store.AddLazyWrites(lazy, &not_open);
    if (!st.ok()) {
      (void)store.CommitBatch();  // ends the transaction; nothing of it counts
      return keep_all(st);
    }
    for (size_t j : not_open) {
      refused->emplace_back(
          batch[lazy_at[j]].trial_id,
          common::FailedPrecondition("trial id " + std::to_string(batch[lazy_at[j]].trial_id) +
                                     " is not open: its write is not stored"));
    }
  }
  Status outage = Status::Ok();
  std::vector<TrialWrite> params_left;
  for (TrialWrite& w : batch) {
    if (w.kind != TrialWrite::Kind::kParam) continue;
    if (!outage.ok()) {
      params_left.push_back(std::move(w));
      continue;
    }
    Status p = PendingWrites::Apply(store, w);
    if (p.ok()) continue;
    if (PendingWrites::IsOutage(p)) {
      outage = p;
      params_left.push_back(std::move(w));
    } else if (p.code() != common::Code::kAlreadyExists) {
      refused->emplace_back(w.trial_id, p);
    }
  }
  Status commit = store.CommitBatch();
  // A commit that failed, or whose outcome is unknown, keeps the whole batch: every write is
  // one a second time changes nothing (the last value of a step, of a key; a parameter stored
  // already is refused for itself, and that refusal is not reported).
  if (!commit.ok()) return keep_all(commit);
  if (!outage.ok()) {
    *left = std::move(params_left);
    return outage;
  }
  return Status::Ok();
}

void LazyWriter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    while (!stop_ && (queue_.size() == 0 || Clock::now() < retry_at_)) {
      if (queue_.size() == 0) {
        wake_.wait(lock);
      } else {
        wake_.wait_until(lock, retry_at_);
      }
    }
    if (stop_) return;  // the destructor writes the rest
    std::vector<TrialWrite> batch = queue_.Take(options_.batch);
    for (const TrialWrite& w : batch) in_flight_trials_.insert(w.trial_id);
    in_flight_ = batch.size();
    lock.unlock();

    std::vector<TrialWrite> left;
    std::vector<std::pair<int64_t, Status>> refused;
    const size_t n = batch.size();
    Status st = WriteBatch(batch, &left, &refused);
    if (!refused.empty()) {
      // Once per batch (a trial ended elsewhere may have many writes waiting).
      options_.logger->warn("{} trial writes refused (not stored), the first: {}", refused.size(),
                            refused.front().second.message());
    }

    lock.lock();
    // The kept ones go back to the front, in their order, ahead of the writes that came
    // meanwhile.
    const size_t kept = left.size();
    queue_.PutBack(std::move(left));
    in_flight_trials_.clear();
    in_flight_ = 0;
    bool report_outage = false;
    bool resumed = false;
    if (st.ok()) {
      resumed = retry_s_ > 0;
      retry_s_ = 0;
      outage_reported_ = false;
    } else {
      retry_s_ = retry_s_ == 0 ? kFirstRetry : std::min(2 * retry_s_, kMaxRetry);
      retry_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(retry_s_));
      report_outage = !outage_reported_;
      outage_reported_ = true;
    }
    const double retry_s = retry_s_;
    const size_t waiting = queue_.size();
    lock.unlock();
    batch_done_.notify_all();

    if (resumed) options_.logger->warn("storage takes the trials' writes again");
    if (!st.ok()) {
      options_.logger->warn(
          "{} of {} trial writes kept ({} waiting in all): {}; next try in "
          "{:.1f} s",
          kept, n, waiting, st.message(), retry_s);
    }
    if (options_.post) {
      std::unordered_set<int64_t> told;  // one call per trial
      for (auto& [trial_id, why] : refused) {
        if (options_.on_refused && told.insert(trial_id).second) {
          options_.post(
              [cb = options_.on_refused, trial_id = trial_id, why = why] { cb(trial_id, why); });
        }
      }
      if (report_outage && options_.on_outage) {
        options_.post([cb = options_.on_outage, st] { cb(st); });
      }
    }
    lock.lock();
  }
}

}  // namespace triald::daemon
