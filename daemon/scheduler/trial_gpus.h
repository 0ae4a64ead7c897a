#pragma once
// TrialGpus: the GPU slots one trial holds ([study] gpus_per_trial), from the pool's Acquire to
// their return, and what is measured on them. There are two ways back, and every slot takes
// exactly one:
//   - no process of the trial ever ran (its launch failed, its start was called off, or it
//     could not be recorded RUNNING): destroying the TrialGpus gives the slots straight back
//     (GpuPool::GiveBack);
//   - the trial ran and ended: Drain() hands them to GpuDrains, which frees them once the
//     driver shows none of the trial's processes holding memory (or records a leak).
// Peak GPU memory: Sample() sums the memory the trial's processes hold on its GPUs (matched by
// process group) and keeps the largest sum.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread owns it.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/devices/gpu_pool.h"
#include "daemon/scheduler/gpu_drains.h"

namespace triald::daemon {

class TrialGpus {
 public:
  TrialGpus() = default;  // a CPU trial: no slots
  // `slots` were acquired from `pool` (not owned) for this trial.
  TrialGpus(devices::GpuPool* pool, std::vector<devices::GpuSlot> slots)
      : pool_(pool), slots_(std::move(slots)) {}
  ~TrialGpus();  // gives back the slots still held
  TrialGpus(TrialGpus&& other) noexcept;
  TrialGpus& operator=(TrialGpus&& other) noexcept;
  TrialGpus(const TrialGpus&) = delete;
  TrialGpus& operator=(const TrialGpus&) = delete;

  bool empty() const { return slots_.empty(); }
  const std::vector<devices::GpuSlot>& slots() const { return slots_; }

  // The trial's main process `pid` started: its memory counts from the first sample.
  void AddProcess(pid_t pid) { pids_.insert(pid); }
  // One sample of the memory held on the trial's GPUs by its processes: those of process group
  // `pgid` (0 at exit: only the pids seen so far). Kept as the peak when larger.
  void Sample(pid_t pgid);
  // The largest sum sampled; nullopt until a sample succeeded.
  std::optional<uint64_t> peak() const { return peak_; }

  // The trial ran and ended: its slots drain (`drains` not owned; trial and study ids name the
  // leak event). The TrialGpus holds nothing afterwards.
  void Drain(GpuDrains& drains, int64_t trial_id, int64_t study_id);

 private:
  devices::GpuPool* pool_ = nullptr;
  std::vector<devices::GpuSlot> slots_;
  std::set<pid_t> pids_;  // the trial's processes seen holding GPU memory
  std::optional<uint64_t> peak_;
};

}  // namespace triald::daemon
