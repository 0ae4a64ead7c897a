// CMA-ES: the optimizer (daemon/sampler/cma.h) against the cmaes library it follows, and the
// sampler (daemon/sampler/cmaes_sampler.h): Optuna's defaults, the generation replay with trials
// in parallel, failed and pruned trials, IPOP restarts, reproducibility, and the sweep keys.
// The contract suite (sampler_contract_test.cc) covers bounds and types.

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/cma.h"
#include "daemon/sampler/cmaes_sampler.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"
#include "tests/config/sweep_test_util.h"
#include "tests/support/distributions.h"

namespace triald::sampler {
namespace {

using config::ParamSpec;
using config::ParamValues;
using config::SearchSpace;
using model::TrialRecord;
using model::TrialState;
using triald::testing::Categorical;
using triald::testing::Float;
using triald::testing::Int;

// ---------------------------------------------------------------------------------------------
// The optimizer.

TEST_CASE("the Jacobi solver decomposes a symmetric matrix", "[sampler][cmaes]") {
  const int n = 6;
  std::mt19937_64 rng(5);
  std::vector<double> a(n * n);
  for (int i = 0; i < n; ++i) {
    for (int j = i; j < n; ++j) a[i * n + j] = a[j * n + i] = UniformUnit(rng) * 2 - 1;
  }
  std::vector<double> values, vectors;
  SymmetricEigen(a, n, &values, &vectors);
  REQUIRE(values.size() == static_cast<size_t>(n));
  for (int c = 1; c < n; ++c) CHECK(values[c - 1] <= values[c]);
  for (int c = 0; c < n; ++c) {
    for (int i = 0; i < n; ++i) {  // A v = lambda v
      double av = 0;
      for (int k = 0; k < n; ++k) av += a[i * n + k] * vectors[k * n + c];
      CHECK(av == Approx(values[c] * vectors[i * n + c]).margin(1e-12));
    }
    for (int d = 0; d < n; ++d) {  // orthonormal columns
      double dot = 0;
      for (int k = 0; k < n; ++k) dot += vectors[k * n + c] * vectors[k * n + d];
      CHECK(dot == Approx(c == d ? 1.0 : 0.0).margin(1e-12));
    }
  }
}

TEST_CASE("the optimizer updates as the cmaes library does", "[sampler][cmaes]") {
  // Reference from python3-cmaes 0.9.1:
  //   opt = CMA(mean=np.array([0.5, -0.2, 1.0]), sigma=0.7)
  //   for g in range(3):
  //     sols = []
  //     for i in range(opt.population_size):
  //       x = np.array([math.sin(i + g), math.cos(2 * i + g), 0.1 * i - 0.3 * g])
  //       sols.append((x, float(np.sum(x ** 2) + 0.01 * i)))
  //     opt.tell(sols)
  //   opt._mean, opt._sigma, opt._C, opt._pc, opt._p_sigma
  Cma::Options o;
  o.mean = {0.5, -0.2, 1.0};
  o.sigma = 0.7;
  auto made = Cma::Create(o);
  REQUIRE(made.ok());
  Cma cma = std::move(made).value();
  REQUIRE(cma.population_size() == 7);  // 4 + floor(3 ln 3)
  for (int g = 0; g < 3; ++g) {
    std::vector<std::pair<std::vector<double>, double>> solutions;
    for (int i = 0; i < cma.population_size(); ++i) {
      std::vector<double> x = {std::sin(i + g), std::cos(2 * i + g), 0.1 * i - 0.3 * g};
      solutions.push_back({x, x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + 0.01 * i});
    }
    REQUIRE(cma.Tell(solutions).ok());
  }
  CHECK(cma.generation() == 3);
  const std::vector<double> mean = {0.12106610559256992, -0.6118842613416735, -0.35138706390585894};
  for (int i = 0; i < 3; ++i) CHECK(cma.mean()[i] == Approx(mean[i]).epsilon(1e-10));
  CHECK(cma.sigma() == Approx(0.7502279764929943).epsilon(1e-10));
  const std::vector<double> c = {0.7434710489596257,   0.036581770161806686,  0.2024419527305636,
                                 0.036581770161806686, 0.8973753910671557,    -0.025181371872956354,
                                 0.2024419527305636,   -0.025181371872956326, 1.282679243598305};
  for (int i = 0; i < 9; ++i) CHECK(cma.covariance()[i] == Approx(c[i]).epsilon(1e-9));
  CHECK_FALSE(cma.ShouldStop());
}

TEST_CASE("the optimizer's defaults and refusals", "[sampler][cmaes]") {
  Cma::Options o;
  o.mean = {0, 0, 0, 0, 0};
  o.sigma = 1;
  CHECK(Cma::Create(o)->population_size() == 8);  // 4 + floor(3 ln 5)
  o.mean = {0, 0};
  CHECK(Cma::Create(o)->population_size() == 6);
  o.mean = {0};
  CHECK_FALSE(Cma::Create(o).ok());
  o.mean = {0, 0};
  o.sigma = 0;
  CHECK_FALSE(Cma::Create(o).ok());
  o.sigma = 1;
  o.bounds = {{1, 2}, {-1, 1}};  // mean 0 outside [1, 2]
  CHECK_FALSE(Cma::Create(o).ok());
  o.bounds = {};
  o.population_size = 1;
  CHECK_FALSE(Cma::Create(o).ok());
  o.population_size = 0;
  Cma cma = *Cma::Create(o);
  CHECK_FALSE(cma.Tell({{{0, 0}, 1.0}}).ok());  // not a whole population
}

TEST_CASE("the optimizer minimises a sphere and keeps to its bounds", "[sampler][cmaes]") {
  Cma::Options o;
  o.mean = {3, 3, 3, 3, 3};
  o.sigma = 1;
  for (int i = 0; i < 5; ++i) o.bounds.push_back({-5, 5});
  Cma cma = *Cma::Create(o);
  std::mt19937_64 rng(11);
  double best = 1e300;
  for (int g = 0; g < 150; ++g) {
    std::vector<std::pair<std::vector<double>, double>> solutions;
    for (int i = 0; i < cma.population_size(); ++i) {
      std::vector<double> x = cma.Ask(rng);
      double f = 0;
      for (double v : x) {
        REQUIRE(v >= -5);
        REQUIRE(v <= 5);
        f += (v - 1) * (v - 1);
      }
      best = std::min(best, f);
      solutions.push_back({x, f});
    }
    REQUIRE(cma.Tell(solutions).ok());
  }
  CHECK(best < 1e-8);
  for (double m : cma.mean()) CHECK(m == Approx(1).margin(1e-3));
}

// ---------------------------------------------------------------------------------------------
// The sampler.

// A study as the daemon keeps it, with creation and finish times.
struct CmaesStudy {
  SearchSpace space;
  std::vector<TrialRecord> trials;
  config::Direction direction = config::Direction::kMinimize;
  double clock = 0;

