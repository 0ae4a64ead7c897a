// One contract suite run against every sampler (GENERATE over kSamplers), then the behaviour
// that is specific to each: random's distributions, grid's exhaustiveness, QMC's spread. TPE's
// own behaviour is in tpe_test.cc.
//
// A new sampler slots in by adding a row to kSamplers; the contract tests then run against it.

#include <boost/random/sobol.hpp>
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
#include "daemon/sampler/grid_sampler.h"
#include "daemon/sampler/qmc_sampler.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"
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

struct SamplerKind {
  std::string kind;
  bool continuous;  // accepts floats without a step
};

// One row per line (clang-format would pack them), so that adding a sampler adds a line.
// clang-format off
const std::vector<SamplerKind> kSamplers = {
    {"random", true},
    {"grid", false},
    {"tpe", true},
    {"qmc", true},
    // NSGA-II's own behaviour, with several objectives: nsga2_test.cc.
    {"nsga2", true},
    {"cmaes", true},
    {"gp", true},
};
// clang-format on

using triald::testing::Float;
using triald::testing::Int;
Distribution Choices(int n) { return triald::testing::Categorical(n, "choice"); }

// Every distribution type the sampler accepts; the grid gets only discrete ones.
SearchSpace ContractSpace(const SamplerKind& kind) {
  SearchSpace space;
  if (kind.continuous) {
    space.push_back({"lr", Float(1e-5, 1e-1, /*log=*/true)});
    space.push_back({"dropout", Float(0.0, 0.5)});
  }
  space.push_back({"momentum", Float(0.5, 0.95, false, 0.05)});
  space.push_back({"layers", Int(1, 8)});
  space.push_back({"batch", Int(1, 64, /*log=*/true)});
  space.push_back({"width", Int(16, 128, false, 16)});
  space.push_back({"optimizer", Choices(3)});
  return space;
}

std::unique_ptr<Sampler> Make(const std::string& kind, const SearchSpace& space, uint64_t seed) {
  return triald::testing::MakeSeededSampler(kind, space, seed);
}

TrialRecord MakeTrial(int number, TrialState state, const SearchSpace& space,
                      const ParamValues& values) {
  TrialRecord t;
  t.number = number;
  t.state = state;
  for (const ParamSpec& p : space) {
    auto it = values.find(p.name);
    if (it != values.end()) t.params[p.name] = model::ParamValue{it->second, p.dist};
  }
  return t;
}

// A study as the daemon keeps it: the space and every trial so far.
struct FakeStudy {
  SearchSpace space;
  std::vector<TrialRecord> trials;

