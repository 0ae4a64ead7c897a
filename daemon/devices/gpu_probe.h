#pragma once
// GpuProbe: what the daemon asks the GPU driver. Two questions only: which GPUs exist, and how
// much memory each process holds on a GPU. NvmlProbe (nvml_probe.h) answers them through NVML;
// tests answer them with a fake (tests/daemon/fakes.h) or with NvmlProbe over the fake NVML
// library (tests/tools/fake_nvml.cc).
//
// Thread-safety: implementations are not thread-safe; the daemon uses them from its event-loop
// thread only.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace triald::devices {

struct GpuInfo {
  int index = 0;  // NVML's index (PCI bus order; CUDA_DEVICE_ORDER=PCI_BUS_ID matches it)
  std::string uuid;
  std::string name;
  uint64_t memory_total = 0;  // bytes
  uint64_t memory_used = 0;   // bytes
};

// Memory a process holds on a GPU, in bytes. The driver may not say how much (NVML's
// NVML_VALUE_NOT_AVAILABLE, e.g. without the right privileges): kUnknownBytes; such a process
// still counts as holding memory.
inline constexpr uint64_t kUnknownBytes = ~uint64_t{0};
using ProcessMemory = std::map<pid_t, uint64_t>;

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // Every GPU the driver knows, by index.
  virtual common::Result<std::vector<GpuInfo>> Gpus() = 0;
  // The compute processes holding memory on GPU `index` and how much each holds.
  virtual common::Result<ProcessMemory> Processes(int index) = 0;
  // Where the answers come from, for logs ("NVML /usr/lib/.../libnvidia-ml.so.1").
  virtual std::string Describe() const = 0;
};

}  // namespace triald::devices
