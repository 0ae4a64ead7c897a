#include "config/sweep.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "tests/config/sweep_test_util.h"

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

using testing::ErrorOf;
using testing::kMinimal;
using testing::Parse;
using testing::Parsed;
using testing::With;

TEST_CASE("the minimal sweep parses", "[config]") {
  common::Result<SweepSpec> r = Parse(kMinimal);
  INFO(r.status().message());
  REQUIRE(r.ok());
}

TEST_CASE("a full sweep file parses with every field", "[config]") {
  const std::string doc = R"(# every key there is
[study]
name = "lr-search.v2"
direction = "maximize"
n_trials = 50
parallelism = 4
trial_timeout = 90.5
kill_grace = 3

[objective]
kind = "exec"
command = ["python3", "train.py", "--epochs", "3"]
workdir = "scripts/../runs"
env = { OMP_NUM_THREADS = "1", HF_HOME = "/tmp/hf" }

[space.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true

[space.batch]
type = "int"
low = 16
high = 128
step = 16

[space.optimizer]
type = "categorical"
choices = ["adamw", "sgd", 3, 0.5, true]

[space.dropout]
type = "float"
low = 0
high = 0.5
step = 0.1

[space.layers]
type = "int"
low = 1
high = 64
log = true

[sampler]
kind = "grid"
seed = 123

[pruner]
kind = "nop"
)";
  common::Result<SweepSpec> r = Parse(doc, "/srv/sweeps/sweep.toml");
  INFO(r.status().message());
  REQUIRE(r.ok());
  const SweepSpec& s = *r;

  CHECK(s.study.name == "lr-search.v2");
  CHECK(s.study.direction == Direction::kMaximize);
  CHECK(s.study.n_trials == 50);
  CHECK(s.study.parallelism == 4);
  CHECK(s.study.trial_timeout == 90.5);
  CHECK(s.study.kill_grace == 3.0);

  CHECK(s.objective.kind == "exec");
  CHECK(s.objective.command == std::vector<std::string>{"python3", "train.py", "--epochs", "3"});
  CHECK(s.objective.workdir == "/srv/sweeps/runs");
  CHECK(s.objective.env ==
        std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}, {"HF_HOME", "/tmp/hf"}});

  REQUIRE(s.space.size() == 5);
  CHECK(s.space[0].name == "lr");
  CHECK(s.space[0].dist.type == ParamType::kFloat);
  CHECK(s.space[0].dist.low == 1e-5);
  CHECK(s.space[0].dist.high == 1e-1);
  CHECK(s.space[0].dist.log);
  CHECK(s.space[0].dist.step == 0);

  CHECK(s.space[1].name == "batch");
  CHECK(s.space[1].dist.type == ParamType::kInt);
  CHECK(s.space[1].dist.low == 16);
  CHECK(s.space[1].dist.high == 128);
  CHECK(s.space[1].dist.step == 16);
  CHECK_FALSE(s.space[1].dist.log);

  CHECK(s.space[2].name == "optimizer");
  CHECK(s.space[2].dist.type == ParamType::kCategorical);
  CHECK(s.space[2].dist.choices ==
        std::vector<Choice>{std::string("adamw"), std::string("sgd"), int64_t{3}, 0.5, true});

  CHECK(s.space[3].name == "dropout");
  CHECK(s.space[3].dist.step == 0.1);
  CHECK(s.space[3].dist.high == 0.5);

  CHECK(s.space[4].name == "layers");
  CHECK(s.space[4].dist.log);
  CHECK(s.space[4].dist.step == 1);

  CHECK(s.sampler.kind == "grid");
  CHECK(s.sampler.seed == 123);
  CHECK(s.sampler.seed_given);
  CHECK(s.pruner.kind == "nop");
}

TEST_CASE("omitted keys take their defaults", "[config]") {
  common::Result<SweepSpec> r = Parse(kMinimal, "/srv/sweeps/sweep.toml");
  REQUIRE(r.ok());
  CHECK(r->study.direction == Direction::kMinimize);
  CHECK(r->study.parallelism == 1);
  CHECK(r->study.trial_timeout == 0);
  CHECK(r->study.kill_grace == 10.0);
  CHECK(r->objective.env.empty());
  CHECK(r->objective.workdir == "/srv/sweeps");
  CHECK(r->space[0].dist.step == 0);
  CHECK_FALSE(r->space[0].dist.log);
  CHECK(r->sampler.kind == "random");
  CHECK_FALSE(r->sampler.seed_given);
  CHECK(r->pruner.kind == "nop");

  // An int parameter steps by one unless told otherwise.
  r = Parse(With("type = \"float\"", "type = \"int\"",
                 With("low = 0.0", "low = 0", With("high = 1.0", "high = 9"))));
  REQUIRE(r.ok());
  CHECK(r->space[0].dist.step == 1);
}