  StudyView View() const {
    StudyView v;
    v.direction = direction;
    v.directions = {direction};
    v.space = &space;
    v.trials = &trials;
    return v;
  }
  // Samples and records a RUNNING trial.
  int Start(Sampler& sampler) {
    const int number = static_cast<int>(trials.size());
    auto values = SampleParams(sampler, View(), number);
    INFO(values.status().message());
    REQUIRE(values.ok());
    TrialRecord t;
    t.number = number;
    t.state = TrialState::kRunning;
    t.created_at = ++clock;
    for (const ParamSpec& p : space) t.params[p.name] = {values->at(p.name), p.dist};
    trials.push_back(t);
    return number;
  }
  void Finish(int number, TrialState state, double value = 0) {
    TrialRecord& t = trials[number];
    t.state = state;
    if (state == TrialState::kComplete) {
      t.value = value;
      t.values = {value};
    }
    t.finished_at = ++clock;
  }
  ParamValues Params(int number) const {
    ParamValues out;
    for (const auto& [name, v] : trials[number].params) out[name] = v.internal;
    return out;
  }
};

std::unique_ptr<Sampler> MakeCmaes(uint64_t seed, const config::CmaesConfig& cmaes = {},
                                   const SearchSpace& space = {}) {
  config::SamplerConfig config;
  config.kind = "cmaes";
  config.seed = seed;
  config.seed_given = true;
  config.cmaes = cmaes;
  auto made = MakeSampler(config, space);
  INFO(made.status().message());
  REQUIRE(made.ok());
  return std::move(made).value();
}

CmaesSampler& AsCmaes(Sampler& s) { return dynamic_cast<CmaesSampler&>(s); }

CmaesSampler::ReplayState ReplayOf(Sampler& s, const CmaesStudy& study, int number) {
  CmaesSampler& c = AsCmaes(s);
  const SearchSpace relative = c.InferRelativeSearchSpace(study.View(), number);
  auto r = c.Replay(study.View(), number, relative);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return *r;
}

double Sphere(const ParamValues& p) {
  double f = 0;
  for (const auto& [name, v] : p) f += (v - 0.3) * (v - 0.3);
  return f;
}

SearchSpace FloatSpace(int n) {
  SearchSpace space;
  for (int i = 0; i < n; ++i) space.push_back({"x" + std::to_string(i), Float(-2, 2)});
  return space;
}

TEST_CASE("cmaes starts at the centre with Optuna's sigma0 and population", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = {{"lr", Float(1e-5, 1e-1, /*log=*/true)},
                 {"dropout", Float(0.0, 0.5)},
                 {"layers", Int(1, 8)},
                 {"batch", Int(1, 64, /*log=*/true)},
                 {"opt", Categorical(3)}};
  auto sampler = MakeCmaes(3);
  // Trial 0: no finished trial, so no relative space and nothing from CMA-ES.
  CHECK(AsCmaes(*sampler).InferRelativeSearchSpace(study.View(), 0).empty());
  study.Finish(study.Start(*sampler), TrialState::kComplete, 1.0);
  const SearchSpace relative = AsCmaes(*sampler).InferRelativeSearchSpace(study.View(), 1);
  // Categoricals are left to the independent sampler; the rest is sorted by name.
  REQUIRE(relative.size() == 4);
  CHECK(relative[0].name == "batch");
  CHECK(relative[1].name == "dropout");
  CHECK(relative[2].name == "layers");
  CHECK(relative[3].name == "lr");
  const CmaesSampler::ReplayState s = ReplayOf(*sampler, study, 1);
  CHECK(s.generation == 0);
  CHECK(s.population_size == 8);  // 4 + floor(3 ln 4)
  // Transformed bounds: batch log [0.5, 64.5], dropout [0, 0.5], layers [0.5, 8.5], lr log.
  REQUIRE(s.mean.size() == 4);
  CHECK(s.mean[0] == Approx((std::log(0.5) + std::log(64.5)) / 2));
  CHECK(s.mean[1] == Approx(0.25));
  CHECK(s.mean[2] == Approx(4.5));
  CHECK(s.mean[3] == Approx((std::log(1e-5) + std::log(1e-1)) / 2));
  CHECK(s.sigma == Approx(0.5 / 6));  // the narrowest range, dropout's
  CHECK(s.tags.at(0).first == -1);    // trial 0 was a start-up trial

  config::CmaesConfig given;
  given.sigma0 = 0.2;
  given.popsize = 5;
  given.x0 = {{"lr", 1e-3}, {"layers", 2}};
  auto with_x0 = MakeCmaes(3, given);
  const CmaesSampler::ReplayState g = ReplayOf(*with_x0, study, 1);
  CHECK(g.sigma == Approx(0.2));
  CHECK(g.population_size == 5);
  CHECK(g.mean[2] == Approx(2));
  CHECK(g.mean[3] == Approx(std::log(1e-3)));
  CHECK(g.mean[1] == Approx(0.25));  // not in x0: the centre
}

TEST_CASE("cmaes samples categoricals and a one-dimensional space independently",
          "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = {{"x", Float(-1, 1)}, {"opt", Categorical(4)}};
  auto sampler = MakeCmaes(8);
  for (int i = 0; i < 20; ++i) study.Finish(study.Start(*sampler), TrialState::kComplete, i);
  CmaesSampler& c = AsCmaes(*sampler);
  const SearchSpace relative = c.InferRelativeSearchSpace(study.View(), 20);
  REQUIRE(relative.size() == 1);
  CHECK(c.SampleRelative(study.View(), 20, relative)->empty());
  // Every value is then the random sampler's, drawn from the same seed.
  RandomSampler random(8);
  for (int i = 0; i < 20; ++i) {
    for (const ParamSpec& p : study.space) {
      CHECK(study.Params(i).at(p.name) == *random.SampleIndependent(study.View(), i, p));
    }
  }
}

TEST_CASE("cmaes waits for n_startup_trials finished trials", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(3);
  config::CmaesConfig cfg;
  cfg.n_startup_trials = 4;
  auto sampler = MakeCmaes(2, cfg);
  RandomSampler random(2);
  for (int i = 0; i < 6; ++i) {
    const int n = study.Start(*sampler);
    const bool startup = i < 4;
    const std::vector<std::pair<int, int>> tags = ReplayOf(*sampler, study, n + 1).tags;
    CHECK((tags.size() <= static_cast<size_t>(n) || tags[n].first < 0) == startup);
    const double first = *random.SampleIndependent(study.View(), n, study.space[0]);
    CHECK((study.Params(n).at("x0") == first) == startup);
    study.Finish(n, TrialState::kComplete, Sphere(study.Params(n)));
  }
}

TEST_CASE("a generation is told only the trials that finished, first by number",
          "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(3);  // population 7
  auto sampler = MakeCmaes(4);
  study.Finish(study.Start(*sampler), TrialState::kComplete, 5.0);  // start-up trial
  // Ten trials asked at once: all from generation 0.
  std::vector<int> running;
  for (int i = 0; i < 10; ++i) running.push_back(study.Start(*sampler));
  CmaesSampler::ReplayState s = ReplayOf(*sampler, study, 11);
  for (int n : running) CHECK(s.tags.at(n) == std::make_pair(0, 0));
  // Failed and pruned trials never fill a generation; six finished are not enough.
  study.Finish(running[0], TrialState::kFail);
  study.Finish(running[1], TrialState::kPruned);
  for (int i = 2; i < 8; ++i) {
    study.Finish(running[i], TrialState::kComplete, Sphere(study.Params(running[i])));
  }
  CHECK(ReplayOf(*sampler, study, 11).generation == 0);
  // The seventh tells it.
  study.Finish(running[8], TrialState::kComplete, Sphere(study.Params(running[8])));
  s = ReplayOf(*sampler, study, 11);
  CHECK(s.generation == 1);
  // A trial created after that sees generation 1; the last of the ten, finishing late, is
  // never told (its generation is past).
  const int next = study.Start(*sampler);
  CHECK(ReplayOf(*sampler, study, next + 1).tags.at(next) == std::make_pair(1, 0));
  study.Finish(running[9], TrialState::kComplete, -100.0);
  const CmaesSampler::ReplayState later = ReplayOf(*sampler, study, next + 1);
  CHECK(later.generation == 1);
  CHECK(later.mean == s.mean);
}

TEST_CASE("trials that finish after a trial was created are not seen by it", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(2);  // population 6
  auto sampler = MakeCmaes(6);
  study.Finish(study.Start(*sampler), TrialState::kComplete, 1.0);
  std::vector<int> first;
  for (int i = 0; i < 6; ++i) first.push_back(study.Start(*sampler));
  // Trial 7 is created before any of them finishes, so it belongs to generation 0 even when the
  // replay runs after all of them have finished.
  const int seventh = study.Start(*sampler);
  for (int n : first) study.Finish(n, TrialState::kComplete, Sphere(study.Params(n)));
  const CmaesSampler::ReplayState s = ReplayOf(*sampler, study, seventh + 1);
  CHECK(s.tags.at(seventh) == std::make_pair(0, 0));
  CHECK(s.generation == 1);
}

TEST_CASE("pruned trials count with consider_pruned_trials, at their last report",
          "[sampler][cmaes]") {
  for (bool consider : {false, true}) {
    INFO("consider_pruned_trials = " << consider);
    CmaesStudy study;
    study.space = FloatSpace(2);
    config::CmaesConfig cfg;
    cfg.consider_pruned_trials = consider;
    auto sampler = MakeCmaes(9, cfg);
    study.Finish(study.Start(*sampler), TrialState::kComplete, 1.0);
    for (int i = 0; i < 6; ++i) {
      const int n = study.Start(*sampler);
      study.trials[n].intermediate = {{0, 10.0}, {3, Sphere(study.Params(n))}};
      study.Finish(n, TrialState::kPruned);
    }
    CHECK(ReplayOf(*sampler, study, 7).generation == (consider ? 1 : 0));
  }
}

TEST_CASE("cmaes maximises by minimising the negated value", "[sampler][cmaes]") {
  auto run = [](config::Direction direction) {
    CmaesStudy study;
    study.space = FloatSpace(2);
    study.direction = direction;
    auto sampler = MakeCmaes(12);
    const double sign = direction == config::Direction::kMaximize ? -1 : 1;
    for (int i = 0; i < 40; ++i) {
      const int n = study.Start(*sampler);
      study.Finish(n, TrialState::kComplete, sign * Sphere(study.Params(n)));
    }
    return study;
  };
  const CmaesStudy min = run(config::Direction::kMinimize);
  const CmaesStudy max = run(config::Direction::kMaximize);
  for (int i = 0; i < 40; ++i) CHECK(min.Params(i) == max.Params(i));
}

TEST_CASE("cmaes converges on a sphere through SampleParams", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(4);
  study.space.push_back({"k", Int(-10, 10)});
  auto sampler = MakeCmaes(21);
  double best = 1e300;
  for (int i = 0; i < 300; ++i) {
    const int n = study.Start(*sampler);
    ParamValues p = study.Params(n);
    const double k = p.at("k");
    p.erase("k");
    const double f = Sphere(p) + std::abs(k - 3);
    best = std::min(best, f);
    study.Finish(n, TrialState::kComplete, f);
  }
  CHECK(best < 1e-3);
  CHECK(ReplayOf(*sampler, study, 300).generation >= 30);
}

TEST_CASE("cmaes is reproducible across instances, as after a daemon restart", "[sampler][cmaes]") {
  auto run = [](uint64_t seed, int restart_at) {
    CmaesStudy study;
    study.space = FloatSpace(3);
    auto sampler = MakeCmaes(seed);
    std::vector<int> running;
    for (int i = 0; i < 60; ++i) {
      if (i == restart_at) sampler = MakeCmaes(seed);
      running.push_back(study.Start(*sampler));
      // Two trials in flight: the older finishes after each start.
      if (running.size() == 2) {
        const int n = running.front();
        running.erase(running.begin());
        study.Finish(n, TrialState::kComplete, Sphere(study.Params(n)));
      }
    }
    return study;
  };
  const CmaesStudy a = run(5, -1);
  const CmaesStudy b = run(5, 30);
  const CmaesStudy c = run(6, -1);
  bool same = true, differs = false;
  for (int i = 0; i < 60; ++i) {
    same = same && a.Params(i) == b.Params(i);
    differs = differs || a.Params(i) != c.Params(i);
  }
  CHECK(same);
  CHECK(differs);
}

TEST_CASE("cmaes replays again when the history it read has changed", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(2);  // population 6
  auto sampler = MakeCmaes(15);
  std::vector<int> running;
  for (int i = 0; i < 30; ++i) {
    running.push_back(study.Start(*sampler));
    if (running.size() == 3) {
      study.Finish(running.front(), TrialState::kComplete, Sphere(study.Params(running.front())));
      running.erase(running.begin());
    }
  }
  const CmaesSampler::ReplayState before = ReplayOf(*sampler, study, 30);
  // Trials 5 to 20 now read as finished after every trial was created: the steps from 6 on see
  // other trials, so the reused sampler must agree with a fresh one, not with its cache.
  for (int n = 5; n <= 20; ++n) study.trials[n].finished_at = study.clock + 1;
  auto fresh = MakeCmaes(15);
  const CmaesSampler::ReplayState reused = ReplayOf(*sampler, study, 30);
  const CmaesSampler::ReplayState again = ReplayOf(*fresh, study, 30);
  CHECK(reused.tags == again.tags);
  CHECK(reused.point == again.point);
  CHECK(reused.tags != before.tags);
}

TEST_CASE("ipop restarts a stopped optimizer with a larger population", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(2);  // population 6
  config::CmaesConfig cfg;
  cfg.restart_strategy = "ipop";
  auto sampler = MakeCmaes(14, cfg);
  // A flat objective: the function values stop changing, which stops the optimizer after
  // 10 + ceil(30 * 2 / 6) = 20 generations.
  for (int i = 0; i < 1 + 6 * 21; ++i)
    study.Finish(study.Start(*sampler), TrialState::kComplete, 1);
  const CmaesSampler::ReplayState s = ReplayOf(*sampler, study, study.trials.size());
  CHECK(s.restarts == 1);
  CHECK(s.population_size == 12);
  CHECK(s.generation == 0);

  config::CmaesConfig none;
  auto plain = MakeCmaes(14, none);
  CHECK(ReplayOf(*plain, study, study.trials.size()).restarts == 0);
}

TEST_CASE("cmaes refuses a study with several objectives", "[sampler][cmaes]") {
  CmaesStudy study;
  study.space = FloatSpace(2);
  auto sampler = MakeCmaes(1);
  StudyView view = study.View();
  view.directions = {config::Direction::kMinimize, config::Direction::kMaximize};
  auto r = SampleParams(*sampler, view, 0);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("2 objectives"));
}

// ---------------------------------------------------------------------------------------------
// The sweep keys.

std::string WithCmaes(const std::string& body) {
  return std::string(config::testing::kMinimal) + "[sampler]\nkind = \"cmaes\"\n" + body;
}

TEST_CASE("a cmaes sampler parses with every option and Optuna's defaults", "[sampler][cmaes]") {
  const config::SweepSpec defaults = config::testing::Parsed(WithCmaes(""));
  const config::CmaesConfig& d = defaults.sampler.cmaes;
  CHECK(defaults.sampler.kind == "cmaes");
  CHECK(d.n_startup_trials == 1);
  CHECK(d.sigma0 == 0);
  CHECK(d.popsize == 0);
  CHECK(d.restart_strategy.empty());
  CHECK(d.inc_popsize == 2);
  CHECK_FALSE(d.consider_pruned_trials);
  CHECK(d.x0.empty());

  const config::SweepSpec s = config::testing::Parsed(WithCmaes(R"(seed = 3
n_startup_trials = 5
sigma0 = 0.25
popsize = 12
restart_strategy = "ipop"
inc_popsize = 3
consider_pruned_trials = true
x0 = { x = 0.75 }
)"));
  const config::CmaesConfig& c = s.sampler.cmaes;
  CHECK(s.sampler.seed == 3);
  CHECK(c.n_startup_trials == 5);
  CHECK(c.sigma0 == 0.25);
  CHECK(c.popsize == 12);
  CHECK(c.restart_strategy == "ipop");
  CHECK(c.inc_popsize == 3);
  CHECK(c.consider_pruned_trials);
  CHECK(c.x0 == std::map<std::string, double>{{"x", 0.75}});
}

TEST_CASE("bad cmaes options name the key, its line and column", "[sampler][cmaes]") {
  using config::testing::ErrorOf;
  // kMinimal ends on line 12; [sampler] is line 13, kind line 14, the body from line 15.
  CHECK(ErrorOf(WithCmaes("restart_strategy = \"bipop\"\n")) ==
        "sweep.toml:15:20: [sampler] restart_strategy = \"bipop\": unknown restart strategy; "
        "expected \"ipop\" (or no restart_strategy for no restarts)");
  CHECK_THAT(
      ErrorOf(WithCmaes("popsize = 1\n")),
      Catch::StartsWith("sweep.toml:15:11: [sampler] popsize = 1: expected an integer >= 2"));
  CHECK_THAT(ErrorOf(WithCmaes("sigma0 = 0\n")),
             Catch::StartsWith("sweep.toml:15:10: [sampler] sigma0 = 0: expected a number > 0"));
  CHECK_THAT(ErrorOf(WithCmaes("inc_popsize = 0\n")),
             Catch::StartsWith("sweep.toml:15:15: [sampler] inc_popsize = 0"));
  CHECK_THAT(ErrorOf(WithCmaes("x0 = { y = 0.5 }\n")),
             Catch::StartsWith("sweep.toml:15:12: [sampler] x0.y = 0.5: no numeric parameter "
                               "\"y\" in [space]; expected one of: x"));
  CHECK_THAT(ErrorOf(WithCmaes("x0 = { x = 2.0 }\n")),
             Catch::StartsWith("sweep.toml:15:12: [sampler] x0.x = 2.0: outside the range of "
                               "\"x\"; expected a value in float [0.0, 1.0]"));
  CHECK_THAT(ErrorOf(WithCmaes("x0 = { x = \"a\" }\n")),
             Catch::StartsWith("sweep.toml:15:12: [sampler] x0.x = \"a\": expected a number"));
  CHECK_THAT(ErrorOf(WithCmaes("x0 = 0.5\n")),
             Catch::StartsWith("sweep.toml:15:6: [sampler] x0 = 0.5: expected a table"));
  CHECK_THAT(ErrorOf(WithCmaes("scramble = true\n")),
             Catch::Contains("an option of kind = \"qmc\", not of kind = \"cmaes\""));
}

}  // namespace
}  // namespace triald::sampler
