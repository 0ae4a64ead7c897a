// The GP sampler (daemon/sampler/gp*.h): the kernel, the marginal likelihood and its gradient
// against finite differences, log EI against a direct evaluation (and far in the tail, where a
// direct one underflows), the posterior, the acquisition search, and the sampler: reproducible
// with a seed, values in their distributions, better than random on a smooth function,
// constraints respected, running trials not proposed again, cancellation; BackgroundSampler;
// the auto sampler's choice.

#include "daemon/sampler/gp.h"

#include <Eigen/Core>
#include <Eigen/LU>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/auto_sampler.h"
#include "daemon/sampler/gp_acquisition.h"
#include "daemon/sampler/gp_sampler.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"
#include "daemon/scheduler/background_sampler.h"
#include "tests/support/distributions.h"

namespace triald {
namespace {

using config::ParamSpec;
using config::ParamValues;
using config::SearchSpace;
using model::TrialRecord;
using model::TrialState;
using sampler::gp::Data;
using sampler::gp::KernelParams;
using triald::testing::Float;
using triald::testing::Int;

Data RandomData(int n, int d, bool with_categorical, uint64_t seed) {
  std::mt19937_64 rng = sampler::TrialRng(seed, 0, "data");
  Data data;
  data.x.resize(n, d);
  data.y.resize(n);
  data.is_categorical.assign(d, false);
  if (with_categorical) data.is_categorical[d - 1] = true;
  for (int i = 0; i < n; ++i) {
    double y = 0;
    for (int j = 0; j < d; ++j) {
      const double u = sampler::UniformUnit(rng);
      data.x(i, j) = data.is_categorical[j] ? std::floor(u * 3) : u;
      y += std::sin(3 * data.x(i, j) + j);
    }
    data.y(i) = y + 0.05 * (sampler::UniformUnit(rng) - 0.5);
  }
  data.y = ((data.y.array() - data.y.mean()) /
            std::sqrt((data.y.array() - data.y.mean()).square().mean()))
               .matrix();
  return data;
}

TEST_CASE("gp: the Matern 5/2 kernel and its derivative", "[gp]") {
  CHECK(sampler::gp::Matern52(0) == Approx(1));
  // h(s) = (1 + t + t^2/3) e^-t, t = sqrt(5 s)
  const double s = 0.37;
  const double t = std::sqrt(5 * s);
  CHECK(sampler::gp::Matern52(s) == Approx((1 + t + t * t / 3) * std::exp(-t)));
  for (double v : {0.0, 1e-6, 0.01, 0.5, 2.0, 9.0}) {
    const double h = 1e-7;
    const double fd = (sampler::gp::Matern52(v + h) - sampler::gp::Matern52(std::max(v - h, 0.0))) /
                      (v + h - std::max(v - h, 0.0));
    INFO("s = " << v);
    CHECK(sampler::gp::Matern52Derivative(v) == Approx(fd).epsilon(1e-5));
  }
  // Categorical dimensions count equal or not, whatever the distance between indices.
  Eigen::MatrixXd a(1, 1);
  Eigen::MatrixXd b(2, 1);
  a << 0;
  b << 1, 2;
  KernelParams p;
  p.inverse_squared_lengthscales = Eigen::VectorXd::Ones(1);
  const Eigen::MatrixXd k = sampler::gp::KernelMatrix(a, b, {true}, p);
  CHECK(k(0, 0) == Approx(k(0, 1)));
}

TEST_CASE("gp: the marginal likelihood matches a direct evaluation", "[gp]") {
  const Data data = RandomData(6, 2, false, 1);
  KernelParams p;
  p.inverse_squared_lengthscales = Eigen::Vector2d(2.0, 0.5);
  p.kernel_scale = 1.3;
  p.noise_var = 0.01;
  Eigen::MatrixXd k = sampler::gp::KernelMatrix(data.x, data.x, data.is_categorical, p);
  k.diagonal().array() += p.noise_var;
  const double direct = -0.5 * data.y.dot(k.inverse() * data.y) - 0.5 * std::log(k.determinant()) -
                        0.5 * 6 * std::log(2 * M_PI);
  CHECK(sampler::gp::LogMarginalLikelihood(data, p) == Approx(direct).epsilon(1e-10));
}

TEST_CASE("gp: the log posterior's gradient matches finite differences", "[gp]") {
  const bool categorical = GENERATE(false, true);
  const bool deterministic = GENERATE(false, true);
  INFO("categorical " << categorical << ", deterministic " << deterministic);
  const Data data = RandomData(12, 3, categorical, 2);
  Eigen::VectorXd raw(deterministic ? 4 : 5);
  raw.head(4) = Eigen::Vector4d(0.3, -0.7, 1.1, 0.2);
  if (!deterministic) raw(4) = -3;
  Eigen::VectorXd grad;
  const double f = sampler::gp::LogPosteriorRaw(data, raw, deterministic, &grad);
  REQUIRE(std::isfinite(f));
  for (Eigen::Index i = 0; i < raw.size(); ++i) {
    const double h = 1e-6;
    Eigen::VectorXd up = raw;
    Eigen::VectorXd down = raw;
    up(i) += h;
    down(i) -= h;
    const double fd = (sampler::gp::LogPosteriorRaw(data, up, deterministic, nullptr) -
                       sampler::gp::LogPosteriorRaw(data, down, deterministic, nullptr)) /
                      (2 * h);
    INFO("raw parameter " << i);
    CHECK(grad(i) == Approx(fd).epsilon(1e-5).margin(1e-6));
  }
  // The value is the likelihood plus the prior.
  const KernelParams p = sampler::gp::FromRaw(raw, 3, deterministic);
  CHECK(f == Approx(sampler::gp::LogMarginalLikelihood(data, p) + sampler::gp::LogPrior(p)));
}

double DirectLogEi(double z) {
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
  return std::log(pdf + z * cdf);
}

TEST_CASE("gp: log EI matches a direct evaluation and stays finite far in the tail", "[gp]") {
  for (double z : {-6.0, -3.0, -1.5, -1.0, -0.999, -0.5, 0.0, 0.7, 2.0, 5.0}) {
    INFO("z = " << z);
    double dz = 0;
    CHECK(sampler::gp::StandardLogEi(z, &dz) == Approx(DirectLogEi(z)).epsilon(1e-9));
    const double h = 1e-6;
    CHECK(dz == Approx((DirectLogEi(z + h) - DirectLogEi(z - h)) / (2 * h)).epsilon(1e-5));
  }
  // Far in the tail the direct form underflows to log(0); h(z) ~ phi(z) / z^2 there.
  CHECK(std::isinf(DirectLogEi(-40)));
  for (double z : {-40.0, -100.0, -1e4}) {
    INFO("z = " << z);
    double dz = 0;
    const double v = sampler::gp::StandardLogEi(z, &dz);
    // h(z) = phi(z) / z^2 (1 - 3 / z^2 + 15 / z^4 - ...)
    const double asymptote = -0.5 * z * z - 0.5 * std::log(2 * M_PI) - 2 * std::log(-z) +
                             std::log(1 - 3 / (z * z) + 15 / (z * z * z * z));
    CHECK(std::isfinite(v));
    CHECK(v == Approx(asymptote).epsilon(1e-9));
    CHECK(dz == Approx(-2 / z - z).epsilon(1e-3));  // d/dz of the asymptote, leading terms
    CHECK(dz > 0);
  }
  // Monotone across the branch at z = -1 and the series at u = 20.
  double last = -std::numeric_limits<double>::infinity();
  for (double z = -40; z < 3; z += 0.01) {
    const double v = sampler::gp::StandardLogEi(z);
    REQUIRE(v > last);
    last = v;
  }
}

TEST_CASE("gp: log Phi matches a direct evaluation and stays finite far in the tail", "[gp]") {
  for (double z : {-5.0, -1.0, 0.0, 1.0, 4.0}) {
    INFO("z = " << z);
    double dz = 0;
    const double direct = std::log(0.5 * std::erfc(-z / std::sqrt(2.0)));
    CHECK(sampler::gp::LogNormalCdf(z, &dz) == Approx(direct).epsilon(1e-10));
    const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
    CHECK(dz == Approx(pdf / std::exp(direct)).epsilon(1e-9));
  }
  const double z = -60;
  CHECK(sampler::gp::LogNormalCdf(z) ==
        Approx(-0.5 * z * z - std::log(-z) - 0.5 * std::log(2 * M_PI)).epsilon(1e-6));
}

TEST_CASE("gp: the posterior interpolates and its gradient matches finite differences", "[gp]") {
  const Data data = RandomData(15, 2, false, 3);
  sampler::gp::FitOptions fit;
  auto r = sampler::gp::Regressor::Fit(data, fit);
  REQUIRE(r.ok());
  // Near the data the mean follows it and the variance is small; far from it, larger.
  double mean = 0;
  double var = 0;
  r->Posterior(data.x.row(0).transpose(), &mean, &var);
  CHECK(std::abs(mean - data.y(0)) < 0.5);
  const double near_var = var;
  r->Posterior(Eigen::Vector2d(5, -5), &mean, &var);
  CHECK(var > 10 * near_var);
  const Eigen::Vector2d x(0.31, 0.77);
  Eigen::VectorXd dm;
  Eigen::VectorXd dv;
  r->Posterior(x, &mean, &var, &dm, &dv);
  for (int j = 0; j < 2; ++j) {
    const double h = 1e-6;
    Eigen::Vector2d up = x;
    Eigen::Vector2d down = x;
    up(j) += h;
    down(j) -= h;
    double mu = 0, vu = 0, md = 0, vd = 0;
    r->Posterior(up, &mu, &vu);
    r->Posterior(down, &md, &vd);
    CHECK(dm(j) == Approx((mu - md) / (2 * h)).epsilon(1e-5).margin(1e-7));
    CHECK(dv(j) == Approx((vu - vd) / (2 * h)).epsilon(1e-5).margin(1e-7));
  }
  // Kriging believer: the variance at a point being evaluated collapses.
  double before = 0;
  r->Posterior(x, &mean, &before);
  sampler::gp::Regressor believed = *r;
  REQUIRE(believed.AddBelieved(x.transpose()).ok());
  double after = 0;
  double believed_mean = 0;
  believed.Posterior(x, &believed_mean, &after);
  CHECK(after < 0.1 * before);
  CHECK(believed_mean == Approx(mean).margin(1e-3));
}

TEST_CASE("gp: the acquisition search finds the maximum of a mixed function", "[gp]") {
  std::vector<sampler::gp::Dimension> dims(3);
  dims[1].kind = sampler::gp::Dimension::Kind::kDiscrete;
  for (int k = 0; k < 11; ++k) dims[1].grid.push_back(k / 10.0);
  dims[2].kind = sampler::gp::Dimension::Kind::kCategorical;
  dims[2].choices = 4;
  // Maximum at x0 = 0.3, x1 = 0.7, choice 2.
  sampler::gp::Acquisition f = [](const Eigen::VectorXd& x, Eigen::VectorXd* grad) {
    const double v =
        -(x(0) - 0.3) * (x(0) - 0.3) - (x(1) - 0.7) * (x(1) - 0.7) + (x(2) == 2 ? 1.0 : 0.0);
    if (grad != nullptr) {
      grad->setZero(3);
      (*grad)(0) = -2 * (x(0) - 0.3);
      (*grad)(1) = -2 * (x(1) - 0.7);
    }
    return v;
  };
  sampler::gp::OptimizeOptions options;
  options.n_preliminary = 64;
  options.seed = 5;
  auto best = sampler::gp::OptimizeAcquisition(dims, f, options);
  REQUIRE(best.ok());
  CHECK(best->x(0) == Approx(0.3).margin(1e-4));
  CHECK(best->x(1) == Approx(0.7));
  CHECK(best->x(2) == 2);
  // Reproducible: the same seed gives the same point.
  auto again = sampler::gp::OptimizeAcquisition(dims, f, options);
  REQUIRE(again.ok());
  CHECK(again->x == best->x);
}

// ---------------------------------------------------------------------------------------------
// The sampler.

struct Study {
  SearchSpace space;
  std::vector<TrialRecord> trials;
  config::Direction direction = config::Direction::kMinimize;

