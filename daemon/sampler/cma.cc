#include "daemon/sampler/cma.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "daemon/sampler/random_sampler.h"

namespace triald::sampler {
namespace {

constexpr double kEps = 1e-8;  // the cmaes library's _EPS
constexpr double kSigmaMax = 1e32;
constexpr double kPi = 3.14159265358979323846;

double Sum(const std::vector<double>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + from, v.begin() + to, 0.0);
}

double SumSquares(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i] * v[i];
  return s;
}

}  // namespace

void SymmetricEigen(const std::vector<double>& a_in, int n, std::vector<double>* values,
                    std::vector<double>* vectors) {
  std::vector<double> a = a_in;
  std::vector<double>& v = *vectors;
  v.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) v[i * n + i] = 1;
  auto at = [&](int i, int j) -> double& { return a[i * n + j]; };
  // Cyclic Jacobi: each rotation zeroes one off-diagonal pair; sweeps until the off-diagonal
  // mass is negligible against the diagonal (quadratic convergence: a handful of sweeps).
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (int i = 0; i < n; ++i) {
      diag += at(i, i) * at(i, i);
      for (int j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    }
    if (off <= 1e-30 * diag || off == 0) break;
    for (int p = 0; p < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (apq == 0) continue;
        const double theta = (at(q, q) - at(p, p)) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1);
        const double s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p and q
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p and q
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
        at(p, q) = at(q, p) = 0;
        for (int k = 0; k < n; ++k) {
          const double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  // Ascending eigenvalues (numpy's eigh order), columns permuted alike.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return at(i, i) < at(j, j); });
  values->resize(n);
  std::vector<double> sorted(static_cast<size_t>(n) * n);
  for (int c = 0; c < n; ++c) {
    (*values)[c] = at(order[c], order[c]);
    for (int k = 0; k < n; ++k) sorted[k * n + c] = v[k * n + order[c]];
  }
  v = std::move(sorted);
}

double StandardNormal(std::mt19937_64& rng) {
  const double u1 = 1.0 - UniformUnit(rng);  // (0, 1]: the log is finite
  const double u2 = UniformUnit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

common::Result<Cma> Cma::Create(const Options& o) {
  const int n = static_cast<int>(o.mean.size());
  if (n < 2) {
    return common::InvalidArgument("CMA-ES: " + std::to_string(n) +
                                   " dimensions; expected two or more");
  }
  if (!(o.sigma > 0) || !std::isfinite(o.sigma)) {
    return common::InvalidArgument("CMA-ES: sigma " + std::to_string(o.sigma) +
                                   "; expected a finite number > 0");
  }
  if (!o.bounds.empty()) {
    if (static_cast<int>(o.bounds.size()) != n) {
      return common::InvalidArgument("CMA-ES: " + std::to_string(o.bounds.size()) + " bounds for " +
                                     std::to_string(n) + " dimensions");
    }
    for (int i = 0; i < n; ++i) {
      if (!(o.bounds[i].first <= o.mean[i] && o.mean[i] <= o.bounds[i].second)) {
        return common::InvalidArgument("CMA-ES: mean of dimension " + std::to_string(i) +
                                       " lies outside its bounds");
      }
    }
  }
  const int popsize =
      o.population_size > 0 ? o.population_size : 4 + static_cast<int>(std::floor(3 * std::log(n)));
  if (popsize < 2) {
    return common::InvalidArgument("CMA-ES: population size " + std::to_string(popsize) +
                                   "; expected 2 or more");
  }
  Cma cma;
  cma.n_ = n;
  cma.popsize_ = popsize;
  cma.mu_ = popsize / 2;
  const int mu = cma.mu_;

  std::vector<double> wp(popsize);
  for (int i = 0; i < popsize; ++i) wp[i] = std::log((popsize + 1) / 2.0) - std::log(i + 1.0);
  const double s_mu = Sum(wp, 0, mu);
  const double mu_eff = s_mu * s_mu / SumSquares(wp, 0, mu);
  const double s_rest = Sum(wp, mu, popsize);
  const double mu_eff_minus = s_rest * s_rest / SumSquares(wp, mu, popsize);

  const double alpha_cov = 2;
  const double c1 = alpha_cov / ((n + 1.3) * (n + 1.3) + mu_eff);
  const double cmu = std::min(1 - c1 - 1e-8, alpha_cov * (mu_eff - 2 + 1 / mu_eff) /
                                                 ((n + 2.0) * (n + 2.0) + alpha_cov * mu_eff / 2));
  const double min_alpha =
      std::min({1 + c1 / cmu, 1 + (2 * mu_eff_minus) / (mu_eff + 2), (1 - c1 - cmu) / (n * cmu)});
  double positive_sum = 0, negative_sum = 0;
  for (double w : wp) (w > 0 ? positive_sum : negative_sum) += std::abs(w);
  cma.weights_.resize(popsize);
  for (int i = 0; i < popsize; ++i) {
    cma.weights_[i] = wp[i] >= 0 ? wp[i] / positive_sum : min_alpha / negative_sum * wp[i];
  }
  cma.mu_eff_ = mu_eff;
  cma.c1_ = c1;
  cma.cmu_ = cmu;
  cma.c_sigma_ = (mu_eff + 2) / (n + mu_eff + 5);
  cma.d_sigma_ = 1 + 2 * std::max(0.0, std::sqrt((mu_eff - 1) / (n + 1)) - 1) + cma.c_sigma_;
  cma.cc_ = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n);
  cma.chi_n_ = std::sqrt(static_cast<double>(n)) * (1.0 - 1.0 / (4.0 * n) + 1.0 / (21.0 * n * n));
  cma.p_sigma_.assign(n, 0.0);
  cma.pc_.assign(n, 0.0);
  cma.mean_ = o.mean;
  cma.c_.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) cma.c_[i * n + i] = 1;
  cma.sigma_ = o.sigma;
  cma.bounds_ = o.bounds;
  cma.n_max_resampling_ = o.n_max_resampling > 0 ? o.n_max_resampling : 10 * n;
  cma.tolx_ = 1e-12 * o.sigma;
  cma.funhist_term_ = 10 + static_cast<int>(std::ceil(30.0 * n / popsize));
  cma.funhist_values_.assign(2 * cma.funhist_term_, std::numeric_limits<double>::quiet_NaN());
  return cma;
}

