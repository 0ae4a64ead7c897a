// The pieces of cgroup mode that need no cgroups: reading mountinfo and /proc/self/cgroup on
// unified, hybrid and namespaced hosts, refusing cleanly where there is no cgroup2, and the
// sweep keys memory_limit and pids_limit.
#include "daemon/launcher/cgroup.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "config/sweep.h"
#include "tests/support/temp_dir.h"

namespace triald::testing {
using launcher::CgroupTree;
using launcher::FindCgroup1Mount;
using launcher::FindCgroup2Mount;
using launcher::OwnCgroupPath;
using launcher::ReadLeafResources;

namespace {

// A hybrid host (this project's CI VM): v1 controllers plus cgroup2 at /sys/fs/cgroup/unified.
const char kHybridMountinfo[] =
    "22 1 0:21 / / rw,relatime - ext4 /dev/vda1 rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
// A unified host; optional fields (shared:N) before the separator.
const char kUnifiedMountinfo[] =
    "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "31 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

}  // namespace

TEST_CASE("cgroup detection reads the cgroup2 mount on hybrid and unified hosts", "[cgroup]") {
  CHECK(FindCgroup2Mount(kHybridMountinfo) == "/sys/fs/cgroup/unified");
  CHECK(FindCgroup2Mount(kUnifiedMountinfo) == "/sys/fs/cgroup");
  CHECK(FindCgroup1Mount(kHybridMountinfo, "pids") == "/sys/fs/cgroup/pids");
  CHECK(FindCgroup1Mount(kHybridMountinfo, "cpu").empty());
  CHECK(FindCgroup1Mount(kUnifiedMountinfo, "pids").empty());
  CHECK(FindCgroup2Mount("22 1 0:21 / / rw - ext4 /dev/vda1 rw\n").empty());
}

TEST_CASE("cgroup detection reads the daemon's own v2 and v1 cgroups", "[cgroup]") {
  const std::string hybrid =
      "9:name=systemd:/\n8:pids:/user.slice\n4:memory:/process_api/5f2e\n0::/\n";
  CHECK(OwnCgroupPath(hybrid) == "/");
  CHECK(OwnCgroupPath(hybrid, "pids") == "/user.slice");
  CHECK(OwnCgroupPath(hybrid, "memory") == "/process_api/5f2e");
  CHECK(OwnCgroupPath("0::/system.slice/triald.service\n") == "/system.slice/triald.service");
  CHECK(OwnCgroupPath("4:memory:/x\n").empty());  // v1 only: no v2 entry
}

TEST_CASE("without a cgroup2 mount the tree is unavailable and says why", "[cgroup]") {
  TempDir dir;
  CgroupTree::Options o;
  o.state_dir = dir.File("state");
  o.mountinfo_path = dir.Write("mountinfo", "22 1 0:21 / / rw - ext4 /dev/vda1 rw\n");
  o.self_cgroup_path = dir.Write("cgroup", "0::/\n");
  auto tree = CgroupTree::Open(o);
  REQUIRE_FALSE(tree.ok());
  CHECK(tree.status().code() == common::Code::kUnavailable);
  CHECK(tree.status().message().find("no cgroup2") != std::string::npos);

  o.mountinfo_path = dir.Write("mountinfo2", kUnifiedMountinfo);
  o.self_cgroup_path = dir.Write("cgroup2", "4:memory:/x\n");
  tree = CgroupTree::Open(o);
  REQUIRE_FALSE(tree.ok());
  CHECK(tree.status().message().find("0::/") != std::string::npos);
}

TEST_CASE("a cgroup2 mount that cannot be written to is unavailable", "[cgroup]") {
  TempDir dir;
  CgroupTree::Options o;
  o.state_dir = dir.File("state");
  // cgroup2 "mounted" at a path that does not exist: no probe cgroup can be made there.
  o.mountinfo_path =
      dir.Write("mountinfo", "40 30 0:37 / " + dir.File("absent") + " rw - cgroup2 cgroup2 rw\n");
  o.self_cgroup_path = dir.Write("cgroup", "0::/\n");
  auto tree = CgroupTree::Open(o);
  REQUIRE_FALSE(tree.ok());
  CHECK(tree.status().message().find("not writable") != std::string::npos);
}

TEST_CASE("resource accounting reads memory.peak and cpu.stat of a v2 leaf", "[cgroup]") {
  TempDir dir;
  const std::string v2 = dir.File("v2");
  const std::string v1 = dir.File("v1");
  std::filesystem::create_directories(v2);
  std::filesystem::create_directories(v1);
  dir.Write("v2/memory.peak", "220200960\n");
  dir.Write("v2/cpu.stat",
            "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 0\n");
  dir.Write("v1/memory.max_usage_in_bytes", "999\n");
  model::TrialResources r = ReadLeafResources(v2, v1);
  CHECK(r.peak_memory_bytes == 220200960u);
  CHECK(r.memory_source == "cgroup2 memory.peak");  // v2 first, the v1 leaf unused
  CHECK(r.cpu_time_s == Approx(1.234567));
  CHECK(r.cpu_source == "cgroup2 cpu.stat");
  CHECK_FALSE(r.wall_s.has_value());
  CHECK_FALSE(r.peak_gpu_memory_bytes.has_value());

  SECTION("no memory.peak (no v2 memory controller): the v1 leaf's max_usage_in_bytes") {
    std::filesystem::remove(v2 + "/memory.peak");
    r = ReadLeafResources(v2, v1);
    CHECK(r.peak_memory_bytes == 999u);
    CHECK(r.memory_source == "cgroup1 memory.max_usage_in_bytes");
    CHECK(r.cpu_source == "cgroup2 cpu.stat");
  }
  SECTION("a recycled v1 leaf: its baseline is subtracted") {
    std::filesystem::remove(v2 + "/memory.peak");
    r = ReadLeafResources(v2, v1, 99);
    CHECK(r.peak_memory_bytes == 900u);
    CHECK(ReadLeafResources(v2, v1, 5000).peak_memory_bytes == 0u);
    // The baseline is the v1 leaf's: memory.peak of a v2 leaf is taken as it is.
    dir.Write("v2/memory.peak", "220200960\n");
    CHECK(ReadLeafResources(v2, v1, 99).peak_memory_bytes == 220200960u);
  }
  SECTION("a reused v2 leaf: its CPU baseline is subtracted, never below zero") {
    r = ReadLeafResources(v2, v1, 0, 234567);
    CHECK(r.cpu_time_s == Approx(1.0));
    CHECK(r.cpu_source == "cgroup2 cpu.stat");
    CHECK(ReadLeafResources(v2, v1, 0, 2000000).cpu_time_s == Approx(0.0));
    CHECK(r.peak_memory_bytes == 220200960u);  // memory.peak is not the CPU baseline's
  }
  SECTION("neither: memory unset, for the caller's getrusage") {
    std::filesystem::remove(v2 + "/memory.peak");
    r = ReadLeafResources(v2, "");
    CHECK_FALSE(r.peak_memory_bytes.has_value());
    CHECK(r.memory_source.empty());
  }
  SECTION("files that do not parse leave their figures unset") {
    dir.Write("v2/memory.peak", "max\n");
    dir.Write("v2/cpu.stat", "user_usec 5\n");
    dir.Write("v1/memory.max_usage_in_bytes", "12x\n");
    r = ReadLeafResources(v2, v1);
    CHECK_FALSE(r.peak_memory_bytes.has_value());
    CHECK(r.memory_source.empty());
    CHECK_FALSE(r.cpu_time_s.has_value());
    CHECK(r.cpu_source.empty());
  }
  SECTION("a leaf that is gone gives nothing") {
    r = ReadLeafResources(dir.File("absent"), dir.File("absent1"));
    CHECK(r.empty());
    CHECK(r.memory_source.empty());
  }
}

namespace {
common::Result<config::SweepSpec> StudyWith(const std::string& lines) {
  return config::ParseSweep(
      {"[study]\nname = \"s\"\nn_trials = 1\n" + lines +
           "\n[objective]\nkind = \"exec\"\ncommand = [\"true\"]\n\n[space.x]\ntype = "
           "\"float\"\nlow = 0.0\nhigh = 1.0\n",
       "/tmp/s.toml"});
}
}  // namespace

TEST_CASE("sweep: memory_limit and pids_limit", "[cgroup][config]") {
  auto spec = StudyWith("memory_limit = \"2G\"\npids_limit = 64");
  REQUIRE(spec.ok());
  CHECK(spec->study.memory_limit == 2ull << 30);
  CHECK(spec->study.pids_limit == 64);
  CHECK(StudyWith("memory_limit = \"512M\"")->study.memory_limit == 512ull << 20);
  CHECK(StudyWith("memory_limit = \"1.5GiB\"")->study.memory_limit == 3ull << 29);
  CHECK(StudyWith("memory_limit = 67108864")->study.memory_limit == 64ull << 20);
  CHECK(StudyWith("")->study.memory_limit == 0);
  CHECK(StudyWith("")->study.pids_limit == 0);
  for (const char* bad : {"memory_limit = \"lots\"", "memory_limit = \"2X\"",
                          "memory_limit = \"-1G\"", "memory_limit = 0", "memory_limit = \"1K\"",
                          "memory_limit = true", "pids_limit = 0", "pids_limit = \"many\""}) {
    INFO(bad);
    auto r = StudyWith(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("/tmp/s.toml:4:") != std::string::npos);
    CHECK(r.status().message().find("expected") != std::string::npos);
  }
}

}  // namespace triald::testing
