// The daemon config file ([daemon], [devices]) and the sweep keys that use devices and retries
// ([study] gpus_per_trial, retries, retry_on): values read, and mistakes reported with file,
// line, column, key and what was expected.

#include "config/daemon_config.h"

#include <catch2/catch.hpp>
#include <string>

#include "config/sweep.h"

namespace triald::config {
namespace {

TEST_CASE("the daemon config gives state, socket and devices", "[config][devices]") {
  auto c = ParseDaemonConfig(
      "[daemon]\nstate_dir = \"state\"\nsocket = \"/run/triald/triald.sock\"\n"
      "log_level = \"debug\"\nshutdown_timeout = 30\n\n"
      "[devices]\ncpu = 8\ngpus = [0, 2]\nslots_per_gpu = 2\n"
      "nvml_library = \"/opt/libnvidia-ml.so.1\"\ngpu_release_timeout = 12.5\n",
      "/etc/triald/triald.toml");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->state_dir == "/etc/triald/state");  // relative to the file
  CHECK(c->socket == "/run/triald/triald.sock");
  CHECK(c->log_level == "debug");
  CHECK(c->shutdown_timeout == 30);
  CHECK(c->devices.cpu == 8);
  REQUIRE(c->devices.gpus.has_value());
  CHECK(*c->devices.gpus == std::vector<int>{0, 2});
  CHECK(c->devices.slots_per_gpu == 2);
  CHECK(c->devices.nvml_library == "/opt/libnvidia-ml.so.1");
  CHECK(c->devices.gpu_release_timeout == 12.5);

  auto empty = ParseDaemonConfig("", "x.toml");
  REQUIRE(empty.ok());
  CHECK_FALSE(empty->devices.gpus.has_value());
  CHECK(empty->devices.slots_per_gpu == 1);
}

TEST_CASE("the config file installed with the systemd unit parses", "[config][devices]") {
  auto c = ParseDaemonConfigFile(std::string(TRIALD_SOURCE_DIR) + "/config/systemd/triald.toml");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->devices.slots_per_gpu == 1);
  CHECK(c->devices.gpu_release_timeout == 60);
  CHECK_FALSE(c->devices.gpus.has_value());  // every GPU NVML reports
}

TEST_CASE("daemon config mistakes name the place, the key and what was expected",
          "[config][devices]") {
  auto msg = [](const std::string& text) {
    auto c = ParseDaemonConfig(text, "/etc/triald/triald.toml");
    REQUIRE_FALSE(c.ok());
    return c.status().message();
  };
  CHECK(msg("[devices]\ngpus = [0, 0]\n") ==
        "/etc/triald/triald.toml:2:8: [devices] gpus = [0, 0]: expected an array of distinct GPU "
        "indices >= 0, e.g. [0, 1]");
  CHECK(msg("[devices]\nslots_per_gpu = 0\n") ==
        "/etc/triald/triald.toml:2:17: [devices] slots_per_gpu = 0: expected an integer from 1 "
        "to 64");
  CHECK_THAT(msg("[devices]\ngpu = [0]\n"),
             Catch::StartsWith("/etc/triald/triald.toml:2:1: [devices] unknown key \"gpu\"; "
                               "expected one of cpu, gpus,"));
  CHECK_THAT(msg("[gpus]\n"), Catch::Contains("unknown table [gpus]"));
  CHECK_THAT(msg("[devices\n"), Catch::StartsWith("/etc/triald/triald.toml:1:"));
  CHECK_THAT(msg("[devices]\ngpu_release_timeout = -1\n"),
             Catch::Contains("gpu_release_timeout = -1: expected a number of seconds > 0"));
}

