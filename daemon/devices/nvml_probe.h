#pragma once
// NvmlProbe: GpuProbe over NVML, loaded with dlopen at run time so that triald has no build or
// package dependency on the NVIDIA driver. Symbols used: nvmlInit_v2, nvmlShutdown,
// nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMemoryInfo,
// nvmlDeviceGetUUID, nvmlDeviceGetName and nvmlDeviceGetComputeRunningProcesses_v3 (falling back
// to _v2, then to the unversioned v1 entry point with its smaller process struct).
//
// Thread-safety: not thread-safe (see gpu_probe.h).

#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/devices/gpu_probe.h"

namespace triald::devices {

// The library loaded when no override is given.
inline constexpr const char* kDefaultNvmlLibrary = "libnvidia-ml.so.1";

// Loads `library` (a file name searched the dlopen way, or a path) and initialises NVML.
// kNotFound: the library is not there (a host without the NVIDIA driver; the caller falls back
// to the configured GPUs). Other errors (a missing symbol, nvmlInit failing) name the library
// and the call.
common::Result<std::unique_ptr<GpuProbe>> OpenNvml(const std::string& library);

}  // namespace triald::devices
