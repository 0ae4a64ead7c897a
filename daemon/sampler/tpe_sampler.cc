#include "daemon/sampler/tpe_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "common/json_text.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/tpe_split.h"

namespace triald::sampler {
namespace {

using config::Distribution;
using config::ParamSpec;
using config::ParamType;
using model::TrialRecord;
using model::TrialState;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2Pi = 2.50662827463100050242;
constexpr double kLogSqrt2Pi = 0.91893853320467274178;
// Optuna's floor for bandwidths when consider_magic_clip is off.
constexpr double kMinSigma = 1e-12;
// Scott's-rule constant of Optuna's multivariate bandwidth (SIGMA0_MAGNITUDE).
constexpr double kSigma0Magnitude = 0.2;
// Below this, 0.5 * erfc(-x / sqrt 2) nears the end of the normal doubles and log Phi(x) switches
// to its asymptotic series (relative error < 1e-10 from here on).
constexpr double kLogPhiAsymptotic = -37.0;
// A mixture term this far (in log) below the largest is negligible: e^-40 = 4e-18.
constexpr double kNegligibleLog = 40.0;
// Past 2^53 neighbouring grid values are no longer distinct doubles: a finer grid is treated as
// having 2^53 values, as the random sampler does.
constexpr double kMaxGridCount = 9007199254740992.0;

// Phi(x) for x <= 0 (or any x where the lower tail is wanted), without cancellation.
double Phi(double x) { return 0.5 * std::erfc(-x / kSqrt2); }

// log Phi(x), accurate far into the lower tail where Phi itself underflows.
double LogPhi(double x) {
  if (x > kLogPhiAsymptotic) return std::log(Phi(x));
  const double r = 1.0 / (x * x);
  return -0.5 * x * x - std::log(-x) - kLogSqrt2Pi + std::log1p(r * (-1.0 + r * (3.0 - 15.0 * r)));
}

// ---------------------------------------------------------------------------------------------
// The search space as the estimators see it.

enum class DimKind { kContinuous, kDiscrete, kCategorical };

struct Dim {
  const ParamSpec* param = nullptr;
  DimKind kind = DimKind::kContinuous;
  bool log = false;
  // The kernels' support in the transformed space: [low, high] of a float, widened by half a
  // step for a discrete parameter, in log space when log.
  double low = 0;
  double high = 0;
  double step = 0;   // discrete: the grid step, in the parameter's own scale
  double count = 0;  // discrete: number of grid values
  int choices = 0;   // categorical
};

Dim MakeDim(const ParamSpec& p) {
  const Distribution& d = p.dist;
  Dim dim;
  dim.param = &p;
  if (d.type == ParamType::kCategorical) {
    dim.kind = DimKind::kCategorical;
    dim.choices = static_cast<int>(d.choices.size());
    return dim;
  }
  dim.step = EffectiveStep(d);
  dim.log = d.log;
  if (dim.step > 0) {
    dim.kind = DimKind::kDiscrete;
    dim.count = std::min(DiscreteCount(d), kMaxGridCount);
    dim.low = d.low - dim.step / 2;
    dim.high = d.high + dim.step / 2;
  } else {
    dim.low = d.low;
    dim.high = d.high;
  }
  if (dim.log) {
    dim.low = std::log(dim.low);
    dim.high = std::log(dim.high);
  }
  return dim;
}

// True when the parameter can take one value only: it is then fixed, not estimated (a kernel of
// zero width has no density).
bool IsSingle(const Distribution& d) {
  if (d.type == ParamType::kCategorical) return d.choices.size() == 1;
  if (EffectiveStep(d) > 0) return DiscreteCount(d) == 1;
  return d.low == d.high;
}

double SingleValue(const Distribution& d) { return d.type == ParamType::kCategorical ? 0 : d.low; }

// A stored value in the estimator's coordinates, or NaN when it is not a value of the parameter
// (such a trial is left out).
double Observe(const Dim& dim, double internal) {
  if (!std::isfinite(internal)) return std::nan("");
  if (dim.kind == DimKind::kCategorical) {
    if (internal < 0 || internal >= dim.choices || internal != std::floor(internal)) {
      return std::nan("");
    }
    return internal;
  }
  const Distribution& d = dim.param->dist;
  if (internal < d.low || internal > d.high) return std::nan("");
  return dim.log ? std::log(internal) : internal;
}

// A trial's stored value in the estimator's coordinates, or NaN (see Observe). A categorical
// stored with other choices than the ones being sampled counts by the choice itself.
double ObserveParam(const Dim& dim, const model::ParamValue& stored) {
  if (dim.kind == DimKind::kCategorical && stored.dist.type == ParamType::kCategorical &&
      stored.dist != dim.param->dist) {
    const double internal = stored.internal;
    if (!(internal >= 0 && internal < static_cast<double>(stored.dist.choices.size())) ||
        internal != std::floor(internal)) {
      return std::nan("");
    }
    const config::Choice& choice = stored.dist.choices[static_cast<size_t>(internal)];
    const std::vector<config::Choice>& choices = dim.param->dist.choices;
    auto it = std::find(choices.begin(), choices.end(), choice);
    if (it == choices.end()) return std::nan("");
    return static_cast<double>(it - choices.begin());
  }
  return Observe(dim, stored.internal);
}

// ---------------------------------------------------------------------------------------------
// Parzen estimator: a weighted mixture of product kernels, one per observation plus a prior.

struct EstimatorOptions {
  // Optuna's prior_weight, as the categorical kernels' smoothing: prior_weight / (n + 1).
  double categorical_prior_weight = 1;
  // The prior kernel's weight in the mixture, next to the observations' weights.
  double prior_kernel_weight = 1;
  bool consider_magic_clip = true;
  bool consider_endpoints = false;
  bool multivariate = true;
  // Multivariate: the number of observations Scott's rule and the magic clip count, so that l and
  // g can share one bandwidth; 0 counts this estimator's own.
  size_t bandwidth_n = 0;
  // One weight per row (Optuna's predetermined weights: "below" with several objectives, see
  // tpe_split.h); null: DefaultWeights.
  const std::vector<double>* weights = nullptr;
  // One factor per row on its weight (a trial tied at the split counts in part for each side,
  // see TieShares); null: 1 for every row.
  const std::vector<double>* share = nullptr;
};

// Candidate points, one row of `dims.size()` entries per candidate.
struct Candidates {
  std::vector<double> value;  // the internal value proposed (grid value, choice index, float)
  std::vector<double> x;      // continuous: transformed value; discrete: rounding interval low;
                              // categorical: the choice index
  std::vector<double> x_hi;   // discrete: rounding interval high (transformed)
};

class ParzenEstimator {
 public:
  // `observations` holds one row of dims.size() transformed values per trial; `rows` picks the
  // trials of this estimator, oldest first (the weights depend on that order).
  ParzenEstimator(const std::vector<Dim>& dims, const std::vector<double>& observations,
                  const std::vector<int>& rows, const EstimatorOptions& options);

