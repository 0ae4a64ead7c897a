// Studies with several objectives and constraints end to end through the daemon, with an exec
// worker (an sh script writing report lines): values and constraints stored and shown by
// `trials --json` and `trialctl`, a wrong number of values ends FAIL(protocol), sweeps that mix
// direction and directions or prune several objectives are refused at submit, and a restart
// keeps what was stored.

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

// Its final line carries x and TRIALD_N_OBJECTIVES, so both the parameter and the environment
// are checked; its constraint is x (feasible when x <= 0).
const char* const kWorker =
    "x=$(printf %s \"$TRIALD_PARAMS\" | sed 's/.*\"x\":\\([^,}]*\\).*/\\1/')\n"
    "echo \"{\\\"type\\\":\\\"constraints\\\",\\\"values\\\":[$x]}\" >&3\n"
    "echo \"{\\\"type\\\":\\\"final\\\",\\\"values\\\":[$x, $TRIALD_N_OBJECTIVES]}\" >&3\n";

std::string TwoObjectiveSweep(const std::string& study, int n_trials, const std::string& dir) {
  std::string toml = ExecSweep(study, "[\"sh\", \"worker.sh\"]", n_trials, 2, 0, 2, dir);
  toml.replace(toml.find("[objective]\n"), 12,
               "directions = [\"minimize\", \"maximize\"]\n\n[objective]\n");
  return toml;
}

double Number(const json::value& v) { return v.to_number<double>(); }

// Checks every trial of the two-objective study against what the worker sent; returns how many
// were feasible.
int CheckTrials(const json::array& trials) {
  int feasible = 0;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const double x = Number(t.at("params").at("x"));
    CHECK(t.at("value").is_null());  // no single value with several objectives
    REQUIRE(t.at("values").is_array());
    REQUIRE(t.at("values").as_array().size() == 2);
    CHECK(Number(t.at("values").as_array()[0]) == x);  // bit for bit
    CHECK(Number(t.at("values").as_array()[1]) == 2);  // TRIALD_N_OBJECTIVES
    REQUIRE(t.at("constraints").is_array());
    REQUIRE(t.at("constraints").as_array().size() == 1);
    CHECK(Number(t.at("constraints").as_array()[0]) == x);
    CHECK(t.at("feasible").as_bool() == (x <= 0));
    feasible += x <= 0;
  }
  return feasible;
}

}  // namespace

TEST_CASE("a two-objective study with constraints runs end to end and survives a restart",
          "[integration][objectives]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  dir.Write("worker.sh", kWorker, 0755);
  const int n = 8;
  const std::string toml = TwoObjectiveSweep("pareto", n, dir.path());
  daemon.Submit(toml, dir.Write("pareto.toml", toml));
  json::object status = daemon.WaitStudy("pareto");
  CHECK(status.at("state").as_string() == "COMPLETE");
  CHECK(status.at("directions") == json::array{"minimize", "maximize"});
  CHECK(status.at("best").is_null());

  json::array trials = daemon.Trials("pareto");
  REQUIRE(trials.size() == n);
  const int feasible = CheckTrials(trials);
  // The seed gives feasible and infeasible trials, or this test proves less than it says.
  CHECK(feasible > 0);
  CHECK(feasible < n);
  // The second objective is the same for all: the front is the feasible trial of least x.
  CHECK(status.at("pareto_front_size").as_int64() == 1);

  Ctl text = Trialctl(daemon.socket(), {"trials", "pareto"});
  REQUIRE(text.code == 0);
  CHECK_THAT(text.out, Catch::StartsWith("#"));
  CHECK_THAT(text.out, Catch::Contains("VALUES"));
  CHECK_THAT(text.out, Catch::Contains("FEASIBLE"));
  CHECK_THAT(text.out, Catch::Contains(", 2 "));
  CHECK_THAT(text.out, Catch::Contains(" yes "));
  CHECK_THAT(text.out, Catch::Contains(" no "));
  Ctl st = Trialctl(daemon.socket(), {"status", "pareto"});
  REQUIRE(st.code == 0);
  CHECK_THAT(st.out, Catch::Contains("COMPLETE, minimize, maximize"));
  CHECK_THAT(st.out, Catch::Contains("pareto front: 1 trial"));
  CHECK_THAT(st.out, !Catch::Contains("best:"));

  // A restart keeps every value and constraint.
  REQUIRE(daemon.Stop() == 0);
  daemon.Start();
  json::array again = daemon.Trials("pareto");
  CHECK(again == trials);
  CHECK(CheckTrials(again) == feasible);
  CHECK(daemon.Call("status", {{"study", "pareto"}}).at("directions") ==
        json::array{"minimize", "maximize"});
}

