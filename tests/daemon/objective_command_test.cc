// What the daemon checks and builds at submit for [objective] kind = "python" (see
// daemon/objective/objective_command.h): the function is found without running the user's code.
#include "daemon/objective/objective_command.h"

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

class ObjectiveDir {
 public:
  ObjectiveDir() {
    std::string tmpl = (fs::temp_directory_path() / "triald-objcmd-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~ObjectiveDir() {
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

config::SweepSpec PythonSweep(const ObjectiveDir& dir, const std::string& function,
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
  CHECK_THAT(
      CheckPythonBinding("objective = 3\n", "objective"),
      Contains("objective is bound to a literal at line 1, column 1, which is not callable"));
  CHECK_THAT(CheckPythonBinding("objective = 'train'  # the name\n", "objective"),
             Contains("not callable"));
  CHECK_THAT(CheckPythonBinding("objective: float = 1.5e-3\n", "objective"),
             Contains("not callable"));
  CHECK(CheckPythonBinding("objective == 3\ndef objective(t): pass\n", "objective") == "");
}

TEST_CASE("a binding inside a module-level block counts, one in a string, def or main guard not",
          "[objective][python]") {
  // Defined in a top-level if / else / try / except / with block, at any depth of those.
  CHECK(CheckPythonBinding("import os\nif os.environ.get('FAST'):\n    def objective(t):\n"
                           "        return 0.0\nelse:\n    def objective(t):\n        return 1.0\n",
                           "objective") == "");
  CHECK(CheckPythonBinding("try:\n    from fast import objective\nexcept ImportError:\n"
                           "    def objective(trial):\n        return 1.0\n",
                           "objective") == "");
  CHECK(CheckPythonBinding("with open('x') as f:\n    if True:\n\tobjective = make(f)\n",
                           "objective") == "");
  CHECK(CheckPythonBinding("if X: objective = make()\n", "objective") == "");
  CHECK(CheckPythonBinding("import torch; objective = torch.compile(f)\n", "objective") == "");
  CHECK(CheckPythonBinding("a = objective = make()\n", "objective") == "");
  CHECK(CheckPythonBinding("train, objective = build()\n", "objective") == "");
  CHECK(CheckPythonBinding("from lib import (\n    train,\n    objective,\n)\n", "objective") ==
        "");
  CHECK(CheckPythonBinding("from lib import *\n", "objective") == "");
  CHECK(CheckPythonBinding("objective = lambda t, k=3: k\n", "objective") == "");
  CHECK(CheckPythonBinding("@decorate(x=1)\ndef objective(t):\n    pass\n", "objective") == "");
  CHECK(CheckPythonBinding("x = 1 \\\n    + 2\nobjective = f\n", "objective") == "");
  CHECK(CheckPythonBinding("class Objective:\n    def __call__(self, t): pass\n",
                           "Objective.__call__") == "");
  // A conditional literal does not hide a callable binding before it; an unconditional one does.
  CHECK(CheckPythonBinding("def objective(t): pass\nif X:\n    objective = None\n", "objective") ==
        "");
  CHECK_THAT(CheckPythonBinding("def objective(t): pass\nobjective = None\n", "objective"),
             Contains("bound to a literal at line 2, column 1"));

  // Text that only looks like a binding: in a string, a comment, a def, a class or the
  // `if __name__ == "__main__":` block (the runner does not run it).
  const std::string no_binding = "no top-level def, class, assignment or import of objective";
  CHECK_THAT(CheckPythonBinding("DOC = '''\ndef objective(trial):\n'''\n", "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("x = f(r\"\"\"\\\nobjective = g\n\"\"\")\n", "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("s = 'it\\'s'  # def objective(t):\n", "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("x = [\n1,\n2]\n# objective = f\n", "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("def main():\n    def objective(t):\n        pass\n", "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("class C:\n    objective = staticmethod(f)\n", "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("if __name__ == \"__main__\":\n    def objective(t):\n"
                                "        pass\n",
                                "objective"),
             Contains(no_binding));
  CHECK_THAT(CheckPythonBinding("f(objective=g)\nobj.objective = g\nobjective == g\n"
                                "objective += g\nd[objective] = g\n",
                                "objective"),
             Contains(no_binding));
  // The code after the main guard's block is module level again.
  CHECK(CheckPythonBinding("if __name__ == '__main__':\n    main()\ndef objective(t): pass\n",
                           "objective") == "");

  // Bindings that cannot be called, with where they are.
  CHECK_THAT(CheckPythonBinding("import objective\n", "objective"),
             Contains("objective is bound to a module (import at line 1, column 8), which is not "
                      "callable"));
  CHECK_THAT(CheckPythonBinding("import numpy as objective\n", "objective"),
             Contains("bound to a module"));
  CHECK_THAT(CheckPythonBinding("\n\nobjective = [f for f in fs]\n", "objective"),
             Contains("bound to a literal at line 3, column 1"));
  CHECK_THAT(CheckPythonBinding("if X:\n  objective = -1e-3\n", "objective"),
             Contains("bound to a literal at line 2, column 3"));
}

TEST_CASE("kind = python at submit: the command and the runner on PYTHONPATH",
          "[objective][python]") {
  ObjectiveDir dir;
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
  ObjectiveDir dir;
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
  ObjectiveDir dir;
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

TEST_CASE("kind = python at submit: constraints is checked like function and passed to the runner",
          "[objective][python]") {
  ObjectiveDir dir;
  dir.Write("obj.py", "LIMIT = 8\n\ndef objective(trial):\n    return 1.0\n");
  dir.Write("limits.py", "def memory_ok(frozen):\n    return [frozen.user_attrs['gb'] - 8]\n");
  const std::string at = dir.path() + "/sweep.toml:8:15: [objective] constraints = ";
  SECTION("a file") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "constraints = \"limits.py:memory_ok\"\n");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(spec.objective.command == std::vector<std::string>{"python3", "-m", "triald", "run",
                                                             dir.path() + "/obj.py:objective",
                                                             "--constraints",
                                                             dir.path() + "/limits.py:memory_ok"});
  }
  SECTION("a module") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "constraints = \"limits:memory_ok\"\n");
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {}, "/r").ok());
    CHECK(spec.objective.command.back() == "limits:memory_ok");
  }
  SECTION("no such file") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "constraints = \"nope.py:memory_ok\"\n");
    CHECK_THAT(PrepareObjective(spec, "", "sweep.toml", {}, "/r").message(),
               StartsWith(at + "\"nope.py:memory_ok\": " + dir.path() + "/nope.py: no such file"));
  }
  SECTION("no such function") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "constraints = \"limits.py:fits\"\n");
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    CHECK_THAT(st.message(), StartsWith(at + "\"limits.py:fits\": no top-level def"));
    CHECK_THAT(st.message(), Contains("def fits(frozen_trial):"));
  }
  SECTION("not callable") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "constraints = \"obj.py:LIMIT\"\n");
    CHECK_THAT(PrepareObjective(spec, "", "sweep.toml", {}, "/r").message(),
               StartsWith(at + "\"obj.py:LIMIT\": LIMIT is bound to a literal"));
  }
}