TEST_CASE("the working directory is anchored at the sweep file", "[config]") {
  const std::string cwd = std::filesystem::current_path().string();
  CHECK(Parse(kMinimal, "")->objective.workdir == cwd);
  CHECK(Parse(kMinimal, "sweep.toml")->objective.workdir == cwd);
  CHECK(Parse(kMinimal, "sub/sweep.toml")->objective.workdir == cwd + "/sub");

  const std::string abs =
      With("command = [\"true\"]", "command = [\"true\"]\nworkdir = \"/data/run/\"");
  CHECK(Parse(abs, "/srv/sweep.toml")->objective.workdir == "/data/run");
  const std::string rel = With("command = [\"true\"]", "command = [\"true\"]\nworkdir = \"out\"");
  CHECK(Parse(rel, "/srv/s/sweep.toml")->objective.workdir == "/srv/s/out");
  CHECK(Parse(rel, "")->objective.workdir == cwd + "/out");
}

TEST_CASE("parameters keep the order of the file", "[config]") {
  const std::string doc = With("[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n",
                               R"([space.zeta]
type = "float"
low = 0
high = 1

[space.mid]
type = "int"
low = 0
high = 3

[space]
beta = { type = "categorical", choices = ["a"] }
alpha.type = "categorical"
alpha.choices = ["b"]

[space.aardvark]
type = "categorical"
choices = [1, 2]
)");
  common::Result<SweepSpec> r = Parse(doc);
  INFO(r.status().message());
  REQUIRE(r.ok());
  std::vector<std::string> names;
  for (const ParamSpec& p : r->space) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"zeta", "mid", "beta", "alpha", "aardvark"});
}

TEST_CASE("an unknown key names the table, the key and the keys allowed", "[config]") {
  CHECK(ErrorOf(With("command =", "comand =")) ==
        "sweep.toml:7:1: [objective] unknown key \"comand\" for kind = \"exec\"; expected one of "
        "kind, command, env, workdir");
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\nntrials = 3")),
             StartsWith("sweep.toml:4:1: [study] unknown key \"ntrials\"") &&
                 Contains("expected one of name, direction, n_trials"));
  CHECK_THAT(ErrorOf(With("high = 1.0", "high = 1.0\nchoices = [1]")),
             StartsWith("sweep.toml:13:1: [space.x] unknown key \"choices\" for a float "
                        "parameter; expected one of type, low, high, log, step"));
  CHECK_THAT(ErrorOf(std::string(kMinimal) + "[sampler]\nkind = \"random\"\nsed = 1\n"),
             StartsWith("sweep.toml:15:1: [sampler] unknown key \"sed\"") &&
                 Contains("expected one of kind, seed"));
  CHECK_THAT(ErrorOf(std::string(kMinimal) + "[pruner]\npatiense = 1\n"),
             StartsWith("sweep.toml:14:1: [pruner] unknown key \"patiense\"") &&
                 Contains("expected one of kind"));
  // A nested table is an unknown key of the parameter, reported before the missing type.
  CHECK_THAT(ErrorOf(With("[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n",
                          "[space.x.sub]\ntype = \"float\"\n")),
             StartsWith("sweep.toml:9:10: [space.x] unknown key \"sub\"; expected one of type, "
                        "low, high, log, step, choices"));
  const std::string cat = With("type = \"float\"\nlow = 0.0", "type = \"categorical\"\nlow = 0");
  CHECK_THAT(ErrorOf(cat), StartsWith("sweep.toml:11:1: [space.x] unknown key \"low\" for a "
                                      "categorical parameter; expected one of type, choices"));
}

TEST_CASE("an unknown table or top-level key is rejected", "[config]") {
  CHECK(ErrorOf(std::string(kMinimal) + "\n[sampling]\nkind = \"random\"\n") ==
        "sweep.toml:14:1: unknown table [sampling]; expected one of [study], [objective], "
        "[space], [sampler], [pruner], [executor]");
  CHECK_THAT(ErrorOf("seed = 3\n" + std::string(kMinimal)),
             StartsWith("sweep.toml:1:1: unknown key \"seed\" outside any table") &&
                 Contains("expected one of the tables [study]"));
  CHECK_THAT(ErrorOf("sampler = \"tpe\"\n" + std::string(kMinimal)),
             StartsWith("sweep.toml:1:11: sampler = \"tpe\": expected a [sampler] table"));
}

