#pragma once
// Measured metrics: what [study] resource_constraints and objectives make of the resources the
// daemon measured of a trial (model::TrialResources), applied to its outcome after
// ClassifyExit (scheduler/trial_outcome.h).
//
//   resource_constraints  COMPLETE and PRUNED trials get one constraint value per entry, after
//                         those the trial reported, in the sweep's order: measured - limit for
//                         "<=", limit - measured for ">=" (<= 0 holds, as Optuna's constraints).
//                         A metric that was not measured for the trial counts as violated, with
//                         the value 1.0: a trial is never taken as feasible on a measurement
//                         that does not exist.
//   objectives            a COMPLETE trial's values are the worker's own ("value" entries),
//                         then the measured metrics in the order objectives names them. A
//                         metric objective that was not measured cannot be ranked: the trial
//                         ends FAIL(protocol) with the detail "objective METRIC was not
//                         measured (...)", and its values and constraints are dropped.
// With two or more directions `value` is unset (as for any multi-objective trial).
// FAIL outcomes are left as they are, resources included.
//
// Thread-safety: pure functions; thread-safe.

#include "config/sweep.h"
#include "daemon/model/records.h"

namespace triald::daemon {

// The constraint value of `c` for `resources` (1.0 when its metric was not measured).
double MeasuredConstraint(const config::ResourceConstraint& c,
                          const model::TrialResources& resources);

// Applies `study`'s resource_constraints and metric objectives to `outcome` (see above). An
// outcome without resources is treated as one where nothing was measured.
void ApplyMeasured(const config::StudyConfig& study, model::TrialOutcome* outcome);

}  // namespace triald::daemon
