// NSGA-II (daemon/sampler/nsga2_sampler.h): generations rebuilt from trial numbers, the elite
// selection against hand-computed populations, constrained domination, the child operators,
// reproducibility across fresh instances and its cache, and a quality check against random
// sampling on ZDT1. The contract shared by every sampler runs in sampler_contract_test.cc.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/nsga2_sampler.h"
#include "daemon/sampler/pareto.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"
#include "tests/support/distributions.h"

namespace triald::sampler {
namespace {

using config::Direction;
using config::ParamSpec;
using config::ParamValues;
using config::SearchSpace;
using model::TrialRecord;
using model::TrialState;
using triald::testing::Categorical;
using triald::testing::Float;
using triald::testing::Int;

const std::vector<Direction> kTwoMin = {Direction::kMinimize, Direction::kMinimize};

std::unique_ptr<Nsga2Sampler> Make(uint64_t seed, config::Nsga2Config config = {}) {
  auto made = Nsga2Sampler::Create(seed, config);
  INFO(made.status().message());
  REQUIRE(made.ok());
  return std::move(made).value();
}

// A study of trials whose values are set directly.
struct Study {
  Study() = default;
  explicit Study(SearchSpace s) : space(std::move(s)) {}

  SearchSpace space;
  std::vector<Direction> directions = kTwoMin;
  std::vector<TrialRecord> trials;

