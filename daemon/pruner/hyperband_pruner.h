#pragma once
// HyperbandPruner, as optuna.pruners.HyperbandPruner (Optuna 3.1) defines it: several
// successive-halving brackets that differ in how early they stop trials, each trial assigned to
// one bracket and judged only against the trials of that bracket.
//
//   n_brackets = floor(log(max_resource / min_resource) / log(reduction_factor)) + 1
//   bracket b runs SuccessiveHalvingPruner(min_resource, reduction_factor,
//                                          min_early_stopping_rate = b, bootstrap_count)
//   budget(b)  = ceil(n_brackets * reduction_factor^s / (s + 1)), s = n_brackets - 1 - b
//   bracket of trial N of study X: crc32("X_N") % sum(budget), walked through the budgets in
//   bracket order. CRC-32 (the zlib/IEEE one, Python's binascii.crc32) is stable across
//   processes, machines and restarts, so a trial keeps its bracket and the assignment is
//   Optuna's own.
//
// max_resource = 0 is Optuna's "auto": the largest step reported by a COMPLETE trial, plus one
// (Optuna counts steps from 0), taken at the first decision after a trial completes; until then
// nothing is pruned. As in Optuna the brackets are fixed from then on, for this pruner's life
// (after a daemon restart they are computed afresh from the trials completed by then).
//
// One known difference with "auto": Optuna's brackets record a trial's rung value only when they
// judge one of its reports, so reports made before the brackets existed never count, and a
// trial running at that moment gets its rung values from its next report. Ours derive rung
// values from every report (see successive_halving_pruner.h), whenever it was made; decisions
// then differ for a few trials around the first completion (in the cross-check of
// tests/daemon/pruner_test.cc, 7 of 363 decisions). With a fixed max_resource they agree.
//
// Thread-safety: one thread at a time, like every Pruner (it caches the brackets).

#include <cstdint>
#include <string_view>
#include <vector>

#include "daemon/pruner/pruner.h"
#include "daemon/pruner/successive_halving_pruner.h"

namespace triald::pruner {

struct HyperbandPrunerOptions {
  int min_resource = 1;      // >= 1
  int max_resource = 0;      // 0: "auto" (see above); otherwise >= min_resource
  int reduction_factor = 3;  // >= 2
  int bootstrap_count = 0;   // >= 0; Optuna refuses it with "auto"
};

class HyperbandPruner final : public Pruner {
 public:
  // Options must be valid (MakePruner checks them).
  explicit HyperbandPruner(HyperbandPrunerOptions options);

  bool ShouldPrune(const PruneContext& context) override;

  // 0 until the brackets are known (max_resource "auto" before any COMPLETE trial).
  int n_brackets() const { return static_cast<int>(brackets_.size()); }
  // budget(b) per bracket, once known.
  const std::vector<int64_t>& budgets() const { return budgets_; }
  // The bracket of trial `number` of `study_name`; 0 until the brackets are known.
  int BracketOf(std::string_view study_name, int number) const;

 private:
  // Computes the brackets, once max_resource is known.
  void TryInitialize(const PruneContext& context);

  HyperbandPrunerOptions options_;
  bool initialized_ = false;
  std::vector<SuccessiveHalvingPruner> brackets_;
  std::vector<int64_t> budgets_;
  int64_t total_budget_ = 0;
};

// CRC-32 as zlib and Python's binascii.crc32 compute it (reflected polynomial 0xEDB88320).
uint32_t Crc32(std::string_view data);

}  // namespace triald::pruner