void Cma::Decompose() {
  if (decomposed_) return;
  const int n = n_;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j)
      c_[i * n + j] = c_[j * n + i] = (c_[i * n + j] + c_[j * n + i]) / 2;
  }
  std::vector<double> d2;
  SymmetricEigen(c_, n, &d2, &b_);
  d_.resize(n);
  for (int i = 0; i < n; ++i) d_[i] = std::sqrt(d2[i] < 0 ? kEps : d2[i]);
  // C rebuilt from its (floored) decomposition, as the library does.
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += b_[i * n + k] * d_[k] * d_[k] * b_[j * n + k];
      c_[i * n + j] = s;
    }
  }
  decomposed_ = true;
}

std::vector<double> Cma::Ask(std::mt19937_64& rng) {
  Decompose();
  const int n = n_;
  auto sample = [&] {
    std::vector<double> z(n), x(n);
    for (int i = 0; i < n; ++i) z[i] = StandardNormal(rng);
    for (int i = 0; i < n; ++i) {
      double y = 0;
      for (int k = 0; k < n; ++k) y += b_[i * n + k] * d_[k] * z[k];
      x[i] = mean_[i] + sigma_ * y;
    }
    return x;
  };
  auto feasible = [&](const std::vector<double>& x) {
    if (bounds_.empty()) return true;
    for (int i = 0; i < n; ++i) {
      if (!(x[i] >= bounds_[i].first && x[i] <= bounds_[i].second)) return false;
    }
    return true;
  };
  for (int i = 0; i < n_max_resampling_; ++i) {
    std::vector<double> x = sample();
    if (feasible(x)) return x;
  }
  std::vector<double> x = sample();
  if (!bounds_.empty()) {
    for (int i = 0; i < n; ++i) x[i] = std::clamp(x[i], bounds_[i].first, bounds_[i].second);
  }
  return x;
}

