#include "daemon/pruner/successive_halving_pruner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace triald::pruner {

using model::TrialRecord;

namespace {

constexpr int64_t kMaxStep = std::numeric_limits<int64_t>::max();

// Optuna's _is_trial_promotable_to_next_rung. `competing` includes `value`.
bool IsPromotable(double value, std::vector<double> competing, int reduction_factor,
                  config::Direction direction) {
  int64_t promotable_idx = static_cast<int64_t>(competing.size()) / reduction_factor - 1;
  // Optuna cannot pause a trial until enough others reach the rung, so the first ones are
  // promoted only if they are the best so far.
  if (promotable_idx == -1) promotable_idx = 0;
  // Reported values are finite (the report protocol refuses others); NaNs sort last here only
  // so that the ordering stays well defined.
  std::sort(competing.begin(), competing.end(), [](double a, double b) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
    return a < b;
  });
  if (direction == config::Direction::kMaximize) {
    return value >= competing[competing.size() - 1 - static_cast<size_t>(promotable_idx)];
  }
  return value <= competing[static_cast<size_t>(promotable_idx)];
}

}  // namespace

int64_t SuccessiveHalvingPruner::RungEndStep(int rung) const {
  int64_t step = options_.min_resource;
  const int exponent = options_.min_early_stopping_rate + rung;
  for (int i = 0; i < exponent; ++i) {
    if (step > kMaxStep / options_.reduction_factor) return kMaxStep;
    step *= options_.reduction_factor;
  }
  return step;
}

std::optional<double> SuccessiveHalvingPruner::RungValue(const TrialRecord& trial, int rung) const {
  const int64_t end = RungEndStep(rung);
  auto it = trial.intermediate.lower_bound(end);
  if (it == trial.intermediate.end()) return std::nullopt;
  return it->second;
}

bool SuccessiveHalvingPruner::ShouldPrune(const PruneContext& context) {
  return ShouldPruneAmong(context, [](const TrialRecord&) { return true; });
}

bool SuccessiveHalvingPruner::ShouldPruneAmong(
    const PruneContext& context, const std::function<bool(const TrialRecord&)>& member) const {
  const TrialRecord& trial = *context.trial;
  if (trial.intermediate.empty()) return false;
  const int64_t step = trial.intermediate.rbegin()->first;
  const double value = trial.intermediate.rbegin()->second;

  // The trial's current rung: rungs it completed at earlier reports (it was promoted at each,
  // or it would not be reporting now).
  int rung = 0;
  for (;;) {
    auto it = trial.intermediate.lower_bound(RungEndStep(rung));
    if (it == trial.intermediate.end() || it->first >= step) break;
    ++rung;
  }

  for (;; ++rung) {
    const int64_t end = RungEndStep(rung);
    if (step < end) return false;
    if (std::isnan(value)) return true;
    std::vector<double> competing;
    for (const TrialRecord& t : *context.trials) {
      if (t.number == trial.number || !member(t)) continue;
      if (std::optional<double> v = RungValue(t, rung)) competing.push_back(*v);
    }
    competing.push_back(value);
    if (static_cast<int64_t>(competing.size()) <= options_.bootstrap_count) return true;
    if (!IsPromotable(value, std::move(competing), options_.reduction_factor, context.direction)) {
      return true;
    }
    if (end == kMaxStep) return false;  // no rung beyond the largest step there can be
  }
}

}  // namespace triald::pruner
