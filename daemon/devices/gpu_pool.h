#pragma once
// GpuPool: the daemon's GPU slots and who holds them.
//
// Each configured GPU has slots_per_gpu slots; a trial that needs k GPUs holds one slot on each
// of k different GPUs, so no two trials ever share a slot (with slots_per_gpu > 1 several trials
// share a GPU, each in its own slot). Acquire picks the GPUs with the most free slots (ties: the
// lowest index), so load spreads over the GPUs.
//
// A slot is not free again the moment its trial ends: a process can outlive its trial's record
// on the GPU (the driver frees memory late, or a stray kept it). StartDraining puts the slots in a
// draining state; Poll frees them once the probe shows no memory held on their GPUs by any of
// the trial's pids, or, after release_timeout_s, frees them anyway and reports a leak. Without a
// probe (no NVML on the host) slots are free at once: the trial's processes are known to be
// gone when it ends, and nothing can tell more.
//
// Time is passed in (monotonic seconds), so tests drive it without sleeping.
//
// Thread-safety: not thread-safe; the daemon uses it from its event-loop thread only.

#include <sys/types.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/devices/gpu_probe.h"

namespace triald::devices {

struct GpuSlot {
  int gpu = 0;   // the GPU's index
  int slot = 0;  // 0 .. slots_per_gpu-1
  bool operator==(const GpuSlot& o) const { return gpu == o.gpu && slot == o.slot; }
  bool operator<(const GpuSlot& o) const { return gpu != o.gpu ? gpu < o.gpu : slot < o.slot; }
};

struct GpuPoolOptions {
  std::vector<int> gpus;          // GPU indices, as CUDA_VISIBLE_DEVICES names them
  int slots_per_gpu = 1;          // >= 1
  GpuProbe* probe = nullptr;      // not owned; nullptr: no driver to ask
  double release_timeout_s = 60;  // longest wait for an ended trial's memory to be freed
  // The process group of a live process (-1 when it is gone); tests replace it.
  std::function<pid_t(pid_t)> process_group_of;
};

class GpuPool {
 public:
  explicit GpuPool(GpuPoolOptions options);

  int gpu_count() const { return static_cast<int>(options_.gpus.size()); }
  int slots_per_gpu() const { return options_.slots_per_gpu; }
  // Slots neither held nor draining.
  int free_slots() const;
  // GPUs with at least one free slot: the most gpus_per_trial that could start now.
  int gpus_with_free_slot() const;

  // One free slot on each of `n` different GPUs (n >= 1), or nullopt when fewer than n GPUs
  // have a free slot. The slots are held until StartDraining.
  std::optional<std::vector<GpuSlot>> Acquire(int n);

  // Frees slots that no process used (the trial never started), at once.
  void GiveBack(const std::vector<GpuSlot>& slots);

  // Adds to `pids` every process the probe shows on `slots`' GPUs whose process group is
  // `pgid`: the running trial's processes that hold GPU memory, children included. Probe errors
  // are ignored (the main pid is recorded anyway).
  void CollectPids(const std::vector<GpuSlot>& slots, pid_t pgid, std::set<pid_t>* pids);

  // One sample of the GPU memory a trial holds: CollectPids (none added when pgid <= 1, as for
  // a trial whose processes are gone), then the sum of the bytes the probe shows for every pid
  // in `pids` on `slots`' GPUs (kUnknownBytes counts as 0; a GPU shared by several slots is
  // counted once). One probe question per GPU. nullopt without a probe, or when it failed for
  // every GPU (a GPU that failed adds nothing to the sum).
  std::optional<uint64_t> SampleMemory(const std::vector<GpuSlot>& slots, pid_t pgid,
                                       std::set<pid_t>* pids);
  // Whether SampleMemory can measure anything: a probe that reports per-process memory.
  bool measures_memory() const { return options_.probe != nullptr; }

  // Starts draining the slots of a trial that ended: Poll() frees them once none of its
  // processes holds memory on them, or after the timeout. `pids` are its processes (main pid,
  // and those CollectPids found), `owner` names it in reports. `now` is monotonic seconds.
  void StartDraining(const std::vector<GpuSlot>& slots, std::set<pid_t> pids, std::string owner,
                     double now);

  struct Released {
    std::string owner;
    std::vector<GpuSlot> slots;
    bool leaked = false;  // the timeout passed with memory still held (or the probe failing)
    std::string detail;   // for a leak: which pid held how much on which GPU, or the error
  };
  // Frees the draining slots whose memory is gone or whose timeout passed.
  std::vector<Released> Poll(double now);
  bool draining() const { return !draining_.empty(); }

  // "0,1": the GPUs of `slots` in the form CUDA_VISIBLE_DEVICES takes; "" for none.
  static std::string CudaVisibleDevices(const std::vector<GpuSlot>& slots);
  // "0.1,1.0": GPU.slot pairs (TRIALD_GPU_SLOTS).
  static std::string SlotList(const std::vector<GpuSlot>& slots);

 private:
  struct Draining {
    std::vector<GpuSlot> slots;
    std::set<pid_t> pids;
    std::string owner;
    double deadline = 0;
  };
  // Empty when nothing of `d` is left on its GPUs; else what is still held.
  std::string StillHeld(const Draining& d) const;

  GpuPoolOptions options_;
  std::set<GpuSlot> busy_;  // held or draining
  std::vector<Draining> draining_;
};

}  // namespace triald::devices