TEST_CASE("stall_timeout: seconds > 0 up to 7 days, absent means none", "[config]") {
  CHECK(Parse(kMinimal, "sweep.toml")->study.stall_timeout == 0);
  common::Result<SweepSpec> r =
      Parse(With("n_trials = 10", "n_trials = 10\nstall_timeout = 2.5"), "sweep.toml");
  REQUIRE(r.ok());
  CHECK(r->study.stall_timeout == 2.5);
  r = Parse(With("n_trials = 10", "n_trials = 10\nstall_timeout = 604800"), "sweep.toml");
  REQUIRE(r.ok());
  CHECK(r->study.stall_timeout == 604800);
  const std::string expected =
      "expected a number of seconds > 0 and at most 604800 (7 days); leave it out for no stall "
      "timeout";
  for (const char* bad : {"0", "-1", "604801", "1e300", "inf", "nan", "\"10s\"", "true"}) {
    INFO(bad);
    const std::string error =
        ErrorOf(With("n_trials = 10", std::string("n_trials = 10\nstall_timeout = ") + bad));
    CHECK_THAT(error, StartsWith("sweep.toml:4:17: [study] stall_timeout = ") &&
                          Catch::EndsWith(": " + expected));
  }
  // A stalled trial may be retried.
  r = Parse(With("n_trials = 10",
                 "n_trials = 10\nstall_timeout = 60\nretries = 1\nretry_on = [\"stalled\"]"),
            "sweep.toml");
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->study.retry_on == std::vector<std::string>{"stalled"});
}

TEST_CASE("a value of the wrong type names the value and the type expected", "[config]") {
  CHECK(ErrorOf(With("n_trials = 10", "n_trials = \"ten\"")) ==
        "sweep.toml:3:12: [study] n_trials = \"ten\": expected an integer >= 1");
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 2.5")),
             StartsWith("sweep.toml:3:12: [study] n_trials = 2.5: expected an integer >= 1"));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\nparallelism = 0")),
             StartsWith("sweep.toml:4:15: [study] parallelism = 0: expected an integer >= 1"));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\ntrial_timeout = -1")),
             StartsWith("sweep.toml:4:17: [study] trial_timeout = -1: expected a number of "
                        "seconds from 0 to 31536000 (365 days)"));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\nkill_grace = \"5s\"")),
             StartsWith("sweep.toml:4:14: [study] kill_grace = \"5s\": expected a number"));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 99999999999")),
             StartsWith("sweep.toml:3:12: [study] n_trials = 99999999999: too large"));
  CHECK_THAT(ErrorOf(With("low = 0.0", "low = \"0\"")),
             StartsWith("sweep.toml:11:7: [space.x] low = \"0\": expected a number"));
  CHECK_THAT(ErrorOf(With("high = 1.0", "high = 1.0\nlog = \"yes\"")),
             StartsWith("sweep.toml:13:7: [space.x] log = \"yes\": expected true or false"));
  CHECK_THAT(ErrorOf(With("command = [\"true\"]", "command = \"python3 train.py\"")),
             StartsWith("sweep.toml:7:11: [objective] command = \"python3 train.py\": expected a "
                        "non-empty array of strings"));
  CHECK_THAT(ErrorOf(With("command = [\"true\"]", "command = []")),
             StartsWith("sweep.toml:7:11: [objective] command = []: expected a non-empty array"));
  CHECK_THAT(ErrorOf(With("command = [\"true\"]", "command = [\"python3\", 3]")),
             StartsWith("sweep.toml:7:23: [objective] command[1] = 3: expected a string"));
  CHECK_THAT(ErrorOf(With("command = [\"true\"]", "command = [\"true\"]\nenv = { A = 1 }")),
             StartsWith("sweep.toml:8:13: [objective.env] A = 1: expected a string"));
  CHECK_THAT(ErrorOf(With("type = \"float\"", "type = \"double\"")),
             StartsWith("sweep.toml:10:8: [space.x] type = \"double\": expected \"float\", "
                        "\"int\" or \"categorical\""));
  CHECK_THAT(
      ErrorOf(With("[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n", "[space]\nx = 5\n")),
      StartsWith("sweep.toml:10:5: [space] x = 5: expected a table such as [space.x]"));
  CHECK_THAT(ErrorOf(With("[study]\nname = \"s\"", "study = 1\n[x]")),
             StartsWith("sweep.toml:1:9: study = 1: expected a [study] table"));
}

