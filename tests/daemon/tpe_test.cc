// TPE's own behaviour: the numerics it rests on, what it does with a study's history (start-up,
// ranking, constant liar, direction), and that it actually optimises — statistical checks over
// fixed seeds, each with a margin chosen so that a sampler that ignored the history would fail.
// The contract every sampler meets (bounds, reproducibility) is in sampler_contract_test.cc.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"
#include "daemon/sampler/tpe_sampler.h"
#include "tests/daemon/sampler_test_util.h"
#include "tests/support/distributions.h"

namespace triald::sampler {
namespace {

using config::Distribution;
using config::ParamSpec;
using config::ParamType;
using config::ParamValues;
using config::SearchSpace;
using model::TrialRecord;
using model::TrialState;

using triald::testing::Categorical;
using triald::testing::Float;
using triald::testing::Int;

std::unique_ptr<Sampler> MakeSeeded(const std::string& kind, const SearchSpace& space,
                                    uint64_t seed, const config::TpeConfig& tpe = {}) {
  return triald::testing::MakeSeededSampler(kind, space, seed, tpe);
}

TrialRecord MakeTrial(int number, TrialState state, const SearchSpace& space,
                      const ParamValues& values, std::optional<double> value = std::nullopt) {
  TrialRecord t;
  t.number = number;
  t.state = state;
  t.value = value;
  for (const ParamSpec& p : space) {
    auto it = values.find(p.name);
    if (it != values.end()) t.params[p.name] = model::ParamValue{it->second, p.dist};
  }
  return t;
}

using Objective = std::function<double(const ParamValues&)>;

struct TpeStudy {
  SearchSpace space;
  std::vector<TrialRecord> trials;
  config::Direction direction = config::Direction::kMinimize;