  // Draws candidate `c` into `out`.
  void Sample(std::mt19937_64& rng, size_t c, Candidates* out) const;
  // log density of every candidate, into `out`.
  void LogPdf(const Candidates& cands, size_t n_cands, std::vector<double>* out) const;

 private:
  const std::vector<Dim>& dims_;
  size_t n_obs_;      // kernels 0 .. n_obs_-1 are observations; kernel n_obs_ is the prior
  size_t n_kernels_;  // n_obs_ + 1
  std::vector<double> cum_weights_;
  // Per kernel: log weight plus every density normaliser that does not depend on the point.
  std::vector<double> log_const_;
  // Per dimension, per kernel: centre and bandwidth (numeric), observed choice (categorical).
  std::vector<std::vector<double>> mu_;
  std::vector<std::vector<double>> sigma_;
  std::vector<std::vector<double>> inv_sigma_;
  // Categorical dimensions: an observation kernel's probability of its own choice and of any
  // other choice.
  std::vector<double> p_hit_, p_miss_, log_hit_, log_miss_;
};

std::vector<double> UnivariateSigmas(const std::vector<double>& mus, double prior_mu, double low,
                                     double high, bool consider_endpoints) {
  // Each kernel reaches to the farther of its two neighbours among the observations, the
  // prior's centre and the ends of the range (hyperopt's rule, as Optuna keeps it).
  const size_t n = mus.size();
  std::vector<double> all(mus);
  all.push_back(prior_mu);
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all[a] < all[b]; });
  std::vector<double> ends(all.size() + 2);
  ends.front() = low;
  ends.back() = high;
  for (size_t i = 0; i < order.size(); ++i) ends[i + 1] = all[order[i]];
  std::vector<double> sorted_sigmas(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    sorted_sigmas[i] = std::max(ends[i + 1] - ends[i], ends[i + 2] - ends[i + 1]);
  }
  if (!consider_endpoints && ends.size() >= 4) {
    sorted_sigmas.front() = ends[2] - ends[1];
    sorted_sigmas.back() = ends[ends.size() - 2] - ends[ends.size() - 3];
  }
  std::vector<double> sigmas(all.size());
  for (size_t i = 0; i < order.size(); ++i) sigmas[order[i]] = sorted_sigmas[i];
  sigmas.resize(n);
  return sigmas;
}

