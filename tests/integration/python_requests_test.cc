// Requests on the two-way trial channel through a real triald: bad suggest requests written by a
// raw exec worker end its trial FAIL(protocol) with a message naming the field, as `trialctl
// trials --json` shows it; and the deprecated suggest aliases of a kind = "python" objective are
// stored with the parameters and distributions Optuna 3.1 stores for the same calls (compared
// by check_optuna_aliases.py with python3-optuna).

#include <sys/wait.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

struct BadRequest {
  const char* what;
  const char* lines;                // written to the trial channel, one request a line
  std::vector<const char*> detail;  // each must be in the trial's fail_detail
};

const std::vector<BadRequest> kBadRequests = {
    {"unknown distribution type",
     R"({"type":"suggest","name":"a","distribution":{"type":"normal","low":0,"high":1}})",
     {"distribution.type", "normal"}},
    {"float low > high",
     R"({"type":"suggest","name":"a","distribution":{"type":"float","low":2,"high":1}})",
     {"\"a\"", "distribution.low = 2.0 is greater than distribution.high = 1.0"}},
    {"int low > high",
     R"({"type":"suggest","name":"n","distribution":{"type":"int","low":5,"high":1}})",
     {"\"n\"", "distribution.low = 5 is greater than distribution.high = 1"}},
    {"empty choices",
     R"({"type":"suggest","name":"c","distribution":{"type":"categorical","choices":[]}})",
     {"\"c\"", "distribution.choices = []"}},
    {"float log with low <= 0",
     R"({"type":"suggest","name":"lr","distribution":{"type":"float","low":0,"high":1,"log":true}})",
     {"\"lr\"", "distribution.low = 0", "log"}},
    {"int log with low <= 0",
     R"({"type":"suggest","name":"n","distribution":{"type":"int","low":0,"high":8,"log":true}})",
     {"\"n\"", "distribution.low = 0", "log"}},
    {"same name, another distribution",
     R"({"type":"suggest","name":"a","distribution":{"type":"float","low":0,"high":1}}
{"type":"suggest","name":"a","distribution":{"type":"int","low":0,"high":3}})",
     {"\"a\"", "differs from", "already has in this trial"}},
    {"suggest after final",
     R"({"type":"final","value":1}
{"type":"suggest","name":"a","distribution":{"type":"float","low":0,"high":1}})",
     {"\"a\"", "after the final value"}},
};

}  // namespace

TEST_CASE("bad suggest requests from an exec worker end its trial FAIL(protocol) naming the field",
          "[python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // One request file per trial number; the worker writes its own and then waits, so that it is
  // the daemon that ends the trial.
  std::filesystem::create_directories(dir.File("requests"));
  for (size_t i = 0; i < kBadRequests.size(); ++i) {
    dir.Write("requests/" + std::to_string(i), std::string(kBadRequests[i].lines) + "\n");
  }
  dir.Write("bad.sh",
            "cat \"requests/$TRIALD_TRIAL\" >&\"$TRIALD_REPORT_FD\" || exit 3\n"
            "exec sleep 30\n",
            0755);
  const int n = static_cast<int>(kBadRequests.size());
  const std::string toml = ExecSweep("bad", "[\"sh\", \"bad.sh\"]", n, 4, 10, 1, dir.path());
  d.Submit(toml, dir.Write("bad.toml", toml));
  json::object status = d.WaitStudy("bad", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");

  Ctl ctl = Trialctl(d.socket(), {"trials", "bad", "--json"});
  INFO(ctl.err);
  REQUIRE(ctl.code == 0);
  json::array trials = json::parse(ctl.out).as_array();
  REQUIRE(static_cast<int>(trials.size()) == n);
  INFO(d.log());
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    const BadRequest& bad = kBadRequests.at(t.at("number").as_int64());
    INFO(bad.what << ": " << json::serialize(t));
    CHECK(t.at("state").as_string() == "FAIL");
    CHECK(t.at("fail_reason") == "protocol");
    REQUIRE(t.at("fail_detail").is_string());
    const std::string detail(t.at("fail_detail").as_string());
    for (const char* part : bad.detail) CHECK_THAT(detail, Catch::Contains(part));
  }
  // The conflict names both distributions, the one the trial holds and the new one.
  CHECK_THAT(std::string(trials[6].at("fail_detail").as_string()),
             Catch::Contains("distribution int [0, 3] differs from float [0"));
  CHECK(WaitNoProcessesOfStudy("bad").empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

TEST_CASE("kind = python: the deprecated suggest aliases are stored as Optuna 3.1 stores them",
          "[python][export][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("aliases.py",
            "import warnings\n\n\n"
            "def objective(trial):\n"
            "    with warnings.catch_warnings():\n"
            "        warnings.simplefilter('ignore')\n"
            "        a = trial.suggest_uniform('a', -1.0, 1.0)\n"
            "        b = trial.suggest_loguniform('b', 1e-4, 1.0)\n"
            "        c = trial.suggest_discrete_uniform('c', 0.0, 1.0, 0.25)\n"
            "        e = trial.suggest_discrete_uniform('e', 1, 3, 1)\n"
            "        d = trial.suggest_int('d', 1, 10, 3)\n"
            "        f = trial.suggest_int('f', 1, 64, 1, True)\n"
            "        g = trial.suggest_int('g', 0, 8, 2, False)\n"
            "    return a + b + c + d + e + f + g\n");
  const std::string toml = R"([study]
name = "aliases"
n_trials = 3
parallelism = 3

[objective]
kind = "python"
function = "aliases.py:objective"

[sampler]
kind = "random"
seed = 11
)";
  d.Submit(toml, dir.Write("aliases.toml", toml));
  json::object status = d.WaitStudy("aliases", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("aliases");
  REQUIRE(trials.size() == 3);
  INFO(d.log());
  INFO(json::serialize(trials));
  CHECK(CountState(trials, "COMPLETE") == 3);

  const std::string db = dir.File("aliases.db");
  Ctl opt = Trialctl(d.socket(), {"export", "aliases", "--format", "optuna", "--out", db});
  INFO(opt.err);
  REQUIRE(opt.code == 0);
  auto [code, output] = Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
                              "/tests/integration/check_optuna_aliases.py " + db + " aliases " +
                              dir.File("aliases.py") + " objective");
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Catch::Contains("3 trials match"));
}

}  // namespace triald::testing
