#pragma once
// Choosing the device a trial trains on, explicitly and once.
//
// The daemon gives every trial its GPU through CUDA_VISIBLE_DEVICES (empty on a CPU slot), so
// inside the worker the trial's GPU is always cuda:0. "auto" takes it when LibTorch can use
// CUDA and otherwise runs on the CPU; "cuda" insists on it and fails with a clear error when
// CUDA is unusable; "cpu" never touches CUDA at all. Nothing here or before it initialises
// CUDA: the first CUDA call of the process is the availability check of SelectDevice, so a CPU
// trial never creates a CUDA context and a GPU trial creates exactly one, on its own device.
//
// Thread-safety: SelectDevice configures process-wide state (the CUDA caching allocator); call
// it once, from the thread that then trains.

#include <c10/core/Device.h>

#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace triald::worker {

struct DeviceOptions {
  std::string name = "auto";       // "auto" | "cpu" | "cuda"
  double gpu_memory_fraction = 0;  // (0, 1]: cap this process's CUDA allocations; 0 = no cap
  // CUDA_VISIBLE_DEVICES as the process sees it (nullopt = unset). Empty means the daemon gave
  // the trial no GPU, which makes "auto" the CPU without asking CUDA.
  std::optional<std::string> cuda_visible_devices;
};

// CUDA_VISIBLE_DEVICES from the environment.
std::optional<std::string> CudaVisibleDevicesFromEnv();

struct DeviceChoice {
  c10::Device device = c10::Device(c10::kCPU);
  // What to report as attributes: "device", and how gpu_memory_fraction was applied.
  std::vector<std::pair<std::string, boost::json::value>> attrs;
};

// Decides the device and applies gpu_memory_fraction to it. Fails (InvalidArgument) for an
// unknown name or a fraction outside [0, 1], and (FailedPrecondition) for "cuda" when this
// LibTorch has no CUDA or no GPU is visible. A fraction on the CPU, or with a LibTorch built
// without CUDA, has no effect; that is reported as the attribute gpu_memory_fraction_ignored
// rather than failing, so one sweep runs on GPU and CPU hosts alike.
common::Result<DeviceChoice> SelectDevice(const DeviceOptions& options);

}  // namespace triald::worker