  StudyView View() const {
    StudyView v;
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
  // Samples the next trial and records it, as the scheduler does.
  ParamValues Next(Sampler& sampler, TrialState state = TrialState::kComplete) {
    const int number = static_cast<int>(trials.size());
    ParamValues values = Sample(sampler, number);
    trials.push_back(MakeTrial(number, state, space, values));
    return values;
  }
};

std::vector<ParamValues> RunStudy(const SamplerKind& kind, uint64_t seed, int n) {
  FakeStudy study{ContractSpace(kind), {}};
  auto sampler = Make(kind.kind, study.space, seed);
  std::vector<ParamValues> out;
  for (int i = 0; i < n; ++i) out.push_back(study.Next(*sampler));
  return out;
}

bool OnStep(double v, double low, double step) {
  const double k = (v - low) / step;
  return std::abs(k - std::round(k)) < 1e-9;
}

// ---------------------------------------------------------------------------------------------
// Contract: every sampler.

TEST_CASE("every sampler keeps values inside their distributions", "[sampler]") {
  const SamplerKind kind = GENERATE(from_range(kSamplers));
  INFO("sampler " << kind.kind);
  FakeStudy study{ContractSpace(kind), {}};
  auto sampler = Make(kind.kind, study.space, 7);
  for (int i = 0; i < 300; ++i) {
    const ParamValues values = study.Next(*sampler);
    REQUIRE(values.size() == study.space.size());
    for (const ParamSpec& p : study.space) {
      const double v = values.at(p.name);
      INFO(p.name << " = " << v);
      const Distribution& d = p.dist;
      CHECK(d.Contains(v));
      if (d.type == ParamType::kCategorical) {
        CHECK(v == std::floor(v));
        CHECK(v >= 0);
        CHECK(v < static_cast<double>(d.choices.size()));
        continue;
      }
      CHECK(v >= d.low);
      CHECK(v <= d.high);
      if (d.type == ParamType::kInt) CHECK(v == std::floor(v));
      if (d.step > 0) CHECK(OnStep(v, d.low, d.step));
    }
  }
}

TEST_CASE("every sampler is reproducible from its seed", "[sampler]") {
  const SamplerKind kind = GENERATE(from_range(kSamplers));
  INFO("sampler " << kind.kind);
  const std::vector<ParamValues> a = RunStudy(kind, 42, 40);
  const std::vector<ParamValues> b = RunStudy(kind, 42, 40);
  CHECK(a == b);
  const std::vector<ParamValues> c = RunStudy(kind, 43, 40);
  CHECK(a != c);
}

TEST_CASE("every sampler gives a trial the same values whatever the order of calls", "[sampler]") {
  const SamplerKind kind = GENERATE(from_range(kSamplers));
  INFO("sampler " << kind.kind);
  FakeStudy study{ContractSpace(kind), {}};
  {
    auto warmup = Make(kind.kind, study.space, 11);
    for (int i = 0; i < 3; ++i) study.Next(*warmup);
  }
  // Two fresh instances (a restarted daemon) asked in opposite orders.
  auto forward = Make(kind.kind, study.space, 11);
  const ParamValues f3 = study.Sample(*forward, 3);
  const ParamValues f5 = study.Sample(*forward, 5);
  auto backward = Make(kind.kind, study.space, 11);
  const ParamValues b5 = study.Sample(*backward, 5);
  const ParamValues b3 = study.Sample(*backward, 3);
  CHECK(f3 == b3);
  CHECK(f5 == b5);
  CHECK(f3 != f5);
  // Asking again changes nothing: no hidden state advances between calls.
  CHECK(study.Sample(*forward, 3) == f3);
}

// ---------------------------------------------------------------------------------------------
// SampleParams and MakeSampler.

// Returns a fixed value for every parameter, to exercise SampleParams' checks.
class FixedSampler final : public Sampler {
 public:
  explicit FixedSampler(double v) : v_(v) {}
  common::Result<double> SampleIndependent(const StudyView&, int, const ParamSpec&) override {
    return v_;
  }

 private:
  double v_;
};

TEST_CASE("SampleParams reports a value outside its distribution as internal", "[sampler]") {
  FakeStudy study{{{"x", Float(0, 1)}, {"n", Int(1, 4)}}, {}};
  FixedSampler inside(1);
  CHECK(SampleParams(inside, study.View(), 0).ok());

  FixedSampler outside(3.5);
  auto r = SampleParams(outside, study.View(), 0);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInternal);
  CHECK_THAT(r.status().message(), Catch::Contains("\"x\"") && Catch::Contains("3.5"));
}

TEST_CASE("SampleParams fills every parameter a relative sampler leaves out", "[sampler]") {
  FakeStudy study{{{"a", Choices(2)}, {"b", Float(0, 1)}}, {}};
  RandomSampler random(3);
  const ParamValues v = study.Sample(random, 0);
  CHECK(v.size() == 2);
  CHECK(v.count("a") == 1);
  CHECK(v.count("b") == 1);
}