TEST_CASE("a missing required key or table names the table and the key", "[config]") {
  CHECK(ErrorOf(With("n_trials = 10", "# no n_trials")) ==
        "sweep.toml:1:1: [study] missing required key \"n_trials\"; expected an integer >= 1");
  CHECK_THAT(ErrorOf(With("name = \"s\"", "")),
             StartsWith("sweep.toml:1:1: [study] missing required key \"name\""));
  CHECK_THAT(ErrorOf(With("kind = \"exec\"", "")),
             StartsWith("sweep.toml:5:1: [objective] missing required key \"kind\"") &&
                 Contains("expected kind = \"exec\""));
  CHECK_THAT(ErrorOf(With("command = [\"true\"]", "")),
             StartsWith("sweep.toml:5:1: [objective] missing required key \"command\""));
  CHECK_THAT(ErrorOf(With("type = \"float\"", "")),
             StartsWith("sweep.toml:9:1: [space.x] missing required key \"type\"") &&
                 Contains("expected type = \"float\", \"int\" or \"categorical\""));
  CHECK_THAT(ErrorOf(With("high = 1.0", "")),
             StartsWith("sweep.toml:9:1: [space.x] missing required key \"high\"") &&
                 Contains("expected a number"));
  CHECK_THAT(ErrorOf(With("low = 0.0\nhigh = 1.0", "",
                          With("type = \"float\"", "type = \"categorical\""))),
             StartsWith("sweep.toml:9:1: [space.x] missing required key \"choices\""));
  CHECK_THAT(ErrorOf(With("[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n", "")),
             StartsWith("sweep.toml:1:1: missing required table [space]") &&
                 Contains("expected at least one [space.NAME]"));
  CHECK_THAT(ErrorOf(With("[objective]\nkind = \"exec\"\ncommand = [\"true\"]\n", "")),
             StartsWith("sweep.toml:1:1: missing required table [objective]"));
  CHECK_THAT(ErrorOf(With("[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n", "[space]\n")),
             StartsWith("sweep.toml:9:1: [space] has no parameters; expected at least one "
                        "[space.NAME] table"));
}

TEST_CASE("distribution problems point at the field at fault", "[config]") {
  CHECK(ErrorOf(With("low = 0.0", "low = 5.0")) ==
        "sweep.toml:11:7: [space.x] low = 5.0 is greater than high = 1.0; expected low <= high");
  CHECK_THAT(ErrorOf(With("high = 1.0", "high = 1.0\nlog = true")),
             StartsWith("sweep.toml:11:7: [space.x] low = 0.0: ") &&
                 Contains("expected low > 0 with log = true"));
  CHECK_THAT(ErrorOf(With("high = 1.0", "high = 1.0\nstep = 0.3")),
             StartsWith("sweep.toml:13:8: [space.x] step = 0.3 does not divide high - low = 1.0") &&
                 Contains("expected high - low to be a whole multiple of step"));
  CHECK_THAT(ErrorOf(With("high = 1.0", "high = 1.0\nstep = 0")),
             StartsWith("sweep.toml:13:8: [space.x] step = 0: expected a number > 0"));
  CHECK_THAT(ErrorOf(With("low = 0.0", "low = 0.1",
                          With("high = 1.0", "high = 1.0\nlog = true\nstep = 0.1"))),
             StartsWith("sweep.toml:14:8: [space.x] step = 0.1: step cannot be combined with "
                        "log = true"));

  const std::string int_doc = With("type = \"float\"", "type = \"int\"");
  CHECK_THAT(ErrorOf(With("low = 0.0", "low = 0.5", int_doc)),
             StartsWith("sweep.toml:11:7: [space.x] low = 0.5: expected an integer (type = "
                        "\"int\")"));
  CHECK_THAT(
      ErrorOf(With("low = 0.0", "low = 0", With("high = 1.0", "high = 10\nstep = 3", int_doc))),
      StartsWith("sweep.toml:13:8: [space.x] step = 3 does not divide high - low = 10"));
  CHECK_THAT(
      ErrorOf(With("low = 0.0", "low = 0", With("high = 1.0", "high = 10\nlog = true", int_doc))),
      StartsWith("sweep.toml:11:7: [space.x] low = 0: ") &&
          Contains("expected low >= 1 with log = true"));
  CHECK_THAT(
      ErrorOf(With("low = 0.0", "low = 0", With("high = 1.0", "high = 9007199254740993", int_doc))),
      StartsWith("sweep.toml:12:8: [space.x] high = 9007199254740993: too large; expected "
                 "an integer between -2^53 and 2^53"));
  CHECK_THAT(
      ErrorOf(With("low = 0.0", "low = 0", With("high = 1.0", "high = 10\nstep = 2.0", int_doc))),
      StartsWith("sweep.toml:13:8: [space.x] step = 2.0: expected an integer >= 1"));

  const std::string cat_doc =
      With("type = \"float\"\nlow = 0.0\nhigh = 1.0", "type = \"categorical\"\nchoices = CHOICES");
  CHECK(ErrorOf(With("CHOICES", "[]", cat_doc)) ==
        "sweep.toml:11:11: [space.x] choices = []: expected at least one choice");
  CHECK_THAT(ErrorOf(With("CHOICES", "[\"adam\", \"sgd\", \"adam\"]", cat_doc)),
             StartsWith("sweep.toml:11:11: [space.x] choices = [\"adam\", \"sgd\", \"adam\"]: "
                        "\"adam\" appears more than once; expected distinct choices"));
  CHECK_THAT(ErrorOf(With("CHOICES", "[\"a\", [1]]", cat_doc)),
             StartsWith("sweep.toml:11:17: [space.x] choices[1] = [1]: expected a string, "
                        "integer, float or boolean"));
  CHECK_THAT(ErrorOf(With("CHOICES", "\"adam\"", cat_doc)),
             StartsWith("sweep.toml:11:11: [space.x] choices = \"adam\": expected a non-empty "
                        "array"));
}

