#include "daemon/pruner/wilcoxon_pruner.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>

namespace triald::pruner {
namespace {

using model::TrialRecord;
using model::TrialState;

// The standard normal CDF as Cephes' ndtr (SciPy's) computes it.
double Ndtr(double a) {
  const double x = a * M_SQRT1_2;
  const double z = std::fabs(x);
  if (z < M_SQRT1_2) return 0.5 + 0.5 * std::erf(x);
  const double y = 0.5 * std::erfc(z);
  return x > 0 ? 1 - y : y;
}

// Whether COMPLETE trial `a` is better than `b` (null: any is), lower number winning ties.
bool Better(const TrialRecord& a, const TrialRecord* b, bool maximize) {
  if (b == nullptr) return true;
  if (*a.value != *b->value) return maximize ? *a.value > *b->value : *a.value < *b->value;
  return a.number < b->number;
}

// Optuna's study.best_trial (see the header); null when there is none.
const TrialRecord* BestTrial(const PruneContext& context) {
  const bool maximize = context.direction == config::Direction::kMaximize;
  const TrialRecord* best = nullptr;
  const TrialRecord* best_feasible = nullptr;
  for (const TrialRecord& t : *context.trials) {
    if (t.state != TrialState::kComplete || !t.value || std::isnan(*t.value)) continue;
    if (t.number == context.trial->number) continue;
    if (Better(t, best, maximize)) best = &t;
    if (t.Feasible() && Better(t, best_feasible, maximize)) best_feasible = &t;
  }
  return best != nullptr && !best->Feasible() ? best_feasible : best;
}

bool AllFinite(const std::map<int64_t, double>& values) {
  return std::all_of(values.begin(), values.end(),
                     [](const auto& sv) { return std::isfinite(sv.second); });
}

double Mean(const std::map<int64_t, double>& values) {
  double sum = 0;
  for (const auto& [step, v] : values) sum += v;
  return sum / static_cast<double>(values.size());
}

}  // namespace

double WilcoxonPValue(const std::vector<double>& d, WilcoxonAlternative alternative) {
  const size_t n = d.size();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const bool greater = alternative == WilcoxonAlternative::kGreater;

  // Average ranks of |d|; tie groups for the exactness test and the variance correction.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&d](size_t a, size_t b) { return std::fabs(d[a]) < std::fabs(d[b]); });
  std::vector<double> rank(n);
  bool has_ties = false;
  double tie_correction = 0;  // sum of t^3 - t over the tie groups
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && std::fabs(d[order[j + 1]]) == std::fabs(d[order[i]])) ++j;
    const double average = (static_cast<double>(i + 1) + static_cast<double>(j + 1)) / 2;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = average;
    const double t = static_cast<double>(j - i + 1);
    if (j > i) has_ties = true;
    tie_correction += t * t * t - t;
    i = j + 1;
  }
  const bool has_zeros = std::any_of(d.begin(), d.end(), [](double x) { return x == 0; });

  // The statistic for d with the signs of the entries in `flipped` (a bit mask) reversed. Every
  // value is a multiple of 1/4 well within double's exact range, so sums compare exactly.
  auto r_plus = [&](uint64_t flipped) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      if (d[i] == 0) {
        sum += rank[i] / 2;
      } else if ((d[i] > 0) != (((flipped >> i) & 1) != 0)) {
        sum += rank[i];
      }
    }
    return sum;
  };
  const double observed = r_plus(0);

  if (n <= 50 && !has_ties && !has_zeros) {
    // Exact: how many of the 2^n subsets of ranks {1..n} sum to each total. The counts (at most
    // 2^50) and their sums over 2^n are exact in double, as SciPy's float distribution is.
    const size_t max_sum = n * (n + 1) / 2;
    std::vector<uint64_t> counts(max_sum + 1, 0);
    counts[0] = 1;
    for (size_t k = 1; k <= n; ++k) {
      for (size_t s = k * (k + 1) / 2; s >= k; --s) counts[s] += counts[s - k];
    }
    const auto r = static_cast<size_t>(observed);  // integral without ties or zeros
    uint64_t tail = 0;
    if (greater) {
      for (size_t s = r; s <= max_sum; ++s) tail += counts[s];
    } else {
      for (size_t s = 0; s <= r; ++s) tail += counts[s];
    }
    return std::ldexp(static_cast<double>(tail), -static_cast<int>(n));
  }
  if (n <= 13) {
    uint64_t tail = 0;
    const uint64_t total = uint64_t{1} << n;
    for (uint64_t flipped = 0; flipped < total; ++flipped) {
      const double s = r_plus(flipped);
      if (greater ? s >= observed : s <= observed) ++tail;
    }
    return static_cast<double>(tail) / static_cast<double>(total);
  }
  const double count = static_cast<double>(n);
  const double mean = count * (count + 1) * 0.25;
  const double se = std::sqrt((count * (count + 1) * (2 * count + 1) - tie_correction / 2) / 24);
  const double z = (observed - mean) / se;
  return greater ? Ndtr(-z) : Ndtr(z);
}

bool WilcoxonPruner::ShouldPrune(const PruneContext& context) {
  const TrialRecord& trial = *context.trial;
  if (trial.intermediate.empty() || !AllFinite(trial.intermediate)) return false;
  const TrialRecord* best = BestTrial(context);
  if (best == nullptr || best->intermediate.empty() || !AllFinite(best->intermediate)) {
    return false;
  }
  std::vector<double> d;
  for (const auto& [step, v] : trial.intermediate) {
    auto it = best->intermediate.find(step);
    if (it != best->intermediate.end()) d.push_back(v - it->second);
  }
  if (d.size() < static_cast<size_t>(std::max(2, options_.n_startup_steps))) return false;
  const bool maximize = context.direction == config::Direction::kMaximize;
  const double p =
      WilcoxonPValue(d, maximize ? WilcoxonAlternative::kLess : WilcoxonAlternative::kGreater);
  if (!(p < options_.p_threshold)) return false;
  // Optuna's safety rule: a trial whose values average no worse than the best's stays.
  const double mean = Mean(trial.intermediate);
  const double best_mean = Mean(best->intermediate);
  const bool average_is_best = maximize ? best_mean <= mean : best_mean >= mean;
  return !average_is_best;
}

}  // namespace triald::pruner
