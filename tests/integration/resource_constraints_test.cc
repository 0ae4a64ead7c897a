// Measured metrics in sweep files, end to end through a real triald: [study]
// resource_constraints on the peak memory the daemon measured (no user code reports it), a
// measured metric as a second objective, and the peak GPU memory of a trial on the fake NVML
// (tests/tools/fake_nvml.cc), whose processes register their own memory with the fake driver.
#include <dlfcn.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

constexpr int64_t kConstraintMiB = 1 << 20;

// Allocates and touches MB MiB (the parameter `mb`), then reports -mb: minimizing prefers the
// largest allocation, so only the constraint keeps the best trial small.
const char kAllocWorker[] = R"py(import json, os, time
p = json.loads(os.environ['TRIALD_PARAMS'])
mb = int(p['mb'])
block = b'\x01' * (mb << 20)  # every page written, so resident
time.sleep(0.2)
out = os.fdopen(int(os.environ['TRIALD_REPORT_FD']), 'w', buffering=1)
out.write(json.dumps({'type': 'final', 'value': -float(mb)}) + '\n')
)py";

std::string AllocSweep(const std::string& name, const std::string& study_keys,
                       const std::string& choices, int n_trials) {
  return "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
         "\nparallelism = 2\n" + study_keys +
         "\n[objective]\nkind = \"exec\"\ncommand = [\"/usr/bin/python3\", \"alloc.py\"]\n"
         "\n[space.mb]\ntype = \"categorical\"\nchoices = " +
         choices + "\n\n[sampler]\nkind = \"grid\"\nseed = 1\n";
}

json::value ParseConstraintJson(const std::string& text) {
  common::Result<json::value> v = common::ParseJsonExact(text);
  INFO(text);
  REQUIRE(v.ok());
  return *v;
}

int64_t Mb(const json::object& trial) {
  const json::value& v = trial.at("params").at("mb");
  return v.is_int64() ? v.as_int64() : static_cast<int64_t>(v.to_number<double>());
}

}  // namespace

TEST_CASE(
    "resource_constraints on measured peak memory: large allocations are infeasible and "
    "the best trial is a feasible one",
    "[integration][resources]") {
  TempDir dir;
  dir.Write("alloc.py", kAllocWorker);
  TestDaemon d(dir.File("state"));
  d.Start();
  // 20 and 60 MiB fit in 150 MiB with the interpreter; 220 and 260 MiB cannot, whichever way
  // the peak is measured (a cgroup's peak or the largest process's ru_maxrss).
  const std::string toml = AllocSweep("mem", "resource_constraints = [\"peak_memory <= 150M\"]\n",
                                      "[20, 60, 220, 260]", 4);
  REQUIRE(Trialctl(d.socket(), {"submit", dir.Write("mem.toml", toml)}).code == 0);
  json::object status = d.WaitStudy("mem", 120);
  CHECK(status.at("state").as_string() == "COMPLETE");

  json::array trials = d.Trials("mem");
  REQUIRE(trials.size() == 4);
  std::map<int64_t, bool> feasible;  // by mb
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    // One constraint, from the daemon's measurement (the worker reported none).
    REQUIRE(t.at("constraints").as_array().size() == 1);
    const double c = t.at("constraints").as_array()[0].to_number<double>();
    feasible[Mb(t)] = t.at("feasible").as_bool();
    CHECK(t.at("feasible").as_bool() == (c <= 0));
    // The constraint value is measured - limit: the peak is at least the allocation.
    CHECK(c + 150.0 * kConstraintMiB >= static_cast<double>(Mb(t) * kConstraintMiB));
  }
  const std::map<int64_t, bool> expected = {{20, true}, {60, true}, {220, false}, {260, false}};
  for (const auto& [mb, want] : expected) {
    INFO(mb << " MiB");
    REQUIRE(feasible.count(mb) == 1);
    CHECK(feasible[mb] == want);
  }

  Ctl best = Trialctl(d.socket(), {"best", "mem", "--json"});
  INFO(best.err);
  REQUIRE(best.code == 0);
  const json::object b = ParseConstraintJson(best.out).as_object();
  CHECK(b.at("feasible").as_bool());
  CHECK(Mb(b) == 60);  // the largest feasible allocation
  d.Stop();
}

TEST_CASE("a measured metric as a second objective: values carry the measured peak memory",
          "[integration][resources]") {
  TempDir dir;
  dir.Write("alloc.py", kAllocWorker);
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string toml = AllocSweep("two",
                                      "directions = [\"minimize\", \"minimize\"]\n"
                                      "objectives = [\"value\", \"peak_memory\"]\n",
                                      "[30, 90]", 2);
  REQUIRE(Trialctl(d.socket(), {"submit", dir.Write("two.toml", toml)}).code == 0);
  d.WaitStudy("two", 120);
  json::array trials = d.Trials("two");
  REQUIRE(trials.size() == 2);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const json::array& values = t.at("values").as_array();
    REQUIRE(values.size() == 2);
    CHECK(values[0].to_number<double>() == -static_cast<double>(Mb(t)));
    CHECK(values[1].to_number<double>() >= static_cast<double>(Mb(t) * kConstraintMiB));
    CHECK(values[1].to_number<double>() < static_cast<double>((Mb(t) + 200) * kConstraintMiB));
    // The objective is the stored measurement itself.
    const json::object& resources = t.at("resources").as_object();
    CHECK(values[1].to_number<double>() ==
          static_cast<double>(resources.at("peak_memory_bytes").as_int64()));
  }
  d.Stop();
}

