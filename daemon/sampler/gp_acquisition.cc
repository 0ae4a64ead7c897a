#include "daemon/sampler/gp_acquisition.h"

#include <LBFGSB.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "daemon/sampler/qmc_sampler.h"
#include "daemon/sampler/random_sampler.h"

namespace triald::sampler::gp {

namespace {

struct SearchCancelled {};

constexpr int kFullGridAtMost = 64;
constexpr int kMaxRounds = 10;

// Counts evaluations, keeps the best point seen, and stops on cancel.
class Evaluator {
 public:
  Evaluator(const Acquisition& acquisition, const std::atomic<bool>* cancel)
      : acquisition_(acquisition), cancel_(cancel) {}

  double operator()(const Eigen::VectorXd& x, Eigen::VectorXd* grad) {
    if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) throw SearchCancelled{};
    ++evaluations_;
    double v = acquisition_(x, grad);
    if (std::isnan(v)) v = -std::numeric_limits<double>::infinity();
    if (v > best_.value || best_.x.size() == 0) {
      best_.value = v;
      best_.x = x;
    }
    return v;
  }
  Optimum best() const {
    Optimum o = best_;
    o.evaluations = evaluations_;
    return o;
  }

 private:
  const Acquisition& acquisition_;
  const std::atomic<bool>* cancel_;
  Optimum best_{Eigen::VectorXd(), -std::numeric_limits<double>::infinity(), 0};
  int evaluations_ = 0;
};

size_t NearestIndex(const std::vector<double>& grid, double v) {
  auto it = std::lower_bound(grid.begin(), grid.end(), v);
  if (it == grid.begin()) return 0;
  if (it == grid.end()) return grid.size() - 1;
  const size_t hi = static_cast<size_t>(it - grid.begin());
  return v - grid[hi - 1] <= grid[hi] - v ? hi - 1 : hi;
}

// L-BFGS-B over the continuous dimensions of x (the others held). Updates x and value.
void ContinuousSearch(const std::vector<int>& continuous, Evaluator& eval, Eigen::VectorXd* x,
                      double* value) {
  if (continuous.empty()) return;
  const Eigen::Index m = static_cast<Eigen::Index>(continuous.size());
  Eigen::VectorXd z(m);
  for (Eigen::Index i = 0; i < m; ++i) z(i) = (*x)(continuous[i]);
  Eigen::VectorXd full = *x;
  Eigen::VectorXd best_z = z;
  double best = *value;
  auto loss = [&](const Eigen::VectorXd& zz, Eigen::VectorXd& g) {
    for (Eigen::Index i = 0; i < m; ++i) full(continuous[i]) = zz(i);
    Eigen::VectorXd grad = Eigen::VectorXd::Zero(full.size());
    const double v = eval(full, &grad);
    g.resize(m);
    for (Eigen::Index i = 0; i < m; ++i) g(i) = -grad(continuous[i]);
    if (!g.allFinite()) g.setZero();
    if (v > best) {
      best = v;
      best_z = zz;
    }
    return std::isfinite(v) ? -v : std::numeric_limits<double>::max();
  };
  LBFGSpp::LBFGSBParam<double> param;
  param.epsilon = 1e-5;
  param.epsilon_rel = 0;
  param.max_iterations = 100;
  param.max_linesearch = 30;
  LBFGSpp::LBFGSBSolver<double> solver(param);
  double fx = 0;
  try {
    solver.minimize(loss, z, fx, Eigen::VectorXd::Zero(m), Eigen::VectorXd::Ones(m));
  } catch (const SearchCancelled&) {
    throw;
  } catch (const std::exception&) {
    // A line search that gave up: the best point seen stands.
  }
  for (Eigen::Index i = 0; i < m; ++i) (*x)(continuous[i]) = best_z(i);
  *value = best;
}

// Tries values of dimension j; keeps the best.
void DiscreteSearch(const Dimension& dim, int j, Evaluator& eval, Eigen::VectorXd* x,
                    double* value) {
  auto try_value = [&](double v) {
    if (v == (*x)(j)) return false;
    Eigen::VectorXd y = *x;
    y(j) = v;
    const double f = eval(y, nullptr);
    if (f > *value) {
      *value = f;
      *x = std::move(y);
      return true;
    }
    return false;
  };
  if (dim.kind == Dimension::Kind::kCategorical) {
    const double current = (*x)(j);
    for (int c = 0; c < dim.choices; ++c) {
      if (c != current) try_value(c);
    }
    return;
  }
  const std::vector<double>& grid = dim.grid;
  if (static_cast<int>(grid.size()) <= kFullGridAtMost) {
    const double current = (*x)(j);
    for (double v : grid) {
      if (v != current) try_value(v);
    }
    return;
  }
  // A long grid: steps of 1, 2, 4, ... each way, while they improve.
  for (int sign : {1, -1}) {
    for (int64_t step = 1; step < static_cast<int64_t>(grid.size()); step *= 2) {
      const int64_t k = static_cast<int64_t>(NearestIndex(grid, (*x)(j))) + sign * step;
      if (k < 0 || k >= static_cast<int64_t>(grid.size())) break;
      if (!try_value(grid[static_cast<size_t>(k)])) break;
    }
  }
}

}  // namespace

