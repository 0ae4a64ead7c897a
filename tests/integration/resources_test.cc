// Resource accounting of real trials: ProcessLauncher with this host's cgroups (or without),
// measuring Python workers that allocate, fork, spin and sleep. Each case first works out on
// its own which source this host offers (ExpectedSources) and asserts the launcher used it.
//
// Tolerances (documented in daemon/README.md, "Resource accounting"): a worker that touches
// 200 MiB has a peak of at least 200 MiB and under 200 MiB + 120 MiB (the interpreter, its
// libraries and, for cgroups, the page cache charged to the trial); a busy loop of 1 s of CPU
// (time.process_time) is measured between 0.95 s and 1.6 s; wall_s is at least the worker's
// sleep and at most the test's own clock around the launch.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "daemon/launcher/cgroup.h"
#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"

namespace triald::testing {
namespace {

constexpr uint64_t kResourceMiB = 1 << 20;
constexpr const char* kPython = "/usr/bin/python3";

// Allocates 200 MiB and writes one byte per page, so that every page is resident.
const char kAllocate[] =
    "b = bytearray(200 << 20)\n"
    "for i in range(0, len(b), 4096):\n"
    "    b[i] = 1\n";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

// Whether a cgroup can be made in `dir` and has `file`; the probe is removed again.
bool LeafWithFile(const std::string& dir, const std::string& file) {
  const std::string probe = dir + "/resources-test-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0) return false;
  const bool has = Exists(probe + "/" + file);
  ::rmdir(probe.c_str());
  return has;
}

// This process's writable v1 memory cgroup ("" when there is none), found from mountinfo and
// /proc/self/cgroup without the launcher's own parsing.
std::string WritableV1MemoryCgroup() {
  std::istringstream mounts(ReadFile("/proc/self/mountinfo"));
  std::string line, mount;
  while (std::getline(mounts, line) && mount.empty()) {
    size_t dash = line.find(" - cgroup ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 10));
    std::string source, options;
    after >> source >> options;
    if ((',' + options + ',').find(",memory,") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string f;
    for (int i = 0; i < 5 && fields >> f; ++i) {
    }
    mount = f;  // field 5: the mount point
  }
  if (mount.empty()) return "";
  std::istringstream own(ReadFile("/proc/self/cgroup"));
  while (std::getline(own, line)) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    std::string controllers = line.substr(a + 1, b - a - 1);
    if ((',' + controllers + ',').find(",memory,") == std::string::npos) continue;
    std::string path = line.substr(b + 1);
    std::string dir = path == "/" ? mount : mount + path;
    return LeafWithFile(dir, "memory.max_usage_in_bytes") ? dir : "";
  }
  return "";
}

struct Sources {
  std::string memory, cpu;
};

// The best source of each figure on this host for trials under `tree` (null: no cgroups):
// memory.peak where the memory controller reaches the trials' parent, else a writable v1 memory
// hierarchy, else getrusage; cpu.stat of a v2 leaf, else getrusage.
Sources ExpectedSources(const launcher::CgroupTree* tree) {
  if (tree == nullptr) return {"getrusage ru_maxrss", "getrusage"};
  Sources s;
  const std::string parent = tree->parent();
  if (HasWord(ReadFile(parent + "/cgroup.subtree_control"), "memory")) {
    s.memory = LeafWithFile(parent, "memory.peak") ? "cgroup2 memory.peak" : "getrusage ru_maxrss";
  } else {
    s.memory = WritableV1MemoryCgroup().empty() ? "getrusage ru_maxrss"
                                                : "cgroup1 memory.max_usage_in_bytes";
  }
  s.cpu = LeafWithFile(parent, "cpu.stat") ? "cgroup2 cpu.stat" : "getrusage";
  return s;
}

struct Run {
  launcher::ProcessOutcome outcome;
  double elapsed_s = 0;
};

// A launcher with this host's cgroups (when `cgroups` and they are writable) or process groups.
class Accounting {
 public:
  Accounting(bool cgroups, bool accounting) : reaper_(io_, common::MakeNullLogger()) {
    REQUIRE(reaper_.Start().ok());
    if (cgroups) {
      launcher::CgroupTree::Options o;
      o.state_dir = dir_.File("state");
      o.logger = common::MakeNullLogger();
      o.resource_accounting = accounting;
      auto tree = launcher::CgroupTree::Open(o);
      if (tree.ok()) tree_ = std::move(tree).value();
      INFO("cgroups: " << (tree_ ? tree_->Describe() : tree.status().message()));
    }
    launcher_ = std::make_unique<launcher::ProcessLauncher>(launcher::ProcessLauncher::Options{
        &io_, &reaper_, common::MakeNullLogger(), tree_.get(), false, "", accounting});
  }

  Run Go(std::vector<std::string> argv) {
    launcher::LaunchSpec s;
    s.executable = argv[0];
    s.argv = std::move(argv);
    s.env = {"PATH=/usr/bin:/bin", "TRIALD_REPORT_FD=3"};
    s.workdir = dir_.path();
    s.log_dir = dir_.path() + "/logs";
    s.kill_grace_s = 1;
    Run run;
    bool exited = false;
    launcher::TrialCallbacks cb;
    cb.on_exit = [&](const launcher::ProcessOutcome& o) {
      run.outcome = o;
      exited = true;
      io_.stop();
    };
    auto start = std::chrono::steady_clock::now();
    auto proc = launcher_->Launch(s, cb);
    INFO(proc.status().message());
    REQUIRE(proc.ok());
    io_.restart();
    io_.run_for(std::chrono::seconds(60));
    run.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    REQUIRE(exited);
    INFO("stderr: " << run.outcome.stderr_tail);
    REQUIRE(run.outcome.exit.code == 0);
    REQUIRE_FALSE(run.outcome.exit.signaled);
    return run;
  }

  const launcher::CgroupTree* tree() const { return tree_.get(); }
  launcher::CgroupTree* mutable_tree() { return tree_.get(); }
  TempDir dir_;

 private:
  boost::asio::io_context io_;
  launcher::Reaper reaper_;
  std::unique_ptr<launcher::CgroupTree> tree_;
  std::unique_ptr<launcher::ProcessLauncher> launcher_;
};

void CheckPeak(const model::TrialResources& r, const std::string& source) {
  INFO("memory source " << r.memory_source << ", peak " << r.peak_memory_bytes.value_or(0));
  CHECK(r.memory_source == source);
  REQUIRE(r.peak_memory_bytes.has_value());
  CHECK(*r.peak_memory_bytes >= 200 * kResourceMiB);
  CHECK(*r.peak_memory_bytes < 320 * kResourceMiB);
}

}  // namespace

TEST_CASE("a worker's 200 MiB is its trial's peak memory, from the host's best source",
          "[launcher][integration][resources]") {
  const bool cgroups = GENERATE(true, false);
  INFO("cgroups " << cgroups);
  Accounting a(cgroups, true);
  const Sources expected = ExpectedSources(a.tree());
  WARN("peak memory source on this host: " << expected.memory << "; CPU: " << expected.cpu);
  Run run = a.Go({kPython, "-c", kAllocate});
  CheckPeak(run.outcome.resources, expected.memory);
  CHECK(run.outcome.resources.cpu_source == expected.cpu);
  CHECK(run.outcome.resources.cpu_time_s.has_value());
  CHECK_FALSE(run.outcome.resources.peak_gpu_memory_bytes.has_value());
  if (!cgroups) CHECK(expected.memory == "getrusage ru_maxrss");
}

TEST_CASE("a child process's allocation counts toward its trial",
          "[launcher][integration][resources]") {
  const bool cgroups = GENERATE(true, false);
  INFO("cgroups " << cgroups);
  Accounting a(cgroups, true);
  // The main process stays small; its child allocates and the main process waits for it.
  const std::string script = std::string(
                                 "import os\n"
                                 "pid = os.fork()\n"
                                 "if pid == 0:\n") +
                             "    exec(" + "'''" + kAllocate + "'''" +
                             ")\n"
                             "    os._exit(0)\n"
                             "os.waitpid(pid, 0)\n";
  Run run = a.Go({kPython, "-c", script});
  CheckPeak(run.outcome.resources, ExpectedSources(a.tree()).memory);
}

TEST_CASE("a busy loop of 1 s is measured as about 1 s of CPU time",
          "[launcher][integration][resources]") {
  const bool cgroups = GENERATE(true, false);
  INFO("cgroups " << cgroups);
  Accounting a(cgroups, true);
  Run run = a.Go({kPython, "-c",
                  "import time\n"
                  "while time.process_time() < 1.0:\n"
                  "    pass\n"});
  const model::TrialResources& r = run.outcome.resources;
  INFO("cpu source " << r.cpu_source << ", cpu " << r.cpu_time_s.value_or(-1));
  CHECK(r.cpu_source == ExpectedSources(a.tree()).cpu);
  REQUIRE(r.cpu_time_s.has_value());
  CHECK(*r.cpu_time_s >= 0.95);
  CHECK(*r.cpu_time_s < 1.6);
  REQUIRE(r.wall_s.has_value());
  CHECK(*r.wall_s >= *r.cpu_time_s * 0.9);  // one thread: no more CPU than wall time
}

TEST_CASE("wall_s covers a worker's sleep and no more than the launch took",
          "[launcher][integration][resources]") {
  Accounting a(true, true);
  Run run = a.Go({"/bin/sh", "-c", "sleep 0.5"});
  const model::TrialResources& r = run.outcome.resources;
  REQUIRE(r.wall_s.has_value());
  CHECK(*r.wall_s >= 0.5);
  CHECK(*r.wall_s <= run.elapsed_s);
  // sleep uses next to no CPU, but it is measured.
  REQUIRE(r.cpu_time_s.has_value());
  CHECK(*r.cpu_time_s < 0.2);
}

TEST_CASE("without resource accounting only wall_s is set and no v1 memory leaf is made",
          "[launcher][integration][resources]") {
  const bool cgroups = GENERATE(true, false);
  INFO("cgroups " << cgroups);
  Accounting a(cgroups, false);
  if (a.tree() != nullptr) CHECK(a.tree()->memory_v1_parent().empty());
  Run run = a.Go({"/bin/sh", "-c", "sleep 0.1"});
  const model::TrialResources& r = run.outcome.resources;
  CHECK_FALSE(r.peak_memory_bytes.has_value());
  CHECK(r.memory_source.empty());
  CHECK_FALSE(r.cpu_time_s.has_value());
  CHECK(r.cpu_source.empty());
  REQUIRE(r.wall_s.has_value());
  CHECK(*r.wall_s >= 0.1);
}

TEST_CASE("a trial runs in a v1 memory leaf, recycled for the next trial with its peak reset",
          "[launcher][integration][resources]") {
  Accounting a(true, true);
  const std::string parent = a.tree() ? a.tree()->memory_v1_parent() : "";
  // Only hosts with a v1 memory hierarchy and no v2 memory controller make these leaves.
  const bool v1 = ExpectedSources(a.tree()).memory == "cgroup1 memory.max_usage_in_bytes";
  CHECK(parent.empty() == !v1);
  if (!v1) TRIALD_SKIP("no v1 memory accounting on this host");
  // Big, big, then small ones: each on a leaf that may have held one before (a big one, for
  // the first reused).
  std::vector<std::string> leaves;
  for (bool big : {true, true, false, false, false, false}) {
    const std::string script =
        std::string("print(open('/proc/self/cgroup').read())\n") + (big ? kAllocate : "");
    Run run = a.Go({kPython, "-c", script});
    INFO("trial " << leaves.size());
    if (big) {
      CheckPeak(run.outcome.resources, "cgroup1 memory.max_usage_in_bytes");
    } else {
      REQUIRE(run.outcome.resources.peak_memory_bytes.has_value());
      CHECK(*run.outcome.resources.peak_memory_bytes < 40 * kResourceMiB);  // the interpreter alone
    }
    std::string line, leaf;
    std::istringstream in(ReadFile(a.dir_.path() + "/logs/stdout.log"));
    while (std::getline(in, line)) {
      size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
      if ((',' + line.substr(c1 + 1, c2 - c1 - 1) + ',').find(",memory,") != std::string::npos) {
        leaf = line.substr(c2 + 1);
      }
    }
    INFO("the trial's v1 memory cgroup: " << leaf << "; the parent: " << parent);
    const std::string name = leaf.substr(leaf.rfind('/') + 1);
    CHECK(name.rfind("triald-", 0) == 0);
    const std::string up = leaf.substr(0, leaf.rfind('/'));
    REQUIRE(parent.size() >= up.size());
    CHECK(parent.compare(parent.size() - up.size(), up.size(), up) == 0);
    leaves.push_back(name);
  }
  // Four leaves are kept ready (LeafMaker::kAhead), recycled ones queued behind them, so the fifth
  // or sixth trial runs in a reused one.
  std::sort(leaves.begin(), leaves.end());
  CHECK(std::unique(leaves.begin(), leaves.end()) != leaves.end());
}

TEST_CASE("the start-up clean of leftovers keeps the v1 memory leaves made ahead",
          "[launcher][integration][resources]") {
  Accounting a(true, true);
  if (a.tree() == nullptr || a.tree()->memory_v1_parent().empty()) {
    TRIALD_SKIP("no v1 memory accounting on this host");
  }
  // The daemon cleans leftovers right after Open(), while the maker may already hold leaves.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  a.mutable_tree()->CleanLeftovers();
  for (int i = 0; i < 4; ++i) {
    INFO("trial " << i);
    Run run = a.Go({"/bin/true"});
    CHECK(run.outcome.exit.code == 0);
    CHECK(run.outcome.resources.memory_source == "cgroup1 memory.max_usage_in_bytes");
  }
}

TEST_CASE("the v1 memory leaves made ahead of trials are gone with the tree",
          "[launcher][integration][resources]") {
  std::string parent, prefix;
  {
    Accounting a(true, true);
    parent = a.tree() ? a.tree()->memory_v1_parent() : "";
    if (parent.empty()) TRIALD_SKIP("no v1 memory accounting on this host");
    for (int i = 0; i < 3; ++i) a.Go({"/bin/true"});
    // Describe() names the leaves: ".../triald-<hash>-*".
    const std::string d = a.tree()->Describe();
    const size_t at = d.find("/triald-");
    REQUIRE(at != std::string::npos);
    prefix = d.substr(at + 1, d.find('*', at) - at - 1);
  }
  INFO("leaves " << parent << "/" << prefix << "*");
  int left = 0;
  for (const auto& e : std::filesystem::directory_iterator(parent)) {
    left += e.path().filename().string().rfind(prefix, 0) == 0 ? 1 : 0;
  }
  CHECK(left == 0);
}

// The v2 leaf a trial ran in, from what it printed of /proc/self/cgroup ("" when none).
std::string V2LeafOf(const std::string& stdout_log) {
  std::string line, leaf;
  std::istringstream in(ReadFile(stdout_log));
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) leaf = line.substr(line.rfind('/') + 1);
  }
  return leaf;
}

