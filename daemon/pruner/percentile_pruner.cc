#include "daemon/pruner/percentile_pruner.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace triald::pruner {
namespace {

using model::TrialRecord;
using model::TrialState;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// np.nanmin / np.nanmax over the trial's values: NaN only when every value is NaN.
double BestIntermediate(const TrialRecord& trial, config::Direction direction) {
  double best = kNaN;
  for (const auto& [step, v] : trial.intermediate) {
    if (std::isnan(v)) continue;
    if (std::isnan(best) || (direction == config::Direction::kMaximize ? v > best : v < best)) {
      best = v;
    }
  }
  return best;
}

}  // namespace

bool IsFirstInIntervalStep(int64_t step, const TrialRecord& trial, int64_t n_warmup_steps,
                           int64_t interval_steps) {
  const int64_t nearest_lower_pruning_step =
      (step - n_warmup_steps) / interval_steps * interval_steps + n_warmup_steps;
  int64_t second_last_step = -1;
  for (const auto& [s, v] : trial.intermediate) {
    if (s != step && s > second_last_step) second_last_step = s;
  }
  return second_last_step < nearest_lower_pruning_step;
}

double NanPercentile(std::vector<double> values, double percentile) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  const double q = percentile / 100.0;
  const double virtual_index = (n - 1) * q;
  if (virtual_index >= n - 1) return values.back();
  if (virtual_index < 0) return values.front();
  const double previous_index = std::floor(virtual_index);
  const double a = values[static_cast<size_t>(previous_index)];
  const double b = values[static_cast<size_t>(previous_index) + 1];
  const double gamma = virtual_index - previous_index;
  // numpy's _lerp: interpolates from the nearer end, which is what makes it exact at t = 1.
  const double diff = b - a;
  return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

bool PercentilePruner::ShouldPrune(const PruneContext& context) {
  const TrialRecord& trial = *context.trial;
  if (trial.intermediate.empty()) return false;

  std::vector<const TrialRecord*> completed;
  for (const TrialRecord& t : *context.trials) {
    if (t.state == TrialState::kComplete && t.number != trial.number) completed.push_back(&t);
  }
  const int n_completed = static_cast<int>(completed.size());
  if (n_completed == 0 || n_completed < options_.n_startup_trials) return false;

  const int64_t step = trial.intermediate.rbegin()->first;  // Optuna's last_step: the largest
  if (step < options_.n_warmup_steps) return false;
  if (!IsFirstInIntervalStep(step, trial, options_.n_warmup_steps, options_.interval_steps)) {
    return false;
  }

  const config::Direction direction = context.direction;
  const double best = BestIntermediate(trial, direction);
  if (std::isnan(best)) return true;

  std::vector<double> at_step;
  for (const TrialRecord* t : completed) {
    auto it = t->intermediate.find(step);
    if (it != t->intermediate.end()) at_step.push_back(it->second);
  }
  if (static_cast<int>(at_step.size()) < options_.n_min_trials) return false;
  const bool maximize = direction == config::Direction::kMaximize;
  const double p =
      NanPercentile(std::move(at_step), maximize ? 100 - options_.percentile : options_.percentile);
  if (std::isnan(p)) return false;
  return maximize ? best < p : best > p;
}

}  // namespace triald::pruner