  sampler::StudyView View() const {
    sampler::StudyView v;
    v.direction = direction;
    v.directions = {direction};
    v.space = &space;
    v.trials = &trials;
    return v;
  }
  ParamValues Sample(sampler::Sampler& s) {
    const int number = static_cast<int>(trials.size());
    auto r = sampler::SampleParams(s, View(), number);
    INFO(r.status().message());
    REQUIRE(r.ok());
    return *r;
  }
  TrialRecord& Add(const ParamValues& values, TrialState state) {
    TrialRecord t;
    t.number = static_cast<int>(trials.size());
    t.id = t.number + 1;
    t.state = state;
    for (const ParamSpec& p : space) t.params[p.name] = {values.at(p.name), p.dist};
    trials.push_back(t);
    return trials.back();
  }
  void Complete(const ParamValues& values, double value, std::vector<double> constraints = {}) {
    TrialRecord& t = Add(values, TrialState::kComplete);
    t.value = value;
    t.values = {value};
    t.constraints = std::move(constraints);
  }
};

std::unique_ptr<sampler::GpSampler> MakeGp(const SearchSpace& space, uint64_t seed,
                                           int startup = 10) {
  config::GpConfig config;
  config.n_startup_trials = startup;
  auto made = sampler::GpSampler::Create(space, seed, config);
  REQUIRE(made.ok());
  return std::move(made).value();
}

// A smooth bowl with its minimum at lr = 1e-3 (log space), dropout 0.2, layers 5.
double Bowl(const ParamValues& v) {
  const double a = std::log10(v.at("lr")) + 3;
  const double b = (v.at("dropout") - 0.2) * 4;
  const double c = (v.at("layers") - 5) / 3.0;
  return a * a + b * b + c * c;
}

SearchSpace BowlSpace() {
  return {{"lr", Float(1e-5, 1e-1, true)}, {"dropout", Float(0.0, 0.5)}, {"layers", Int(1, 8)}};
}

double RunBowl(sampler::Sampler& s, int n, Study* study_out = nullptr) {
  Study study{BowlSpace(), {}};
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) {
    const ParamValues v = study.Sample(s);
    for (const ParamSpec& p : study.space) REQUIRE(p.dist.Contains(v.at(p.name)));
    best = std::min(best, Bowl(v));
    study.Complete(v, Bowl(v));
  }
  if (study_out != nullptr) *study_out = study;
  return best;
}

TEST_CASE("gp sampler: reproducible with a seed, and the seed matters", "[gp]") {
  Study a;
  Study b;
  auto ga = MakeGp(BowlSpace(), 11, 5);
  auto gb = MakeGp(BowlSpace(), 11, 5);
  RunBowl(*ga, 14, &a);
  RunBowl(*gb, 14, &b);
  for (size_t i = 0; i < a.trials.size(); ++i) {
    for (const auto& [name, value] : a.trials[i].params) {
      REQUIRE(value.internal == b.trials[i].params.at(name).internal);
    }
  }
  // A new sampler on the stored history (a restarted daemon) proposes the same next point.
  auto fresh = MakeGp(BowlSpace(), 11, 5);
  CHECK(a.Sample(*ga) == a.Sample(*fresh));
  Study c;
  auto gc = MakeGp(BowlSpace(), 12, 5);
  RunBowl(*gc, 14, &c);
  CHECK(c.trials.back().params.at("lr").internal != a.trials.back().params.at("lr").internal);
}

TEST_CASE("gp sampler: finds a smooth minimum far better than random search", "[gp]") {
  int gp_wins = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto gp = MakeGp(BowlSpace(), seed);
    sampler::RandomSampler random(seed);
    const double gp_best = RunBowl(*gp, 25);
    const double random_best = RunBowl(random, 25);
    INFO("seed " << seed << ": gp " << gp_best << ", random " << random_best);
    CHECK(gp_best < 0.1);
    gp_wins += gp_best < random_best ? 1 : 0;
  }
  CHECK(gp_wins >= 4);
}