TEST_CASE("study names, directions and parameter names are checked", "[config]") {
  CHECK_THAT(ErrorOf(With("name = \"s\"", "name = \"my study\"")),
             StartsWith("sweep.toml:2:8: [study] name = \"my study\": not a valid study name; "
                        "expected 1 to 128 characters from A-Z a-z 0-9 _ . -"));
  CHECK_THAT(ErrorOf(With("name = \"s\"", "name = \"\"")),
             StartsWith("sweep.toml:2:8: [study] name"));
  CHECK_THAT(ErrorOf(With("name = \"s\"", "name = \"" + std::string(129, 'a') + "\"")),
             StartsWith("sweep.toml:2:8: [study] name"));
  CHECK(Parse(With("name = \"s\"", "name = \"" + std::string(128, 'a') + "\"")).ok());
  // A name is a folder under studies/ and a command-line argument: it starts with a letter or
  // digit, so ".", ".." and "-rf" are refused with the rule.
  for (const char* bad : {".", "..", "-rf", "_x", ".hidden"}) {
    INFO(bad);
    CHECK(ErrorOf(With("name = \"s\"", std::string("name = \"") + bad + "\"")) ==
          std::string("sweep.toml:2:8: [study] name = \"") + bad +
              "\": not a valid study name; expected 1 to 128 characters from A-Z a-z 0-9 _ . -, "
              "starting with a letter or digit");
  }
  for (const char* good : {"a..b", "7-up", "Z_.-"}) {
    INFO(good);
    CHECK(Parse(With("name = \"s\"", std::string("name = \"") + good + "\"")).ok());
  }

  CHECK(ErrorOf(With("n_trials = 10", "n_trials = 10\ndirection = \"max\"")) ==
        "sweep.toml:4:13: [study] direction = \"max\": expected \"minimize\" or \"maximize\"");

  CHECK_THAT(ErrorOf(With("[space.x]", "[space.1x]")),
             StartsWith("sweep.toml:9:8: [space] parameter name \"1x\" is not valid; expected a "
                        "name matching [A-Za-z_][A-Za-z0-9_.-]*"));
  CHECK_THAT(ErrorOf(With("[space.x]", "[space.\"a b\"]")),
             StartsWith("sweep.toml:9:8: [space] parameter name \"a b\" is not valid"));
  CHECK(Parse(With("[space.x]", "[space.\"model.lr\"]"))->space[0].name == "model.lr");
}