TEST_CASE("MakeSampler rejects an unknown kind, naming it and the known ones", "[sampler]") {
  config::SamplerConfig config;
  config.kind = "bayes";
  auto r = MakeSampler(config, {{"x", Float(0, 1)}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(),
             Catch::Contains("\"bayes\"") && Catch::Contains("random, grid, tpe, qmc"));
}

// ---------------------------------------------------------------------------------------------
// Random sampler.

TEST_CASE("random sampler draws log floats log-uniformly and floats uniformly", "[sampler]") {
  FakeStudy study{{{"lr", Float(1e-4, 1, /*log=*/true)}, {"x", Float(0, 10)}}, {}};
  RandomSampler sampler(2024);
  const int n = 2000;
  int lr_below = 0, x_below = 0;
  for (int i = 0; i < n; ++i) {
    const ParamValues v = study.Sample(sampler, i);
    if (v.at("lr") < 1e-2) ++lr_below;  // the geometric midpoint
    if (v.at("x") < 5) ++x_below;
  }
  // Expected 0.5 each with a standard deviation of about 0.011; a linear draw of lr would put
  // only 1% below 1e-2, a log draw of x far more than half below 5.
  CHECK(lr_below / double(n) == Approx(0.5).margin(0.06));
  CHECK(x_below / double(n) == Approx(0.5).margin(0.06));
}

TEST_CASE("random sampler covers categorical choices and int values uniformly", "[sampler]") {
  FakeStudy study{{{"c", Choices(4)}, {"k", Int(0, 9, false, 3)}}, {}};
  RandomSampler sampler(5);
  std::map<double, int> choices, ints;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const ParamValues v = study.Sample(sampler, i);
    ++choices[v.at("c")];
    ++ints[v.at("k")];
  }
  REQUIRE(choices.size() == 4);
  for (const auto& [c, count] : choices) {
    INFO("choice " << c);
    CHECK(count == Approx(n / 4).margin(100));  // ~5 standard deviations
  }
  REQUIRE(ints.size() == 4);  // 0, 3, 6, 9
  for (const auto& [k, count] : ints) {
    INFO("int " << k);
    CHECK(count == Approx(n / 4).margin(100));
  }
}

TEST_CASE("random sampler reaches both ends of stepped and log int ranges", "[sampler]") {
  FakeStudy study{{{"m", Float(0.0, 0.7, false, 0.1)}, {"b", Int(1, 8, /*log=*/true)}}, {}};
  RandomSampler sampler(9);
  std::set<double> m, b;
  for (int i = 0; i < 500; ++i) {
    const ParamValues v = study.Sample(sampler, i);
    m.insert(v.at("m"));
    b.insert(v.at("b"));
  }
  CHECK(m.size() == 8);
  CHECK(*m.rbegin() == 0.7);  // exactly high, not 7 * 0.1 = 0.7000000000000001
  CHECK(b.size() == 8);
}

// ---------------------------------------------------------------------------------------------
// Grid sampler.

SearchSpace Grid3x4x2() {
  return {{"opt", Choices(3)}, {"layers", Int(1, 4)}, {"dropout", Float(0, 0.5, false, 0.5)}};
}

using Point = std::vector<double>;
Point PointOf(const SearchSpace& space, const ParamValues& v) {
  Point p;
  for (const ParamSpec& s : space) p.push_back(v.at(s.name));
  return p;
}

TEST_CASE("grid sampler visits every point once, then is exhausted", "[sampler]") {
  FakeStudy study{Grid3x4x2(), {}};
  auto sampler = Make("grid", study.space, 1);
  // Finished trials of every outcome hold their point: a failed point is not retried.
  const TrialState states[] = {TrialState::kComplete, TrialState::kPruned, TrialState::kFail};
  std::set<Point> seen;
  for (int i = 0; i < 24; ++i) {
    CHECK_FALSE(sampler->Exhausted(study.View()));
    seen.insert(PointOf(study.space, study.Next(*sampler, states[i % 3])));
  }
  CHECK(seen.size() == 24);
  CHECK(sampler->Exhausted(study.View()));

  auto r = SampleParams(*sampler, study.View(), 24);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kFailedPrecondition);
  CHECK_THAT(r.status().message(), Catch::Contains("grid exhausted"));
}

TEST_CASE("grid sampler does not repeat the points of unfinished trials", "[sampler]") {
  FakeStudy study{Grid3x4x2(), {}};
  auto sampler = Make("grid", study.space, 2);
  std::set<Point> seen;
  for (int i = 0; i < 24; ++i) {
    const TrialState state = i % 2 ? TrialState::kRunning : TrialState::kWaiting;
    seen.insert(PointOf(study.space, study.Next(*sampler, state)));
  }
  CHECK(seen.size() == 24);
  CHECK(sampler->Exhausted(study.View()));
}