TEST_CASE("gp sampler: values lie in their distributions on a mixed space", "[gp]") {
  SearchSpace space = {
      {"lr", Float(1e-5, 1e-1, true)}, {"momentum", Float(0.5, 0.95, false, 0.05)},
      {"batch", Int(1, 64, true)},     {"width", Int(16, 128, false, 16)},
      {"big", Int(0, 100000)},         {"optimizer", triald::testing::Categorical(3, "opt")}};
  Study study{space, {}};
  auto gp = MakeGp(space, 3, 4);
  for (int i = 0; i < 12; ++i) {
    const ParamValues v = study.Sample(*gp);
    for (const ParamSpec& p : space) {
      INFO(p.name << " = " << v.at(p.name));
      REQUIRE(p.dist.Contains(v.at(p.name)));
    }
    study.Complete(v, std::log(v.at("lr")) + v.at("optimizer") + v.at("width") / 100.0);
  }
  CHECK(gp->diagnostics().observations == 11);
}

TEST_CASE("gp sampler: running trials are not proposed again", "[gp]") {
  SearchSpace space = {{"x", Float(0, 1)}, {"y", Float(0, 1)}};
  Study study{space, {}};
  auto gp = MakeGp(space, 4, 8);
  for (int i = 0; i < 8; ++i) {
    const ParamValues v = study.Sample(*gp);
    study.Complete(v, std::pow(v.at("x") - 0.6, 2) + std::pow(v.at("y") - 0.4, 2));
  }
  // Four trials proposed while the others run: each differs from those running.
  std::vector<ParamValues> running;
  for (int i = 0; i < 4; ++i) {
    const ParamValues v = study.Sample(*gp);
    CHECK(gp->diagnostics().pending == i);
    for (const ParamValues& r : running) {
      const double d = std::hypot(v.at("x") - r.at("x"), v.at("y") - r.at("y"));
      INFO("trial " << i << " at distance " << d << " of a running one");
      CHECK(d > 0.01);
    }
    running.push_back(v);
    study.Add(v, TrialState::kRunning);
  }
}