TEST_CASE("durations above 365 days are refused at submit", "[config]") {
  // 1e10 s overflowed the clock a timeout is converted to: every trial ended FAIL(timeout) at once.
  for (const char* key : {"trial_timeout", "kill_grace"}) {
    for (const char* value : {"1e10", "1e300", "31536001"}) {
      INFO(key << " = " << value);
      const std::string line = std::string(key) + " = " + value;
      const std::string err = ErrorOf(With("n_trials = 10", "n_trials = 10\n" + line));
      CHECK_THAT(err, StartsWith("sweep.toml:4:" + std::to_string(std::string(key).size() + 4) +
                                 ": [study] " + key + " = ") &&
                          Catch::EndsWith(": expected a number of seconds from 0 to 31536000 "
                                          "(365 days)"));
    }
    SweepSpec at_max =
        Parsed(With("n_trials = 10", "n_trials = 10\n" + std::string(key) + " = 31536000"));
    CHECK((key == std::string("kill_grace") ? at_max.study.kill_grace
                                            : at_max.study.trial_timeout) == 31536000.0);
  }
}

TEST_CASE("per-trial report caps have defaults, take overrides and are checked", "[config]") {
  const SweepSpec d = Parsed(kMinimal);
  CHECK(d.study.max_intermediate_steps == 10000);
  CHECK(d.study.max_attrs == 1000);
  CHECK(d.study.max_attr_bytes == 1048576);
  CHECK(d.study.max_report_bytes == 67108864);

  const SweepSpec s = Parsed(With("n_trials = 10",
                                  "n_trials = 10\nmax_intermediate_steps = 200000\nmax_attrs = 5\n"
                                  "max_attr_bytes = \"2M\"\nmax_report_bytes = 4096"));
  CHECK(s.study.max_intermediate_steps == 200000);
  CHECK(s.study.max_attrs == 5);
  CHECK(s.study.max_attr_bytes == 2097152);
  CHECK(s.study.max_report_bytes == 4096);

  CHECK(ErrorOf(With("n_trials = 10", "n_trials = 10\nmax_intermediate_steps = 0")) ==
        "sweep.toml:4:26: [study] max_intermediate_steps = 0: expected an integer from 1 to "
        "10000000 (distinct steps with an intermediate value per trial)");
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\nmax_attrs = 100001")),
             StartsWith("sweep.toml:4:13: [study] max_attrs = 100001: "));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\nmax_attr_bytes = \"1T\"")),
             StartsWith("sweep.toml:4:18: [study] max_attr_bytes = \"1T\": expected a size "
                        "from 1024 to 67108864 bytes"));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\nmax_report_bytes = 10")),
             StartsWith("sweep.toml:4:20: [study] max_report_bytes = 10: expected a size from "
                        "1024"));
}

TEST_CASE("the daemon's own environment variables cannot be set", "[config]") {
  const std::string base = With("command = [\"true\"]",
                                "command = [\"true\"]\n[objective.env]\nOK = \"1\"\nNAME = \"x\"");
  CHECK_THAT(ErrorOf(With("NAME", "TRIALD_PARAMS", base)),
             StartsWith("sweep.toml:10:1: [objective.env] TRIALD_PARAMS is reserved") &&
                 Contains("expected a name that does not start with TRIALD_ and is not "
                          "CUDA_VISIBLE_DEVICES"));
  CHECK_THAT(ErrorOf(With("NAME", "CUDA_VISIBLE_DEVICES", base)),
             StartsWith("sweep.toml:10:1: [objective.env] CUDA_VISIBLE_DEVICES is reserved"));
  CHECK_THAT(ErrorOf(With("NAME", "1BAD", base)),
             StartsWith("sweep.toml:10:1: [objective.env] \"1BAD\" is not a valid environment "
                        "variable name; expected a name matching [A-Za-z_][A-Za-z0-9_]*"));
  common::Result<SweepSpec> ok = Parse(With("NAME", "TRIAL_ID", base));
  REQUIRE(ok.ok());
  CHECK(ok->objective.env.at("TRIAL_ID") == "x");
}

TEST_CASE("TOML syntax errors keep toml++'s description and position", "[config]") {
  std::string msg = ErrorOf(With("n_trials = 10", "n_trials = = 10"));
  CHECK_THAT(msg, StartsWith("sweep.toml:3:12: invalid TOML: "));
  CHECK(msg.size() > std::string("sweep.toml:3:12: invalid TOML: ").size());
  CHECK_THAT(ErrorOf(With("name = \"s\"", "name = \"s\"\nname = \"t\"")),
             StartsWith("sweep.toml:3:") && Contains("invalid TOML"));
  CHECK_THAT(ErrorOf(With("[space.x]", "[space.x")), StartsWith("sweep.toml:9:"));
}

