// [objective] kind = "python": define-by-run objectives named by a function, [space] optional,
// and [sampler] group for TPE. What is checked on disk at submit is tested in
// tests/daemon/objective_command_test.cc.
#include <catch2/catch.hpp>
#include <string>

#include "config/sweep.h"
#include "tests/config/sweep_test_util.h"

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using testing::ErrorOf;
using testing::Parsed;

// [objective] starts on line 5; function is on line 7.
const char* const kPython = R"([study]
name = "s"
n_trials = 10

[objective]
kind = "python"
function = "objective.py:objective"
)";

std::string Python(const std::string& more) { return std::string(kPython) + more; }

TEST_CASE("kind = python parses without [space], the file anchored at the sweep file",
          "[config][python]") {
  SweepSpec s = Parsed(kPython, "/srv/sweeps/conditional.toml");
  CHECK(s.objective.kind == "python");
  CHECK(s.objective.function == "objective.py:objective");
  CHECK(s.objective.function_file == "/srv/sweeps/objective.py");
  CHECK(s.objective.function_module.empty());
  CHECK(s.objective.function_name == "objective");
  CHECK(s.objective.function_at == "/srv/sweeps/conditional.toml:7:12");
  CHECK(s.objective.python == "python3");
  CHECK(s.objective.workdir == "/srv/sweeps");
  CHECK(s.objective.command.empty());  // the daemon fills it in at submit
  CHECK(s.space.empty());
}

TEST_CASE("kind = python: module form, python, env, workdir and a [space] drawn up front",
          "[config][python]") {
  SweepSpec s = Parsed(std::string(R"([study]
name = "s"
n_trials = 10

[objective]
kind = "python"
function = "pkg.models.train:objective"
python = "/usr/bin/python3"
env = { OMP_NUM_THREADS = "1" }
workdir = "src"

[space.lr]
type = "float"
low = 0.001
high = 0.1
)"),
                       "/srv/sweeps/s.toml");
  CHECK(s.objective.function_file.empty());
  CHECK(s.objective.function_module == "pkg.models.train");
  CHECK(s.objective.function_name == "objective");
  CHECK(s.objective.python == "/usr/bin/python3");
  CHECK(s.objective.env.at("OMP_NUM_THREADS") == "1");
  CHECK(s.objective.workdir == "/srv/sweeps/src");
  REQUIRE(s.space.size() == 1);
  CHECK(s.space[0].name == "lr");
}

TEST_CASE("kind = python: a bad function names the key and its place", "[config][python]") {
  auto with_function = [](const std::string& value) {
    std::string doc = kPython;
    const std::string from = "\"objective.py:objective\"";
    return doc.replace(doc.find(from), from.size(), value);
  };
  std::string e = ErrorOf(with_function("\"objective.py\""));
  CHECK_THAT(e, StartsWith("sweep.toml:7:12: [objective] function = \"objective.py\": no "
                           "\":NAME\""));
  CHECK_THAT(e, Contains("PATH.py:NAME"));
  CHECK_THAT(ErrorOf(with_function("\"objective.py:1st\"")),
             Contains("\"1st\" is not a Python name"));
  CHECK_THAT(ErrorOf(with_function("\"my-module:f\"")),
             Contains("is neither a .py file nor a dotted module name"));
  CHECK_THAT(ErrorOf(with_function("\":f\"")), Contains("no file or module before"));
  CHECK_THAT(ErrorOf(with_function("3")), StartsWith("sweep.toml:7:12: [objective] function = 3"));
  std::string missing = ErrorOf(R"([study]
name = "s"
n_trials = 10

[objective]
kind = "python"
)");
  CHECK_THAT(missing, Contains("missing required key \"function\""));
  CHECK_THAT(ErrorOf(Python("python = \"\"\n")), Contains("[objective] python = \"\": empty"));
  CHECK_THAT(ErrorOf(Python("command = [\"x\"]\n")),
             Contains("[objective] command = [\"x\"]: an option of kind = \"exec\", not of kind = "
                      "\"python\""));
}