TEST_CASE("[slurm] gives a Slurm study's executor defaults", "[config][slurm]") {
  auto c = ParseDaemonConfig(
      "[slurm]\npartition = \"gpu\"\naccount = \"ml\"\nqos = \"high\"\n"
      "constraint = \"a100,80gb\"\n",
      "/etc/triald/triald.toml");
  REQUIRE(c.ok());
  CHECK(c->slurm.partition == "gpu");
  CHECK(c->slurm.account == "ml");
  CHECK(c->slurm.qos == "high");
  CHECK(c->slurm.constraint == "a100,80gb");
  auto bad = ParseDaemonConfig("[slurm]\npartition = \"a b\"\n", "t.toml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "t.toml:2:13: [slurm] partition = \"a b\": expected a Slurm name without spaces, e.g. "
        "\"gpu\"");
  auto unknown = ParseDaemonConfig("[slurm]\ntime = 10\n", "t.toml");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Catch::Contains("[slurm] unknown key \"time\""));
}

TEST_CASE("[devices] gpu_sample_interval is the GPU sampling interval", "[config][devices]") {
  auto absent = ParseDaemonConfig("", "x.toml");
  REQUIRE(absent.ok());
  CHECK(absent->devices.gpu_sample_interval == 0.5);
  auto given = ParseDaemonConfig("[devices]\ngpu_sample_interval = 0.1\n", "x.toml");
  INFO(given.status().ToString());
  REQUIRE(given.ok());
  CHECK(given->devices.gpu_sample_interval == 0.1);
  for (const char* bad : {"0", "-1", "61", "\"1s\""}) {
    auto c =
        ParseDaemonConfig(std::string("[devices]\ngpu_sample_interval = ") + bad + "\n", "x.toml");
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.status().message(),
               Catch::StartsWith(std::string("x.toml:2:23: [devices] gpu_sample_interval = ") +
                                 bad + ": expected a number of seconds > 0 and <= 60"));
  }
}

TEST_CASE("the daemon config names a shared storage and this node", "[config][cluster]") {
  auto c = ParseDaemonConfig(
      "[daemon]\nstorage = \"postgresql://triald@db:5432/triald\"\nnode_name = \"box-1\"\n"
      "heartbeat_interval = 0.5\nnode_timeout = 10\n",
      "/etc/triald/triald.toml");
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  CHECK(c->storage == "postgresql://triald@db:5432/triald");
  CHECK(c->node_name == "box-1");
  CHECK(c->heartbeat_interval == 0.5);
  CHECK(c->node_timeout == 10);
  auto msg = [](const std::string& text) {
    auto bad = ParseDaemonConfig(text, "/etc/triald/triald.toml");
    REQUIRE_FALSE(bad.ok());
    return bad.status().message();
  };
  CHECK_THAT(
      msg("[daemon]\nstorage = 5\n"),
      Catch::StartsWith("/etc/triald/triald.toml:2:11: [daemon] storage = 5: expected a URL"));
  CHECK_THAT(msg("[daemon]\nnode_name = \"\"\n"),
             Catch::Contains("expected a non-empty node name"));
  CHECK_THAT(msg("[daemon]\nnode_timeout = 0\n"),
             Catch::Contains("node_timeout = 0: expected a number of seconds > 0"));
  // Durations past 365 days would overflow the clocks they are converted to.
  for (const char* line :
       {"node_timeout = 1e10", "shutdown_timeout = 31536001", "heartbeat_interval = 1e300"}) {
    INFO(line);
    CHECK_THAT(msg(std::string("[daemon]\n") + line + "\n"),
               Catch::EndsWith("expected a number of seconds > 0 and <= 31536000 (365 days)"));
  }
}

TEST_CASE("[daemon] resource_accounting is a boolean, on unless set", "[config]") {
  auto on = ParseDaemonConfig("[daemon]\nstate_dir = \"/s\"\n", "/etc/triald/triald.toml");
  REQUIRE(on.ok());
  CHECK_FALSE(on->resource_accounting.has_value());
  auto off =
      ParseDaemonConfig("[daemon]\nresource_accounting = false\n", "/etc/triald/triald.toml");
  REQUIRE(off.ok());
  CHECK(off->resource_accounting == false);
  auto bad =
      ParseDaemonConfig("[daemon]\nresource_accounting = \"no\"\n", "/etc/triald/triald.toml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "/etc/triald/triald.toml:2:23: [daemon] resource_accounting = \"no\": expected true or "
        "false");
}