TEST_CASE("messages show the path they were given", "[config]") {
  common::Result<SweepSpec> r =
      ParseSweep(SweepSource{With("low = 0.0", "low = 5.0"), "/home/u/exp/lr.toml"});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), StartsWith("/home/u/exp/lr.toml:11:7: [space.x]"));
}

TEST_CASE("ParseSweepFile reads a file and names an unreadable one", "[config]") {
  common::Result<SweepSpec> r = ParseSweepFile("/nonexistent/dir/sweep.toml");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(),
             Contains("/nonexistent/dir/sweep.toml") && Contains("No such file or directory"));

  r = ParseSweepFile("/");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Contains("Is a directory"));
}

TEST_CASE("DirectionName names both directions", "[config]") {
  CHECK(std::string(DirectionName(Direction::kMinimize)) == "minimize");
  CHECK(std::string(DirectionName(Direction::kMaximize)) == "maximize");
}

TEST_CASE("directions gives one direction per objective", "[config][objectives]") {
  SweepSpec single = Parsed(kMinimal);
  CHECK(single.study.directions == std::vector<Direction>{Direction::kMinimize});
  SweepSpec max = Parsed(With("n_trials = 10", "n_trials = 10\ndirection = \"maximize\""));
  CHECK(max.study.directions == std::vector<Direction>{Direction::kMaximize});

  SweepSpec two = Parsed(With(
      "n_trials = 10", "n_trials = 10\ndirections = [\"maximize\", \"minimize\", \"maximize\"]"));
  CHECK(two.study.directions ==
        std::vector<Direction>{Direction::kMaximize, Direction::kMinimize, Direction::kMaximize});
  CHECK(two.study.direction == Direction::kMaximize);
}

TEST_CASE("bad directions are refused naming the key", "[config][objectives]") {
  CHECK(ErrorOf(With("n_trials = 10", "n_trials = 10\ndirections = [\"minimize\"]")) ==
        "sweep.toml:4:14: [study] directions = [\"minimize\"]: a single objective; expected an "
        "array of two or more of \"minimize\" and \"maximize\", one per objective (for one "
        "objective write direction = \"minimize\" or \"maximize\")");
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\ndirections = []")),
             StartsWith("sweep.toml:4:14: [study] directions = []: no objectives; expected"));
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\ndirections = \"minimize\"")),
             StartsWith("sweep.toml:4:14: [study] directions = \"minimize\": expected an array"));
  CHECK(ErrorOf(With("n_trials = 10", "n_trials = 10\ndirections = [\"minimize\", \"up\"]")) ==
        "sweep.toml:4:27: [study] directions[1] = \"up\": expected \"minimize\" or \"maximize\"");
  CHECK_THAT(ErrorOf(With("n_trials = 10", "n_trials = 10\ndirections = [\"minimize\", 1]")),
             StartsWith("sweep.toml:4:27: [study] directions[1] = 1: expected"));
  // Both keys: the message names both, with where each is.
  const std::string both = ErrorOf(With("n_trials = 10",
                                        "n_trials = 10\ndirection = \"minimize\"\n"
                                        "directions = [\"minimize\", \"maximize\"]"));
  CHECK_THAT(both, StartsWith("sweep.toml:5:14: [study] directions = [\"minimize\", "
                              "\"maximize\"] and direction = \"minimize\" (at sweep.toml:4:13) "
                              "are both given; expected one of them"));
}