TEST_CASE("metric_names name the objectives in status, trials, best, watch and the exports",
          "[integration][objectives]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  dir.Write("worker.sh", kWorker, 0755);
  std::string toml = TwoObjectiveSweep("named", 4, dir.path());
  toml.replace(toml.find("[objective]\n"), 12,
               "metric_names = [\"error rate\", \"throughput\"]\n\n[objective]\n");
  daemon.Submit(toml, dir.Write("named.toml", toml));
  json::object status = daemon.WaitStudy("named");
  REQUIRE(status.at("state").as_string() == "COMPLETE");
  CHECK(status.at("metric_names") == json::array{"error rate", "throughput"});
  CHECK_THAT(Trialctl(daemon.socket(), {"status", "named"}).out,
             Catch::Contains("COMPLETE, minimize error rate, maximize throughput"));
  CHECK_THAT(Trialctl(daemon.socket(), {"trials", "named"}).out,
             Catch::Contains("VALUES (error rate, throughput)"));
  CHECK_THAT(Trialctl(daemon.socket(), {"best", "named"}).out,
             Catch::Contains("(minimize error rate, maximize throughput; "));
  CHECK_THAT(Trialctl(daemon.socket(), {"watch", "named"}).out,
             Catch::Contains("minimize error rate, maximize throughput"));
  // Optuna's names: values_NAME columns, and study:metric_names in its storage.
  Ctl csv = Trialctl(daemon.socket(), {"export", "named", "--format", "csv"});
  REQUIRE(csv.code == 0);
  CHECK_THAT(csv.out, Catch::StartsWith("number,state,values_error rate,values_throughput,"));
  const std::string db = dir.File("named.db");
  REQUIRE(Trialctl(daemon.socket(), {"export", "named", "--format", "optuna", "--out", db}).code ==
          0);
  auto [code, names] = Shell(
      "/usr/bin/python3 -c \"import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
      "'SELECT value_json FROM study_system_attributes WHERE key = ?', "
      "('study:metric_names',)).fetchone()[0])\" " +
      db);
  CHECK(code == 0);
  CHECK(names == "[\"error rate\", \"throughput\"]\n");
  // Renamed after submit (Optuna's set_metric_names); a restart keeps them.
  Ctl renamed = Trialctl(daemon.socket(), {"set", "named", "metric_names=err,tput"});
  CHECK(renamed.code == 0);
  CHECK(renamed.out == "study named: objectives named err, tput\n");
  CHECK(Trialctl(daemon.socket(), {"set", "named", "metric_names=one"}).code != 0);
  REQUIRE(daemon.Stop() == 0);
  daemon.Start();
  CHECK(daemon.Call("status", {{"study", "named"}}).at("metric_names") ==
        json::array{"err", "tput"});
  // A count that does not match the directions is refused at submit by name.
  std::string bad = TwoObjectiveSweep("badnames", 2, dir.path());
  bad.replace(bad.find("[objective]\n"), 12, "metric_names = [\"loss\"]\n\n[objective]\n");
  Ctl refused = Trialctl(daemon.socket(), {"submit", dir.Write("bad.toml", bad)});
  CHECK(refused.code != 0);
  CHECK_THAT(refused.err, Catch::Contains("[study] metric_names") &&
                              Catch::Contains("names 1 objective but [study] has 2 directions"));
}

TEST_CASE("a worker sending the wrong number of values ends FAIL(protocol) naming the count",
          "[integration][objectives]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  dir.Write("worker.sh", "echo '{\"type\":\"final\",\"values\":[1, 2, 3]}' >&3\n", 0755);
  std::string toml = TwoObjectiveSweep("count", 2, dir.path());
  daemon.Submit(toml, dir.Write("count.toml", toml));
  daemon.WaitStudy("count");
  json::array trials = daemon.Trials("count");
  REQUIRE(trials.size() == 2);
  for (const json::value& v : trials) {
    INFO(json::serialize(v));
    CHECK(v.at("state").as_string() == "FAIL");
    CHECK(v.at("fail_reason").as_string() == "protocol");
    CHECK(v.at("fail_detail").as_string() ==
          "final line carried 3 objective values; this study has 2 objectives, so expected 2 "
          "values");
    CHECK(v.at("values").is_null());
  }

  // One objective, a values array of one: accepted, as value.
  dir.Write("one.sh",
            "echo '{\"type\":\"constraints\",\"values\":[-1]}' >&3\n"
            "echo '{\"type\":\"final\",\"values\":[0.5]}' >&3\n",
            0755);
  std::string single = ExecSweep("single", "[\"sh\", \"one.sh\"]", 1, 1, 0, 2, dir.path());
  daemon.Submit(single, dir.Write("single.toml", single));
  daemon.WaitStudy("single");
  json::array one = daemon.Trials("single");
  REQUIRE(one.size() == 1);
  CHECK(one[0].at("state").as_string() == "COMPLETE");
  CHECK(Number(one[0].at("value")) == 0.5);
  CHECK(one[0].at("values") == json::array{0.5});
  CHECK(one[0].at("constraints") == json::array{-1.0});
  CHECK(one[0].at("feasible").as_bool());
}

TEST_CASE("sweeps with both direction keys, or a pruner for several objectives, are refused",
          "[integration][objectives]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  dir.Write("worker.sh", kWorker, 0755);
  std::string both = TwoObjectiveSweep("both", 2, dir.path());
  both.replace(both.find("directions"), 0, "direction = \"minimize\"\n");
  Ctl r = Trialctl(daemon.socket(), {"submit", dir.Write("both.toml", both)});
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("both.toml:9:14: [study] directions = "));
  CHECK_THAT(r.err, Catch::Contains("and direction = \"minimize\" (at "));

  std::string pruned =
      TwoObjectiveSweep("pruned", 2, dir.path()) + "\n[pruner]\nkind = \"median\"\n";
  r = Trialctl(daemon.socket(), {"submit", dir.Write("pruned.toml", pruned)});
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("[pruner] kind = \"median\": pruning is not supported for a "
                                    "study with several objectives"));
  // Nothing was stored.
  CHECK(daemon.Call("studies").as_array().empty());
}

}  // namespace triald::testing