TEST_CASE("other kinds still need [space], the kinds are listed", "[config][python]") {
  std::string e = ErrorOf(R"([study]
name = "s"
n_trials = 10

[objective]
kind = "exec"
command = ["true"]
)");
  CHECK_THAT(e, Contains("missing required table [space]"));
  std::string k = ErrorOf(testing::With("kind = \"exec\"", "kind = \"julia\""));
  CHECK_THAT(k, Contains("\"exec\", \"lm\", \"python\" or \"client\""));
}

TEST_CASE("[sampler] group = true is read for TPE, and needs multivariate", "[config][python]") {
  SweepSpec s = Parsed(Python("\n[sampler]\nkind = \"tpe\"\ngroup = true\n"));
  CHECK(s.sampler.tpe.group);
  CHECK(s.sampler.tpe.multivariate);
  CHECK_FALSE(Parsed(Python("\n[sampler]\nkind = \"tpe\"\n")).sampler.tpe.group);
  CHECK_THAT(ErrorOf(Python("\n[sampler]\nkind = \"tpe\"\nmultivariate = false\ngroup = true\n")),
             Contains("group = true only with multivariate = true"));
  CHECK_THAT(ErrorOf(Python("\n[sampler]\nkind = \"random\"\ngroup = true\n")),
             Contains("group = true: an option of kind = \"tpe\", not of kind = \"random\""));
}

TEST_CASE("kind = python: constraints names a function like function does", "[config][python]") {
  SweepSpec s = Parsed(Python("constraints = \"limits.py:memory_ok\"\n"), "/srv/sweeps/s.toml");
  CHECK(s.objective.constraints == "limits.py:memory_ok");
  CHECK(s.objective.constraints_file == "/srv/sweeps/limits.py");
  CHECK(s.objective.constraints_module.empty());
  CHECK(s.objective.constraints_name == "memory_ok");
  CHECK(s.objective.constraints_at == "/srv/sweeps/s.toml:8:15");
  SweepSpec m = Parsed(Python("constraints = \"pkg.limits:ok\"\n"), "/srv/sweeps/s.toml");
  CHECK(m.objective.constraints_file.empty());
  CHECK(m.objective.constraints_module == "pkg.limits");
  CHECK(m.objective.constraints_name == "ok");
  CHECK(Parsed(kPython).objective.constraints.empty());

  CHECK_THAT(ErrorOf(Python("constraints = \"limits.py\"\n")),
             StartsWith("sweep.toml:8:15: [objective] constraints = \"limits.py\": no \":NAME\""));
  CHECK_THAT(ErrorOf(Python("constraints = \"limits.py:2x\"\n")),
             Contains("\"2x\" is not a Python name"));
  CHECK_THAT(ErrorOf(Python("constraints = [\"a.py:f\"]\n")),
             StartsWith("sweep.toml:8:15: [objective] constraints = [\"a.py:f\"]"));
  CHECK_THAT(
      ErrorOf(R"([study]
name = "s"
n_trials = 10

[objective]
kind = "exec"
command = ["x"]
constraints = "a.py:f"

[space.x]
type = "float"
low = 0.0
high = 1.0
)"),
      Contains("[objective] constraints = \"a.py:f\": an option of kind = \"python\", not of "
               "kind = \"exec\""));
}