ParzenEstimator::ParzenEstimator(const std::vector<Dim>& dims,
                                 const std::vector<double>& observations,
                                 const std::vector<int>& rows, const EstimatorOptions& options)
    : dims_(dims), n_obs_(rows.size()), n_kernels_(rows.size() + 1) {
  const size_t n_dims = dims.size();
  std::vector<double> weights = options.weights != nullptr
                                    ? *options.weights
                                    : tpe_internal::DefaultWeights(static_cast<int>(n_obs_));
  weights.push_back(options.prior_kernel_weight);

  if (options.share != nullptr) {
    for (size_t i = 0; i < n_obs_; ++i) weights[i] *= (*options.share)[i];
  }
  double total = 0;
  for (double w : weights) total += w;
  cum_weights_.resize(n_kernels_);
  log_const_.resize(n_kernels_);
  double running = 0;
  for (size_t k = 0; k < n_kernels_; ++k) {
    const double w = weights[k] / total;
    running += w;
    cum_weights_[k] = running;
    log_const_[k] = std::log(w);
  }

  mu_.resize(n_dims);
  sigma_.resize(n_dims);
  inv_sigma_.resize(n_dims);
  p_hit_.assign(n_dims, 0);
  p_miss_.assign(n_dims, 0);
  log_hit_.assign(n_dims, 0);
  log_miss_.assign(n_dims, 0);
  const double n_for_sigma = static_cast<double>(
      std::max<size_t>(options.bandwidth_n > 0 ? options.bandwidth_n : n_obs_, 1));
  std::vector<double> mass(n_kernels_, 1.0);  // per kernel: product of its in-support masses
  for (size_t j = 0; j < n_dims; ++j) {
    const Dim& dim = dims[j];
    std::vector<double>& mu = mu_[j];
    mu.resize(n_kernels_);
    for (size_t i = 0; i < n_obs_; ++i) mu[i] = observations[rows[i] * n_dims + j];

    if (dim.kind == DimKind::kCategorical) {
      mu[n_obs_] = -1;  // the prior observed nothing
      const double c = dim.choices;
      const double base = options.categorical_prior_weight / static_cast<double>(n_kernels_);
      const double row_sum = c * base + 1;
      p_hit_[j] = (base + 1) / row_sum;
      p_miss_[j] = base / row_sum;
      log_hit_[j] = std::log(p_hit_[j]);
      log_miss_[j] = std::log(p_miss_[j]);
      log_const_[n_obs_] -= std::log(c);  // the prior kernel is uniform over the choices
      continue;
    }

    const double range = dim.high - dim.low;
    const double prior_mu = 0.5 * (dim.low + dim.high);
    std::vector<double>& sigma = sigma_[j];
    if (options.multivariate) {
      // Scott's rule, as Optuna's multivariate estimator (and BOHB) uses it.
      const double s = kSigma0Magnitude *
                       std::pow(n_for_sigma, -1.0 / (static_cast<double>(n_dims) + 4)) * range;
      sigma.assign(n_obs_, s);
    } else {
      std::vector<double> obs(mu.begin(), mu.begin() + static_cast<long>(n_obs_));
      sigma = UnivariateSigmas(obs, prior_mu, dim.low, dim.high, options.consider_endpoints);
    }
    const double max_sigma = range;
    // The clip counts the kernels: the observations Scott's rule counted, plus the prior.
    const double clip_kernels =
        options.multivariate ? n_for_sigma + 1 : static_cast<double>(n_kernels_);
    const double min_sigma =
        options.consider_magic_clip ? range / std::min(100.0, 1.0 + clip_kernels) : kMinSigma;
    for (double& s : sigma) s = std::clamp(s, min_sigma, max_sigma);
    mu[n_obs_] = prior_mu;
    sigma.push_back(range);

    std::vector<double>& inv = inv_sigma_[j];
    inv.resize(n_kernels_);
    double log_sigma = 0;
    for (size_t k = 0; k < n_kernels_; ++k) {
      inv[k] = 1.0 / sigma[k];
      // Truncation to the support: every kernel is renormalised over [low, high]. A kernel
      // centred inside the support (all of them, in practice) has a mass of at least 0.19 there,
      // so the masses are multiplied and logged once per kernel rather than once per dimension.
      const double a = (dim.low - mu[k]) * inv[k];
      const double b = (dim.high - mu[k]) * inv[k];
      if (a <= 0 && b >= 0) {
        mass[k] *= 0.5 * (std::erf(b / kSqrt2) + std::erf(-a / kSqrt2));
      } else {
        log_const_[k] -= tpe_internal::LogGaussMass(a, b);
      }
      if (dim.kind == DimKind::kContinuous) {
        // Multivariate bandwidths are shared by all observation kernels: one log each.
        if (k == 0 || sigma[k] != sigma[k - 1]) log_sigma = std::log(sigma[k]);
        log_const_[k] -= log_sigma + kLogSqrt2Pi;
      }
    }
  }
  for (size_t k = 0; k < n_kernels_; ++k) log_const_[k] -= std::log(mass[k]);
}