common::Status Cma::Tell(std::vector<std::pair<std::vector<double>, double>> solutions) {
  const int n = n_;
  if (static_cast<int>(solutions.size()) != popsize_) {
    return common::InvalidArgument("CMA-ES: told " + std::to_string(solutions.size()) +
                                   " solutions; expected the population size, " +
                                   std::to_string(popsize_));
  }
  for (const auto& [x, y] : solutions) {
    if (static_cast<int>(x.size()) != n || !std::isfinite(y)) {
      return common::InvalidArgument("CMA-ES: a told solution has " + std::to_string(x.size()) +
                                     " coordinates and value " + std::to_string(y) + "; expected " +
                                     std::to_string(n) + " and a finite value");
    }
  }
  ++g_;
  std::stable_sort(solutions.begin(), solutions.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  const int funhist_idx = 2 * (g_ % funhist_term_);
  funhist_values_[funhist_idx] = solutions.front().second;
  funhist_values_[funhist_idx + 1] = solutions.back().second;

  Decompose();
  const std::vector<double> b = b_, d = d_;
  decomposed_ = false;

  std::vector<std::vector<double>> y_k(popsize_, std::vector<double>(n));
  for (int k = 0; k < popsize_; ++k) {
    for (int i = 0; i < n; ++i) y_k[k][i] = (solutions[k].first[i] - mean_[i]) / sigma_;
  }
  std::vector<double> y_w(n, 0.0);
  for (int k = 0; k < mu_; ++k) {
    for (int i = 0; i < n; ++i) y_w[i] += weights_[k] * y_k[k][i];
  }
  for (int i = 0; i < n; ++i) mean_[i] += cm_ * sigma_ * y_w[i];

  // C^(-1/2) = B D^-1 B^T.
  std::vector<double> c_2(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += b[i * n + k] * b[j * n + k] / d[k];
      c_2[i * n + j] = s;
    }
  }
  auto times_c_2 = [&](const std::vector<double>& x) {
    std::vector<double> out(n, 0.0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) out[i] += c_2[i * n + j] * x[j];
    }
    return out;
  };

  const std::vector<double> cy = times_c_2(y_w);
  const double ps_scale = std::sqrt(c_sigma_ * (2 - c_sigma_) * mu_eff_);
  for (int i = 0; i < n; ++i) p_sigma_[i] = (1 - c_sigma_) * p_sigma_[i] + ps_scale * cy[i];
  const double norm_p_sigma = std::sqrt(SumSquares(p_sigma_, 0, n));
  sigma_ *= std::exp((c_sigma_ / d_sigma_) * (norm_p_sigma / chi_n_ - 1));
  sigma_ = std::min(sigma_, kSigmaMax);

  // The library compares with generation g + 1 after having advanced g: kept as it is.
  const double h_left = norm_p_sigma / std::sqrt(1 - std::pow(1 - c_sigma_, 2.0 * (g_ + 1)));
  const double h_right = (1.4 + 2.0 / (n + 1)) * chi_n_;
  const double h_sigma = h_left < h_right ? 1.0 : 0.0;

  const double pc_scale = h_sigma * std::sqrt(cc_ * (2 - cc_) * mu_eff_);
  for (int i = 0; i < n; ++i) pc_[i] = (1 - cc_) * pc_[i] + pc_scale * y_w[i];

  std::vector<double> w_io(popsize_);
  for (int k = 0; k < popsize_; ++k) {
    if (weights_[k] >= 0) {
      w_io[k] = weights_[k];
    } else {
      const std::vector<double> cyk = times_c_2(y_k[k]);
      w_io[k] = weights_[k] * n / (SumSquares(cyk, 0, n) + kEps);
    }
  }
  const double delta_h_sigma = (1 - h_sigma) * cc_ * (2 - cc_);
  const double weight_sum = Sum(weights_, 0, weights_.size());
  const double keep = 1 + c1_ * delta_h_sigma - c1_ - cmu_ * weight_sum;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double rank_mu = 0;
      for (int k = 0; k < popsize_; ++k) rank_mu += w_io[k] * y_k[k][i] * y_k[k][j];
      c_[i * n + j] = keep * c_[i * n + j] + c1_ * pc_[i] * pc_[j] + cmu_ * rank_mu;
    }
  }
  return common::Status::Ok();
}

bool Cma::ShouldStop() {
  Decompose();
  const int n = n_;
  if (g_ > funhist_term_) {
    const auto [lo, hi] = std::minmax_element(funhist_values_.begin(), funhist_values_.end());
    if (*hi - *lo < tolfun_) return true;
  }
  bool small = true;
  for (int i = 0; i < n; ++i) {
    if (!(sigma_ * c_[i * n + i] < tolx_ && sigma_ * pc_[i] < tolx_)) small = false;
  }
  if (small) return true;
  const double d_max = *std::max_element(d_.begin(), d_.end());
  const double d_min = *std::min_element(d_.begin(), d_.end());
  if (sigma_ * d_max > tolxup_) return true;
  for (int i = 0; i < n; ++i) {
    if (mean_[i] == mean_[i] + 0.2 * sigma_ * std::sqrt(c_[i * n + i])) return true;
  }
  const int axis = g_ % n;
  bool no_effect = true;
  for (int i = 0; i < n; ++i) {
    if (mean_[i] != mean_[i] + 0.1 * sigma_ * d_[axis] * b_[i * n + axis]) no_effect = false;
  }
  if (no_effect) return true;
  return d_max / d_min > tolconditioncov_;
}

}  // namespace triald::sampler