TEST_CASE("gp sampler: constraints steer suggestions to the feasible region", "[gp]") {
  // The objective falls towards x = 1, but x > 0.5 is infeasible (constraint x - 0.5 <= 0):
  // the best feasible point lies on the boundary, where the GP's suggestions go (within a hair
  // on either side).
  SearchSpace space = {{"x", Float(0, 1)}, {"y", Float(0, 1)}};
  Study study{space, {}};
  auto gp = MakeGp(space, 6, 8);
  int infeasible_startup = 0;
  for (int i = 0; i < 24; ++i) {
    const ParamValues v = study.Sample(*gp);
    const double c = v.at("x") - 0.5;
    if (i < 8) infeasible_startup += c > 0.01 ? 1 : 0;
    if (i >= 8) {
      INFO("trial " << i << ": x = " << v.at("x"));
      CHECK(c <= 0.01);
    }
    study.Complete(v, -v.at("x") + 0.1 * v.at("y"), {c});
  }
  CHECK(infeasible_startup > 0);  // the QMC start-up went there; the GP does not
  CHECK(gp->diagnostics().constraints == 1);
  // The best feasible value found approaches the boundary x = 0.5, y = 0.
  double best = std::numeric_limits<double>::infinity();
  for (const TrialRecord& t : study.trials) {
    if (t.constraints[0] <= 0) best = std::min(best, *t.value);
  }
  CHECK(best < -0.45);
}

