#include "daemon/devices/nvml_probe.h"

#include <dlfcn.h>

#include <vector>

namespace triald::devices {
namespace {

// The few NVML types used, as nvml.h declares them (the header is not needed to build).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;

struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlProcessInfoV1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct NvmlProcessInfoV2 {  // nvmlProcessInfo_v2_t; the _v3 entry point takes the same layout
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using CountFn = nvmlReturn_t (*)(unsigned int*);
using HandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using MemoryFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlMemory*);
using TextFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using ProcsV2Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, NvmlProcessInfoV2*);
using ProcsV1Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, NvmlProcessInfoV1*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);

class NvmlProbe final : public GpuProbe {
 public:
  NvmlProbe(void* handle, std::string library) : handle_(handle), library_(std::move(library)) {}
  ~NvmlProbe() override {
    if (shutdown_ != nullptr && initialised_) shutdown_();
    ::dlclose(handle_);
  }

  common::Status Load() {
    TRIALD_RETURN_IF_ERROR(Sym("nvmlInit_v2", &init_));
    TRIALD_RETURN_IF_ERROR(Sym("nvmlShutdown", &shutdown_));
    TRIALD_RETURN_IF_ERROR(Sym("nvmlDeviceGetCount_v2", &count_));
    TRIALD_RETURN_IF_ERROR(Sym("nvmlDeviceGetHandleByIndex_v2", &handle_by_index_));
    TRIALD_RETURN_IF_ERROR(Sym("nvmlDeviceGetMemoryInfo", &memory_));
    TRIALD_RETURN_IF_ERROR(Sym("nvmlDeviceGetUUID", &uuid_));
    TRIALD_RETURN_IF_ERROR(Sym("nvmlDeviceGetName", &name_));
    error_string_ = reinterpret_cast<ErrorStringFn>(::dlsym(handle_, "nvmlErrorString"));
    procs_v2_ =
        reinterpret_cast<ProcsV2Fn>(::dlsym(handle_, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (procs_v2_ == nullptr) {
      procs_v2_ =
          reinterpret_cast<ProcsV2Fn>(::dlsym(handle_, "nvmlDeviceGetComputeRunningProcesses_v2"));
    }
    if (procs_v2_ == nullptr)
      TRIALD_RETURN_IF_ERROR(Sym("nvmlDeviceGetComputeRunningProcesses", &procs_v1_));
    TRIALD_RETURN_IF_ERROR(Check(init_(), "nvmlInit_v2"));
    initialised_ = true;
    return common::Status::Ok();
  }

  common::Result<std::vector<GpuInfo>> Gpus() override {
    unsigned int n = 0;
    TRIALD_RETURN_IF_ERROR(Check(count_(&n), "nvmlDeviceGetCount_v2"));
    std::vector<GpuInfo> out;
    for (unsigned int i = 0; i < n; ++i) {
      TRIALD_ASSIGN_OR_RETURN(nvmlDevice_t dev, Handle(static_cast<int>(i)));
      GpuInfo g;
      g.index = static_cast<int>(i);
      char text[256] = {};
      if (uuid_(dev, text, sizeof(text)) == kNvmlSuccess) g.uuid = text;
      text[0] = '\0';
      if (name_(dev, text, sizeof(text)) == kNvmlSuccess) g.name = text;
      NvmlMemory mem{};
      const std::string what = "nvmlDeviceGetMemoryInfo(GPU " + std::to_string(i) + ")";
      TRIALD_RETURN_IF_ERROR(Check(memory_(dev, &mem), what));
      g.memory_total = mem.total;
      g.memory_used = mem.used;
      out.push_back(std::move(g));
    }
    return out;
  }

  common::Result<ProcessMemory> Processes(int index) override {
    TRIALD_ASSIGN_OR_RETURN(nvmlDevice_t dev, Handle(index));
    const std::string what =
        "nvmlDeviceGetComputeRunningProcesses(GPU " + std::to_string(index) + ")";
    // The process list can grow between the sizing call and the real one: retry a few times.
    for (unsigned int capacity = 64; capacity <= 65536; capacity *= 4) {
      unsigned int n = capacity;
      ProcessMemory out;
      nvmlReturn_t rc;
      if (procs_v2_ != nullptr) {
        std::vector<NvmlProcessInfoV2> infos(capacity);
        rc = procs_v2_(dev, &n, infos.data());
        if (rc == kNvmlSuccess) {
          for (unsigned int i = 0; i < n && i < capacity; ++i) Add(infos[i], &out);
        }
      } else {
        std::vector<NvmlProcessInfoV1> infos(capacity);
        rc = procs_v1_(dev, &n, infos.data());
        if (rc == kNvmlSuccess) {
          for (unsigned int i = 0; i < n && i < capacity; ++i) Add(infos[i], &out);
        }
      }
      if (rc == kNvmlSuccess) return out;
      if (rc != kNvmlErrorInsufficientSize) {
        TRIALD_RETURN_IF_ERROR(Check(rc, what));
      }
    }
    return common::Unavailable(what + ": more than 65536 processes");
  }

  std::string Describe() const override { return "NVML (" + library_ + ")"; }

 private:
  template <typename Fn>
  common::Status Sym(const char* name, Fn* out) {
    *out = reinterpret_cast<Fn>(::dlsym(handle_, name));
    if (*out == nullptr) {
      return common::FailedPrecondition(library_ + " has no symbol " + name +
                                        "; expected an NVML library (NVIDIA driver >= 450)");
    }
    return common::Status::Ok();
  }

  common::Status Check(nvmlReturn_t rc, const std::string& what) const {
    if (rc == kNvmlSuccess) return common::Status::Ok();
    std::string text = error_string_ != nullptr ? error_string_(rc) : "";
    return common::Unavailable(what + " failed: NVML error " + std::to_string(rc) +
                               (text.empty() ? "" : " (" + text + ")"));
  }

  common::Result<nvmlDevice_t> Handle(int index) {
    nvmlDevice_t dev = nullptr;
    const std::string what = "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(index) + ")";
    TRIALD_RETURN_IF_ERROR(Check(handle_by_index_(static_cast<unsigned int>(index), &dev), what));
    return dev;
  }

  template <typename Info>
  static void Add(const Info& info, ProcessMemory* out) {
    uint64_t bytes =
        info.usedGpuMemory == kNvmlValueNotAvailable ? kUnknownBytes : info.usedGpuMemory;
    uint64_t& slot = (*out)[static_cast<pid_t>(info.pid)];
    slot = (slot == kUnknownBytes || bytes == kUnknownBytes) ? kUnknownBytes : slot + bytes;
  }

  void* handle_;
  std::string library_;
  bool initialised_ = false;
  InitFn init_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  CountFn count_ = nullptr;
  HandleFn handle_by_index_ = nullptr;
  MemoryFn memory_ = nullptr;
  TextFn uuid_ = nullptr;
  TextFn name_ = nullptr;
  ProcsV2Fn procs_v2_ = nullptr;
  ProcsV1Fn procs_v1_ = nullptr;
  ErrorStringFn error_string_ = nullptr;
};

}  // namespace

common::Result<std::unique_ptr<GpuProbe>> OpenNvml(const std::string& library) {
  // RTLD_LOCAL: NVML's symbols stay out of the daemon's global namespace.
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    return common::NotFound("cannot load " + library + ": " + (err ? err : "dlopen failed"));
  }
  auto probe = std::make_unique<NvmlProbe>(handle, library);
  TRIALD_RETURN_IF_ERROR(probe->Load());
  return std::unique_ptr<GpuProbe>(std::move(probe));
}

}  // namespace triald::devices