  StudyView View() const {
    StudyView v;
    v.direction = directions[0];
    v.directions = directions;
    v.space = &space;
    v.trials = &trials;
    return v;
  }
  TrialRecord& Add(TrialState state, std::vector<double> values = {},
                   std::vector<double> constraints = {}, const ParamValues& params = {}) {
    TrialRecord t;
    t.number = static_cast<int>(trials.size());
    t.state = state;
    t.values = std::move(values);
    t.constraints = std::move(constraints);
    for (const ParamSpec& p : space) {
      auto it = params.find(p.name);
      if (it != params.end()) t.params[p.name] = {it->second, p.dist};
    }
    trials.push_back(std::move(t));
    return trials.back();
  }
  ParamValues Sample(Sampler& sampler, int number) const {
    auto r = SampleParams(sampler, View(), number);
    INFO("trial " << number << ": " << r.status().message());
    REQUIRE(r.ok());
    return *r;
  }
};

TEST_CASE("nsga2: a trial's generation counts the complete trials numbered below it",
          "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 4;
  auto sampler = Make(1, config);
  Study study;
  for (int i = 0; i < 9; ++i) study.Add(TrialState::kComplete, {double(i), double(9 - i)});
  for (int n = 0; n <= 9; ++n) {
    INFO("trial " << n);
    CHECK(sampler->ParentPopulation(study.View(), n).generation == n / 4);
  }
  // Failed, pruned, running and waiting trials do not count; nor does a COMPLETE trial without
  // one value per objective.
  study.trials[1].state = TrialState::kFail;
  study.trials[2].state = TrialState::kRunning;
  study.trials[5].values = {1.0};
  CHECK(sampler->ParentPopulation(study.View(), 6).generation == 0);  // 0, 3, 4 below 6
  CHECK(sampler->ParentPopulation(study.View(), 8).generation == 1);  // 0, 3, 4, 6
  CHECK(sampler->ParentPopulation(study.View(), 8).numbers == std::vector<int>{0, 3, 4, 6});
  // Trial 2 completes late: the first block becomes 0, 2, 3, 4.
  study.trials[2].state = TrialState::kComplete;
  CHECK(sampler->ParentPopulation(study.View(), 6).generation == 1);
  CHECK(sampler->ParentPopulation(study.View(), 6).numbers == std::vector<int>{0, 2, 3, 4});
  // Trials numbered at or above the one sampled are not read.
  CHECK(sampler->ParentPopulation(study.View(), 3).generation == 0);
}

TEST_CASE("nsga2: the elite takes whole fronts, then the least crowded of the overflowing one",
          "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 4;
  auto sampler = Make(1, config);
  Study study;
  // Block 0 (trials 0-3): a front of three and one point behind it.
  study.Add(TrialState::kComplete, {1, 4});
  study.Add(TrialState::kComplete, {2, 2});
  study.Add(TrialState::kComplete, {4, 1});
  study.Add(TrialState::kComplete, {3, 3});
  // Block 1 (trials 4-7).
  study.Add(TrialState::kComplete, {0.5, 5});
  study.Add(TrialState::kComplete, {1.5, 1.5});
  study.Add(TrialState::kComplete, {5, 0.5});
  study.Add(TrialState::kComplete, {3.5, 3.5});
  // P(1): block 0 whole, the front (0, 1, 2) then rank 1 (3).
  CHECK(sampler->ParentPopulation(study.View(), 4).numbers == std::vector<int>{0, 1, 2, 3});
  // P(2) from block 1 + P(1): the first front is 4, 5, 6, 0, 2 (5 dominates 1, 3 and 7), one too
  // many. Crowding distances (ranges 4.5 in both objectives): 4 and 6 inf, 5 6/4.5, 0 and 2
  // 4.5/4.5 each; the tie goes to population order, so 0 stays and 2 goes.
  CHECK(sampler->ParentPopulation(study.View(), 8).numbers == std::vector<int>{4, 6, 5, 0});

  // Maximised objectives are negated first: flipping the direction and the sign of the second
  // objective selects the same trials.
  Study flipped = study;
  flipped.directions = {Direction::kMinimize, Direction::kMaximize};
  for (TrialRecord& t : flipped.trials) t.values[1] = -t.values[1];
  CHECK(Make(1, config)->ParentPopulation(flipped.View(), 8).numbers ==
        std::vector<int>{4, 6, 5, 0});
}

TEST_CASE("nsga2: constraints decide the elite as Optuna's constrained domination",
          "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 2;
  auto sampler = Make(1, config);
  Study study;
  study.Add(TrialState::kComplete, {0, 0}, {1.0});   // best values, infeasible (violation 1)
  study.Add(TrialState::kComplete, {5, 5}, {-1.0});  // feasible
  study.Add(TrialState::kComplete, {1, 1}, {0.5});   // infeasible (violation 0.5)
  study.Add(TrialState::kComplete, {6, 6}, {0.0});   // feasible (0 is feasible)
  // Ranks: 1 (feasible, dominates 3), 3, then the infeasible ones by violation: 2, 0.
  CHECK(sampler->ParentPopulation(study.View(), 4).numbers == std::vector<int>{1, 3});
  // Without constraints the same values keep the two best, by rank: 0 (0, 0), then 2 (1, 1).
  // (The same instance: its cached elites were made with the constraints and no longer apply.)
  for (TrialRecord& t : study.trials) t.constraints.clear();
  CHECK(sampler->ParentPopulation(study.View(), 4).numbers == std::vector<int>{0, 2});
}

SearchSpace MixedSpace() {
  return {{"lr", Float(1e-5, 1e-1, /*log=*/true)},
          {"dropout", Float(0.0, 0.5)},
          {"momentum", Float(0.5, 0.95, false, 0.05)},
          {"layers", Int(1, 8)},
          {"batch", Int(1, 64, /*log=*/true)},
          {"width", Int(16, 128, false, 16)},
          {"optimizer", Categorical(3)},
          {"fixed", Float(0.25, 0.25)}};
}

// Two objectives of every parameter, so that the selection has something to work on.
std::vector<double> MixedObjectives(const ParamValues& v) {
  const double a = std::log10(v.at("lr")) + 3 + v.at("dropout") + v.at("optimizer");
  const double b =
      v.at("momentum") + v.at("layers") / 8 + std::log2(v.at("batch")) / 6 + v.at("width") / 128;
  return {a * a + b, (a - 1) * (a - 1) + (2 - b) * (2 - b)};
}

// Runs a study of n trials one at a time; returns every trial's parameters.
std::vector<ParamValues> Run(Sampler& sampler, Study& study, int n) {
  std::vector<ParamValues> out;
  for (int i = 0; i < n; ++i) {
    const ParamValues v = study.Sample(sampler, i);
    study.Add(TrialState::kComplete, MixedObjectives(v), {}, v);
    out.push_back(v);
  }
  return out;
}

TEST_CASE("nsga2: the first generation is uniform, as the random sampler draws it",
          "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 10;
  auto sampler = Make(5, config);
  RandomSampler random(5);
  Study study(MixedSpace());
  const std::vector<ParamValues> trials = Run(*sampler, study, 12);
  for (int i = 0; i < 10; ++i) CHECK(trials[i] == study.Sample(random, i));
  CHECK(trials[10] != study.Sample(random, 10));
}

TEST_CASE("nsga2: children take their parents' values, mutation redraws them uniformly",
          "[sampler][nsga2]") {
  Study history(MixedSpace());
  {
    config::Nsga2Config config;
    config.population_size = 6;
    auto warmup = Make(3, config);
    Run(*warmup, history, 20);
  }
  const int n = 20;  // generation 3
  auto parents_of = [&](const config::Nsga2Config& config) {
    std::vector<ParamValues> out;
    for (int number : Make(3, config)->ParentPopulation(history.View(), n).numbers) {
      ParamValues v;
      for (const auto& [name, pv] : history.trials[number].params) v[name] = pv.internal;
      out.push_back(v);
    }
    return out;
  };
  SECTION("a copy of one parent without crossover or mutation") {
    config::Nsga2Config config;
    config.population_size = 6;
    config.crossover_prob = 0;
    config.mutation_prob = 0;
    const std::vector<ParamValues> parents = parents_of(config);
    REQUIRE(parents.size() == 6);
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const ParamValues child = history.Sample(*Make(seed, config), n);
      CHECK(std::find(parents.begin(), parents.end(), child) != parents.end());
    }
  }
  SECTION("each parameter from one of two parents with crossover") {
    config::Nsga2Config config;
    config.population_size = 6;
    config.crossover_prob = 1;
    config.mutation_prob = 0;
    const std::vector<ParamValues> parents = parents_of(config);
    int mixed = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const ParamValues child = history.Sample(*Make(seed, config), n);
      // Some pair of parents supplies every value.
      bool found = false, from_one = false;
      for (size_t a = 0; a < parents.size() && !found; ++a) {
        for (size_t b = 0; b < parents.size() && !found; ++b) {
          bool all = true;
          for (const auto& [name, v] : child) {
            all = all && (v == parents[a].at(name) || v == parents[b].at(name));
          }
          found = all;
          from_one = all && (child == parents[a] || child == parents[b]);
        }
      }
      CHECK(found);
      if (!from_one) ++mixed;
    }
    CHECK(mixed > 0);  // crossover does mix
  }
  SECTION("mutation probability 1 redraws everything uniformly") {
    config::Nsga2Config config;
    config.population_size = 6;
    config.mutation_prob = 1;
    RandomSampler random(9);
    CHECK(history.Sample(*Make(9, config), n) == history.Sample(random, n));
  }
}