TEST_CASE("[daemon] http is the dashboard's address, off unless set", "[config]") {
  auto off = ParseDaemonConfig("[daemon]\nstate_dir = \"/s\"\n", "/etc/triald/triald.toml");
  REQUIRE(off.ok());
  CHECK(off->http.empty());
  auto on = ParseDaemonConfig("[daemon]\nhttp = \"127.0.0.1:8080\"\n", "/etc/triald/triald.toml");
  REQUIRE(on.ok());
  CHECK(on->http == "127.0.0.1:8080");
  for (const char* bad : {"[daemon]\nhttp = 8080\n", "[daemon]\nhttp = \"\"\n"}) {
    auto r = ParseDaemonConfig(bad, "/etc/triald/triald.toml");
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(),
               Catch::StartsWith("/etc/triald/triald.toml:2:") &&
                   Catch::EndsWith("[daemon] http = " +
                                   std::string(bad).substr(16, std::string(bad).size() - 17) +
                                   ": expected HOST:PORT, e.g. \"127.0.0.1:8080\""));
  }
}

TEST_CASE("the --gpus list takes distinct indices", "[config][devices]") {
  CHECK(*ParseGpuList("0,1,3") == std::vector<int>{0, 1, 3});
  CHECK(ParseGpuList("none")->empty());
  CHECK_FALSE(ParseGpuList("0,0").ok());
  CHECK_FALSE(ParseGpuList("0,").ok());
  CHECK_FALSE(ParseGpuList("a").ok());
  CHECK_THAT(ParseGpuList("1,-2").status().message(), Catch::Contains("\"-2\" is not a GPU index"));
}

std::string Sweep(const std::string& study_extra) {
  return "[study]\nname = \"s\"\nn_trials = 4\n" + study_extra +
         "\n[objective]\nkind = \"exec\"\ncommand = [\"/bin/true\"]\n"
         "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";
}

TEST_CASE("[study] gpus_per_trial, retries and retry_on", "[config][retry]") {
  auto plain = ParseSweep({Sweep(""), "s.toml"});
  REQUIRE(plain.ok());
  CHECK(plain->study.gpus_per_trial == 0);
  CHECK(plain->study.retries == 0);
  CHECK(plain->study.retry_on.empty());

  auto s = ParseSweep(
      {Sweep("gpus_per_trial = 2\nretries = 3\nretry_on = [\"lost\", \"oom\", \"timeout\"]\n"),
       "s.toml"});
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  CHECK(s->study.gpus_per_trial == 2);
  CHECK(s->study.retries == 3);
  CHECK(s->study.retry_on == std::vector<std::string>{"lost", "oom", "timeout"});

  auto defaults = ParseSweep({Sweep("retries = 1\n"), "s.toml"});
  REQUIRE(defaults.ok());
  CHECK(defaults->study.retry_on ==
        std::vector<std::string>{"lost", "signal", "oom", "preempted", "node_failure"});

  auto msg = [](const std::string& extra) {
    auto r = ParseSweep({Sweep(extra), "s.toml"});
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(msg("retries = 1\nretry_on = [\"signal\", \"protocol\"]\n") ==
        "s.toml:5:23: [study] retry_on[1] = \"protocol\": not a retryable failure reason; "
        "expected one of \"lost\", \"signal\", \"oom\", \"timeout\", \"exit\", \"shutdown\", "
        "\"stalled\", \"preempted\", \"node_failure\", \"slurm_time_limit\", \"slurm_oom\" or "
        "\"slurm_cancelled\"");
  CHECK_THAT(msg("retry_on = [\"lost\"]\n"),
             Catch::Contains("retry_on = [\"lost\"]: has no effect while retries = 0"));
  CHECK_THAT(msg("retries = -1\n"), Catch::Contains("[study] retries = -1:"));
  CHECK_THAT(msg("gpus_per_trial = 1.5\n"), Catch::Contains("[study] gpus_per_trial = 1.5:"));
}

}  // namespace
}  // namespace triald::config