TEST_CASE("kind = python: preload, preload_objective and fork_server with their defaults",
          "[config][python][fork_server]") {
  SweepSpec plain = Parsed(kPython);
  CHECK(plain.objective.preload.empty());
  CHECK_FALSE(plain.objective.preload_objective);
  CHECK_FALSE(plain.objective.fork_server);

  SweepSpec pre = Parsed(Python("preload = [\"torch\", \"numpy.linalg\", \"_x1\"]\n"));
  CHECK(pre.objective.preload == std::vector<std::string>{"torch", "numpy.linalg", "_x1"});
  CHECK(pre.objective.preload_objective);
  CHECK(pre.objective.fork_server);

  SweepSpec no_obj = Parsed(Python("preload = [\"torch\"]\npreload_objective = false\n"));
  CHECK_FALSE(no_obj.objective.preload_objective);
  CHECK(no_obj.objective.fork_server);

  SweepSpec off = Parsed(Python("preload = [\"torch\"]\nfork_server = false\n"));
  CHECK_FALSE(off.objective.fork_server);
  CHECK_FALSE(off.objective.preload_objective);

  // fork_server without preload: the server saves the interpreter's start only.
  SweepSpec bare = Parsed(Python("fork_server = true\n"));
  CHECK(bare.objective.fork_server);
  CHECK(bare.objective.preload.empty());
  CHECK_FALSE(bare.objective.preload_objective);
  CHECK_FALSE(bare.objective.fork_twice);

  // fork_twice: the server forks through a middle process; it needs a server.
  CHECK(Parsed(Python("preload = [\"torch\"]\nfork_twice = true\n")).objective.fork_twice);
  CHECK_FALSE(Parsed(Python("preload = [\"torch\"]\nfork_twice = false\n")).objective.fork_twice);
  CHECK_THAT(ErrorOf(Python("fork_twice = true\n")),
             StartsWith("sweep.toml:8:14: [objective] fork_twice = true: true without a fork "
                        "server: nothing is forked; expected fork_server = true, or no "
                        "fork_twice"));
  CHECK_THAT(ErrorOf(Python("preload = [\"torch\"]\nfork_server = false\nfork_twice = true\n")),
             Contains("true without a fork server"));
  CHECK_THAT(ErrorOf(Python("fork_server = true\nfork_twice = 1\n")), Contains("fork_twice = 1"));
}

TEST_CASE("kind = python: a bad preload names the entry and its place",
          "[config][python][fork_server]") {
  // preload is on line 8.
  CHECK_THAT(ErrorOf(Python("preload = \"torch\"\n")),
             StartsWith("sweep.toml:8:11: [objective] preload = \"torch\""));
  CHECK_THAT(ErrorOf(Python("preload = \"torch\"\n")), Contains("an array of module names"));
  CHECK_THAT(ErrorOf(Python("preload = [\"torch\", \"my-mod\"]\n")),
             StartsWith("sweep.toml:8:21: [objective] preload[1] = \"my-mod\": not a module name"));
  for (const char* bad :
       {"\"\"", "\"a..b\"", "\".a\"", "\"a.\"", "\"1a\"", "\"a.2b\"", "\"a b\""}) {
    INFO(bad);
    CHECK_THAT(ErrorOf(Python("preload = [" + std::string(bad) + "]\n")),
               Contains("not a module name"));
  }
  CHECK_THAT(ErrorOf(Python("preload = [3]\n")), Contains("preload[0] = 3"));
  CHECK_THAT(ErrorOf(Python("preload = [\"torch\", \"torch\"]\n")),
             Contains("\"torch\" is already in preload"));
  CHECK_THAT(ErrorOf(Python("fork_server = \"yes\"\n")),
             StartsWith("sweep.toml:8:15: [objective] fork_server = \"yes\""));
  CHECK_THAT(ErrorOf(Python("preload_objective = 1\n")), Contains("true or false"));
  CHECK_THAT(ErrorOf(Python("preload_objective = true\nfork_server = false\n")),
             Contains("preload_objective = true with fork_server = false"));
}

TEST_CASE("preload and fork_server are refused for kind = exec", "[config][python][fork_server]") {
  const std::string exec = R"([study]
name = "s"
n_trials = 10

[objective]
kind = "exec"
command = ["x"]
)";
  const std::string space = "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";
  CHECK_THAT(ErrorOf(exec + "preload = [\"torch\"]\n" + space),
             Contains("[objective] preload = [\"torch\"]: an option of kind = \"python\", not of "
                      "kind = \"exec\""));
  CHECK_THAT(ErrorOf(exec + "fork_server = true\n" + space),
             Contains("fork_server = true: an option of kind = \"lm\" or \"python\", not of kind "
                      "= \"exec\""));
}

}  // namespace
}  // namespace triald::config

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using testing::ErrorOf;
using testing::Parsed;