  StudyView View() const {
    StudyView v;
    v.direction = direction;
    v.space = &space;
    v.trials = &trials;
    return v;
  }
  ParamValues Sample(Sampler& sampler, int number) const {
    auto r = SampleParams(sampler, View(), number);
    INFO("trial " << number << ": " << r.status().message());
    REQUIRE(r.ok());
    return *r;
  }
  // Samples the next trial, evaluates it and records it COMPLETE.
  ParamValues Run(Sampler& sampler, const Objective& f) {
    const int number = static_cast<int>(trials.size());
    ParamValues values = Sample(sampler, number);
    trials.push_back(MakeTrial(number, TrialState::kComplete, space, values, f(values)));
    return values;
  }
  void Add(TrialState state, const ParamValues& values, std::optional<double> value) {
    trials.push_back(MakeTrial(static_cast<int>(trials.size()), state, space, values, value));
  }
};

// The best value of a fresh study of `n` trials.
double BestOf(const std::string& kind, const SearchSpace& space, const Objective& f, uint64_t seed,
              int n) {
  TpeStudy study{space, {}};
  auto sampler = MakeSeeded(kind, space, seed);
  double best = INFINITY;
  for (int i = 0; i < n; ++i) {
    study.Run(*sampler, f);
    best = std::min(best, *study.trials.back().value);
  }
  return best;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------------------------------------
// Numerics.

TEST_CASE("tpe normal quantile is accurate from the centre to the far tails", "[tpe]") {
  using tpe_internal::NormalQuantile;
  CHECK(NormalQuantile(0.5) == Approx(0).margin(1e-15));
  CHECK(NormalQuantile(0.975) == Approx(1.959963984540054).epsilon(1e-14));
  CHECK(NormalQuantile(0.025) == Approx(-1.959963984540054).epsilon(1e-14));
  CHECK(NormalQuantile(1e-10) == Approx(-6.361340902404056).epsilon(1e-13));
  CHECK(NormalQuantile(1e-300) == Approx(-37.04709629936121).epsilon(1e-12));
  CHECK(NormalQuantile(0) == -INFINITY);
  CHECK(NormalQuantile(1) == INFINITY);
  // Round trip through Phi over the whole lower half.
  for (double p = 1e-12; p < 0.5; p *= 1.7) {
    INFO("p = " << p);
    const double x = NormalQuantile(p);
    CHECK(0.5 * std::erfc(-x / std::sqrt(2.0)) == Approx(p).epsilon(1e-13));
  }
}

TEST_CASE("tpe gauss mass keeps its digits for tiny intervals and far tails", "[tpe]") {
  using tpe_internal::LogGaussMass;
  CHECK(std::exp(LogGaussMass(-1.959963984540054, 1.959963984540054)) ==
        Approx(0.95).epsilon(1e-13));
  CHECK(std::exp(LogGaussMass(0, 50)) == Approx(0.5).epsilon(1e-14));
  // A tiny interval at 0: mass = width * phi(0), where 1 - Phi differences would cancel.
  CHECK(std::exp(LogGaussMass(-1e-9, 1e-9)) == Approx(2e-9 / std::sqrt(2 * M_PI)).epsilon(1e-9));
  // Symmetric in the two tails.
  CHECK(LogGaussMass(3, 4) == Approx(LogGaussMass(-4, -3)).epsilon(1e-14));
  // Far tail, where Phi underflows: log Q(x) ~ -x^2/2 - log(x sqrt(2 pi)) for large x.
  const double far = LogGaussMass(100, INFINITY);
  CHECK(std::isfinite(far));
  CHECK(far == Approx(-5000 - std::log(100 * std::sqrt(2 * M_PI)) - 1e-4).epsilon(1e-9));
  // Continuous across the switch to the asymptotic series at 37.
  CHECK(LogGaussMass(36.999999, 40) == Approx(LogGaussMass(37.000001, 40)).epsilon(1e-6));
  CHECK(LogGaussMass(1, 1) == -INFINITY);
}

TEST_CASE("tpe truncated normal draws stay in bounds and have the right quantiles", "[tpe]") {
  using tpe_internal::TruncatedNormalQuantile;
  // Half-normal: the median is Phi^-1(0.75).
  CHECK(TruncatedNormalQuantile(0, 10, 0.5) == Approx(0.6744897501960817).epsilon(1e-12));
  CHECK(TruncatedNormalQuantile(-10, 0, 0.5) == Approx(-0.6744897501960817).epsilon(1e-12));
  // Mean of the normal truncated to [-1, 2] by a fine midpoint rule over u.
  const double a = -1, b = 2;
  const int n = 200000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double z = TruncatedNormalQuantile(a, b, (i + 0.5) / n);
    REQUIRE(z >= a);
    REQUIRE(z <= b);
    sum += z;
  }
  auto pdf = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  const double mass = 0.5 * (std::erf(b / std::sqrt(2.0)) - std::erf(a / std::sqrt(2.0)));
  CHECK(sum / n == Approx((pdf(a) - pdf(b)) / mass).epsilon(1e-4));
  // Far-tail intervals still give values inside them.
  for (double u : {0.0, 0.3, 0.999999}) {
    const double z = TruncatedNormalQuantile(40, 41, u);
    CHECK(z >= 40);
    CHECK(z <= 41);
  }
}

TEST_CASE("tpe weights ramp down all but the 25 most recent trials, as Optuna's", "[tpe]") {
  using tpe_internal::DefaultWeights;
  CHECK(DefaultWeights(0).empty());
  CHECK(DefaultWeights(3) == std::vector<double>{1, 1, 1});
  CHECK(DefaultWeights(25) == std::vector<double>(25, 1.0));
  const std::vector<double> w26 = DefaultWeights(26);
  REQUIRE(w26.size() == 26);
  CHECK(w26[0] == Approx(1.0 / 26));
  const std::vector<double> w30 = DefaultWeights(30);
  REQUIRE(w30.size() == 30);
  // numpy.linspace(1/30, 1, 5)
  const double step = (1 - 1.0 / 30) / 4;
  for (int i = 0; i < 5; ++i) CHECK(w30[i] == Approx(1.0 / 30 + i * step));
  for (int i = 5; i < 30; ++i) CHECK(w30[i] == 1);
}

// ---------------------------------------------------------------------------------------------
// Options and errors.

TEST_CASE("tpe sampler refuses bad options, naming the option and the value", "[tpe]") {
  SearchSpace space{{"x", Float(0, 1)}};
  struct Case {
    std::function<void(config::TpeConfig&)> set;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](config::TpeConfig& c) { c.n_ei_candidates = 0; }, "n_ei_candidates = 0"},
      {[](config::TpeConfig& c) { c.n_startup_trials = -1; }, "n_startup_trials = -1"},
      {[](config::TpeConfig& c) { c.prior_weight = 0; }, "prior_weight = 0"},
      {[](config::TpeConfig& c) { c.gamma_fraction = 1.5; }, "gamma_fraction = 1.5"},
      {[](config::TpeConfig& c) { c.gamma_max = 0; }, "gamma_max = 0"},
  };
  for (const Case& c : cases) {
    config::SamplerConfig config;
    config.kind = "tpe";
    c.set(config.tpe);
    auto r = MakeSampler(config, space);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == common::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains("tpe sampler") && Catch::Contains(c.expect) &&
                                         Catch::Contains("expected"));
  }
}

