#include "worker/device.h"

#include <torch/cuda.h>
#include <torch/types.h>

#include <cstdlib>
#include <sstream>

// Defined by worker/CMakeLists.txt when LibTorch was built with CUDA: the caching allocator's
// header ships with CPU builds too, but its library does not.
#ifdef TRIALD_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

std::string FormatDouble(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

std::optional<std::string> CudaVisibleDevicesFromEnv() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

Result<DeviceChoice> SelectDevice(const DeviceOptions& options) {
  const std::string& name = options.name;
  if (name != "auto" && name != "cpu" && name != "cuda") {
    return Status(
        InvalidArgument("device \"" + name + "\" is not one of \"auto\", \"cpu\", \"cuda\""));
  }
  const double fraction = options.gpu_memory_fraction;
  if (!(fraction >= 0 && fraction <= 1)) {
    return Status(InvalidArgument("gpu_memory_fraction " + FormatDouble(fraction) +
                                  " is outside [0, 1] (0 = no cap)"));
  }

  DeviceChoice choice;
  // An empty CUDA_VISIBLE_DEVICES is the daemon's word that this is a CPU slot.
  const bool no_gpu_given =
      options.cuda_visible_devices.has_value() && options.cuda_visible_devices->empty();
  bool use_cuda = false;
  if (name == "cuda") {
    if (no_gpu_given) {
      return Status(common::FailedPrecondition(
          "device \"cuda\" was requested, but CUDA_VISIBLE_DEVICES is empty: this trial was "
          "given no GPU (use device \"auto\" to fall back to the CPU)"));
    }
    if (!torch::cuda::is_available()) {
      return Status(common::FailedPrecondition(
          "device \"cuda\" was requested, but CUDA is not available to this trial-worker (a "
          "LibTorch built without CUDA, no driver, or no visible GPU); use device \"auto\" to "
          "fall back to the CPU"));
    }
    use_cuda = true;
  } else if (name == "auto") {
    use_cuda = !no_gpu_given && torch::cuda::is_available();
  }

  if (!use_cuda) {
    choice.device = c10::Device(c10::kCPU);
    choice.attrs.emplace_back("device", "cpu");
    if (fraction > 0) {
      choice.attrs.emplace_back("gpu_memory_fraction_ignored",
                                "the trial runs on the CPU, so gpu_memory_fraction " +
                                    FormatDouble(fraction) + " had no effect");
    }
    return choice;
  }

  // Index 0 of the GPUs CUDA_VISIBLE_DEVICES leaves visible: the one the scheduler assigned.
  choice.device = c10::Device(c10::kCUDA, 0);
  choice.attrs.emplace_back("device", "cuda:0");
  if (options.cuda_visible_devices) {
    choice.attrs.emplace_back("cuda_visible_devices", *options.cuda_visible_devices);
  }
  if (fraction > 0) {
#ifdef TRIALD_TORCH_CUDA
    // The allocator exists only once CUDA is initialised for the device; a one-element
    // allocation does that in every LibTorch version (the init entry point was renamed).
    (void)torch::empty({1}, torch::TensorOptions().device(choice.device));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, 0);
    choice.attrs.emplace_back("gpu_memory_fraction", fraction);
#else
    choice.attrs.emplace_back("gpu_memory_fraction_ignored",
                              "this trial-worker was built against a LibTorch without the CUDA "
                              "caching allocator, so gpu_memory_fraction " +
                                  FormatDouble(fraction) + " had no effect");
#endif
  }
  return choice;
}

}  // namespace triald::worker
