#pragma once
// Pruner: decides, when a running trial reports an intermediate value, whether to stop it now.
// The daemon asks after every report line; a "yes" stops the trial's process group and records
// it as PRUNED with its last intermediate value.
//
// Thread-safety: a Pruner instance is used from one thread at a time.

#include <memory>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/storage/records.h"

namespace triald::pruner {

struct PruneContext {
  config::Direction direction = config::Direction::kMinimize;
  const std::vector<storage::TrialRecord>* trials = nullptr;  // the whole study
  const storage::TrialRecord* trial = nullptr;                // the one that just reported
};

class Pruner {
 public:
  virtual ~Pruner() = default;
  virtual bool ShouldPrune(const PruneContext& context) = 0;
};

// Never prunes.
class NopPruner final : public Pruner {
 public:
  bool ShouldPrune(const PruneContext&) override { return false; }
};

common::Result<std::unique_ptr<Pruner>> MakePruner(const config::PrunerConfig& config);

}  // namespace triald::pruner