void ParzenEstimator::Sample(std::mt19937_64& rng, size_t c, Candidates* out) const {
  const size_t n_dims = dims_.size();
  const double r = UniformUnit(rng);
  size_t k = static_cast<size_t>(std::upper_bound(cum_weights_.begin(), cum_weights_.end(), r) -
                                 cum_weights_.begin());
  k = std::min(k, n_kernels_ - 1);  // r may equal a last cumulative weight rounded below 1

  for (size_t j = 0; j < n_dims; ++j) {
    const Dim& dim = dims_[j];
    const size_t at = c * n_dims + j;
    if (dim.kind == DimKind::kCategorical) {
      double choice;
      if (k == n_obs_) {
        choice = static_cast<double>(UniformIndex(rng, static_cast<uint64_t>(dim.choices)));
      } else {
        const double own = mu_[j][k];
        const double u = UniformUnit(rng);
        double acc = 0;
        choice = dim.choices - 1;
        for (int i = 0; i < dim.choices; ++i) {
          acc += i == own ? p_hit_[j] : p_miss_[j];
          if (u < acc) {
            choice = i;
            break;
          }
        }
      }
      out->value[at] = choice;
      out->x[at] = choice;
      continue;
    }

    const double mu = mu_[j][k];
    const double sigma = sigma_[j][k];
    const double z = tpe_internal::TruncatedNormalQuantile(
        (dim.low - mu) / sigma, (dim.high - mu) / sigma, UniformUnit(rng));
    const double t = std::clamp(mu + sigma * z, dim.low, dim.high);
    const double v = dim.log ? std::exp(t) : t;
    const Distribution& d = dim.param->dist;
    if (dim.kind == DimKind::kContinuous) {
      const double value = std::clamp(v, d.low, d.high);
      out->value[at] = value;
      out->x[at] = dim.log ? std::log(value) : value;
      continue;
    }
    // Discrete: round onto the grid; the density is the kernel's mass over the value's rounding
    // interval, so every grid value is as likely as that interval under the kernel.
    const double index = std::clamp(std::round((v - d.low) / dim.step), 0.0, dim.count - 1);
    const double value = DiscreteValue(d, static_cast<uint64_t>(index));
    double lo = value - dim.step / 2;
    double hi = value + dim.step / 2;
    if (dim.log) {
      lo = std::log(lo);
      hi = std::log(hi);
    }
    out->value[at] = value;
    out->x[at] = std::max(lo, dim.low);
    out->x_hi[at] = std::min(hi, dim.high);
  }
}