TEST_CASE("v2 leaves: made ahead, reused when no memory controller is on, none left",
          "[launcher][integration][resources]") {
  std::string parent, prefix;
  auto count = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(parent)) {
      n += e.path().filename().string().rfind(prefix, 0) == 0 ? 1 : 0;
    }
    return n;
  };
  std::string tampered;  // a leaf a trial made a child cgroup in
  {
    Accounting a(true, true);
    if (a.tree() == nullptr) TRIALD_SKIP("no writable cgroup v2 hierarchy on this host");
    parent = a.tree()->parent();
    const bool reused = !a.tree()->has_memory();
    const std::string d = a.tree()->Describe();
    const size_t at = d.find("/triald-");
    REQUIRE(at != std::string::npos);
    prefix = d.substr(at + 1, d.find('*', at) - at - 1);
    INFO("leaves " << parent << "/" << prefix << "*; reused: " << reused);
    // None before the first trial: CleanLeftovers may still run then.
    CHECK(count() == 0);
    // Trials that spin for 0.3 s of CPU and trials that sleep, one after the other, each after
    // the maker's thread has had time (its 50 ms poll) to take the last one's leaf back.
    const char* kSpin =
        "cat /proc/self/cgroup; python3 -c 'import time\nwhile "
        "time.process_time() < 0.3: pass'";
    const char* kSleep = "cat /proc/self/cgroup; sleep 0.05";
    std::vector<std::string> leaves;
    std::vector<double> cpu;
    for (int i = 0; i < 6; ++i) {
      Run run = a.Go({"/bin/sh", "-c", i % 2 == 0 ? kSpin : kSleep});
      leaves.push_back(V2LeafOf(a.dir_.path() + "/logs/stdout.log"));
      INFO("trial " << i << " ran in " << leaves.back());
      CHECK(leaves.back().rfind(prefix, 0) == 0);
      REQUIRE(run.outcome.resources.cpu_time_s.has_value());
      cpu.push_back(*run.outcome.resources.cpu_time_s);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    std::vector<std::string> distinct = leaves;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    if (!reused) {
      CHECK(distinct.size() == leaves.size());  // one leaf per trial, never reused
    } else {
      CHECK(distinct.size() < leaves.size());
      // A sleeping trial in the leaf a spinning one used is measured from zero.
      int pairs = 0;
      for (size_t i = 1; i < leaves.size(); i += 2) {
        if (leaves[i] != leaves[i - 1]) continue;
        ++pairs;
        INFO("trial " << i << " after a 0.3 s spin in " << leaves[i] << ": " << cpu[i] << " s");
        CHECK(cpu[i - 1] >= 0.28);
        CHECK(cpu[i] < 0.1);
      }
      CHECK(pairs > 0);
      // A trial that leaves a child cgroup in its leaf: the leaf is never handed out again.
      const std::string mkdir_sub = "cat /proc/self/cgroup; mkdir \"" + parent +
                                    "/$(sed -n 's|^0::.*/||p' /proc/self/cgroup)/sub\"";
      a.Go({"/bin/sh", "-c", mkdir_sub});
      tampered = V2LeafOf(a.dir_.path() + "/logs/stdout.log");
      REQUIRE(std::filesystem::exists(parent + "/" + tampered + "/sub"));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int i = 0; i < 6; ++i) {
        a.Go({"/bin/sh", "-c", "cat /proc/self/cgroup"});
        INFO("trial after the tampered one in " << tampered);
        CHECK(V2LeafOf(a.dir_.path() + "/logs/stdout.log") != tampered);
      }
    }
    // The leaves the trials are done with go (on the maker's thread, within its 50 ms poll) or
    // wait among the ready ones: at most the four kept ready (LeafMaker::kAhead) stay, and the
    // tampered one, which cannot be removed while its child cgroup is there.
    const int tolerated = 4 + (tampered.empty() ? 0 : 1);
    for (int i = 0; i < 200 && count() > tolerated; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(count() <= tolerated);
  }
  if (!tampered.empty()) {
    CHECK(::rmdir((parent + "/" + tampered + "/sub").c_str()) == 0);
    CHECK(::rmdir((parent + "/" + tampered).c_str()) == 0);
  }
  CHECK(count() == 0);  // and the ready ones are gone with the tree
}

}  // namespace triald::testing
