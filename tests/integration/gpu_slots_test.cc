// GPU slots end to end: a real triald loads the fake NVML library (tests/tools/fake_nvml.cc) as
// its NVML, two studies of sh workers ask for one and two GPUs per trial, and every trial
// records the CUDA_VISIBLE_DEVICES and slots it was given. No two trials that ran at the same
// time may share a slot, and some must have run at the same time (each sleeps 1 s, with up to
// four slots free), or the check would hold vacuously. Each worker registers its GPU memory with
// the fake driver (which reports it only while the process lives), so slots go back through
// NVML-checked draining.

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

struct Ran {
  std::string study;
  int number = 0;
  double started = 0, finished = 0;
  std::string cuda;
  std::vector<std::string> slots;  // "GPU.slot"
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < s.size();) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

const char kWorker[] =
    "gpu=${CUDA_VISIBLE_DEVICES%%,*}\n"
    "echo \"proc $gpu $$ 1048576\" >> \"$FAKE_NVML_STATE\"\n"
    "echo '{\"type\":\"attr\",\"key\":\"cuda\",\"value\":\"'$CUDA_VISIBLE_DEVICES'\"}' >&3\n"
    "echo '{\"type\":\"attr\",\"key\":\"slots\",\"value\":\"'$TRIALD_GPU_SLOTS'\"}' >&3\n"
    "sleep 1\n"
    "echo '{\"type\":\"final\",\"value\":1}' >&3\n";

}  // namespace

TEST_CASE("trials on GPUs from the fake NVML never share a slot", "[integration][devices]") {
  TempDir dir;
  const std::string state = dir.Write("nvml-state", "devices 2\nlive_only\n");
  ::setenv("FAKE_NVML_STATE", state.c_str(), 1);  // the daemon's own NVML reads it
  TestDaemon daemon(dir.File("state"), /*max_workers=*/8);
  daemon.AddArgs({"--nvml-library", BinDir() + "/libfake-nvml.so", "--slots-per-gpu", "2",
                  "--gpu-release-timeout", "20"});
  daemon.Start();
  ::unsetenv("FAKE_NVML_STATE");

  dir.Write("gpu.sh", kWorker, 0755);
  auto sweep = [&](const std::string& name, int n, int parallelism, int gpus) {
    std::string toml = ExecSweep(name, "[\"sh\", \"gpu.sh\"]", n, parallelism, 0, 2, dir.path());
    toml.replace(toml.find("[objective]\n"), 12,
                 "gpus_per_trial = " + std::to_string(gpus) +
                     "\n\n[objective]\nenv = { FAKE_NVML_STATE = \"" + state + "\" }\n");
    daemon.Submit(toml, dir.Write(name + ".toml", toml));
  };
  sweep("one", 10, 4, 1);
  sweep("two", 4, 2, 2);

  std::vector<Ran> ran;
  for (const std::string study : {"one", "two"}) {
    json::object status = daemon.WaitStudy(study);
    CHECK(status.at("state").as_string() == "COMPLETE");
    json::array trials = daemon.Trials(study);
    CHECK(CountState(trials, "COMPLETE") == static_cast<int>(trials.size()));
    for (const json::value& v : trials) {
      const json::object& t = v.as_object();
      Ran r;
      r.study = study;
      r.number = static_cast<int>(t.at("number").as_int64());
      r.started = t.at("started_at").to_number<double>();
      r.finished = t.at("finished_at").to_number<double>();
      r.cuda = std::string(t.at("attrs").at("cuda").as_string());
      r.slots = Split(std::string(t.at("attrs").at("slots").as_string()));
      const size_t want = study == "one" ? 1 : 2;
      INFO(study << " trial " << r.number << ": CUDA_VISIBLE_DEVICES=" << r.cuda);
      REQUIRE(r.slots.size() == want);
      std::string cuda;
      std::set<std::string> gpus;
      for (const std::string& s : r.slots) {
        const std::string gpu = s.substr(0, s.find('.'));
        CHECK((gpu == "0" || gpu == "1"));
        CHECK(gpus.insert(gpu).second);
        cuda += (cuda.empty() ? "" : ",") + gpu;
      }
      CHECK(r.cuda == cuda);
      ran.push_back(r);
    }
  }
  REQUIRE(ran.size() == 14);
  int overlapping = 0;
  for (size_t i = 0; i < ran.size(); ++i) {
    for (size_t j = i + 1; j < ran.size(); ++j) {
      const Ran& a = ran[i];
      const Ran& b = ran[j];
      if (!(a.started < b.finished && b.started < a.finished)) continue;
      ++overlapping;
      for (const std::string& s : a.slots) {
        INFO(a.study << " trial " << a.number << " and " << b.study << " trial " << b.number
                     << " ran together");
        CHECK(std::find(b.slots.begin(), b.slots.end(), s) == b.slots.end());
      }
    }
  }
  // 14 one-second trials on 4 slots: some ran together unless the daemon ran them one at a time,
  // and without any overlap the check above asserted nothing.
  CHECK(overlapping > 0);
  CHECK(ZombieChildren(daemon.pid()).empty());
  CHECK(WaitNoProcessesOfStudy("one").empty());
  CHECK(daemon.log().find("GPU slots: GPUs 0,1 x 2 slot(s) each, released after NVML") !=
        std::string::npos);
  CHECK(daemon.log().find("GPU memory leak") == std::string::npos);
}

}  // namespace triald::testing