TEST_CASE("kind = python with a measured objective: the runner expects only the value entries",
          "[integration][resources][python]") {
  TempDir dir;
  dir.Write("objective.py",
            "def one(trial):\n"
            "    return trial.suggest_float(\"x\", 0.0, 1.0)\n");
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string toml =
      "[study]\nname = \"py\"\ndirections = [\"minimize\", \"minimize\"]\n"
      "objectives = [\"value\", \"wall\"]\nn_trials = 2\nparallelism = 2\n\n"
      "[objective]\nkind = \"python\"\nfunction = \"objective.py:one\"\n"
      "python = \"/usr/bin/python3\"\n";
  d.WaitStudy(d.Submit(toml, dir.Write("py.toml", toml)), 120);
  json::array trials = d.Trials("py");
  REQUIRE(trials.size() == 2);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    // The objective returned one number for a study of two directions, as it should.
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const json::array& values = t.at("values").as_array();
    REQUIRE(values.size() == 2);
    CHECK(values[0].to_number<double>() == t.at("params").at("x").to_number<double>());
    CHECK(values[1].to_number<double>() == t.at("resources").at("wall_s").to_number<double>());
    CHECK(values[1].to_number<double>() > 0);
  }
  d.Stop();
}

TEST_CASE("a GPU trial's peak GPU memory is what its processes held on the (fake) driver",
          "[integration][resources][devices]") {
  TempDir dir;
  const std::string state = dir.Write("nvml-state", "devices 1\nlive_only\n");
  ::setenv("FAKE_NVML_STATE", state.c_str(), 1);  // the daemon's own NVML reads it
  TestDaemon d(dir.File("state"));
  d.AddArgs({"--nvml-library", BinDir() + "/libfake-nvml.so", "--gpu-sample-interval", "0.1",
             "--gpu-release-timeout", "20"});
  d.Start();
  ::unsetenv("FAKE_NVML_STATE");
  // The worker holds 1 MiB and starts a child (same process group) holding 3 MiB; both live
  // for well over several sample intervals. 4 MiB together.
  dir.Write("gpu.sh",
            "echo \"proc 0 $$ 1048576\" >> \"$FAKE_NVML_STATE\"\n"
            "sh -c 'echo \"proc 0 $$ 3145728\" >> \"$FAKE_NVML_STATE\"; sleep 1.5' &\n"
            "sleep 1.5\nwait\n"
            "echo '{\"type\":\"final\",\"value\":1}' >&3\n",
            0755);
  std::string toml = ExecSweep("gpu", "[\"sh\", \"gpu.sh\"]", 1, 1, 0, 2, dir.path());
  toml.replace(toml.find("[objective]\n"), 12,
               "gpus_per_trial = 1\ndirections = [\"minimize\", \"minimize\"]\n"
               "objectives = [\"value\", \"peak_gpu_memory\"]\n"
               "resource_constraints = [\"peak_gpu_memory <= 2M\"]\n"
               "\n[objective]\nenv = { FAKE_NVML_STATE = \"" +
                   state + "\" }\n");
  d.Submit(toml, dir.Write("gpu.toml", toml));
  json::object status = d.WaitStudy("gpu", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("gpu");
  REQUIRE(trials.size() == 1);
  const json::object& t = trials[0].as_object();
  INFO(json::serialize(t) << "\n" << d.log());
  REQUIRE(t.at("state").as_string() == "COMPLETE");
  const json::array& values = t.at("values").as_array();
  REQUIRE(values.size() == 2);
  CHECK(values[1].to_number<double>() == 4.0 * kConstraintMiB);
  CHECK(t.at("constraints").as_array()[0].to_number<double>() == 2.0 * kConstraintMiB);
  CHECK_FALSE(t.at("feasible").as_bool());
  CHECK(t.at("resources").at("peak_gpu_memory_bytes").as_int64() == 4 * kConstraintMiB);
  d.Stop();
}

TEST_CASE("a GPU metric is refused at submit by a triald that cannot measure GPU memory",
          "[integration][resources][devices]") {
  // A host with NVML measures GPU memory: the refusal is for hosts without it.
  if (void* nvml = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(nvml);
    TRIALD_SKIP("this host has NVML (libnvidia-ml.so.1), so triald can measure GPU memory");
  }
  TempDir dir;
  TestDaemon d(dir.File("state"));
  // GPUs given by hand, and no NVML library to be found.
  d.AddArgs({"--gpus", "0"});
  d.Start();
  dir.Write("ok.sh", "echo '{\"type\":\"final\",\"value\":1}' >&3\n", 0755);
  std::string toml = ExecSweep("g", "[\"sh\", \"ok.sh\"]", 1, 1, 0, 2, dir.path());
  toml.replace(toml.find("[objective]\n"), 12,
               "gpus_per_trial = 1\nresource_constraints = [\"peak_gpu_memory <= 2M\"]\n"
               "\n[objective]\n");
  Ctl submit = Trialctl(d.socket(), {"submit", dir.Write("g.toml", toml)});
  CHECK(submit.code != 0);
  CHECK_THAT(submit.err, Catch::Contains("[study] resource_constraints entry \"peak_gpu_memory "
                                         "<= 2M\": triald cannot measure GPU memory"));
  d.Stop();
}

}  // namespace triald::testing
