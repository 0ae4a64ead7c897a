#pragma once
// Pruner: decides, when a running trial reports an intermediate value, whether to stop it now.
// The daemon asks after every report line; a "yes" stops the trial's process group and records
// it as PRUNED with its last intermediate value. Reports a worker sends after that decision are
// dropped, as in Optuna, where a pruned objective reports nothing more.
//
// The kinds follow Optuna 3.1's definitions (optuna.pruners): nop, median, percentile, asha
// (SuccessiveHalvingPruner), hyperband, threshold and patient; wilcoxon follows Optuna 4's. Optuna
// keeps some pruner state in trial system attributes; ours is derived from the trials' intermediate
// values, so a pruner needs no storage of its own and decides the same after a daemon restart (see
// each header for where that derivation and Optuna can differ).
//
// Contract (tests/daemon/pruner_test.cc runs it against every kind): a trial without
// intermediate values is never pruned; a decision depends only on the context given.
//
// Thread-safety: a Pruner instance is used from one thread at a time.

#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/model/records.h"

namespace triald::pruner {

struct PruneContext {
  config::Direction direction = config::Direction::kMinimize;
  // Every trial of the study, finished or not; `trial` points into it (or lies beside it).
  const std::vector<model::TrialRecord>* trials = nullptr;
  // The trial that just reported; its intermediate values include that report.
  const model::TrialRecord* trial = nullptr;
  // Hyperband assigns trials to brackets by a hash of (study name, trial number), as Optuna.
  std::string_view study_name;
};

class Pruner {
 public:
  virtual ~Pruner() = default;
  // True: stop the trial now. Never called for a trial the pruner has already pruned.
  virtual bool ShouldPrune(const PruneContext& context) = 0;
};

// Never prunes.
class NopPruner final : public Pruner {
 public:
  bool ShouldPrune(const PruneContext&) override { return false; }
};

// The kinds MakePruner builds, for messages: "nop, median, percentile, asha, hyperband,
// threshold, patient, wilcoxon".
const char* PrunerKinds();

// Builds the pruner a sweep asks for. Options outside Optuna's ranges, and an unknown kind,
// are kInvalidArgument naming the option, the value and what was expected.
common::Result<std::unique_ptr<Pruner>> MakePruner(const config::PrunerConfig& config);

}  // namespace triald::pruner
