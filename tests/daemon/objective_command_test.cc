// What the daemon checks and builds at submit for [objective] kind = "python" (see
// daemon/objective_command.h): the function is found without running the user's code.
#include "daemon/objective_command.h"

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/sweep.h"

namespace triald::daemon {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "triald-objcmd-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& rel, const std::string& text) const {
    fs::create_directories(fs::path(path_ + "/" + rel).parent_path());
    std::ofstream(path_ + "/" + rel) << text;
  }

 private:
  std::string path_;
};

config::SweepSpec PythonSweep(const TempDir& dir, const std::string& function,
                              const std::string& more = "") {
  const std::string doc =
      "[study]\nname = \"s\"\nn_trials = 3\n\n[objective]\nkind = "
      "\"python\"\nfunction = \"" +
      function + "\"\n" + more;
  common::Result<config::SweepSpec> r = config::ParseSweep({doc, dir.path() + "/sweep.toml"});
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("a top-level binding is found without running the file", "[objective][python]") {
  CHECK(CheckPythonBinding("import math\n\ndef objective(trial):\n    return 1.0\n", "objective") ==
        "");
  CHECK(CheckPythonBinding("async def objective(trial):\n    pass\n", "objective") == "");
  CHECK(CheckPythonBinding("class Objective:\n    def __call__(self, t): pass\n", "Objective") ==
        "");
  CHECK(CheckPythonBinding("objective = make_objective(3)\n", "objective") == "");
  CHECK(CheckPythonBinding("objective = lambda t: 1.0\n", "objective") == "");
  CHECK(CheckPythonBinding("from mylib.train import objective\n", "objective") == "");
  CHECK(CheckPythonBinding("from mylib import train as objective\n", "objective") == "");
  CHECK_THAT(CheckPythonBinding("def other(trial):\n    objective = 1\n", "objective"),
             Contains("no top-level def, class, assignment or import of objective"));
  CHECK_THAT(CheckPythonBinding("def objective_v2(t): pass\n", "objective"),
             Contains("no top-level"));
  CHECK_THAT(CheckPythonBinding("objective = 3\n", "objective"),
             Contains("objective is bound to a literal, which is not callable"));
  CHECK_THAT(CheckPythonBinding("objective = 'train'  # the name\n", "objective"),
             Contains("not callable"));
  CHECK_THAT(CheckPythonBinding("objective: float = 1.5e-3\n", "objective"),
             Contains("not callable"));
  CHECK(CheckPythonBinding("objective == 3\ndef objective(t): pass\n", "objective") == "");
}

TEST_CASE("kind = python at submit: the command and the runner on PYTHONPATH",
          "[objective][python]") {
  TempDir dir;
  dir.Write("obj.py", "def objective(trial):\n    return trial.suggest_float('x', 0, 1)\n");
  config::SweepSpec spec = PythonSweep(dir, "obj.py:objective");
  const std::string runner = DefaultPythonRunnerDir();
  REQUIRE_FALSE(runner.empty());  // the test binary lives in the build tree
  CHECK(fs::is_regular_file(runner + "/triald/__main__.py"));
  SECTION("without a PYTHONPATH of the user's") {
    common::Status st =
        PrepareObjective(spec, "/nonexistent/trial-worker", "sweep.toml", {"PATH=/usr/bin:/bin"});
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(spec.objective.command == std::vector<std::string>{"python3", "-m", "triald", "run",
                                                             dir.path() + "/obj.py:objective"});
    CHECK(spec.objective.env.at("PYTHONPATH") == runner);
  }
  SECTION("the daemon's PYTHONPATH follows the runner's folder") {
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {"PYTHONPATH=/opt/lib"}, "/r").ok());
    CHECK(spec.objective.env.at("PYTHONPATH") == "/r:/opt/lib");
  }
  SECTION("[objective] env's PYTHONPATH takes the daemon's place") {
    spec.objective.env["PYTHONPATH"] = "/mine";
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {"PYTHONPATH=/opt/lib"}, "/r").ok());
    CHECK(spec.objective.env.at("PYTHONPATH") == "/r:/mine");
  }
}

TEST_CASE("kind = python at submit: a missing file or name is refused at the function key",
          "[objective][python]") {
  TempDir dir;
  dir.Write("obj.py", "LR = 0.1\n\ndef objective(trial):\n    return 1.0\n");
  const std::string at = dir.path() + "/sweep.toml:7:12: [objective] function = ";
  SECTION("no such file") {
    config::SweepSpec spec = PythonSweep(dir, "nope.py:objective");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    CHECK_THAT(st.message(),
               StartsWith(at + "\"nope.py:objective\": " + dir.path() + "/nope.py: no such file"));
  }
  SECTION("no such function") {
    config::SweepSpec spec = PythonSweep(dir, "obj.py:train");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    CHECK_THAT(st.message(), StartsWith(at + "\"obj.py:train\": no top-level def"));
    CHECK_THAT(st.message(), Contains("def train(trial):"));
  }
  SECTION("not callable") {
    config::SweepSpec spec = PythonSweep(dir, "obj.py:LR");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    CHECK_THAT(st.message(), StartsWith(at + "\"obj.py:LR\": LR is bound to a literal"));
  }
}

TEST_CASE("kind = python at submit: a module is found under workdir or PYTHONPATH",
          "[objective][python]") {
  TempDir dir;
  dir.Write("src/pkg/__init__.py", "");
  dir.Write("src/pkg/train.py", "def objective(trial):\n    return 1.0\n");
  dir.Write("lib/other/__init__.py", "def objective(trial):\n    return 2.0\n");
  SECTION("under workdir") {
    config::SweepSpec spec = PythonSweep(dir, "pkg.train:objective", "workdir = \"src\"\n");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(spec.objective.command.back() == "pkg.train:objective");
  }
  SECTION("a package's __init__.py on PYTHONPATH") {
    config::SweepSpec spec = PythonSweep(dir, "other:objective");
    common::Status st =
        PrepareObjective(spec, "", "sweep.toml", {"PYTHONPATH=" + dir.path() + "/lib"}, "/r");
    INFO(st.message());
    REQUIRE(st.ok());
  }
  SECTION("nowhere") {
    config::SweepSpec spec = PythonSweep(dir, "pkg.train:objective");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    CHECK_THAT(st.message(), Contains("module \"pkg.train\" not found (as pkg/train.py or "
                                      "pkg/train/__init__.py) under " +
                                      dir.path()));
  }
}

}  // namespace
}  // namespace triald::daemon