TEST_CASE("several objectives need a sampler that handles them and no pruner",
          "[config][objectives]") {
  const std::string mo =
      With("n_trials = 10", "n_trials = 10\ndirections = [\"minimize\", \"maximize\"]");
  for (const char* kind : MultiObjectiveSamplerKinds()) {
    if (std::string(kind) == "nsga2") continue;  // its options belong to its own tests
    INFO(kind);
    SweepSpec s = Parsed(mo + "\n[sampler]\nkind = \"" + kind + "\"\n");
    CHECK(s.sampler.kind == kind);
    CHECK(s.study.directions.size() == 2);
  }
  const std::vector<const char*>& kinds = MultiObjectiveSamplerKinds();
  CHECK(std::find_if(kinds.begin(), kinds.end(),
                     [](const char* k) { return std::string(k) == "cmaes"; }) == kinds.end());

  // Every kind the parser knows that is not in the list is refused, naming it and the list.
  // (A kind unknown to this build fails earlier, as unknown.)
  for (const char* kind : {"cmaes"}) {
    common::Result<SweepSpec> r = Parse(mo + "\n[sampler]\nkind = \"" + kind + "\"\n");
    if (!r.ok() && r.status().message().find("unknown sampler kind") != std::string::npos) {
      continue;
    }
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.status().message(),
               StartsWith(std::string("sweep.toml:16:8: [sampler] kind = \"") + kind +
                          "\": does not handle several objectives"));
    CHECK_THAT(r.status().message(), Contains("random, qmc, grid, tpe, nsga2"));
  }

  // A pruner: refused, naming the pruner, at its kind.
  CHECK(ErrorOf(mo + "\n[pruner]\nkind = \"median\"\n") ==
        "sweep.toml:16:8: [pruner] kind = \"median\": pruning is not supported for a study with "
        "several objectives ([study] directions has 2 objectives), as in Optuna; expected no "
        "[pruner] table (or kind = \"nop\")");
  CHECK_THAT(
      ErrorOf(mo + "\n[pruner]\nkind = \"hyperband\"\n"),
      StartsWith("sweep.toml:16:8: [pruner] kind = \"hyperband\": pruning is not supported"));
  CHECK(Parsed(mo + "\n[pruner]\nkind = \"nop\"\n").pruner.kind == "nop");
  // One objective: every pruner as before.
  CHECK(Parsed(std::string(kMinimal) + "\n[pruner]\nkind = \"median\"\n").pruner.kind == "median");
}

TEST_CASE("a sweep file that is not UTF-8 is refused naming the byte, its line and column",
          "[config]") {
  std::string doc = With("name = \"s\"", "name = \"caf\xE9\"");
  CHECK(ErrorOf(doc) ==
        "sweep.toml: not UTF-8 text: byte 0xE9 at line 2, column 12 (byte offset 19); expected "
        "a UTF-8 file (save it as UTF-8)");
}

TEST_CASE("a float range wider than a double can hold is refused", "[config]") {
  CHECK_THAT(ErrorOf(With("low = 0.0", "low = -1.797e308", With("high = 1.0", "high = 1.797e308"))),
             StartsWith("sweep.toml:12:8: [space.x] high = 1.797e+308: high - low = inf overflows "
                        "a double; expected a range no wider than 1.79e308"));
  // A log range of the same width is fine: draws are made on log(high) - log(low).
  CHECK(Parse(With("low = 0.0", "low = 1e-300\nlog = true", With("high = 1.0", "high = 1e308")))
            .ok());
}

TEST_CASE("choices that are equal as numbers are refused", "[config]") {
  const std::string cat_doc =
      With("type = \"float\"\nlow = 0.0\nhigh = 1.0", "type = \"categorical\"\nchoices = CHOICES");
  CHECK_THAT(ErrorOf(With("CHOICES", "[1, 2, 1.0]", cat_doc)),
             StartsWith("sweep.toml:11:11: [space.x] choices = [1, 2, 1.0]: 1.0 equals 1 as a "
                        "number (an objective receives both as the same JSON number)"));
  // true and 1, "1" and 1 stay apart: they are different JSON values.
  CHECK(Parse(With("CHOICES", "[true, 1, \"1\", 1.5]", cat_doc)).ok());
}

TEST_CASE("a space whose parameters cannot reach a trial in TRIALD_PARAMS is refused", "[config]") {
  std::string doc =
      "[study]\nname = \"s\"\nn_trials = 1\n\n[objective]\nkind = \"exec\"\n"
      "command = [\"true\"]\n\n";
  for (int i = 0; i < 4000; ++i) {
    doc += "[space.parameter_number_" + std::to_string(i) +
           "]\ntype = \"float\"\nlow = 0.0\n"
           "high = 1.0\n";
  }
  const std::string message = ErrorOf(doc);
  CHECK_THAT(message, StartsWith("sweep.toml:9:1: [space] has 4000 parameters whose values can "
                                 "take "));
  CHECK_THAT(message, Contains("which Linux limits to 128 KiB; expected at most 122880 bytes"));
  // 1,000 such parameters fit.
  std::string fits = doc.substr(0, doc.find("[space.parameter_number_1000]"));
  CHECK(Parse(fits).ok());
}

}  // namespace
}  // namespace triald::config
