// GPU slot accounting (GpuPool) and the NVML probe. The pool is driven with FakeGpuProbe and
// explicit times; NvmlProbe is tested for real by loading the fake NVML library
// (tests/tools/fake_nvml.cc) the way the daemon loads libnvidia-ml.so.1.

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/devices/gpu_pool.h"
#include "daemon/devices/nvml_probe.h"
#include "tests/daemon/fakes.h"
#include "tests/support/temp_dir.h"

namespace triald::devices {
namespace {

using testing::FakeGpuProbe;

GpuPool MakePool(std::vector<int> gpus, int slots, GpuProbe* probe = nullptr, double timeout = 10,
                 std::map<pid_t, pid_t> groups = {}) {
  GpuPoolOptions o;
  o.gpus = std::move(gpus);
  o.slots_per_gpu = slots;
  o.probe = probe;
  o.release_timeout_s = timeout;
  o.process_group_of = [groups](pid_t pid) {
    auto it = groups.find(pid);
    return it == groups.end() ? pid_t{-1} : it->second;
  };
  return GpuPool(o);
}

TEST_CASE("GPU slots are never handed out twice, and a trial's slots are on different GPUs",
          "[devices]") {
  GpuPool pool = MakePool({0, 1, 2}, 2);
  REQUIRE(pool.free_slots() == 6);
  std::set<GpuSlot> held;
  std::vector<std::vector<GpuSlot>> trials;
  for (int i = 0; i < 3; ++i) {
    auto got = pool.Acquire(2);
    REQUIRE(got.has_value());
    REQUIRE(got->size() == 2);
    CHECK((*got)[0].gpu != (*got)[1].gpu);
    for (const GpuSlot& s : *got) CHECK(held.insert(s).second);  // never shared
    trials.push_back(*got);
  }
  CHECK(pool.free_slots() == 0);
  CHECK_FALSE(pool.Acquire(1).has_value());
  // Load spreads: every GPU carries two trials.
  std::map<int, int> per_gpu;
  for (const GpuSlot& s : held) ++per_gpu[s.gpu];
  CHECK(per_gpu == std::map<int, int>{{0, 2}, {1, 2}, {2, 2}});

  // Without a probe, a released slot is free at the next poll.
  pool.StartDraining(trials[0], {100}, "t0", 0.0);
  CHECK(pool.draining());
  CHECK(pool.free_slots() == 0);
  auto released = pool.Poll(0.0);
  REQUIRE(released.size() == 1);
  CHECK_FALSE(released[0].leaked);
  CHECK(pool.free_slots() == 2);
  auto again = pool.Acquire(2);
  REQUIRE(again.has_value());
  CHECK(*again == trials[0]);
  CHECK(GpuPool::CudaVisibleDevices(*again) ==
        std::to_string((*again)[0].gpu) + "," + std::to_string((*again)[1].gpu));
}

TEST_CASE("a request for more GPUs than have a free slot gets nothing and holds nothing",
          "[devices]") {
  GpuPool pool = MakePool({0, 1}, 2);
  auto one = pool.Acquire(1);  // GPU 0, slot 0
  REQUIRE(one.has_value());
  auto two = pool.Acquire(2);  // one slot on each GPU
  REQUIRE(two.has_value());
  CHECK(pool.gpus_with_free_slot() == 1);
  CHECK_FALSE(pool.Acquire(2).has_value());
  CHECK(pool.free_slots() == 1);
  pool.GiveBack(*two);
  CHECK(pool.free_slots() == 3);
  CHECK(pool.Acquire(2).has_value());
}

TEST_CASE("an ended trial's slot drains until the probe shows its processes' memory gone",
          "[devices]") {
  FakeGpuProbe probe(1);
  // Trial process group 500: leader 500 and a child 501; 900 is someone else's process.
  GpuPool pool = MakePool({0}, 1, &probe, 30, {{500, 500}, {501, 500}, {900, 900}});
  auto slots = pool.Acquire(1);
  REQUIRE(slots.has_value());
  probe.Hold(0, 501, 1 << 20);
  probe.Hold(0, 900, 1 << 20);
  std::set<pid_t> pids = {500};
  pool.CollectPids(*slots, 500, &pids);
  CHECK(pids == std::set<pid_t>{500, 501});  // the child, not the stranger

  probe.Hold(0, 500, 4096);
  pool.StartDraining(*slots, pids, "trial", 100.0);
  CHECK(pool.Poll(101.0).empty());
  CHECK_FALSE(pool.Acquire(1).has_value());
  probe.Hold(0, 500, 0);
  CHECK(pool.Poll(102.0).empty());  // the child still holds memory
  probe.Hold(0, 501, 0);            // the stranger's memory does not matter
  auto released = pool.Poll(103.0);
  REQUIRE(released.size() == 1);
  CHECK_FALSE(released[0].leaked);
  CHECK(released[0].owner == "trial");
  CHECK(pool.Acquire(1).has_value());
}

TEST_CASE("SampleMemory sums the memory of a trial's processes on its GPUs", "[devices]") {
  FakeGpuProbe probe(3);
  // 500 leads the trial's group; 501 is its child; 900 is a stranger.
  GpuPool pool = MakePool({0, 1, 2}, 2, &probe, 10, {{500, 500}, {501, 500}, {900, 900}});
  auto slots = pool.Acquire(2);  // GPUs 0 and 1
  REQUIRE(slots.has_value());
  REQUIRE((*slots)[0].gpu == 0);
  REQUIRE((*slots)[1].gpu == 1);
  probe.Hold(0, 500, 1000);
  probe.Hold(1, 501, 20);
  probe.Hold(1, 900, 1 << 30);  // not the trial's
  probe.Hold(2, 500, 1 << 30);  // not on the trial's GPUs
  std::set<pid_t> pids = {500};
  CHECK(pool.SampleMemory(*slots, 500, &pids) == uint64_t{1020});
  CHECK(pids == std::set<pid_t>{500, 501});
  // Memory the driver cannot quantify counts as 0, but the process is the trial's.
  probe.Hold(0, 500, kUnknownBytes);
  CHECK(pool.SampleMemory(*slots, 500, &pids) == uint64_t{20});
  // After the trial ended (group 0): only the pids seen so far count, nobody is added.
  pool = MakePool({0, 1, 2}, 2, &probe, 10, {{502, 500}});
  probe.Hold(0, 500, 7);
  probe.Hold(0, 502, 5);
  CHECK(pool.SampleMemory(*slots, 0, &pids) == uint64_t{27});
  CHECK(pids == std::set<pid_t>{500, 501});
  // Nothing of the trial's on its GPUs: 0, a measurement.
  std::set<pid_t> other = {12345};
  CHECK(pool.SampleMemory(*slots, 0, &other) == uint64_t{0});
  // The probe failing: no measurement; no probe: none either.
  probe.Fail("GPU is lost");
  CHECK_FALSE(pool.SampleMemory(*slots, 500, &pids).has_value());
  GpuPool blind = MakePool({0}, 1);
  CHECK_FALSE(blind.measures_memory());
  CHECK(pool.measures_memory());
  CHECK_FALSE(blind.SampleMemory({{0, 0}}, 500, &pids).has_value());
}

TEST_CASE("a slot whose memory is never freed is given out after the timeout, as a leak",
          "[devices]") {
  FakeGpuProbe probe(2);
  GpuPool pool = MakePool({1}, 1, &probe, 30);
  auto slots = pool.Acquire(1);
  REQUIRE(slots.has_value());
  CHECK((*slots)[0].gpu == 1);
  probe.Hold(1, 700, devices::kUnknownBytes);  // the driver cannot say how much
  pool.StartDraining(*slots, {700}, "trial", 0.0);
  CHECK(pool.Poll(29.9).empty());
  auto released = pool.Poll(30.0);
  REQUIRE(released.size() == 1);
  CHECK(released[0].leaked);
  CHECK_THAT(released[0].detail, Catch::Contains("pid 700 holds memory on GPU 1"));
  CHECK(pool.Acquire(1).has_value());

  // A failing probe cannot prove the memory free either.
  pool.StartDraining({{1, 0}}, {701}, "t2", 50.0);
  probe.Fail("NVML error 15 (GPU is lost)");
  CHECK(pool.Poll(60.0).empty());
  released = pool.Poll(80.0);
  REQUIRE(released.size() == 1);
  CHECK(released[0].leaked);
  CHECK_THAT(released[0].detail, Catch::Contains("GPU is lost"));
}

// ---- NvmlProbe over the fake NVML library ----

std::string FakeNvml() { return std::string(TRIALD_BIN_DIR) + "/libfake-nvml.so"; }

struct FakeNvmlState {
  testing::TempDir dir;
  std::string path = dir.File("nvml-state");
  explicit FakeNvmlState(const std::string& text) {
    Write(text);
    ::setenv("FAKE_NVML_STATE", path.c_str(), 1);
  }
  ~FakeNvmlState() { ::unsetenv("FAKE_NVML_STATE"); }
  void Write(const std::string& text) { std::ofstream(path) << text; }
};

TEST_CASE("NvmlProbe reads GPUs and per-process memory through the NVML entry points",
          "[devices][nvml]") {
  FakeNvmlState state("devices 2\nproc 1 4242 1048576\nproc 1 4243 na\nproc 0 77 5\n");
  auto probe = OpenNvml(FakeNvml());
  INFO(probe.status().ToString());
  REQUIRE(probe.ok());
  auto gpus = (*probe)->Gpus();
  REQUIRE(gpus.ok());
  REQUIRE(gpus->size() == 2);
  CHECK((*gpus)[1].index == 1);
  CHECK((*gpus)[1].uuid == "GPU-fake-1");
  CHECK((*gpus)[1].name == "Fake NVML GPU");
  CHECK((*gpus)[1].memory_total == (80ULL << 30));
  CHECK((*gpus)[1].memory_used == 1048576);

  auto procs = (*probe)->Processes(1);
  REQUIRE(procs.ok());
  CHECK(*procs == ProcessMemory{{4242, 1048576}, {4243, kUnknownBytes}});
  // The state is read on every call: memory given back shows at once.
  state.Write("devices 2\n");
  procs = (*probe)->Processes(1);
  REQUIRE(procs.ok());
  CHECK(procs->empty());
  // More processes than the first buffer holds.
  std::string many = "devices 1\n";
  for (int pid = 1000; pid < 1200; ++pid) many += "proc 0 " + std::to_string(pid) + " 1\n";
  state.Write(many);
  procs = (*probe)->Processes(0);
  REQUIRE(procs.ok());
  CHECK(procs->size() == 200);
  CHECK_FALSE((*probe)->Processes(3).ok());
}

TEST_CASE("NvmlProbe reports a missing library as not found and a failing driver by name",
          "[devices][nvml]") {
  auto missing = OpenNvml("/nonexistent/libnvidia-ml.so.1");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == common::Code::kNotFound);

  FakeNvmlState state("fail_init\n");
  auto failing = OpenNvml(FakeNvml());
  REQUIRE_FALSE(failing.ok());
  CHECK(failing.status().code() != common::Code::kNotFound);
  CHECK_THAT(failing.status().message(), Catch::Contains("nvmlInit_v2"));
  CHECK_THAT(failing.status().message(), Catch::Contains("Driver Not Loaded"));

  // A library without NVML's symbols is refused, naming the symbol.
  auto not_nvml = OpenNvml("libc.so.6");
  REQUIRE_FALSE(not_nvml.ok());
  CHECK_THAT(not_nvml.status().message(), Catch::Contains("nvmlInit_v2"));
}

}  // namespace
}  // namespace triald::devices