TEST_CASE("tpe sampler refuses an invalid distribution, naming the parameter", "[tpe]") {
  config::SamplerConfig config;
  config.kind = "tpe";
  auto r = MakeSampler(config, {{"x", Float(0, 1)}, {"lr", Float(-1, 1, /*log=*/true)}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("parameter \"lr\""));
}

// ---------------------------------------------------------------------------------------------
// History handling.

double Quadratic2(const ParamValues& v) {
  const double dx = v.at("x") - 1.5, dy = v.at("y") + 2;
  return dx * dx + dy * dy;
}

SearchSpace Square() { return {{"x", Float(-5, 5)}, {"y", Float(-5, 5)}}; }

TEST_CASE("tpe samples exactly as random until n_startup_trials trials finished", "[tpe]") {
  TpeStudy tpe_study{Square(), {}};
  TpeStudy random_study{Square(), {}};
  auto tpe = MakeSeeded("tpe", tpe_study.space, 5);
  auto random = MakeSeeded("random", random_study.space, 5);
  // Failed trials do not count towards the start-up (Optuna counts COMPLETE and PRUNED).
  for (int i = 0; i < 5; ++i) {
    CHECK(tpe_study.Sample(*tpe, i) == random_study.Sample(*random, i));
    tpe_study.Add(TrialState::kFail, tpe_study.Sample(*tpe, i), std::nullopt);
    random_study.Add(TrialState::kFail, random_study.Sample(*random, i), std::nullopt);
  }
  for (int i = 5; i < 15; ++i) {
    CHECK(tpe_study.Run(*tpe, Quadratic2) == random_study.Run(*random, Quadratic2));
  }
  // 10 COMPLETE trials now: TPE takes over.
  CHECK(tpe_study.Sample(*tpe, 15) != random_study.Sample(*random, 15));

  // PRUNED trials count too.
  TpeStudy pruned{Square(), {}};
  auto tpe2 = MakeSeeded("tpe", pruned.space, 5);
  for (int i = 0; i < 10; ++i) {
    pruned.Add(TrialState::kPruned, pruned.Sample(*tpe2, i), std::nullopt);
    pruned.trials.back().intermediate[3] = i;
  }
  CHECK(pruned.Sample(*tpe2, 10) != random_study.Sample(*random, 10));
}

TEST_CASE("tpe gives trial N the same values for the same history, whatever the order",
          "[tpe][sampler]") {
  TpeStudy study{
      {{"x", Float(-5, 5)}, {"y", Float(-5, 5)}, {"k", Int(1, 8)}, {"c", Categorical(3)}}, {}};
  auto f = [](const ParamValues& v) { return Quadratic2(v) + v.at("k") + v.at("c"); };
  {
    auto warmup = MakeSeeded("tpe", study.space, 11);
    for (int i = 0; i < 20; ++i) study.Run(*warmup, f);
    study.Add(TrialState::kRunning, study.Sample(*warmup, 20), std::nullopt);
  }
  auto forward = MakeSeeded("tpe", study.space, 11);
  const ParamValues f21 = study.Sample(*forward, 21);
  const ParamValues f25 = study.Sample(*forward, 25);
  auto backward = MakeSeeded("tpe", study.space, 11);
  const ParamValues b25 = study.Sample(*backward, 25);
  const ParamValues b21 = study.Sample(*backward, 21);
  CHECK(f21 == b21);
  CHECK(f25 == b25);
  CHECK(f21 != f25);
  // Trials numbered N or later do not change trial N's values (a restarted daemon may hold them).
  study.Add(TrialState::kComplete, f21, 0.0);
  study.Add(TrialState::kRunning, f25, std::nullopt);
  CHECK(study.Sample(*forward, 21) == f21);
  // A different seed gives a different suggestion from the same history.
  auto other = MakeSeeded("tpe", study.space, 12);
  CHECK(study.Sample(*other, 21) != f21);
}

TEST_CASE("tpe maximizing f suggests exactly what minimizing -f does", "[tpe]") {
  TpeStudy minimize{Square(), {}};
  TpeStudy maximize{Square(), {}};
  maximize.direction = config::Direction::kMaximize;
  auto a = MakeSeeded("tpe", minimize.space, 3);
  auto b = MakeSeeded("tpe", maximize.space, 3);
  auto negated = [](const ParamValues& v) { return -Quadratic2(v); };
  for (int i = 0; i < 30; ++i) CHECK(minimize.Run(*a, Quadratic2) == maximize.Run(*b, negated));

  // Without the sign flip the maximizing study would chase the worst values: check that it
  // climbs towards the maximum instead.
  TpeStudy climb{Square(), {}};
  climb.direction = config::Direction::kMaximize;
  auto c = MakeSeeded("tpe", climb.space, 4);
  for (int i = 0; i < 40; ++i) climb.Run(*c, Quadratic2);
  double late = 0;
  for (int i = 30; i < 40; ++i) late += *climb.trials[i].value;
  CHECK(late / 10 > 30);  // corners are ~ 40-60; the square's mean is ~ 22
}

// A pruned trial that got further (a later step) ranks better than one stopped earlier, even
// with a worse value, as Optuna ranks them.
TEST_CASE("tpe ranks pruned trials by their last step before their value", "[tpe]") {
  SearchSpace space{{"x", Float(0, 10)}};
  int late_side = 0;
  const int seeds = 20;
  for (int seed = 0; seed < seeds; ++seed) {
    TpeStudy study{space, {}};
    // Two trials pruned late (step 9) with a poor value at x ~ 8; two pruned early (step 1)
    // with the best value at x ~ 2; sixteen pruned early with bad values all over.
    for (double x : {7.9, 8.1}) {
      study.Add(TrialState::kPruned, {{"x", x}}, std::nullopt);
      study.trials.back().intermediate = {{1, 6.0}, {9, 5.0}};
    }
    for (double x : {1.9, 2.1}) {
      study.Add(TrialState::kPruned, {{"x", x}}, std::nullopt);
      study.trials.back().intermediate = {{1, 0.0}};
    }
    for (int i = 0; i < 16; ++i) {
      study.Add(TrialState::kPruned, {{"x", 0.3 + 0.6 * i}}, std::nullopt);
      study.trials.back().intermediate = {{1, 10.0}};
    }
    auto sampler = MakeSeeded("tpe", space, static_cast<uint64_t>(seed));
    const double x = study.Sample(*sampler, 20).at("x");
    if (x > 5) ++late_side;
  }
  // gamma(20) = 2: the late pair is "below" and draws the suggestions to its half of the range
  // (to its far edge, in fact, where g(x) is thinnest: Optuna 3.1 proposes 9.4-10 here too).
  // Ranked by value alone, the early pair would be "below" and pull them under 5.
  INFO("suggestions on the late-pruned trials' side: " << late_side << "/" << seeds);
  CHECK(late_side >= 16);
}

TEST_CASE("tpe constant liar steers away from running trials", "[tpe]") {
  // A finished history whose best trial is at `best`; four trials are still running right next
  // to it. With the liar they count as bad results there, so the next suggestion should move
  // away; without it TPE keeps proposing the same neighbourhood.
  SearchSpace space = Square();
  TpeStudy base{space, {}};
  {
    auto random = MakeSeeded("random", space, 99);
    for (int i = 0; i < 30; ++i) base.Run(*random, Quadratic2);
  }
  const TrialRecord& best = *std::min_element(
      base.trials.begin(), base.trials.end(),
      [](const TrialRecord& a, const TrialRecord& b) { return *a.value < *b.value; });
  const double bx = best.params.at("x").internal, by = best.params.at("y").internal;
  for (int i = 0; i < 4; ++i) {
    base.Add(TrialState::kRunning, {{"x", bx + 0.01 * i}, {"y", by - 0.01 * i}}, std::nullopt);
  }

  auto far_count = [&](bool liar) {
    config::TpeConfig tpe;
    tpe.constant_liar = liar;
    int far = 0;
    for (uint64_t seed = 0; seed < 60; ++seed) {
      auto sampler = MakeSeeded("tpe", space, seed, tpe);
      const ParamValues v = base.Sample(*sampler, 34);
      if (std::hypot(v.at("x") - bx, v.at("y") - by) > 1.0) ++far;
    }
    return far;
  };
  const int with_liar = far_count(true);
  const int without = far_count(false);
  INFO("far from the running trials: with liar " << with_liar << "/60, without " << without
                                                 << "/60");
  CHECK(with_liar >= without + 15);
}

// ---------------------------------------------------------------------------------------------
// Optimisation quality (statistical, fixed seeds).

TEST_CASE("tpe beats random on a 2-d quadratic after 40 trials", "[tpe]") {
  std::vector<double> tpe, random;
  int tpe_wins = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    tpe.push_back(BestOf("tpe", Square(), Quadratic2, seed, 40));
    random.push_back(BestOf("random", Square(), Quadratic2, seed, 40));
    if (tpe.back() < random.back()) ++tpe_wins;
  }
  INFO("median best: tpe " << Median(tpe) << ", random " << Median(random) << "; tpe wins "
                           << tpe_wins << "/20");
  // Random search's expected best of 40 draws here is ~0.2; TPE's ~0.03.
  CHECK(Median(tpe) < 0.5 * Median(random));
  CHECK(tpe_wins >= 14);
}

