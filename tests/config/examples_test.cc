// The example sweeps under config/examples: every one parses, and each shows what it claims to.

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "config/sweep.h"

namespace triald::config {
namespace {

namespace fs = std::filesystem;

const std::string kExamples = std::string(TRIALD_SOURCE_DIR) + "/config/examples";

SweepSpec ParseExample(const std::string& name) {
  common::Result<SweepSpec> r = ParseSweepFile(kExamples + "/" + name);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

// A path as the parser resolves one relative to the examples folder.
std::string UnderSource(const std::string& relative) {
  return (fs::path(TRIALD_SOURCE_DIR) / relative).lexically_normal().string();
}

TEST_CASE("every example sweep parses", "[config][examples]") {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(kExamples)) {
    if (e.path().extension() == ".toml") names.push_back(e.path().filename().string());
  }
  // The ones this suite knows about must be among them: an empty folder is no pass.
  for (const char* known : {"quadratic.toml", "tpe.toml", "grid.toml", "lm.toml"}) {
    CHECK(std::find(names.begin(), names.end(), known) != names.end());
  }
  std::vector<std::string> study_names;
  for (const std::string& name : names) {
    INFO(name);
    common::Result<SweepSpec> r = ParseSweepFile(kExamples + "/" + name);
    INFO(r.status().message());
    CHECK(r.ok());
    if (r.ok()) study_names.push_back(r->study.name);
  }
  // Study names are unique per daemon: the examples can all be submitted to one.
  std::sort(study_names.begin(), study_names.end());
  CHECK(std::adjacent_find(study_names.begin(), study_names.end()) == study_names.end());
}

TEST_CASE("the quadratic example parses", "[config][examples]") {
  const SweepSpec s = ParseExample("quadratic.toml");
  CHECK(s.study.name == "quadratic");
  CHECK(s.study.direction == Direction::kMinimize);
  CHECK(s.study.n_trials == 20);
  CHECK(s.study.parallelism == 2);
  CHECK(s.study.trial_timeout == 30);
  CHECK(s.study.kill_grace == 5);
  CHECK(s.objective.command == std::vector<std::string>{"python3", "quadratic.py"});
  CHECK(fs::equivalent(s.objective.workdir, kExamples));
  REQUIRE(s.space.size() == 3);
  CHECK(s.space[0].name == "x");
  CHECK(s.space[0].dist == Distribution{ParamType::kFloat, -10, 10, false, 0, {}});
  CHECK(s.space[1].name == "y");
  CHECK(s.space[2].name == "shape");
  CHECK(s.space[2].dist.choices == std::vector<Choice>{std::string("bowl"), std::string("tilted")});
  CHECK(s.sampler.kind == "auto");
  CHECK(s.sampler.seed == 7);
  CHECK(s.sampler.seed_given);
}

TEST_CASE("the tpe example runs quadratic.py with TPE and the median pruner",
          "[config][examples]") {
  const SweepSpec s = ParseExample("tpe.toml");
  CHECK(s.objective.kind == "exec");
  CHECK(s.objective.command == std::vector<std::string>{"python3", "quadratic.py"});
  CHECK(fs::equivalent(s.objective.workdir, kExamples));
  CHECK(s.sampler.kind == "tpe");
  CHECK(s.sampler.seed_given);
  CHECK(s.sampler.tpe.n_startup_trials < s.study.n_trials);
  CHECK(s.pruner.kind == "median");
  CHECK(s.pruner.percentile == 50);
  // quadratic.py reports steps 0 to 4: a warm-up of 5 or more would never prune anything.
  CHECK(s.pruner.n_warmup_steps < 5);
}

TEST_CASE("the grid example is a finite grid that n_trials covers", "[config][examples]") {
  const SweepSpec s = ParseExample("grid.toml");
  CHECK(s.sampler.kind == "grid");
  CHECK(s.objective.command == std::vector<std::string>{"python3", "quadratic.py"});
  std::vector<ParamType> types;
  double points = 1;
  for (const ParamSpec& p : s.space) {
    INFO(p.name);
    types.push_back(p.dist.type);
    if (p.dist.type == ParamType::kCategorical) {
      points *= static_cast<double>(p.dist.choices.size());
    } else {
      REQUIRE(p.dist.step > 0);  // a continuous float cannot be on a grid
      points *= (p.dist.high - p.dist.low) / p.dist.step + 1;
    }
  }
  // One of each kind of grid axis.
  CHECK(std::count(types.begin(), types.end(), ParamType::kCategorical) >= 1);
  CHECK(std::count(types.begin(), types.end(), ParamType::kInt) >= 1);
  CHECK(std::count(types.begin(), types.end(), ParamType::kFloat) >= 1);
  CHECK(points == s.study.n_trials);
}

TEST_CASE("the lm example fine-tunes the test fixtures with TPE", "[config][examples]") {
  const SweepSpec s = ParseExample("lm.toml");
  CHECK(s.objective.kind == "lm");
  CHECK(s.objective.command.empty());
  const LmObjectiveConfig& lm = s.objective.lm;
  CHECK(lm.model == UnderSource("tests/fixtures/tiny-gpt2"));
  CHECK(lm.train_file == UnderSource("tests/fixtures/tiny-corpus/train.txt"));
  CHECK(lm.eval_file == UnderSource("tests/fixtures/tiny-corpus/eval.txt"));
  CHECK(lm.max_steps == 20);
  CHECK(lm.seq_len == 32);
  CHECK(lm.eval_every == 5);
  CHECK(lm.device == "auto");
  std::vector<std::string> names;
  for (const ParamSpec& p : s.space) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"learning_rate", "batch_size", "lr_schedule"});
  CHECK(s.space[0].dist == Distribution{ParamType::kFloat, 1e-4, 1e-2, true, 0, {}});
  CHECK(s.space[1].dist == Distribution{ParamType::kInt, 2, 8, false, 1, {}});
  CHECK(s.sampler.kind == "tpe");
  CHECK(s.pruner.kind == "median");
  CHECK(s.study.n_trials == 8);
  CHECK(s.study.parallelism == 2);
  // What the daemon will hand to trial-worker reads back unchanged.
  common::Result<LmObjectiveConfig> back = LmObjectiveFromJson(LmObjectiveToJson(lm));
  INFO(back.status().message());
  REQUIRE(back.ok());
  CHECK(LmObjectiveToJson(*back) == LmObjectiveToJson(lm));
}

}  // namespace
}  // namespace triald::config