const char* const kClient = R"([study]
name = "c"
n_trials = 10

[objective]
kind = "client"
)";

TEST_CASE("kind = client: define-by-run without a command, and what cannot apply is refused",
          "[config][client]") {
  SweepSpec s = Parsed(kClient);
  CHECK(s.objective.kind == "client");
  CHECK(s.objective.define_by_run());
  CHECK(s.objective.command.empty());
  CHECK(s.space.empty());
  // A [space] is drawn up front, as for kind = "python".
  SweepSpec with_space =
      Parsed(std::string(kClient) + "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n");
  REQUIRE(with_space.space.size() == 1);
  // It has no keys of its own: a command belongs to kind = "exec".
  CHECK_THAT(ErrorOf(std::string(kClient) + "command = [\"python3\"]\n"), Contains("command"));
  const std::string why =
      "sweep.toml:6:8: [objective] kind = \"client\": each trial runs in the "
      "program that asked for it";
  std::string gpus = ErrorOf(std::string(R"([study]
name = "c"
n_trials = 10
gpus_per_trial = 1

[objective]
kind = "client"
)"));
  CHECK_THAT(gpus, Contains("sweep.toml:7:8: [objective] kind = \"client\"") &&
                       Contains("remove [study] gpus_per_trial"));
  CHECK_THAT(ErrorOf(std::string(kClient) + "\n[executor]\nkind = \"slurm\"\npartition = \"p\"\n"),
             Contains(why) && Contains("[executor] kind = \"slurm\" has nothing to run"));
  CHECK_THAT(ErrorOf(std::string(R"([study]
name = "c"
n_trials = 10
resource_constraints = ["peak_memory <= 1G"]

[objective]
kind = "client"
)")),
             Contains("triald measures none of its resources"));
}

}  // namespace
}  // namespace triald::config

namespace triald::config {
namespace {

TEST_CASE("[study] metric_names: one distinct name per objective, said where it is wrong",
          "[config][objectives]") {
  using testing::ErrorOf;
  using testing::Parsed;
  const std::string two =
      "[study]\nname = \"m\"\nn_trials = 2\ndirections = [\"minimize\", \"maximize\"]\n";
  const std::string rest = "\n[objective]\nkind = \"client\"\n";
  SweepSpec s = Parsed(two + "metric_names = [\"loss\", \"accuracy\"]\n" + rest);
  CHECK(s.study.metric_names == std::vector<std::string>{"loss", "accuracy"});
  CHECK(Parsed(two + rest).study.metric_names.empty());
  CHECK_THAT(ErrorOf(two + "metric_names = [\"loss\", \"loss\"]\n" + rest),
             Catch::Contains("metric_names[1]") && Catch::Contains("already in metric_names"));
  CHECK_THAT(ErrorOf(two + "metric_names = [\"loss\", \"\"]\n" + rest),
             Catch::Contains("metric_names[1]") && Catch::Contains("1 to 64 characters"));
  CHECK_THAT(ErrorOf(two + "metric_names = \"loss\"\n" + rest),
             Catch::Contains("[study] metric_names") && Catch::Contains("an array of 2"));
  // Before directions in the file or after: the count is checked against them all the same.
  const std::string before =
      "[study]\nname = \"m\"\nn_trials = 2\nmetric_names = [\"a\"]\n"
      "directions = [\"minimize\", \"maximize\"]\n";
  CHECK_THAT(ErrorOf(before + rest), Catch::Contains("names 1 objective but [study] has 2"));
}

}  // namespace
}  // namespace triald::config