TEST_CASE("tpe proposes near the best trials of a 6-d history, not in its empty regions", "[tpe]") {
  // A history as TPE makes them: 20 random trials of a 6-d sphere, then 20 around the best of
  // them. Most of the box is far from every trial, and the best trial's neighbourhood is mostly
  // "above" trials. With l and g sharing one bandwidth and the prior's share, an empty region
  // scores no better than the base rate, so suggestions should come from the best trials'
  // neighbourhood and beat the 4 best trials (the gamma(40) = 4 "below" ones) most of the time.
  SearchSpace space;
  for (int i = 0; i < 6; ++i) space.push_back({"x" + std::to_string(i), Float(0, 1)});
  auto f = [](const ParamValues& v) {
    double sum = 0;
    for (const auto& [name, x] : v) sum += (x - 0.25) * (x - 0.25);
    return sum;
  };
  TpeStudy base{space, {}};
  {
    auto random = MakeSeeded("random", space, 5);
    for (int i = 0; i < 20; ++i) base.Run(*random, f);
    const TrialRecord best = *std::min_element(
        base.trials.begin(), base.trials.end(),
        [](const TrialRecord& a, const TrialRecord& b) { return *a.value < *b.value; });
    std::mt19937_64 rng(11);
    std::normal_distribution<double> step(0, 0.1);
    for (int i = 0; i < 20; ++i) {
      ParamValues v;
      for (const ParamSpec& p : space) {
        v[p.name] = std::clamp(best.params.at(p.name).internal + step(rng), 0.0, 1.0);
      }
      base.Add(TrialState::kComplete, v, f(v));
    }
  }
  std::vector<double> values;
  for (const TrialRecord& t : base.trials) values.push_back(*t.value);
  std::sort(values.begin(), values.end());
  const double fourth_best = values[3];
  int better = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto sampler = MakeSeeded("tpe", space, seed);
    if (f(base.Sample(*sampler, 40)) < fourth_best) ++better;
  }
  INFO("suggestions better than the 4th best trial: " << better << "/200");
  // Measured: 153/200. With a bandwidth and a prior weight of their own for l and g (Optuna's
  // estimators) 126/200: the argmax often lands in empty space.
  CHECK(better >= 145);
}

