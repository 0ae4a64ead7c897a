#pragma once
// Parameter importance for the dashboard: how much of the objective's variation each parameter
// explains on its own, by the correlation ratio (eta squared) over bins of the parameter.
//
// Method (daemon/README.md, "Dashboard"): the trials used are the COMPLETE, feasible ones with a
// finite value of objective `objective`. For each parameter they carry, they are put in bins:
// one per choice for a categorical parameter; for a numeric one, up to kMaxBins bins of equal
// counts by the parameter's value (so a log-scaled parameter bins the same as its logarithm),
// equal values never split across bins. Then
//     eta^2 = sum over bins of n_b * (mean_b - mean)^2 / sum over trials of (y - mean)^2,
// the share of the objective's variance explained by the bin means: 0 when the parameter tells
// nothing, 1 when it decides the objective. The dashboard shows eta^2 and each parameter's share
// of the sum of all eta^2 (importance). It sees each parameter alone (no interactions, unlike
// fANOVA), and with few trials per bin it overestimates (min_trials below guards the worst of
// it): a cheap, deterministic guide, not a causal measure.
//
// Thread-safety: a pure function.

#include <string>
#include <vector>

#include "daemon/model/records.h"

namespace triald::daemon::http {

inline constexpr int kMaxBins = 10;

struct ParamImportance {
  std::string name;
  double eta_squared = 0;  // in [0, 1]
  double importance = 0;   // eta_squared / the sum over parameters (0 when that sum is 0)
  int trials = 0;          // trials that had the parameter
};

// Parameters by decreasing importance (then by name). Empty when fewer than `min_trials`
// trials qualify or their objective does not vary.
std::vector<ParamImportance> ParameterImportance(const std::vector<model::TrialRecord>& trials,
                                                 size_t objective = 0, int min_trials = 5);

}  // namespace triald::daemon::http