TEST_CASE("grid sampler counts a point typed by hand as taken", "[sampler]") {
  // 0.1 * 3 is 0.30000000000000004, not the 0.3 the grid holds; it is still that point.
  FakeStudy study{{{"x", Float(0, 0.3, false, 0.1)}}, {}};
  study.trials.push_back(MakeTrial(0, TrialState::kComplete, study.space, {{"x", 0.1 * 3}}));
  auto sampler = Make("grid", study.space, 3);
  std::set<double> seen;
  for (int i = 1; i < 4; ++i) seen.insert(study.Next(*sampler).at("x"));
  CHECK(seen == std::set<double>{0.0, 0.1, 0.2});
  CHECK(sampler->Exhausted(study.View()));
}

TEST_CASE("grid sampler gives a trial its own point again when asked twice", "[sampler]") {
  // After a restart the daemon may sample a trial that is already stored with its params; the
  // trial's own record must not push it onto another point.
  FakeStudy study{Grid3x4x2(), {}};
  auto sampler = Make("grid", study.space, 4);
  for (int i = 0; i < 5; ++i) study.Next(*sampler, TrialState::kRunning);
  ParamValues stored;
  for (const auto& [name, pv] : study.trials[4].params) stored[name] = pv.internal;
  CHECK(study.Sample(*sampler, 4) == stored);
}

TEST_CASE("grid sampler rejects continuous floats, naming the parameter", "[sampler]") {
  const Distribution continuous = GENERATE(Float(0, 1), Float(1e-5, 1, /*log=*/true));
  config::SamplerConfig config;
  config.kind = "grid";
  auto r = MakeSampler(config, {{"n", Int(1, 3)}, {"x", continuous}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("parameter \"x\" is a continuous float") &&
                                       Catch::Contains("expected a step or a categorical"));
}

TEST_CASE("grid sampler refuses a grid too large to finish, naming its size", "[sampler]") {
  config::SamplerConfig config;
  config.kind = "grid";
  SearchSpace space;
  for (const char* name : {"a", "b", "c", "d", "e"}) space.push_back({name, Int(0, 99)});
  auto r = MakeSampler(config, space);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("10000000000"));

  // 10,000,000 points is still allowed.
  space.resize(3);
  space.push_back({"d", Int(1, 10)});
  auto ok = MakeSampler(config, space);
  INFO(ok.status().message());
  CHECK(ok.ok());
}

// ---------------------------------------------------------------------------------------------
// QMC sampler.

std::unique_ptr<Sampler> MakeQmc(const SearchSpace& space, uint64_t seed, bool scramble) {
  config::SamplerConfig config;
  config.kind = "qmc";
  config.seed = seed;
  config.qmc.scramble = scramble;
  auto sampler = MakeSampler(config, space);
  INFO(sampler.status().message());
  REQUIRE(sampler.ok());
  return std::move(sampler).value();
}

// The bin of `t` in [0, 1) among `n`; the tolerance keeps a point computed exactly on a bin's
// edge (unscrambled points are multiples of 1/2^k) from falling into the bin below.
int Bin(double t, int n) { return std::min(n - 1, static_cast<int>(std::floor(t * n + 1e-9))); }

TEST_CASE("qmc sampler: the first 16 trials hit each of 16 bins once", "[sampler][qmc]") {
  const uint64_t seed = GENERATE(1, 2, 3);
  INFO("seed " << seed);
  FakeStudy study{{{"x", Float(0, 1)}, {"y", Float(-8, 8)}, {"lr", Float(1e-6, 1e-2, true)}}, {}};
  auto sampler = MakeQmc(study.space, seed, /*scramble=*/true);
  std::set<int> x_bins, y_bins, lr_bins;
  std::set<std::pair<int, int>> cells;
  for (int i = 0; i < 16; ++i) {
    const ParamValues v = study.Next(*sampler);
    x_bins.insert(Bin(v.at("x"), 16));
    y_bins.insert(Bin((v.at("y") + 8) / 16, 16));
    lr_bins.insert(Bin((std::log10(v.at("lr")) + 6) / 4, 16));  // log: equal bins in log space
    cells.insert({Bin(v.at("x"), 4), Bin((v.at("y") + 8) / 16, 4)});
  }
  CHECK(x_bins.size() == 16);
  CHECK(y_bins.size() == 16);
  CHECK(lr_bins.size() == 16);
  // Sobol's first two coordinates form a (0, m, 2)-net: one point in each of the 4 x 4 cells.
  CHECK(cells.size() == 16);
}

