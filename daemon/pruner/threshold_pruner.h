#pragma once
// ThresholdPruner (kind "threshold"), as optuna.pruners.ThresholdPruner (Optuna 3.1) defines it:
// it prunes a trial whose latest intermediate value (the value at its largest step S) is below
// `lower`, above `upper`, or NaN. No check while S < n_warmup_steps, and checks happen once per
// interval, as the percentile pruner's (IsFirstInIntervalStep). It looks at no other trial.
//
// Thread-safety: stateless after construction; one thread at a time, like every Pruner.

#include <cstdint>
#include <limits>

#include "daemon/pruner/pruner.h"

namespace triald::pruner {

struct ThresholdPrunerOptions {
  // Optuna's None for either bound is an infinity here; lower <= upper.
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();
  int n_warmup_steps = 0;  // >= 0
  int interval_steps = 1;  // >= 1
};

class ThresholdPruner final : public Pruner {
 public:
  // Options must be valid (MakePruner checks them).
  explicit ThresholdPruner(ThresholdPrunerOptions options) : options_(options) {}
  bool ShouldPrune(const PruneContext& context) override;

 private:
  ThresholdPrunerOptions options_;
};

}  // namespace triald::pruner