TEST_CASE("nsga2: a fresh instance, a call order or a stale cache change nothing",
          "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 8;
  auto sampler = Make(21, config);
  Study study(MixedSpace());
  Run(*sampler, study, 40);
  const ParamValues a = study.Sample(*sampler, 40);
  CHECK(study.Sample(*Make(21, config), 40) == a);
  auto backward = Make(21, config);
  const ParamValues b37 = study.Sample(*backward, 37);
  CHECK(study.Sample(*backward, 40) == a);
  CHECK(study.Sample(*backward, 37) == b37);
  CHECK(study.Sample(*Make(22, config), 40) != a);
  // A trial of the first block fails after the fact (as a lost trial would): the cached elites
  // no longer apply, and the used instance agrees with a fresh one.
  const std::vector<int> before = sampler->ParentPopulation(study.View(), 40).numbers;
  study.trials[3].state = TrialState::kFail;
  const std::vector<int> after = sampler->ParentPopulation(study.View(), 40).numbers;
  CHECK(after == Make(21, config)->ParentPopulation(study.View(), 40).numbers);
  CHECK(study.Sample(*sampler, 40) == study.Sample(*Make(21, config), 40));
  CHECK(before != after);
}

TEST_CASE("nsga2: trials running in parallel", "[sampler][nsga2]") {
  // Four workers: each trial is sampled while the three before it still run, then completes.
  config::Nsga2Config config;
  config.population_size = 10;
  auto sampler = Make(4, config);
  Study study(MixedSpace());
  std::set<ParamValues> distinct;
  for (int i = 0; i < 60; ++i) {
    if (i >= 3) {
      TrialRecord& done = study.trials[i - 3];
      ParamValues v;
      for (const auto& [name, pv] : done.params) v[name] = pv.internal;
      done.state = TrialState::kComplete;
      done.values = MixedObjectives(v);
    }
    const ParamValues v = study.Sample(*sampler, i);
    study.Add(TrialState::kRunning, {}, {}, v);
    distinct.insert(v);
    // The generation counts only the trials complete so far.
    CHECK(sampler->ParentPopulation(study.View(), i).generation == std::max(0, i - 2) / 10);
  }
  CHECK(distinct.size() > 50);
}