TEST_CASE("qmc sampler unscrambled: the first 15 trials fill every bin but the origin's",
          "[sampler][qmc]") {
  // Trial N takes point N + 1: the skipped point 0 sits in bin 0, points 1..15 in the others.
  FakeStudy study{{{"x", Float(0, 1)}, {"y", Float(-8, 8)}}, {}};
  auto sampler = MakeQmc(study.space, 1, /*scramble=*/false);
  std::set<int> x_bins, y_bins;
  for (int i = 0; i < 15; ++i) {
    const ParamValues v = study.Next(*sampler);
    x_bins.insert(Bin(v.at("x"), 16));
    y_bins.insert(Bin((v.at("y") + 8) / 16, 16));
  }
  CHECK(x_bins.size() == 15);
  CHECK(x_bins.count(0) == 0);
  CHECK(y_bins.size() == 15);
  CHECK(y_bins.count(0) == 0);
}

TEST_CASE("qmc sampler spreads ints, steps and categoricals evenly over their grids",
          "[sampler][qmc]") {
  FakeStudy study{{{"k", Int(1, 4)}, {"m", Float(0, 0.7, false, 0.1)}, {"c", Choices(4)}}, {}};
  auto sampler = MakeQmc(study.space, 8, true);
  std::map<double, int> k, m, c;
  for (int i = 0; i < 16; ++i) {
    const ParamValues v = study.Next(*sampler);
    ++k[v.at("k")];
    ++m[v.at("m")];
    ++c[v.at("c")];
  }
  REQUIRE(k.size() == 4);
  for (const auto& [value, count] : k) CHECK(count == 4);
  REQUIRE(m.size() == 8);
  for (const auto& [value, count] : m) CHECK(count == 2);
  REQUIRE(c.size() == 4);
  for (const auto& [value, count] : c) CHECK(count == 4);
}

TEST_CASE("qmc sampler scrambles from its seed, the plain sequence ignores the seed",
          "[sampler][qmc]") {
  FakeStudy study{{{"x", Float(0, 1)}, {"y", Float(0, 1)}}, {}};
  auto a = MakeQmc(study.space, 1, true);
  auto b = MakeQmc(study.space, 2, true);
  auto plain1 = MakeQmc(study.space, 1, false);
  auto plain2 = MakeQmc(study.space, 2, false);
  CHECK(study.Sample(*a, 0) != study.Sample(*b, 0));
  for (int i = 0; i < 8; ++i) CHECK(study.Sample(*plain1, i) == study.Sample(*plain2, i));
  // Unscrambled, trial 0 is point 1 of the sequence (point 0 is the origin): (0.5, 0.5).
  const ParamValues first = study.Sample(*plain1, 0);
  CHECK(first.at("x") == 0.5);
  CHECK(first.at("y") == 0.5);
}

TEST_CASE("qmc sequence matches Joe and Kuo's direction numbers in 64 dimensions",
          "[sampler][qmc]") {
  // Boost.Random's Sobol engine carries the same table (new-joe-kuo-6.21201); it starts at
  // point 1.
  auto seq = SobolSequence::Create(64, /*scramble=*/false, 0);
  REQUIRE(seq.ok());
  boost::random::sobol_engine<uint32_t, 32> reference(64);
  int mismatches = 0;
  for (uint32_t i = 1; i <= 4096; ++i) {
    const std::vector<uint32_t> point = seq->PointBits(i);
    for (int d = 0; d < 64; ++d) {
      if (point[d] != reference()) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("qmc sampler refuses more than 64 parameters, saying how many", "[sampler][qmc]") {
  SearchSpace space;
  for (int i = 0; i < 65; ++i) space.push_back({"p" + std::to_string(i), Float(0, 1)});
  config::SamplerConfig config;
  config.kind = "qmc";
  auto r = MakeSampler(config, space);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(),
             Catch::Contains("65 parameters") && Catch::Contains("at most 64"));
  space.pop_back();
  CHECK(MakeSampler(config, space).ok());
}

}  // namespace
}  // namespace triald::sampler