TEST_CASE("kind = python with fork_server: the server's command and the fork request's argv",
          "[objective][python][fork_server]") {
  ObjectiveDir dir;
  dir.Write("obj.py", "def objective(trial):\n    return 1.0\n");
  dir.Write("limits.py", "def ok(frozen):\n    return [0]\n");
  const std::string obj = dir.path() + "/obj.py:objective";
  SECTION("preload and the objective, with constraints") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective",
                    "constraints = \"limits.py:ok\"\npreload = [\"torch\", \"numpy\"]\n");
    REQUIRE(spec.objective.fork_server);
    common::Status st = PrepareObjective(spec, "", "sweep.toml", {}, "/r");
    INFO(st.message());
    REQUIRE(st.ok());
    CHECK(spec.objective.fork_server_command ==
          std::vector<std::string>{"python3", "-m", "triald", "fork-server", "--preload",
                                   "torch,numpy", "--objective", obj, "--constraints",
                                   dir.path() + "/limits.py:ok"});
    CHECK(spec.objective.fork_request_argv ==
          std::vector<std::string>{"run", obj, "--constraints", dir.path() + "/limits.py:ok"});
  }
  SECTION("preload without the objective") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "preload = [\"numpy\"]\npreload_objective = false\n");
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {}, "/r").ok());
    CHECK(spec.objective.fork_server_command ==
          std::vector<std::string>{"python3", "-m", "triald", "fork-server", "--preload", "numpy"});
    CHECK(spec.objective.fork_request_argv == std::vector<std::string>{"run", obj});
  }
  SECTION("fork_server alone") {
    config::SweepSpec spec = PythonSweep(dir, "obj.py:objective", "fork_server = true\n");
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {}, "/r").ok());
    CHECK(spec.objective.fork_server_command ==
          std::vector<std::string>{"python3", "-m", "triald", "fork-server"});
    CHECK(spec.objective.fork_request_argv == std::vector<std::string>{"run", obj});
  }
  SECTION("fork_twice: the server is told") {
    config::SweepSpec spec =
        PythonSweep(dir, "obj.py:objective", "fork_server = true\nfork_twice = true\n");
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {}, "/r").ok());
    CHECK(spec.objective.fork_server_command ==
          std::vector<std::string>{"python3", "-m", "triald", "fork-server", "--fork-twice"});
  }
  SECTION("off: no server") {
    config::SweepSpec spec = PythonSweep(dir, "obj.py:objective");
    REQUIRE(PrepareObjective(spec, "", "sweep.toml", {}, "/r").ok());
    CHECK(spec.objective.fork_server_command.empty());
    CHECK(spec.objective.fork_request_argv.empty());
  }
}

}  // namespace
}  // namespace triald::daemon
