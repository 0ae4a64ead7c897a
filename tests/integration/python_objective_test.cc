// [objective] kind = "python" end to end: a real triald runs Optuna-style objective functions
// through the Python runner (python3 -m triald run), answering their suggests on the trial
// channel. Parameters of a branch not taken are absent from the trial, not zero.

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

const std::string kExamples = ExamplesDir();

}  // namespace

TEST_CASE("example conditional.toml: an Optuna-style objective with a conditional space",
          "[python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // The example as it stands, shorter; submitted from the examples folder so that its
  // function = "conditional.py:objective" resolves there.
  const std::string toml =
      SetTomlKey(ReadTextFile(kExamples + "/conditional.toml"), "n_trials", "14");
  const std::string study = d.Submit(toml, kExamples + "/conditional.toml");
  json::object status = d.WaitStudy(study, 120);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 14);
  INFO(d.log());
  int sgd = 0, adam = 0;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
    const json::object& p = t.at("params").as_object();
    const std::string optimizer(p.at("optimizer").as_string());
    CHECK(p.contains("lr"));
    if (optimizer == "sgd") {
      ++sgd;
      CHECK(p.contains("momentum"));
      CHECK_FALSE(p.contains("beta1"));
    } else {
      ++adam;
      CHECK(optimizer == "adam");
      CHECK(p.contains("beta1"));
      CHECK_FALSE(p.contains("momentum"));
    }
    const int64_t layers = p.at("n_layers").as_int64();
    for (int i = 0; i < 3; ++i) {
      CHECK(p.contains("width_" + std::to_string(i)) == (i < layers));
    }
    CHECK(t.at("intermediate").as_array().size() == 3);
  }
  CHECK(sgd > 0);
  CHECK(adam > 0);

  // trialctl shows each trial's own parameters.
  Ctl ctl = Trialctl(d.socket(), {"trials", study, "--json"});
  INFO(ctl.err);
  REQUIRE(ctl.code == 0);
  json::array listed = json::parse(ctl.out).as_array();
  REQUIRE(listed.size() == 14);
  for (size_t i = 0; i < listed.size(); ++i) {
    // The same names, and the same values (up to the JSON reader's last bit).
    const json::object& shown = listed[i].at("params").as_object();
    const json::object& stored = trials[i].at("params").as_object();
    REQUIRE(shown.size() == stored.size());
    for (const auto& kv : stored) {
      INFO(std::string(kv.key()));
      REQUIRE(shown.contains(kv.key()));
      if (kv.value().is_string()) {
        CHECK(shown.at(kv.key()) == kv.value());
      } else {
        CHECK(shown.at(kv.key()).to_number<double>() ==
              Approx(kv.value().to_number<double>()).epsilon(1e-15));
      }
    }
  }
  CHECK(WaitNoProcessesOfStudy(study).empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

TEST_CASE("an objective that imports optuna and raises optuna.TrialPruned ends PRUNED",
          "[python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("prunes.py",
            "import optuna\n\n\n"
            "def objective(trial):\n"
            "    x = trial.suggest_float(\"x\", 0.0, 1.0)\n"
            "    trial.report(x, 0)\n"
            "    trial.report(x + 1.0, 1)\n"
            "    raise optuna.TrialPruned()\n");
  const std::string toml = R"([study]
name = "optuna-pruned"
n_trials = 3
parallelism = 3

[objective]
kind = "python"
function = "prunes.py:objective"
python = "/usr/bin/python3"
)";
  const std::string study = d.Submit(toml, dir.Write("prunes.toml", toml));
  d.WaitStudy(study, 120);
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 3);
  INFO(d.log());
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "PRUNED");
    const double x = t.at("params").at("x").to_number<double>();
    CHECK(t.at("value").to_number<double>() == x + 1.0);  // the last intermediate value
  }
}

TEST_CASE("kind = python: a trial told to stop through should_prune ends PRUNED without a signal",
          "[python][prune][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  // Later trials report worse values at every step: from trial 2 on the median pruner stops
  // them at step 0. kill_grace is long, so a trial that had to be signalled would take 30 s.
  dir.Write("coop.py",
            "import triald\n\n\n"
            "def objective(trial):\n"
            "    trial.suggest_float(\"x\", 0.0, 1.0)\n"
            "    for step in range(3):\n"
            "        trial.report(float(trial.number), step)\n"
            "        if trial.should_prune():\n"
            "            raise triald.TrialPruned()\n"
            "    return float(trial.number)\n");
  const std::string toml = R"([study]
name = "coop"
n_trials = 4
parallelism = 1
kill_grace = 30

[objective]
kind = "python"
function = "coop.py:objective"

[pruner]
kind = "median"
n_startup_trials = 2
)";
  const auto start = std::chrono::steady_clock::now();
  const std::string study = d.Submit(toml, dir.Write("coop.toml", toml));
  d.WaitStudy(study, 120);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 4);
  INFO(d.log());
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    const int64_t n = t.at("number").as_int64();
    CHECK(t.at("state").as_string() == (n < 2 ? "COMPLETE" : "PRUNED"));
    CHECK(t.at("value").to_number<double>() == static_cast<double>(n));
    if (n >= 2) CHECK(t.at("intermediate").as_array().size() == 1);  // stopped at step 0
  }
  CHECK(took < 25);  // no trial waited out kill_grace
}

}  // namespace triald::testing
