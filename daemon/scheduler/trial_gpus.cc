#include "daemon/scheduler/trial_gpus.h"

#include <utility>

namespace triald::daemon {

TrialGpus::~TrialGpus() {
  if (pool_ != nullptr && !slots_.empty()) pool_->GiveBack(slots_);
}

TrialGpus::TrialGpus(TrialGpus&& other) noexcept
    : pool_(other.pool_),
      slots_(std::move(other.slots_)),
      pids_(std::move(other.pids_)),
      peak_(other.peak_) {
  other.slots_.clear();
}

TrialGpus& TrialGpus::operator=(TrialGpus&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr && !slots_.empty()) pool_->GiveBack(slots_);
    pool_ = other.pool_;
    slots_ = std::move(other.slots_);
    other.slots_.clear();
    pids_ = std::move(other.pids_);
    peak_ = other.peak_;
  }
  return *this;
}

void TrialGpus::Sample(pid_t pgid) {
  if (pool_ == nullptr || slots_.empty()) return;
  std::optional<uint64_t> bytes = pool_->SampleMemory(slots_, pgid, &pids_);
  if (bytes && (!peak_ || *bytes > *peak_)) peak_ = bytes;
}

void TrialGpus::Drain(GpuDrains& drains, int64_t trial_id, int64_t study_id) {
  if (slots_.empty()) return;
  drains.Start(trial_id, study_id, slots_, pids_);
  slots_.clear();
}

}  // namespace triald::daemon
