#include "daemon/scheduler/storage_outage.h"

#include <algorithm>

namespace triald::daemon {

bool StorageOutage::IsOutage(const common::Status& st) {
  return st.code() == common::Code::kIo || st.code() == common::Code::kUnavailable;
}

bool StorageOutage::OnFailure(const common::Status& st, double now) {
  if (!IsOutage(st)) return false;
  if (!held_) {
    held_ = true;
    reason_ = st.message();
    failures_ = 0;
    delay_ = kInitialDelay;
    retry_at_ = now + delay_;
  }
  ++failures_;
  return true;
}

void StorageOutage::OnProbeFailure(double now) {
  delay_ = std::min(kMaxDelay, delay_ * 2);
  retry_at_ = now + delay_;
}

bool StorageOutage::OnSuccess() {
  const bool was = held_;
  held_ = false;
  reason_.clear();
  failures_ = 0;
  delay_ = 0;
  retry_at_ = 0;
  return was;
}

}  // namespace triald::daemon