// Ties at the split: trials of equal value are alike, so which of them the split puts "below"
// (the oldest, by trial number) must not steer the search.

SearchSpace UnitSquare() { return {{"x", Float(0, 1)}, {"y", Float(0, 1)}}; }

TEST_CASE("tpe gives no preference to the oldest of trials that all tie", "[tpe]") {
  // 50 trials of one value (a plateau): the 10 oldest in the corner [0, 0.2]^2, the other 40
  // spread over the rest of the square. gamma(50) = 5, so the split puts 5 of the corner trials
  // "below". Nothing distinguishes them: each should count 5/50 for l and 45/50 for g, so that
  // l = g and suggestions follow all 50 trials (a fifth of them in the corner) rather than the
  // 5 oldest.
  const SearchSpace space = UnitSquare();
  TpeStudy study{space, {}};
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> corner(0, 0.2), anywhere(0, 1);
  for (int i = 0; i < 50; ++i) {
    double x = corner(rng), y = corner(rng);
    while (i >= 10 && x < 0.25 && y < 0.25) x = anywhere(rng), y = anywhere(rng);
    study.Add(TrialState::kComplete, {{"x", x}, {"y", y}}, 1.0);
  }
  int in_corner = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto sampler = MakeSeeded("tpe", space, seed);
    const ParamValues v = study.Sample(*sampler, 50);
    if (v.at("x") < 0.25 && v.at("y") < 0.25) ++in_corner;
  }
  INFO("suggestions in the corner of the 10 oldest trials: " << in_corner << "/200");
  // Measured: 33/200. With the 5 oldest "below" at full weight (Optuna's estimators) 200/200.
  CHECK(in_corner <= 80);
  CHECK(in_corner >= 10);  // the corner's trials still count, as the other trials do
}