void ParzenEstimator::LogPdf(const Candidates& cands, size_t n_cands,
                             std::vector<double>* out) const {
  const size_t n_dims = dims_.size();
  out->resize(n_cands);
  std::vector<double> acc(n_kernels_);
  for (size_t c = 0; c < n_cands; ++c) {
    std::copy(log_const_.begin(), log_const_.end(), acc.begin());
    for (size_t j = 0; j < n_dims; ++j) {
      const Dim& dim = dims_[j];
      const double* mu = mu_[j].data();
      const size_t at = c * n_dims + j;
      switch (dim.kind) {
        case DimKind::kContinuous: {
          const double x = cands.x[at];
          const double* inv = inv_sigma_[j].data();
          for (size_t k = 0; k < n_kernels_; ++k) {
            const double z = (x - mu[k]) * inv[k];
            acc[k] -= 0.5 * z * z;
          }
          break;
        }
        case DimKind::kDiscrete: {
          const double lo = cands.x[at];
          const double hi = cands.x_hi[at];
          const double* inv = inv_sigma_[j].data();
          for (size_t k = 0; k < n_kernels_; ++k) {
            acc[k] += tpe_internal::LogGaussMass((lo - mu[k]) * inv[k], (hi - mu[k]) * inv[k]);
          }
          break;
        }
        case DimKind::kCategorical: {
          const double x = cands.x[at];
          const double hit = log_hit_[j];
          const double miss = log_miss_[j];
          for (size_t k = 0; k < n_obs_; ++k) acc[k] += mu[k] == x ? hit : miss;
          break;
        }
      }
    }
    double max = -kInf;
    for (double a : acc) max = std::max(max, a);
    if (!std::isfinite(max)) {
      (*out)[c] = max;
      continue;
    }
    // A kernel more than 40 below the largest term adds under 4e-18 to a sum of at least 1;
    // skipping its exp() halves the cost of a large history.
    const double cutoff = max - kNegligibleLog;
    double sum = 0;
    for (double a : acc) {
      if (a > cutoff) sum += std::exp(a - max);
    }
    (*out)[c] = max + std::log(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// The study's history, ranked.

// A trial usable by the estimators, with the keys it is ranked by.
struct Ranked {
  int number;
  int row;      // its row in the observation matrix
  double step;  // PRUNED: minus the last reported step (later steps rank first)
  double loss;  // value, sign-flipped when maximizing; NaN counts as the worst
};

bool ByLoss(const Ranked& a, const Ranked& b) {
  if (a.loss != b.loss) return a.loss < b.loss;
  return a.number < b.number;
}

bool ByStepThenLoss(const Ranked& a, const Ranked& b) {
  if (a.step != b.step) return a.step < b.step;
  return ByLoss(a, b);
}

// The sum of tpe_internal::DefaultWeights(n).
double SumOfWeights(size_t n) {
  double sum = 0;
  for (double w : tpe_internal::DefaultWeights(static_cast<int>(n))) sum += w;
  return sum;
}

// The sum of an estimator's observation weights: DefaultWeights(n), each times its share.
double SumOfWeights(size_t n, const std::vector<double>& share) {
  if (share.empty()) return SumOfWeights(n);
  const std::vector<double> w = tpe_internal::DefaultWeights(static_cast<int>(n));
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += w[i] * share[i];
  return sum;
}

// The estimators' rows when COMPLETE trials tie at the split (see the header): `is_below` is the
// split, `by_number` every (trial number, row) in trial order. When k of the t COMPLETE trials
// whose loss equals the worst "below" loss were put "below" and t > k, each of the t goes to
// both estimators, with a share k / t of its weight in l and (t - k) / t in g; the shares are
// left empty when nothing ties across the split or `share_ties` is false (the plain split).
struct EstimatorRows {
  std::vector<int> below, above;
  std::vector<double> below_share, above_share;  // per row of below / above, or empty
};

EstimatorRows TieShares(const std::vector<Ranked>& complete, const std::vector<char>& is_below,
                        const std::vector<std::pair<int, int>>& by_number, bool share_ties) {
  EstimatorRows out;
  bool any_below = false;
  double boundary = -kInf;
  for (const Ranked& r : complete) {
    if (r.row >= 0 && is_below[r.row]) {
      any_below = true;
      boundary = std::max(boundary, r.loss);
    }
  }
  std::vector<char> tied(is_below.size(), 0);
  size_t k = 0, t = 0;
  for (const Ranked& r : complete) {
    if (!share_ties || !any_below || r.row < 0 || r.loss != boundary) continue;
    tied[r.row] = 1;
    ++t;
    k += is_below[r.row] ? 1 : 0;
  }
  const bool split_ties = t > k;
  const double share = split_ties ? static_cast<double>(k) / static_cast<double>(t) : 1;
  for (const auto& [number, r] : by_number) {
    if (split_ties && tied[r]) {
      out.below.push_back(r);
      out.below_share.push_back(share);
      out.above.push_back(r);
      out.above_share.push_back(1 - share);
    } else if (is_below[r]) {
      out.below.push_back(r);
      out.below_share.push_back(1);
    } else {
      out.above.push_back(r);
      out.above_share.push_back(1);
    }
  }
  if (!split_ties) {
    out.below_share.clear();
    out.above_share.clear();
  }
  return out;
}

std::string OptionError(const char* name, const std::string& value, const char* expected) {
  return std::string("tpe sampler: ") + name + " = " + value + "; expected " + expected;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Numerics.

namespace tpe_internal {

double NormalQuantile(double p) {
  if (!(p > 0)) return p == 0 ? -kInf : std::nan("");
  if (!(p < 1)) return p == 1 ? kInf : std::nan("");
  if (p > 0.5) return -NormalQuantile(1 - p);
  // Abramowitz & Stegun 26.2.23 (error < 4.5e-4) as a start, then Halley's iteration on
  // Phi(x) = p, which triples the correct digits each step: three steps reach double precision
  // from anywhere in (0, 0.5].
  const double t = std::sqrt(-2 * std::log(p));
  double x = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) /
                       (1 + t * (1.432788 + t * (0.189269 + t * 0.001308))));
  for (int i = 0; i < 3; ++i) {
    const double e = Phi(x) - p;
    const double u = e * kSqrt2Pi * std::exp(0.5 * x * x);
    x -= u / (1 + 0.5 * x * u);
  }
  return x;
}

double LogGaussMass(double a, double b) {
  if (!(a < b)) return a == b ? -kInf : std::nan("");
  // Mirror so that the interval reaches into the lower tail, where Phi has no cancellation.
  if (a >= 0) return LogGaussMass(-b, -a);
  if (b > 0) {
    // Across 0: the two half-masses are both positive, so even a tiny interval keeps its digits.
    return std::log(0.5 * (std::erf(b / kSqrt2) + std::erf(-a / kSqrt2)));
  }
  if (b > kLogPhiAsymptotic) {
    const double mass = Phi(b) - Phi(a);
    if (mass > 0) return std::log(mass);
  }
  const double log_b = LogPhi(b);
  return log_b + std::log1p(-std::exp(LogPhi(a) - log_b));
}

double TruncatedNormalQuantile(double a, double b, double u) {
  if (a >= 0) return -TruncatedNormalQuantile(-b, -a, 1 - u);
  double z;
  if (b <= 0) {
    const double pa = Phi(a);
    const double pb = Phi(b);
    // Both ends beyond the doubles' reach (a kernel far outside its range, which the estimator
    // never builds): the mass piles up at b.
    z = pb > pa ? NormalQuantile(pa + u * (pb - pa)) : b;
  } else {
    // Across 0: take the quantile from whichever tail holds it, so neither end loses precision.
    const double pa = Phi(a);
    const double qb = Phi(-b);
    const double mass = 0.5 * (std::erf(b / kSqrt2) + std::erf(-a / kSqrt2));
    const double left = pa + u * mass;
    z = left <= 0.5 ? NormalQuantile(left) : -NormalQuantile(qb + (1 - u) * mass);
  }
  if (std::isnan(z)) z = a;
  return std::clamp(z, a, b);
}

std::vector<double> DefaultWeights(int n) {
  std::vector<double> w;
  if (n <= 0) return w;
  constexpr int kFlat = 25;
  if (n < kFlat) return std::vector<double>(static_cast<size_t>(n), 1.0);
  const int ramp = n - kFlat;
  const double start = 1.0 / n;
  w.reserve(static_cast<size_t>(n));
  for (int i = 0; i < ramp; ++i) {
    // numpy.linspace(1/n, 1, ramp): ends exactly at 1, a single point is the start.
    w.push_back(ramp == 1 ? start
                          : (i == ramp - 1 ? 1.0 : start + i * ((1.0 - start) / (ramp - 1))));
  }
  w.insert(w.end(), kFlat, 1.0);
  return w;
}

}  // namespace tpe_internal

// ---------------------------------------------------------------------------------------------
// TpeSampler.

common::Result<std::unique_ptr<TpeSampler>> TpeSampler::Create(const config::SearchSpace& space,
                                                               uint64_t seed,
                                                               const config::TpeConfig& config) {
  if (config.n_startup_trials < 0) {
    return common::InvalidArgument(OptionError(
        "n_startup_trials", std::to_string(config.n_startup_trials), "an integer >= 0"));
  }
  if (config.n_ei_candidates < 1) {
    return common::InvalidArgument(
        OptionError("n_ei_candidates", std::to_string(config.n_ei_candidates), "an integer >= 1"));
  }
  if (!(config.prior_weight > 0) || !std::isfinite(config.prior_weight)) {
    return common::InvalidArgument(OptionError(
        "prior_weight", common::DoubleRepr(config.prior_weight), "a finite number > 0"));
  }
  if (!(config.gamma_fraction > 0 && config.gamma_fraction <= 1)) {
    return common::InvalidArgument(OptionError(
        "gamma_fraction", common::DoubleRepr(config.gamma_fraction), "a number in (0, 1]"));
  }
  if (config.gamma_max < 1) {
    return common::InvalidArgument(
        OptionError("gamma_max", std::to_string(config.gamma_max), "an integer >= 1"));
  }
  if (config.group && !config.multivariate) {
    return common::InvalidArgument(
        OptionError("group", "true", "multivariate = true with it (groups are joint estimators)"));
  }
  for (const ParamSpec& p : space) {
    common::Status st = p.dist.Validate();
    if (!st.ok()) {
      return common::InvalidArgument("tpe sampler: parameter \"" + p.name + "\": " + st.message());
    }
  }
  return std::unique_ptr<TpeSampler>(new TpeSampler(seed, config));
}

TpeSampler::TpeSampler(uint64_t seed, const config::TpeConfig& config)
    : seed_(seed), config_(config) {}

namespace {

bool Declares(const config::SearchSpace& space, const std::string& name) {
  for (const ParamSpec& p : space) {
    if (p.name == name) return true;
  }
  return false;
}

// `group` as an estimator sees it: the [space] parameters it holds first, in declaration order,
// with their declared distributions, then its other parameters in its own (name) order;
// single-valued parameters left out.
config::SearchSpace EstimatorOrder(const config::SearchSpace& fixed,
                                   const config::SearchSpace& group) {
  config::SearchSpace out;
  for (const ParamSpec& p : fixed) {
    if (!IsSingle(p.dist) && Declares(group, p.name)) out.push_back(p);
  }
  for (const ParamSpec& p : group) {
    if (!IsSingle(p.dist) && !Declares(fixed, p.name)) out.push_back(p);
  }
  return out;
}

}  // namespace

std::vector<config::SearchSpace> TpeSampler::RelativeGroups(const StudyView& study,
                                                            int trial_number) const {
  std::vector<config::SearchSpace> groups;
  if (!config_.multivariate) return groups;
  static const config::SearchSpace kNoSpace;
  static const std::vector<TrialRecord> kNoTrials;
  const config::SearchSpace& fixed = study.space != nullptr ? *study.space : kNoSpace;
  const std::vector<TrialRecord>& trials = study.trials != nullptr ? *study.trials : kNoTrials;
  std::vector<config::SearchSpace> found;
  if (config_.group) {
    found = GroupDecomposedSearchSpace(trials, trial_number);
  } else {
    // The [space] parameters belong to every trial, so they are in the intersection whenever a
    // trial has finished; before that they are the whole relative space, as with a fixed space.
    config::SearchSpace all = fixed;
    for (ParamSpec& p : IntersectionSearchSpace(trials, trial_number)) {
      if (!Declares(fixed, p.name)) all.push_back(std::move(p));
    }
    found.push_back(std::move(all));
  }
  if (found.empty()) found.push_back(fixed);  // group = true, nothing finished yet
  for (const config::SearchSpace& group : found) {
    config::SearchSpace g = EstimatorOrder(fixed, group);
    if (!g.empty()) groups.push_back(std::move(g));
  }
  return groups;
}

config::SearchSpace TpeSampler::InferRelativeSearchSpace(const StudyView& study, int trial_number) {
  config::SearchSpace space;
  for (config::SearchSpace& group : RelativeGroups(study, trial_number)) {
    for (ParamSpec& p : group) space.push_back(std::move(p));
  }
  return space;
}

common::Result<config::ParamValues> TpeSampler::SampleRelative(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  config::ParamValues values;
  if (relative_space.empty()) return values;
  const std::vector<config::SearchSpace> groups = RelativeGroups(study, trial_number);
  for (const config::SearchSpace& group : groups) {
    // The group's parameters as the caller's relative space has them (normally all of them).
    std::vector<const ParamSpec*> params;
    for (const ParamSpec& g : group) {
      for (const ParamSpec& p : relative_space) {
        if (p.name == g.name && p.dist == g.dist && !IsSingle(p.dist)) params.push_back(&p);
      }
    }
    if (params.empty()) continue;
    // One stream per joint estimator: "tpe" for the only one (every fixed-space study), else
    // named by the group's first parameter (groups are disjoint).
    const std::string stream = groups.size() == 1 ? "tpe" : "tpe/group/" + group.front().name;
    TRIALD_ASSIGN_OR_RETURN(std::optional<std::vector<double>> suggestion,
                            Suggest(study, trial_number, params, stream));
    if (!suggestion) return values;  // start-up: SampleIndependent draws uniformly
    for (size_t j = 0; j < params.size(); ++j) values[params[j]->name] = (*suggestion)[j];
  }
  return values;
}

common::Result<double> TpeSampler::SampleIndependent(const StudyView& study, int trial_number,
                                                     const ParamSpec& param) {
  if (IsSingle(param.dist)) return SingleValue(param.dist);
  const std::string stream = "tpe/" + param.name;
  TRIALD_ASSIGN_OR_RETURN(std::optional<std::vector<double>> suggestion,
                          Suggest(study, trial_number, {&param}, stream));
  if (suggestion) return suggestion->front();
  // Start-up: the very draw RandomSampler makes, so the first trials match a random study's.
  std::mt19937_64 rng = TrialRng(seed_, trial_number, param.name);
  return DrawUniform(param.dist, rng);
}

common::Result<std::optional<std::vector<double>>> TpeSampler::Suggest(
    const StudyView& study, int trial_number, const std::vector<const ParamSpec*>& params,
    std::string_view stream) const {
  std::vector<Dim> dims;
  dims.reserve(params.size());
  for (const ParamSpec* p : params) dims.push_back(MakeDim(*p));
  const size_t n_dims = dims.size();
  const double sign = study.direction == config::Direction::kMaximize ? -1 : 1;

  // Gather the finished trials (and, with the constant liar, the pending ones) with their ranking
  // keys; those holding every parameter of `params` also get a row of transformed values. As in
  // Optuna, every finished trial takes part in the split, and only then are the trials lacking
  // a parameter left out of the estimators.
  std::vector<double> observations;
  std::vector<Ranked> complete, pruned, pending;
  std::vector<double> row(n_dims);
  // Conditional: the finished trials do not all hold the same parameter names.
  const model::ParamMap* first_finished = nullptr;
  bool conditional = false;
  // Several objectives or constraints: Optuna's split of tpe_split.h, over these observations
  // (split_rows: each one's row, or -1). A single-objective study without constraints keeps the
  // split below.
  const bool multi = study.directions.size() > 1;
  const bool constrained =
      study.trials != nullptr && tpe_split::Constrained(*study.trials, trial_number);
  const bool split_here = multi || constrained;
  // One objective: its direction is the view's `direction`, as for the split below.
  const std::vector<config::Direction> split_directions =
      multi ? study.directions : std::vector<config::Direction>{study.direction};
  std::vector<tpe_split::Observation> split_obs;
  std::vector<int> split_rows;
  if (study.trials != nullptr) {
    observations.reserve(study.trials->size() * n_dims);
    for (const TrialRecord& trial : *study.trials) {
      // Trial N is proposed from trials 0..N-1 only: asking again for N, even after N or later
      // trials were stored, gives the same answer.
      if (trial.number >= trial_number) continue;
      Ranked r{trial.number, -1, 0, 0};
      std::vector<Ranked>* group = nullptr;
      std::optional<tpe_split::Observation> split;
      if (split_here) {
        split = tpe_split::Observe(trial, split_directions, constrained, config_.constant_liar);
        if (!split) continue;
      }
      switch (trial.state) {
        case TrialState::kComplete:
          if (!split && !trial.value) continue;
          r.loss = trial.value ? sign * *trial.value : 0;
          group = &complete;
          break;
        case TrialState::kPruned:
          if (trial.intermediate.empty()) {
            // Reported nothing: ranks after every pruned trial that did.
            r.step = 1;
            r.loss = 0;
          } else {
            const auto& [step, value] = *trial.intermediate.rbegin();
            r.step = -static_cast<double>(step);
            r.loss = sign * value;
          }
          group = &pruned;
          break;
        case TrialState::kRunning:
        case TrialState::kWaiting:
          if (!config_.constant_liar) continue;
          group = &pending;
          break;
        case TrialState::kFail:
          continue;
      }
      if (std::isnan(r.loss)) r.loss = kInf;
      if (group != &pending) {
        if (first_finished == nullptr) {
          first_finished = &trial.params;
        } else if (!conditional && !SameNames(*first_finished, trial.params)) {
          conditional = true;
        }
      }
      bool usable = true;
      for (size_t j = 0; j < n_dims && usable; ++j) {
        auto it = trial.params.find(dims[j].param->name);
        row[j] = it == trial.params.end() ? std::nan("") : ObserveParam(dims[j], it->second);
        usable = !std::isnan(row[j]);
      }
      if (usable) {
        r.row = static_cast<int>(observations.size() / std::max<size_t>(n_dims, 1));
        observations.insert(observations.end(), row.begin(), row.end());
      } else if (group == &pending && !split) {
        continue;  // a pending trial only ever joins "above": without a row it adds nothing
      }
      group->push_back(r);
      if (split) {
        split_obs.push_back(std::move(*split));
        split_rows.push_back(r.row);
      }
    }
  }

  const int n_finished = static_cast<int>(complete.size() + pruned.size());
  if (n_finished < config_.n_startup_trials) return std::optional<std::vector<double>>();

  // Split: the gamma(n) best finished trials are "below"; the rest, and with the constant liar
  // every pending trial, are "above". Only the best few need ordering.
  size_t n_below = static_cast<size_t>(
      std::max(0, std::min(static_cast<int>(std::ceil(config_.gamma_fraction * n_finished)),
                           config_.gamma_max)));
  const size_t n_rows = observations.size() / std::max<size_t>(n_dims, 1);
  std::vector<char> is_below(n_rows, 0);
  auto take_best = [&](std::vector<Ranked>& group, size_t n, auto less) {
    n = std::min(n, group.size());
    std::partial_sort(group.begin(), group.begin() + static_cast<long>(n), group.end(), less);
    for (size_t i = 0; i < n; ++i) {
      if (group[i].row >= 0) is_below[group[i].row] = 1;
    }
    return n;
  };
  std::vector<double> row_weight;  // several objectives: each "below" row's kernel weight
  if (split_here) {
    const tpe_split::Split s = tpe_split::SplitObservations(split_obs, n_below, constrained);
    if (multi) row_weight.assign(n_rows, 0);
    for (size_t i = 0; i < s.below.size(); ++i) {
      const int r = split_rows[s.below[i]];
      if (r < 0) continue;
      is_below[r] = 1;
      if (multi) row_weight[r] = s.weights[i];
    }
  } else {
    n_below -= take_best(complete, n_below, ByLoss);
    take_best(pruned, n_below, ByStepThenLoss);
  }

  // Both groups in trial order: the kernel weights ramp down the oldest trials.
  std::vector<std::pair<int, int>> by_number;  // (number, row)
  by_number.reserve(n_rows);
  for (const auto* group : {&complete, &pruned, &pending}) {
    for (const Ranked& r : *group) {
      if (r.row >= 0) by_number.emplace_back(r.number, r.row);
    }
  }
  std::sort(by_number.begin(), by_number.end());
  // Unconstrained with one objective, trials tied at the split count in part for each side (see
  // TieShares); the split of tpe_split.h (several objectives, constraints) keeps its own.
  const EstimatorRows est = TieShares(complete, is_below, by_number, /*share_ties=*/!split_here);
  const std::vector<int>& below_rows = est.below;
  const std::vector<int>& above_rows = est.above;
  std::vector<double> below_weights;
  for (int r : below_rows) {
    if (multi) below_weights.push_back(row_weight[r]);
  }

  EstimatorOptions options;
  options.categorical_prior_weight = config_.prior_weight;
  options.prior_kernel_weight = config_.prior_weight;
  options.consider_magic_clip = config_.consider_magic_clip;
  options.consider_endpoints = config_.consider_endpoints;
  options.multivariate = config_.multivariate;
  EstimatorOptions above_options = options;
  if (!conditional) {
    // l and g on a common footing (see the header): one bandwidth, from Scott's rule over every
    // observation (multivariate only; univariate bandwidths follow each observation's
    // neighbours), and the same prior share, prior_weight next to l's observation weights, so
    // that a region far from every trial scores l = g, the base rate, instead of the best odds
    // there are.
    options.bandwidth_n = by_number.size();  // every observation once, tied ones included
    above_options = options;
    // Several objectives: the "below" weights (hypervolume contributions, the largest 1). With
    // no feasible trial among them all are 1e-12 and l is its prior alone; g then gets the
    // prior share of a one-trial l rather than a prior that drowns its observations.
    const double below_sum =
        multi ? std::max(1.0, std::accumulate(below_weights.begin(), below_weights.end(), 0.0))
              : SumOfWeights(below_rows.size(), est.below_share);
    const double above_sum = SumOfWeights(above_rows.size(), est.above_share);
    if (below_sum > 0 && above_sum > 0) {
      above_options.prior_kernel_weight = config_.prior_weight * above_sum / below_sum;
    }
  }
  // A conditional study keeps Optuna's footing (each estimator its own bandwidth count and
  // prior_weight): see the header.
  if (multi) options.weights = &below_weights;
  if (!est.below_share.empty()) {
    options.share = &est.below_share;
    above_options.share = &est.above_share;
  }
  const ParzenEstimator below(dims, observations, below_rows, options);
  const ParzenEstimator above(dims, observations, above_rows, above_options);

  const size_t n_cands = static_cast<size_t>(config_.n_ei_candidates);
  Candidates cands;
  cands.value.resize(n_cands * n_dims);
  cands.x.resize(n_cands * n_dims);
  cands.x_hi.resize(n_cands * n_dims);
  std::mt19937_64 rng = TrialRng(seed_, trial_number, stream);
  for (size_t c = 0; c < n_cands; ++c) below.Sample(rng, c, &cands);

  std::vector<double> log_l, log_g;
  below.LogPdf(cands, n_cands, &log_l);
  above.LogPdf(cands, n_cands, &log_g);
  size_t best = 0;
  double best_score = -kInf;
  for (size_t c = 0; c < n_cands; ++c) {
    const double score = log_l[c] - log_g[c];
    if (score > best_score) {
      best_score = score;
      best = c;
    }
  }
  return std::optional<std::vector<double>>(
      std::vector<double>(cands.value.begin() + static_cast<long>(best * n_dims),
                          cands.value.begin() + static_cast<long>((best + 1) * n_dims)));
}

}  // namespace triald::sampler
