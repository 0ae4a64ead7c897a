// trialctl against a real triald: verbs, --json shapes, errors and exit codes.
#include <catch2/catch.hpp>
#include <sstream>

#include "daemon/ctl/trialctl.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

struct Ctl {
  int code = -1;
  std::string out, err;
};

Ctl Run(const std::string& socket, std::vector<std::string> args) {
  std::ostringstream out, err;
  args.insert(args.begin(), {"--socket", socket});
  Ctl c;
  c.code = ctl::RunTrialctl(args, out, err);
  c.out = out.str();
  c.err = err.str();
  return c;
}

}  // namespace

TEST_CASE("trialctl without a daemon: one clear line and exit code 3", "[trialctl][integration]") {
  TempDir dir;
  Ctl c = Run(dir.File("nothing.sock"), {"studies"});
  CHECK(c.code == ctl::kExitUnavailable);
  CHECK_THAT(c.err, Catch::StartsWith("trialctl: cannot reach triald at " + dir.File("nothing.sock")));
  CHECK(std::count(c.err.begin(), c.err.end(), '\n') == 1);
}

TEST_CASE("trialctl bad command lines exit 2 with usage", "[trialctl][integration]") {
  CHECK(Run("/x", {}).code == ctl::kExitUsage);
  CHECK(Run("/x", {"frobnicate"}).code == ctl::kExitUsage);
  CHECK(Run("/x", {"status"}).code == ctl::kExitUsage);
  CHECK(Run("/x", {"logs", "s", "abc"}).code == ctl::kExitUsage);
  CHECK(Run("/x", {"trials", "s", "--bogus"}).code == ctl::kExitUsage);
  Ctl help = Run("/x", {"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("submit FILE [--wait]"));
}

TEST_CASE("trialctl submit --wait, trials --json, best --json, logs, studies, status",
          "[trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("w.sh",
            "echo \"hello from $TRIALD_TRIAL\"\necho warn >&2\n"
            "echo '{\"type\":\"final\",\"value\":'$TRIALD_TRIAL'}' >&3\n",
            0755);
  std::string sweep =
      dir.Write("s.toml", ExecSweep("ctl", "[\"sh\", \"w.sh\"]", 4, 2));
  Ctl submit = Run(d.socket(), {"submit", sweep, "--wait"});
  INFO(submit.err);
  REQUIRE(submit.code == 0);
  CHECK_THAT(submit.out, Catch::StartsWith("ctl\n"));
  CHECK_THAT(submit.out, Catch::Contains("best trial 0: COMPLETE  value 0"));

  Ctl trials = Run(d.socket(), {"trials", "ctl", "--json"});
  REQUIRE(trials.code == 0);
  json::array arr = json::parse(trials.out).as_array();
  REQUIRE(arr.size() == 4);
  for (const json::value& v : arr) {
    const json::object& t = v.as_object();
    for (const char* key : {"number", "state", "value", "params", "fail_reason", "duration_s"}) {
      CHECK(t.contains(key));
    }
    CHECK(t.at("state").as_string() == "COMPLETE");
    CHECK(t.at("params").as_object().contains("x"));
  }
  Ctl best = Run(d.socket(), {"best", "ctl", "--json"});
  REQUIRE(best.code == 0);
  CHECK(json::parse(best.out).at("number").as_int64() == 0);
  CHECK(json::parse(best.out).at("value").to_number<double>() == 0.0);

  Ctl table = Run(d.socket(), {"trials", "ctl"});
  CHECK_THAT(table.out, Catch::StartsWith("#  STATE"));
  Ctl studies = Run(d.socket(), {"studies"});
  CHECK_THAT(studies.out, Catch::Contains("ctl    COMPLETE"));
  Ctl status = Run(d.socket(), {"status", "ctl"});
  CHECK_THAT(status.out, Catch::Contains("4/4 finished (4 complete, 0 pruned, 0 failed)"));

  Ctl out_log = Run(d.socket(), {"logs", "ctl", "2"});
  CHECK(out_log.code == 0);
  CHECK(out_log.out == "hello from 2\n");
  Ctl err_log = Run(d.socket(), {"logs", "ctl", "2", "--stderr"});
  CHECK(err_log.out == "warn\n");

  SECTION("errors: unknown study, duplicate name, invalid sweep, missing file") {
    Ctl unknown = Run(d.socket(), {"status", "nope"});
    CHECK(unknown.code == ctl::kExitError);
    CHECK(unknown.err == "trialctl: no study named \"nope\" (see `trialctl studies`)\n");
    Ctl dup = Run(d.socket(), {"submit", sweep});
    CHECK(dup.code == ctl::kExitError);
    CHECK_THAT(dup.err, Catch::Contains("already exists"));
    CHECK_THAT(dup.err, Catch::Contains(sweep));
    std::string bad = dir.Write("bad.toml", "[study]\nname = \"b\"\nn_trials = 0\n");
    Ctl invalid = Run(d.socket(), {"submit", bad});
    CHECK(invalid.code == ctl::kExitError);
    CHECK_THAT(invalid.err, Catch::Contains(bad + ":3:"));
    CHECK_THAT(invalid.err, Catch::Contains("n_trials"));
    Ctl missing = Run(d.socket(), {"submit", dir.File("missing.toml")});
    CHECK(missing.code == ctl::kExitError);
    CHECK_THAT(missing.err, Catch::Contains("missing.toml"));
    // Nothing was stored by the failed submissions.
    Ctl all = Run(d.socket(), {"studies", "--json"});
    CHECK(json::parse(all.out).as_array().size() == 1);
    Ctl cancel_done = Run(d.socket(), {"cancel", "ctl"});
    CHECK(cancel_done.code == ctl::kExitError);
  }
}

TEST_CASE("trialctl cancel stops a running study", "[trialctl][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("slow.sh", "sleep 1000\n", 0755);
  std::string sweep = dir.Write("s.toml", ExecSweep("long", "[\"sh\", \"slow.sh\"]", 10, 2));
  REQUIRE(Run(d.socket(), {"submit", sweep}).code == 0);
  Ctl c = Run(d.socket(), {"cancel", "long"});
  CHECK(c.code == 0);
  json::object st = d.WaitStudy("long");
  CHECK(st.at("state").as_string() == "CANCELLED");
  CHECK(WaitNoProcessesOfStudy("long").empty());
  json::array trials = d.Trials("long");
  CHECK(trials.size() <= 2);
  for (const json::value& t : trials) CHECK(t.at("fail_reason").as_string() == "cancelled");
}

}  // namespace triald::testing
