#include "daemon/sampler/tpe_split.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "daemon/sampler/pareto.h"

namespace triald::sampler::tpe_split {
namespace {

using model::TrialRecord;
using model::TrialState;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Optuna's EPS (optuna/samplers/_tpe/sampler.py).
constexpr double kEps = 1e-12;

using Points = std::vector<std::vector<double>>;

// Single objective, unconstrained: stable by (step, loss), so COMPLETE trials by value, then
// PRUNED ones by last step (later first) and value; pending last.
std::vector<size_t> SplitSingle(const std::vector<Observation>& obs, size_t n_below) {
  std::vector<size_t> order(obs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (obs[a].step != obs[b].step) return obs[a].step < obs[b].step;
    return obs[a].loss[0] < obs[b].loss[0];
  });
  order.resize(std::min(n_below, order.size()));
  return order;
}

// The non-domination rank of each point (as pareto::NonDominatedRanks), for the best ranks only:
// peeled front by front until they hold at least `wanted` points; -1 for the rest. Points in
// lexicographic order can only be dominated by earlier ones, and a point dominated by any
// remaining point is dominated by a point of the current front, so each point is compared with
// the front being built alone: O(n f) per front of f points instead of O(n^2) for all ranks.
std::vector<int> BestRanks(const Points& points, size_t wanted) {
  std::vector<size_t> order(points.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return points[a] < points[b]; });
  std::vector<int> rank(points.size(), -1);
  size_t ranked = 0;
  for (int r = 0; ranked < wanted && !order.empty(); ++r) {
    std::vector<size_t> front, rest;
    for (size_t i : order) {
      bool dominated = false;
      for (size_t f : front) {
        if (pareto::Dominates(points[f], points[i])) {
          dominated = true;
          break;
        }
      }
      (dominated ? rest : front).push_back(i);
    }
    for (size_t i : front) rank[i] = r;
    ranked += front.size();
    order = std::move(rest);
  }
  return rank;
}

// Several objectives, unconstrained: whole non-domination ranks, then the rank that does not fit
// cut by greedy hypervolume subset selection.
std::vector<size_t> SplitMulti(const std::vector<Observation>& obs, size_t n_below) {
  Points points;
  points.reserve(obs.size());
  for (const Observation& o : obs) points.push_back(o.loss);
  const std::vector<int> rank = BestRanks(points, n_below);
  std::vector<size_t> below;
  int r = 0;
  for (;; ++r) {
    if (below.size() >= n_below) break;
    size_t count = 0;
    for (int k : rank) count += k == r ? 1 : 0;
    if (count == 0 || below.size() + count > n_below) break;
    for (size_t i = 0; i < rank.size(); ++i) {
      if (rank[i] == r) below.push_back(i);
    }
  }
  const size_t subset = n_below > below.size() ? n_below - below.size() : 0;
  if (subset > 0) {
    Points last;
    std::vector<size_t> last_index;
    for (size_t i = 0; i < rank.size(); ++i) {
      if (rank[i] == r) {
        last.push_back(points[i]);
        last_index.push_back(i);
      }
    }
    for (size_t k : GreedyHypervolumeSubset(last, subset, ReferencePoint(last))) {
      below.push_back(last_index[k]);
    }
  }
  return below;
}

std::vector<size_t> SplitUnconstrained(const std::vector<Observation>& obs, size_t n_below,
                                       bool multi) {
  return multi ? SplitMulti(obs, n_below) : SplitSingle(obs, n_below);
}

// Optuna's _calculate_weights_below_for_multi_objective for obs[below[i]].
std::vector<double> WeightsBelow(const std::vector<Observation>& obs,
                                 const std::vector<size_t>& below, bool constrained) {
  std::vector<double> weights(below.size(), kEps);
  Points feasible;
  std::vector<size_t> at;
  for (size_t i = 0; i < below.size(); ++i) {
    if (constrained && obs[below[i]].violation != 0) continue;
    feasible.push_back(obs[below[i]].loss);
    at.push_back(i);
  }
  if (feasible.size() == 1) weights[at[0]] = 1;
  if (feasible.size() < 2) return weights;
  const std::vector<double> reference = ReferencePoint(feasible);
  const double total = pareto::Hypervolume(feasible, reference);
  std::vector<double> contribution(feasible.size());
  double largest = -kInf;
  for (size_t i = 0; i < feasible.size(); ++i) {
    Points others;
    others.reserve(feasible.size() - 1);
    for (size_t j = 0; j < feasible.size(); ++j) {
      if (j != i) others.push_back(feasible[j]);
    }
    contribution[i] = total - pareto::Hypervolume(others, reference) + kEps;
    largest = std::max(largest, contribution[i]);
  }
  for (size_t i = 0; i < feasible.size(); ++i) {
    weights[at[i]] = std::clamp(contribution[i] / largest, 0.0, 1.0);
  }
  return weights;
}

}  // namespace

bool Constrained(const std::vector<TrialRecord>& trials, int trial_number) {
  for (const TrialRecord& t : trials) {
    if (t.number < trial_number && !t.constraints.empty()) return true;
  }
  return false;
}