TEST_CASE("gp sampler: define-by-run parameters outside the space come from QMC", "[gp]") {
  Study study{{}, {}};
  auto gp = MakeGp({}, 9, 3);
  // Every trial suggested "x"; only some "extra".
  const config::Distribution x = Float(0, 1);
  for (int i = 0; i < 6; ++i) {
    TrialRecord t;
    t.number = i;
    t.state = TrialState::kComplete;
    t.params["x"] = {0.1 * i, x};
    if (i % 2 == 0) t.params["extra"] = {0.5, x};
    t.value = 0.1 * i;
    study.trials.push_back(t);
  }
  const SearchSpace relative = gp->InferRelativeSearchSpace(study.View(), 6);
  REQUIRE(relative.size() == 1);
  CHECK(relative[0].name == "x");
  auto sample = gp->SampleRelative(study.View(), 6, relative);
  REQUIRE(sample.ok());
  CHECK(sample->count("x") == 1);
  CHECK(gp->diagnostics().observations == 6);
}

TEST_CASE("gp sampler: a cancelled fit ends at once", "[gp]") {
  Study study;
  auto gp = MakeGp(BowlSpace(), 1, 2);
  RunBowl(*gp, 4, &study);
  std::atomic<bool> cancel{true};
  gp->SetCancel(&cancel);
  const SearchSpace relative = gp->InferRelativeSearchSpace(study.View(), 4);
  auto r = gp->SampleRelative(study.View(), 4, relative);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kFailedPrecondition);
}

