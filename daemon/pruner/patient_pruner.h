#pragma once
// PatientPruner (kind "patient"), as optuna.pruners.PatientPruner (Optuna 3.1) defines it: it
// lets the wrapped pruner decide only once the trial has stopped improving. With the trial's
// steps in order, the "recent" values are those at its last patience + 1 steps and the "earlier"
// ones all before them; nothing is decided while there are no earlier ones. The trial has
// stopped improving when (minimizing) min(earlier) + min_delta < min(recent), or (maximizing)
// max(earlier) - min_delta > max(recent), NaNs ignored (all NaN on one side: still improving).
// Then the wrapped pruner decides, or, with none, the trial is pruned (plain early stopping).
//
// The wrapped pruner is asked only then, as in Optuna. Pruners that keep no state of their own
// (median, percentile, threshold, wilcoxon, nop) decide as they would alone. ASHA and hyperband
// derive rung values from every report (successive_halving_pruner.h), while Optuna's record one
// only when they are asked; wrapped in a patient pruner they can therefore differ from Optuna's
// for a trial that passed a rung end while it was still improving.
//
// Thread-safety: one thread at a time, like every Pruner (and the pruner it wraps).

#include <memory>

#include "daemon/pruner/pruner.h"

namespace triald::pruner {

struct PatientPrunerOptions {
  int patience = 0;                 // >= 0
  double min_delta = 0;             // >= 0
  std::unique_ptr<Pruner> wrapped;  // null: prune once the trial stops improving
};

class PatientPruner final : public Pruner {
 public:
  // Options must be valid (MakePruner checks them).
  explicit PatientPruner(PatientPrunerOptions options) : options_(std::move(options)) {}
  bool ShouldPrune(const PruneContext& context) override;

 private:
  PatientPrunerOptions options_;
};

}  // namespace triald::pruner
