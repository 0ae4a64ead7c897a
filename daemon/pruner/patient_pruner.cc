#include "daemon/pruner/patient_pruner.h"

#include <cmath>
#include <cstddef>
#include <limits>

namespace triald::pruner {
namespace {

// np.nanmin (minimize) or np.nanmax (maximize) of values[begin, end): NaN when all are NaN.
double NanBest(const std::vector<double>& values, size_t begin, size_t end, bool maximize) {
  double best = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = begin; i < end; ++i) {
    const double v = values[i];
    if (std::isnan(v)) continue;
    if (std::isnan(best) || (maximize ? v > best : v < best)) best = v;
  }
  return best;
}

}  // namespace

bool PatientPruner::ShouldPrune(const PruneContext& context) {
  const model::TrialRecord& trial = *context.trial;
  const size_t recent = static_cast<size_t>(options_.patience) + 1;
  if (trial.intermediate.size() <= recent) return false;
  std::vector<double> values;  // by step
  values.reserve(trial.intermediate.size());
  for (const auto& [step, v] : trial.intermediate) values.push_back(v);
  const size_t split = values.size() - recent;
  const bool maximize = context.direction == config::Direction::kMaximize;
  const double before = NanBest(values, 0, split, maximize);
  const double after = NanBest(values, split, values.size(), maximize);
  // A comparison with NaN is false: no decision, as numpy's.
  const bool stalled =
      maximize ? before - options_.min_delta > after : before + options_.min_delta < after;
  if (!stalled) return false;
  return options_.wrapped == nullptr || options_.wrapped->ShouldPrune(context);
}

}  // namespace triald::pruner