Eigen::VectorXd Snap(const std::vector<Dimension>& dims, const Eigen::VectorXd& x) {
  Eigen::VectorXd y = x;
  for (size_t j = 0; j < dims.size(); ++j) {
    const Dimension& d = dims[j];
    const Eigen::Index i = static_cast<Eigen::Index>(j);
    switch (d.kind) {
      case Dimension::Kind::kContinuous:
        y(i) = std::clamp(x(i), 0.0, 1.0);
        break;
      case Dimension::Kind::kDiscrete:
        y(i) = d.grid[NearestIndex(d.grid, x(i))];
        break;
      case Dimension::Kind::kCategorical:
        y(i) = std::clamp(std::round(x(i)), 0.0, static_cast<double>(d.choices - 1));
        break;
    }
  }
  return y;
}

common::Result<Optimum> OptimizeAcquisition(const std::vector<Dimension>& dims,
                                            const Acquisition& acquisition,
                                            const OptimizeOptions& options) {
  const int d = static_cast<int>(dims.size());
  if (d == 0) return common::InvalidArgument("the acquisition's space has no dimension");
  std::vector<int> continuous;
  std::vector<int> discrete;  // discrete and categorical
  for (int j = 0; j < d; ++j) {
    (dims[j].kind == Dimension::Kind::kContinuous ? continuous : discrete).push_back(j);
  }
  Evaluator eval(acquisition, options.cancel);
  std::mt19937_64 rng = TrialRng(options.seed, 0, "gp-acquisition");
  try {
    // Quasi-random points: a scrambled Sobol sequence (uniform draws past its 64 dimensions).
    std::vector<Eigen::VectorXd> points;
    std::vector<double> values;
    common::Result<SobolSequence> sobol = SobolSequence::Create(
        std::min(d, SobolSequence::kMaxDimensions), /*scramble=*/true, options.seed);
    for (int i = 0; i < options.n_preliminary; ++i) {
      Eigen::VectorXd u(d);
      std::vector<double> p;
      if (sobol.ok()) p = sobol->Point(static_cast<uint32_t>(i));
      for (int j = 0; j < d; ++j) {
        u(j) = j < static_cast<int>(p.size()) ? p[j] : UniformUnit(rng);
        if (dims[j].kind == Dimension::Kind::kCategorical) {
          u(j) = std::min(std::floor(u(j) * dims[j].choices), dims[j].choices - 1.0);
        }
      }
      points.push_back(Snap(dims, u));
      values.push_back(eval(points.back(), nullptr));
    }
    // Starts: the best point, the extra ones, then points drawn in proportion to exp(value).
    std::vector<Eigen::VectorXd> starts;
    std::vector<size_t> order(points.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (!points.empty()) {
      const size_t best =
          static_cast<size_t>(std::max_element(values.begin(), values.end()) - values.begin());
      starts.push_back(points[best]);
      values[best] = -std::numeric_limits<double>::infinity();  // not drawn again
    }
    for (const Eigen::VectorXd& s : options.extra_starts) starts.push_back(Snap(dims, s));
    const double top = points.empty() ? 0 : *std::max_element(values.begin(), values.end());
    while (static_cast<int>(starts.size()) < options.n_local_search + 1 && std::isfinite(top)) {
      double total = 0;
      for (double v : values) total += std::isfinite(v) ? std::exp(v - top) : 0.0;
      if (!(total > 0)) break;
      double r = UniformUnit(rng) * total;
      size_t pick = values.size();
      for (size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) continue;
        r -= std::exp(values[i] - top);
        pick = i;
        if (r <= 0) break;
      }
      if (pick == values.size()) break;
      starts.push_back(points[pick]);
      values[pick] = -std::numeric_limits<double>::infinity();
    }
    // Local searches.
    for (const Eigen::VectorXd& start : starts) {
      Eigen::VectorXd x = start;
      double value = eval(x, nullptr);
      for (int round = 0; round < kMaxRounds; ++round) {
        const double before = value;
        ContinuousSearch(continuous, eval, &x, &value);
        for (int j : discrete) DiscreteSearch(dims[j], j, eval, &x, &value);
        if (!(value - before > options.tolerance)) break;
      }
    }
  } catch (const SearchCancelled&) {
    return common::FailedPrecondition("the acquisition's search was cancelled");
  }
  Optimum best = eval.best();
  best.x = Snap(dims, best.x);
  return best;
}

}  // namespace triald::sampler::gp