std::optional<Observation> Observe(const TrialRecord& trial,
                                   const std::vector<config::Direction>& directions,
                                   bool constrained, bool constant_liar) {
  const bool multi = directions.size() > 1;
  const double sign =
      !directions.empty() && directions[0] == config::Direction::kMaximize ? -1.0 : 1.0;
  Observation o;
  o.number = trial.number;
  switch (trial.state) {
    case TrialState::kComplete:
      if (multi) {
        if (trial.values.size() != directions.size()) return std::nullopt;
        o.loss = pareto::Minimized(trial.values, directions);
      } else {
        if (!trial.value) return std::nullopt;
        o.loss = {sign * *trial.value};
      }
      o.step = -kInf;
      break;
    case TrialState::kPruned:
      if (multi) return std::nullopt;
      if (trial.intermediate.empty()) {
        o.step = 1;
        o.loss = {0.0};
      } else {
        const auto& [step, value] = *trial.intermediate.rbegin();
        o.step = -static_cast<double>(step);
        o.loss = {sign * value};
      }
      break;
    case TrialState::kRunning:
    case TrialState::kWaiting:
      if (!constant_liar) return std::nullopt;
      o.pending = true;
      o.step = kInf;
      o.loss.assign(std::max<size_t>(directions.size(), 1), kInf);
      break;
    case TrialState::kFail:
      return std::nullopt;
  }
  for (double& l : o.loss) {
    if (std::isnan(l)) l = kInf;
  }
  if (constrained) {
    if (o.pending || trial.constraints.empty()) {
      o.violation = kInf;
    } else {
      for (double c : trial.constraints) {
        if (c > 0) o.violation += c;
      }
    }
  }
  return o;
}

Split SplitObservations(const std::vector<Observation>& all, size_t n_below, bool constrained) {
  const bool multi = !all.empty() && all.front().loss.size() > 1;
  // Several objectives: pending trials take no part (they are "above").
  std::vector<size_t> index;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!multi || !all[i].pending) index.push_back(i);
  }
  std::vector<Observation> obs;
  obs.reserve(index.size());
  for (size_t i : index) obs.push_back(all[i]);

  std::vector<size_t> below;
  if (constrained) {
    std::vector<size_t> order(obs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return obs[a].violation < obs[b].violation; });
    if (n_below >= order.size() || obs[order[n_below]].violation > 0) {
      // At most n_below feasible trials: all of them, then the least violating.
      below.assign(order.begin(), order.begin() + static_cast<long>(n_below));
    } else {
      std::vector<Observation> feasible;
      std::vector<size_t> feasible_index;
      for (size_t i = 0; i < obs.size(); ++i) {
        if (obs[i].violation == 0) {
          feasible.push_back(obs[i]);
          feasible_index.push_back(i);
        }
      }
      for (size_t k : SplitUnconstrained(feasible, n_below, multi)) {
        below.push_back(feasible_index[k]);
      }
    }
  } else {
    below = SplitUnconstrained(obs, n_below, multi);
  }
  std::sort(below.begin(), below.end());

  Split split;
  if (multi) split.weights = WeightsBelow(obs, below, constrained);
  for (size_t i : below) split.below.push_back(index[i]);
  return split;
}

std::vector<size_t> GreedyHypervolumeSubset(const Points& points, size_t subset_size,
                                            const std::vector<double>& reference) {
  // Optuna's greedy choice: each time, the point adding the most hypervolume to those chosen
  // (the earlier point of equal gains). A point's gain only shrinks as points are chosen
  // (hypervolume is submodular), so a gain computed earlier bounds it from above and only the
  // point on top needs its gain brought up to date (lazy greedy): it is chosen once its current
  // gain is still the largest bound, which picks what the full recomputation would, ties
  // included, at a few hypervolume computations per step instead of one per point.
  const size_t n = points.size();
  std::vector<double> gain(n);
  std::vector<size_t> as_of(n, 0);  // the number of chosen points `gain` was computed against
  for (size_t j = 0; j < n; ++j) gain[j] = pareto::Hypervolume({points[j]}, reference);
  std::vector<char> chosen(n, 0);
  std::vector<size_t> selected;
  Points selected_points;
  double selected_volume = 0;
  while (selected.size() < std::min(subset_size, n)) {
    for (;;) {
      size_t best = n;
      for (size_t j = 0; j < n; ++j) {
        if (!chosen[j] && (best == n || gain[j] > gain[best])) best = j;
      }
      if (as_of[best] == selected.size()) {
        chosen[best] = 1;
        selected.push_back(best);
        selected_points.push_back(points[best]);
        selected_volume = pareto::Hypervolume(selected_points, reference);
        break;
      }
      selected_points.push_back(points[best]);
      gain[best] = pareto::Hypervolume(selected_points, reference) - selected_volume;
      selected_points.pop_back();
      as_of[best] = selected.size();
    }
  }
  return selected;
}

std::vector<double> ReferencePoint(const Points& points) {
  std::vector<double> reference;
  if (points.empty()) return reference;
  reference.assign(points.front().size(), -kInf);
  for (const std::vector<double>& p : points) {
    for (size_t k = 0; k < reference.size() && k < p.size(); ++k) {
      reference[k] = std::max(reference[k], p[k]);
    }
  }
  for (double& r : reference) {
    r = std::max(1.1 * r, 0.9 * r);
    if (r == 0) r = kEps;
  }
  return reference;
}

}  // namespace triald::sampler::tpe_split
