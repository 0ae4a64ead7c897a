#pragma once
// GpuDrains: the GPU slots of ended trials while they drain (devices::GpuPool::StartDraining),
// and what a leak leaves behind. A slot is given out again once the driver shows none of its
// trial's processes holding memory, or after the pool's timeout; the latter is a leak, logged
// and stored as a `gpu_leak` event of the trial (and its study).
//
// Owns: which study each draining trial belonged to. Not owned: the pool, storage and clock.
//
// Thread-safety: not thread-safe; the scheduler's thread only.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "daemon/devices/gpu_pool.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class GpuDrains {
 public:
  struct Options {
    devices::GpuPool* pool = nullptr;  // required
    storage::Storage* storage = nullptr;
    const common::Clock* clock = nullptr;
    common::Logger logger;
  };
  explicit GpuDrains(Options options);

  // Trial `trial_id` of study `study_id` ended holding `slots`; `pids` are its processes seen
  // holding GPU memory. Starts draining them and frees whatever has drained already.
  void Start(int64_t trial_id, int64_t study_id, const std::vector<devices::GpuSlot>& slots,
             std::set<pid_t> pids);
  // Frees the drained slots (recording leaks); true when any came back.
  bool Collect();

 private:
  Options options_;
  std::map<int64_t, int64_t> study_of_;  // trial id -> study id, while its slots drain
};

}  // namespace triald::daemon