// ---------------------------------------------------------------------------------------------
// BackgroundSampler.

TEST_CASE("background sampler: computes off the caller's thread, then answers at once", "[gp]") {
  Study study;
  auto sync = MakeGp(BowlSpace(), 21, 3);
  RunBowl(*sync, 5, &study);
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  daemon::BackgroundSampler bg(MakeGp(BowlSpace(), 21, 3), [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++ready;
    cv.notify_all();
  });
  // Asked without RelativeReady: nothing computed on this thread (independent sampling).
  const SearchSpace relative = bg.InferRelativeSearchSpace(study.View(), 5);
  REQUIRE(relative.size() == 3);
  auto unasked = bg.SampleRelative(study.View(), 5, relative);
  REQUIRE(unasked.ok());
  CHECK(unasked->empty());

  CHECK_FALSE(bg.RelativeReady(study.View(), 5));
  CHECK_FALSE(bg.RelativeReady(study.View(), 5));  // asked again while it computes: still one
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return ready == 1; }));
  }
  CHECK(bg.RelativeReady(study.View(), 5));
  CHECK(bg.computed() == 1);
  // The same point as the sampler computes on the caller's thread.
  CHECK(study.Sample(bg) == study.Sample(*sync));
}

TEST_CASE("background sampler: dropping it cancels the sample in progress", "[gp]") {
  Study study;
  auto sync = MakeGp(BowlSpace(), 22, 3);
  RunBowl(*sync, 60, &study);
  std::atomic<int> ready{0};
  const auto start = std::chrono::steady_clock::now();
  {
    daemon::BackgroundSampler bg(MakeGp(BowlSpace(), 22, 3), [&] { ++ready; });
    CHECK_FALSE(bg.RelativeReady(study.View(), 60));
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("waited " << waited << " s");
  CHECK(ready.load() == 0);  // cancelled: no sample reported
}

// ---------------------------------------------------------------------------------------------
// kind = "auto".

config::SweepSpec AutoSpec(SearchSpace space, int n_trials) {
  config::SweepSpec spec;
  spec.space = std::move(space);
  spec.study.n_trials = n_trials;
  spec.sampler.kind = "auto";
  return spec;
}

TEST_CASE("auto sampler: GP for small numeric spaces and budgets, TPE otherwise", "[gp]") {
  CHECK(sampler::ChooseAutoSampler(AutoSpec(BowlSpace(), 40)).kind == "gp");
  CHECK(sampler::ChooseAutoSampler(AutoSpec(BowlSpace(), 40)).why ==
        "gp: 3 numeric parameters, 40 trials, one objective");
  CHECK(sampler::ChooseAutoSampler(AutoSpec(BowlSpace(), 500)).kind == "tpe");
  CHECK(sampler::ChooseAutoSampler(AutoSpec({}, 40)).kind == "tpe");
  SearchSpace with_choice = BowlSpace();
  with_choice.push_back({"opt", triald::testing::Categorical(2, "o")});
  const sampler::AutoChoice choice = sampler::ChooseAutoSampler(AutoSpec(with_choice, 40));
  CHECK(choice.kind == "tpe");
  CHECK(choice.why == "tpe: categorical parameter \"opt\"");
  config::SweepSpec two = AutoSpec(BowlSpace(), 40);
  two.study.directions = {config::Direction::kMinimize, config::Direction::kMaximize};
  CHECK(sampler::ChooseAutoSampler(two).kind == "tpe");
  // Resolved: the chosen kind with the seed kept.
  config::SweepSpec spec = AutoSpec(BowlSpace(), 40);
  spec.sampler.seed = 77;
  spec.sampler.seed_given = true;
  const config::SamplerConfig resolved = sampler::ResolveAutoSampler(spec.sampler, spec);
  CHECK(resolved.kind == "gp");
  CHECK(resolved.seed == 77);
  auto made = sampler::MakeSampler(resolved, spec.space);
  CHECK(made.ok());
}

}  // namespace
}  // namespace triald
