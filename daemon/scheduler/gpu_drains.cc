#include "daemon/scheduler/gpu_drains.h"

#include <optional>
#include <string>

namespace triald::daemon {

GpuDrains::GpuDrains(Options options) : options_(std::move(options)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
}

void GpuDrains::Start(int64_t trial_id, int64_t study_id,
                      const std::vector<devices::GpuSlot>& slots, std::set<pid_t> pids) {
  study_of_[trial_id] = study_id;
  options_.pool->StartDraining(slots, std::move(pids), std::to_string(trial_id),
                               options_.clock->MonotonicSeconds());
  Collect();
}

bool GpuDrains::Collect() {
  std::vector<devices::GpuPool::Released> released =
      options_.pool->Poll(options_.clock->MonotonicSeconds());
  for (const devices::GpuPool::Released& r : released) {
    const int64_t trial_id = std::stoll(r.owner);
    auto sid = study_of_.find(trial_id);
    std::optional<int64_t> study_id;
    if (sid != study_of_.end()) {
      study_id = sid->second;
      study_of_.erase(sid);
    }
    if (!r.leaked) continue;
    const std::string detail = "GPU slot(s) " + devices::GpuPool::SlotList(r.slots) +
                               " given out again with memory still held: " + r.detail;
    options_.logger->warn("trial id {}: GPU memory leak: {}", trial_id, detail);
    common::Status st = options_.storage->AppendEvent(study_id, trial_id, "gpu_leak", detail,
                                                      options_.clock->WallSeconds());
    if (!st.ok()) options_.logger->error("storing event gpu_leak: {}", st.message());
  }
  return !released.empty();
}

}  // namespace triald::daemon
