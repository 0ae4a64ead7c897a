#include "daemon/devices/gpu_pool.h"

#include <unistd.h>

#include <algorithm>

namespace triald::devices {

GpuPool::GpuPool(GpuPoolOptions options) : options_(std::move(options)) {
  if (options_.slots_per_gpu < 1) options_.slots_per_gpu = 1;
  if (!options_.process_group_of) {
    options_.process_group_of = [](pid_t pid) { return ::getpgid(pid); };
  }
}

int GpuPool::free_slots() const {
  return gpu_count() * options_.slots_per_gpu - static_cast<int>(busy_.size());
}

int GpuPool::gpus_with_free_slot() const {
  int n = 0;
  for (int gpu : options_.gpus) {
    for (int s = 0; s < options_.slots_per_gpu; ++s) {
      if (busy_.count({gpu, s}) == 0) {
        ++n;
        break;
      }
    }
  }
  return n;
}

std::optional<std::vector<GpuSlot>> GpuPool::Acquire(int n) {
  if (n < 1) return std::vector<GpuSlot>{};
  struct Candidate {
    int gpu;
    int free;
    int first_free;
  };
  std::vector<Candidate> candidates;
  for (int gpu : options_.gpus) {
    Candidate c{gpu, 0, -1};
    for (int s = 0; s < options_.slots_per_gpu; ++s) {
      if (busy_.count({gpu, s}) != 0) continue;
      ++c.free;
      if (c.first_free < 0) c.first_free = s;
    }
    if (c.free > 0) candidates.push_back(c);
  }
  if (static_cast<int>(candidates.size()) < n) return std::nullopt;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return a.free != b.free ? a.free > b.free : a.gpu < b.gpu;
                   });
  std::vector<GpuSlot> out;
  for (int i = 0; i < n; ++i) out.push_back({candidates[i].gpu, candidates[i].first_free});
  std::sort(out.begin(), out.end());
  for (const GpuSlot& s : out) busy_.insert(s);
  return out;
}

void GpuPool::GiveBack(const std::vector<GpuSlot>& slots) {
  for (const GpuSlot& s : slots) busy_.erase(s);
}

void GpuPool::CollectPids(const std::vector<GpuSlot>& slots, pid_t pgid, std::set<pid_t>* pids) {
  if (options_.probe == nullptr || pgid <= 1) return;
  std::set<int> gpus;
  for (const GpuSlot& s : slots) gpus.insert(s.gpu);
  for (int gpu : gpus) {
    common::Result<ProcessMemory> procs = options_.probe->Processes(gpu);
    if (!procs.ok()) continue;
    for (const auto& [pid, bytes] : *procs) {
      if (pids->count(pid) == 0 && options_.process_group_of(pid) == pgid) pids->insert(pid);
    }
  }
}

std::optional<uint64_t> GpuPool::SampleMemory(const std::vector<GpuSlot>& slots, pid_t pgid,
                                              std::set<pid_t>* pids) {
  if (options_.probe == nullptr) return std::nullopt;
  std::set<int> gpus;
  for (const GpuSlot& s : slots) gpus.insert(s.gpu);
  std::optional<uint64_t> total;
  for (int gpu : gpus) {
    common::Result<ProcessMemory> procs = options_.probe->Processes(gpu);
    if (!procs.ok()) continue;
    if (!total) total = 0;
    for (const auto& [pid, bytes] : *procs) {
      if (pids->count(pid) == 0) {
        if (pgid <= 1 || options_.process_group_of(pid) != pgid) continue;
        pids->insert(pid);
      }
      if (bytes != kUnknownBytes) *total += bytes;
    }
  }
  return total;
}

void GpuPool::StartDraining(const std::vector<GpuSlot>& slots, std::set<pid_t> pids,
                            std::string owner, double now) {
  if (slots.empty()) return;
  draining_.push_back({slots, std::move(pids), std::move(owner), now + options_.release_timeout_s});
}

std::string GpuPool::StillHeld(const Draining& d) const {
  if (options_.probe == nullptr) return "";
  std::set<int> gpus;
  for (const GpuSlot& s : d.slots) gpus.insert(s.gpu);
  std::string held;
  for (int gpu : gpus) {
    common::Result<ProcessMemory> procs = options_.probe->Processes(gpu);
    if (!procs.ok()) {
      held += (held.empty() ? "" : "; ") + procs.status().message();
      continue;
    }
    for (const auto& [pid, bytes] : *procs) {
      if (d.pids.count(pid) == 0 || bytes == 0) continue;
      held += (held.empty() ? "" : "; ") + std::string("pid ") + std::to_string(pid) + " holds " +
              (bytes == kUnknownBytes ? std::string("memory") : std::to_string(bytes) + " bytes") +
              " on GPU " + std::to_string(gpu);
    }
  }
  return held;
}

std::vector<GpuPool::Released> GpuPool::Poll(double now) {
  std::vector<Released> out;
  for (auto it = draining_.begin(); it != draining_.end();) {
    std::string held = StillHeld(*it);
    if (!held.empty() && now < it->deadline) {
      ++it;
      continue;
    }
    for (const GpuSlot& s : it->slots) busy_.erase(s);
    out.push_back({it->owner, it->slots, !held.empty(), held});
    it = draining_.erase(it);
  }
  return out;
}

std::string GpuPool::CudaVisibleDevices(const std::vector<GpuSlot>& slots) {
  std::string out;
  for (const GpuSlot& s : slots) out += (out.empty() ? "" : ",") + std::to_string(s.gpu);
  return out;
}

std::string GpuPool::SlotList(const std::vector<GpuSlot>& slots) {
  std::string out;
  for (const GpuSlot& s : slots) {
    out += (out.empty() ? "" : ",") + std::to_string(s.gpu) + "." + std::to_string(s.slot);
  }
  return out;
}

}  // namespace triald::devices
