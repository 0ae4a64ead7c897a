// triald-bench-gpu-sample: what sampling running trials' GPU memory costs the daemon.
//
//   triald-bench-gpu-sample [--nvml LIB] [--trials 1,4,16] [--procs 2] [--samples 2000]
//     {"trials":n,"procs_per_trial":k,"us_per_trial_sample":x,"cpu_us_per_trial_sample":y,
//      "core_share_at_0_5s":z}
//
// For each trial count n it starts n process groups of k sleeping processes each (real pids, so
// the process-group lookups are the daemon's), writes a fake NVML state file that shows every
// one of them holding memory on GPU 0, opens NVML through LIB (default: libfake-nvml.so beside
// this binary) exactly as triald does, and times GpuPool::SampleMemory for every trial, as one
// tick of the daemon's GPU poll does, `--samples` times. core_share_at_0_5s is the share of one
// core that sampling n trials every 0.5 s (the default --gpu-sample-interval) takes. With the
// fake library the probe's own cost is reading its state file; a real driver's query costs
// what NVML costs on that host. Figures only: nothing here asserts.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/devices/gpu_pool.h"
#include "daemon/devices/nvml_probe.h"

namespace {

using triald::devices::GpuPool;
using triald::devices::GpuPoolOptions;
using triald::devices::GpuSlot;

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A process group of `procs` processes that sleep until killed; returns their pids, leader
// first.
std::vector<pid_t> StartGroup(int procs) {
  std::vector<pid_t> pids;
  pid_t leader = ::fork();
  if (leader == 0) {
    ::setpgid(0, 0);
    for (;;) ::pause();
  }
  ::setpgid(leader, leader);
  pids.push_back(leader);
  for (int i = 1; i < procs; ++i) {
    pid_t p = ::fork();
    if (p == 0) {
      ::setpgid(0, leader);
      for (;;) ::pause();
    }
    ::setpgid(p, leader);
    pids.push_back(p);
  }
  return pids;
}

}  // namespace

int main(int argc, char** argv) {
  std::string self = argv[0];
  std::string nvml = self.substr(0, self.rfind('/') + 1) + "libfake-nvml.so";
  std::vector<int> trial_counts = {1, 4, 16};
  int procs = 2;
  int samples = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--nvml") {
      nvml = value;
    } else if (flag == "--trials") {
      trial_counts = ParseList(value);
    } else if (flag == "--procs") {
      procs = std::atoi(value.c_str());
    } else if (flag == "--samples") {
      samples = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr, "triald-bench-gpu-sample: unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  char state_template[] = "/tmp/triald-bench-nvml-XXXXXX";
  int fd = ::mkstemp(state_template);
  if (fd < 0) return 1;
  ::close(fd);
  const std::string state = state_template;
  ::setenv("FAKE_NVML_STATE", state.c_str(), 1);
  for (int n : trial_counts) {
    std::vector<std::vector<pid_t>> groups;
    std::ofstream file(state);
    file << "devices 1\n";
    for (int t = 0; t < n; ++t) {
      groups.push_back(StartGroup(procs));
      for (pid_t p : groups.back()) file << "proc 0 " << p << " " << (64 << 20) << "\n";
    }
    file.close();
    auto probe = triald::devices::OpenNvml(nvml);
    if (!probe.ok()) {
      std::fprintf(stderr, "triald-bench-gpu-sample: %s\n", probe.status().message().c_str());
      return 1;
    }
    GpuPoolOptions options;
    options.gpus = {0};
    options.slots_per_gpu = n;
    options.probe = probe->get();
    GpuPool pool(options);
    std::vector<std::vector<GpuSlot>> slots;
    std::vector<std::set<pid_t>> seen(n);
    for (int t = 0; t < n; ++t) slots.push_back(*pool.Acquire(1));
    uint64_t checksum = 0;
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    for (int s = 0; s < samples; ++s) {
      for (int t = 0; t < n; ++t) {
        checksum += pool.SampleMemory(slots[t], groups[t][0], &seen[t]).value_or(0);
      }
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = CpuSeconds() - cpu_start;
    const double per = wall / (static_cast<double>(samples) * n) * 1e6;
    const double cpu_per = cpu / (static_cast<double>(samples) * n) * 1e6;
    const bool right = checksum == static_cast<uint64_t>(samples) * n * procs * (64ull << 20);
    std::printf(
        "{\"trials\":%d,\"procs_per_trial\":%d,\"us_per_trial_sample\":%.1f,"
        "\"cpu_us_per_trial_sample\":%.1f,\"core_share_at_0_5s\":%.6f,\"sums_right\":%s}\n",
        n, procs, per, cpu_per, per * n / 0.5e6, right ? "true" : "false");
    for (const auto& g : groups) ::kill(-g[0], SIGKILL);
    while (::waitpid(-1, nullptr, 0) > 0) {
    }
  }
  ::unlink(state.c_str());
  return 0;
}
