// [objective] kind = "python" with several objectives and constraints, end to end: a real triald
// runs Optuna-style objectives that return tuples through the Python runner, with constraints
// from trial.set_constraints() and from a constraints function named in the sweep file.

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

std::vector<double> Numbers(const json::value& v) {
  std::vector<double> out;
  for (const json::value& e : v.as_array()) out.push_back(e.to_number<double>());
  return out;
}

const char* const kObjectives =
    "import triald\n\n\n"
    "def two(trial):\n"
    "    x = trial.suggest_float(\"x\", 0.0, 1.0)\n"
    "    trial.set_user_attr(\"memory_gb\", 16.0 * x)\n"
    "    return x * x, (x - 1.0) ** 2\n\n\n"
    "def two_set_constraints(trial):\n"
    "    x = trial.suggest_float(\"x\", 0.0, 1.0)\n"
    "    trial.set_constraints([x - 0.5, -1.0])\n"
    "    return x, 1.0 - x\n\n\n"
    "def one(trial):\n"
    "    return trial.suggest_float(\"x\", 0.0, 1.0)\n\n\n"
    "def fits_in_8gb(frozen):\n"
    "    assert frozen.values == [frozen.params[\"x\"] ** 2, (frozen.params[\"x\"] - 1.0) ** 2]\n"
    "    return [frozen.user_attrs[\"memory_gb\"] - 8.0]\n";

std::string Sweep(const std::string& name, const std::string& function,
                  const std::string& more = "") {
  return "[study]\nname = \"" + name +
         "\"\ndirections = [\"minimize\", \"minimize\"]\nn_trials = 6\nparallelism = 3\n\n"
         "[objective]\nkind = \"python\"\nfunction = \"objectives.py:" +
         function + "\"\npython = \"/usr/bin/python3\"\n" + more;
}

// Writes objectives.py, submits Sweep(name, function, more) to `d` and waits for the study;
// returns its final status.
json::object RunStudy(TestDaemon& d, TempDir& dir, const std::string& name,
                      const std::string& function, const std::string& more = "") {
  dir.Write("objectives.py", kObjectives);
  const std::string toml = Sweep(name, function, more);
  return d.WaitStudy(d.Submit(toml, dir.Write("two.toml", toml)), 120);
}

}  // namespace

TEST_CASE("kind = python: a tuple is the trial's values, constraints from a function",
          "[objectives][python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = "two-fn";
  json::object status =
      RunStudy(d, dir, study, "two", "constraints = \"objectives.py:fits_in_8gb\"\n");
  INFO(d.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 6);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const double x = t.at("params").at("x").to_number<double>();
    const std::vector<double> values = Numbers(t.at("values"));
    REQUIRE(values.size() == 2);
    CHECK(values[0] == Approx(x * x).epsilon(1e-12));
    CHECK(values[1] == Approx((x - 1) * (x - 1)).epsilon(1e-12));
    const std::vector<double> constraints = Numbers(t.at("constraints"));
    REQUIRE(constraints.size() == 1);
    CHECK(constraints[0] == Approx(16 * x - 8).epsilon(1e-12));
  }
  CHECK(WaitNoProcessesOfStudy(study).empty());
}

TEST_CASE("kind = python: set_constraints() is stored with the trial's values",
          "[objectives][python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = "two-set";
  RunStudy(d, dir, study, "two_set_constraints");
  INFO(d.log());
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 6);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const double x = t.at("params").at("x").to_number<double>();
    CHECK(Numbers(t.at("values")) == std::vector<double>{x, 1.0 - x});
    CHECK(Numbers(t.at("constraints")) == std::vector<double>{x - 0.5, -1.0});
  }
}

TEST_CASE("kind = python: one value for two objectives fails with Optuna's message",
          "[objectives][python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = "two-wrong";
  RunStudy(d, dir, study, "one");
  INFO(d.log());
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 6);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "FAIL");
    CHECK_THAT(std::string(t.at("fail_detail").as_string()),
               Catch::Contains("The number of the values 1 did not match the number of the "
                               "objectives 2."));
  }
}

TEST_CASE("kind = python: a constraints function that does not exist is refused at submit",
          "[objectives][python][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  dir.Write("objectives.py", kObjectives);
  const std::string toml = Sweep("two-missing", "two", "constraints = \"objectives.py:fits\"\n");
  const std::string path = dir.Write("two.toml", toml);
  Ctl ctl = Trialctl(d.socket(), {"submit", path});
  CHECK(ctl.code != 0);
  CHECK_THAT(ctl.err, Catch::Contains(path + ":11:15: [objective] constraints = "
                                             "\"objectives.py:fits\": no top-level def"));
}

TEST_CASE("example two_objectives.toml: two objectives and a constraints function",
          "[objectives][python][integration][examples]") {
  TempDir dir;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string examples = ExamplesDir();
  const std::string toml =
      SetTomlKey(ReadTextFile(examples + "/two_objectives.toml"), "n_trials", "8");
  const std::string study = d.Submit(toml, examples + "/two_objectives.toml");
  json::object status = d.WaitStudy(study, 120);
  INFO(d.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 8);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
    CHECK(t.at("values").as_array().size() == 2);
    const double memory_gb = t.at("attrs").at("memory_gb").to_number<double>();
    CHECK(Numbers(t.at("constraints"))[0] == Approx(memory_gb - 1.0));
  }
}

}  // namespace triald::testing
