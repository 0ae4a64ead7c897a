// libfake-nvml.so: a stand-in for libnvidia-ml.so.1 on hosts without a GPU, so that triald's
// NVML path (daemon/devices/nvml_probe.cc) and GPU slot draining are tested for real: the daemon
// loads it through --nvml-library or TRIALD_NVML_LIBRARY exactly as it loads NVML.
//
// It exports the NVML entry points triald uses, with NVML's signatures, and answers from a
// state file named by $FAKE_NVML_STATE, re-read on every call so a test can change the "driver"
// while the daemon runs. One directive per line ('#' starts a comment):
//   devices N            N GPUs (default 0), each with 80 GiB; UUIDs GPU-fake-<i>
//   proc GPU PID BYTES   process PID holds BYTES on GPU (BYTES "na": NVML_VALUE_NOT_AVAILABLE)
//   live_only            report a proc line only while its PID exists (as the driver does)
//   fail_init            nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (9)
// A missing state file is a host with no GPU.
#include <signal.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Proc {
  int gpu;
  unsigned int pid;
  unsigned long long bytes;
};

struct State {
  unsigned int devices = 0;
  bool live_only = false;
  bool fail_init = false;
  std::vector<Proc> procs;
};

State Load() {
  State s;
  const char* path = std::getenv("FAKE_NVML_STATE");
  if (path == nullptr) return s;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line.substr(0, line.find('#')));
    std::string word;
    if (!(ls >> word)) continue;
    if (word == "devices") {
      ls >> s.devices;
    } else if (word == "live_only") {
      s.live_only = true;
    } else if (word == "fail_init") {
      s.fail_init = true;
    } else if (word == "proc") {
      Proc p{};
      std::string bytes;
      if (ls >> p.gpu >> p.pid >> bytes) {
        p.bytes = bytes == "na" ? ~0ULL : std::stoull(bytes);
        if (!s.live_only || ::kill(static_cast<pid_t>(p.pid), 0) == 0 || errno == EPERM) {
          s.procs.push_back(p);
        }
      }
    }
  }
  return s;
}

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kInsufficientSize = 7;
constexpr int kDriverNotLoaded = 9;
constexpr unsigned long long kTotal = 80ULL << 30;

// A device handle is its index + 1, so a null handle is never valid.
int Index(void* device) { return static_cast<int>(reinterpret_cast<intptr_t>(device)) - 1; }

}  // namespace

extern "C" {

struct FakeNvmlMemory {
  unsigned long long total, free, used;
};
struct FakeNvmlProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};

__attribute__((visibility("default"))) int nvmlInit_v2() {
  return Load().fail_init ? kDriverNotLoaded : kSuccess;
}
__attribute__((visibility("default"))) int nvmlShutdown() { return kSuccess; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int rc) {
  return rc == kDriverNotLoaded ? "Driver Not Loaded" : "fake NVML error";
}
__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count == nullptr) return kInvalidArgument;
  *count = Load().devices;
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                         void** device) {
  if (device == nullptr || index >= Load().devices) return kInvalidArgument;
  *device = reinterpret_cast<void*>(static_cast<intptr_t>(index) + 1);
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* device, char* out,
                                                             unsigned int length) {
  if (out == nullptr || Index(device) < 0) return kInvalidArgument;
  std::snprintf(out, length, "GPU-fake-%d", Index(device));
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void* device, char* out,
                                                             unsigned int length) {
  if (out == nullptr || Index(device) < 0) return kInvalidArgument;
  std::snprintf(out, length, "Fake NVML GPU");
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* device,
                                                                   FakeNvmlMemory* memory) {
  if (memory == nullptr || Index(device) < 0) return kInvalidArgument;
  unsigned long long used = 0;
  for (const Proc& p : Load().procs) {
    if (p.gpu == Index(device) && p.bytes != ~0ULL) used += p.bytes;
  }
  *memory = {kTotal, kTotal - used, used};
  return kSuccess;
}
__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses_v3(
    void* device, unsigned int* count, FakeNvmlProcessInfo* infos) {
  if (count == nullptr || Index(device) < 0) return kInvalidArgument;
  std::vector<Proc> mine;
  for (const Proc& p : Load().procs) {
    if (p.gpu == Index(device)) mine.push_back(p);
  }
  const unsigned int capacity = *count;
  *count = static_cast<unsigned int>(mine.size());
  if (mine.size() > capacity) return kInsufficientSize;
  for (size_t i = 0; i < mine.size(); ++i) infos[i] = {mine[i].pid, mine[i].bytes, 0, 0};
  return kSuccess;
}

}  // extern "C"