TEST_CASE("tpe follows the trials better than a tie, not the tied trials the split took", "[tpe]") {
  // Three trials near (0.1, 0.1), then one good trial at (0.8, 0.8), then 36 spread elsewhere;
  // all but the good one of the same worse value. gamma(40) = 4 puts the good trial and the
  // three oldest tied ones "below". With the tie shared (3/39 of each tied trial in l, 36/39 in
  // g), l holds the good trial and little else, so suggestions go near it.
  const SearchSpace space = UnitSquare();
  TpeStudy study{space, {}};
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> anywhere(0, 1);
  for (int i = 0; i < 3; ++i) {
    study.Add(TrialState::kComplete, {{"x", 0.08 + 0.02 * i}, {"y", 0.12 - 0.02 * i}}, 5.0);
  }
  study.Add(TrialState::kComplete, {{"x", 0.8}, {"y", 0.8}}, 0.0);
  for (int i = 0; i < 36; ++i) {
    double x = anywhere(rng), y = anywhere(rng);
    // Keep the neighbourhoods of the two points under test clear.
    while ((x < 0.3 && y < 0.3) || (x > 0.6 && y > 0.6)) x = anywhere(rng), y = anywhere(rng);
    study.Add(TrialState::kComplete, {{"x", x}, {"y", y}}, 5.0);
  }
  int near_good = 0, near_tied = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto sampler = MakeSeeded("tpe", space, seed);
    const ParamValues v = study.Sample(*sampler, 40);
    if (v.at("x") > 0.6 && v.at("y") > 0.6) ++near_good;
    if (v.at("x") < 0.3 && v.at("y") < 0.3) ++near_tied;
  }
  INFO("near the good trial: " << near_good << "/200, near the oldest tied ones: " << near_tied
                               << "/200");
  // Measured: 193 and 0. With the three oldest tied trials "below" at full weight (Optuna's
  // estimators) 0 and 200.
  CHECK(near_good >= 150);
  CHECK(near_tied <= 20);
}

TEST_CASE("tpe concentrates on the best choice of a categorical-only objective", "[tpe]") {
  SearchSpace space{{"opt", Categorical(5)}};
  const double cost[] = {3, 1, 0, 2, 4};
  auto f = [&](const ParamValues& v) { return cost[static_cast<int>(v.at("opt"))]; };
  int best_choice = 0, total = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    TpeStudy study{space, {}};
    auto sampler = MakeSeeded("tpe", space, seed);
    for (int i = 0; i < 50; ++i) {
      const ParamValues v = study.Run(*sampler, f);
      if (i >= 20) {
        ++total;
        if (v.at("opt") == 2) ++best_choice;
      }
    }
  }
  INFO("best choice in " << best_choice << " of " << total << " late trials");
  // Uniform sampling would pick it 20% of the time.
  CHECK(best_choice > total / 2);
}

TEST_CASE("tpe handles log floats and ints and steps and beats random on them", "[tpe]") {
  SearchSpace space{{"lr", Float(1e-6, 1, /*log=*/true)},
                    {"layers", Int(1, 16)},
                    {"batch", Int(1, 1024, /*log=*/true)},
                    {"momentum", Float(0, 0.99, false, 0.01)},
                    {"width", Int(16, 512, false, 16)}};
  auto f = [](const ParamValues& v) {
    const double a = std::log10(v.at("lr")) + 3;  // best lr 1e-3
    const double b = (v.at("layers") - 11) / 4;
    const double c = (std::log2(v.at("batch")) - 6) / 2;  // best batch 64
    const double d = (v.at("momentum") - 0.9) * 5;
    const double e = (v.at("width") - 256) / 128;
    return a * a + b * b + c * c + d * d + e * e;
  };
  std::vector<double> tpe, random;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    tpe.push_back(BestOf("tpe", space, f, seed, 60));
    random.push_back(BestOf("random", space, f, seed, 60));
  }
  INFO("median best: tpe " << Median(tpe) << ", random " << Median(random));
  CHECK(Median(tpe) < 0.6 * Median(random));
}

}  // namespace
}  // namespace triald::sampler