TEST_CASE("nsga2: single-objective studies and define-by-run parameters", "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 5;
  auto sampler = Make(8, config);
  Study study({{"x", Float(-5, 5)}, {"c", Categorical(2)}});
  study.directions = {Direction::kMaximize};
  for (int i = 0; i < 30; ++i) {
    const ParamValues v = study.Sample(*sampler, i);
    TrialRecord& t = study.Add(TrialState::kComplete, {}, {}, v);
    // Stored as the scheduler stores a single-objective trial before values existed: value only.
    t.value = -(v.at("x") - 1) * (v.at("x") - 1) + v.at("c");
    // A parameter only some trials hold stays out of the relative space.
    if (i % 2 == 0) t.params["extra"] = {0.5, Float(0, 1)};
  }
  const SearchSpace relative = sampler->InferRelativeSearchSpace(study.View(), 30);
  REQUIRE(relative.size() == 2);
  CHECK(relative[0].name == "c");
  CHECK(relative[1].name == "x");
  // The parents of generation 6 are the five best trials by value.
  std::vector<std::pair<double, int>> by_value;
  for (const TrialRecord& t : study.trials) by_value.push_back({-*t.value, t.number});
  std::sort(by_value.begin(), by_value.end());
  std::set<int> best;
  for (int k = 0; k < 5; ++k) best.insert(by_value[k].second);
  const std::vector<int> parents = sampler->ParentPopulation(study.View(), 30).numbers;
  CHECK(std::set<int>(parents.begin(), parents.end()) == best);

  // Define-by-run: StartTrial then Suggest; "extra" is drawn uniformly.
  SearchSpace none;
  Study dynamic = study;
  dynamic.space = none;
  auto started = StartTrial(*sampler, dynamic.View(), 30);
  REQUIRE(started.ok());
  auto extra = Suggest(*sampler, dynamic.View(), *started, {"extra", Float(0, 1)});
  REQUIRE(extra.ok());
  RandomSampler random(8);
  CHECK(*extra == *random.SampleIndependent(dynamic.View(), 30, {"extra", Float(0, 1)}));
  auto x = Suggest(*sampler, dynamic.View(), *started, {"x", Float(-5, 5)});
  REQUIRE(x.ok());
  CHECK(*x >= -5);
  CHECK(*x <= 5);
}

// ZDT1 over 6 variables: the hypervolume NSGA-II reaches in 200 trials beats uniform sampling on
// every one of five seeds.
double Zdt1Hypervolume(Sampler& sampler) {
  Study study;
  for (int i = 0; i < 6; ++i) study.space.push_back({"x" + std::to_string(i), Float(0, 1)});
  std::vector<pareto::Point> points;
  for (int n = 0; n < 200; ++n) {
    const ParamValues v = study.Sample(sampler, n);
    double g = 0;
    for (int i = 1; i < 6; ++i) g += v.at("x" + std::to_string(i));
    g = 1 + 9 * g / 5;
    const double f1 = v.at("x0");
    const double f2 = g * (1 - std::sqrt(f1 / g));
    study.Add(TrialState::kComplete, {f1, f2}, {}, v);
    points.push_back({f1, f2});
  }
  return pareto::Hypervolume(points, {1.1, 11});
}

TEST_CASE("nsga2: finds a better front than uniform sampling on ZDT1", "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 20;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    INFO("seed " << seed);
    RandomSampler random(seed);
    const double uniform = Zdt1Hypervolume(random);
    const double nsga2 = Zdt1Hypervolume(*Make(seed, config));
    CHECK(nsga2 > uniform);
  }
}

TEST_CASE("nsga2: options out of range are refused, naming the option", "[sampler][nsga2]") {
  config::Nsga2Config config;
  config.population_size = 1;
  auto r = Nsga2Sampler::Create(0, config);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("population_size = 1"));
  config = {};
  config.crossover_prob = 1.5;
  r = Nsga2Sampler::Create(0, config);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("crossover_prob = 1.5"));
  config = {};
  config.mutation_prob = -0.1;
  CHECK_FALSE(Nsga2Sampler::Create(0, config).ok());
  config = {};
  config.swapping_prob = 2;
  CHECK_FALSE(Nsga2Sampler::Create(0, config).ok());
}

}  // namespace
}  // namespace triald::sampler
