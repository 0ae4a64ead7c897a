#include "daemon/pruner/pruner.h"

#include <sstream>
#include <string>

#include "daemon/pruner/hyperband_pruner.h"
#include "daemon/pruner/patient_pruner.h"
#include "daemon/pruner/percentile_pruner.h"
#include "daemon/pruner/successive_halving_pruner.h"
#include "daemon/pruner/threshold_pruner.h"
#include "daemon/pruner/wilcoxon_pruner.h"

namespace triald::pruner {
namespace {

// Checks `value` >= `min` for option `name`, in the words the sweep file uses.
common::Status AtLeast(const char* name, int64_t value, int64_t min) {
  if (value >= min) return common::Status::Ok();
  return common::InvalidArgument("[pruner] " + std::string(name) + " = " + std::to_string(value) +
                                 "; expected an integer >= " + std::to_string(min));
}

common::Status CheckPercentileOptions(const config::PrunerConfig& c, bool check_percentile) {
  if (check_percentile && !(c.percentile >= 0 && c.percentile <= 100)) {
    std::ostringstream o;
    o << "[pruner] percentile = " << c.percentile << "; expected a number in [0, 100]";
    return common::InvalidArgument(o.str());
  }
  TRIALD_RETURN_IF_ERROR(AtLeast("n_startup_trials", c.n_startup_trials, 0));
  TRIALD_RETURN_IF_ERROR(AtLeast("n_warmup_steps", c.n_warmup_steps, 0));
  TRIALD_RETURN_IF_ERROR(AtLeast("interval_steps", c.interval_steps, 1));
  return AtLeast("n_min_trials", c.n_min_trials, 1);
}

}  // namespace

const char* PrunerKinds() {
  return "nop, median, percentile, asha, hyperband, threshold, patient, wilcoxon";
}

common::Result<std::unique_ptr<Pruner>> MakePruner(const config::PrunerConfig& c) {
  if (c.kind == "nop") return std::unique_ptr<Pruner>(new NopPruner());
  if (c.kind == "median" || c.kind == "percentile") {
    const bool median = c.kind == "median";
    TRIALD_RETURN_IF_ERROR(CheckPercentileOptions(c, !median));
    PercentilePrunerOptions o;
    o.percentile = median ? 50.0 : c.percentile;
    o.n_startup_trials = c.n_startup_trials;
    o.n_warmup_steps = c.n_warmup_steps;
    o.interval_steps = c.interval_steps;
    o.n_min_trials = c.n_min_trials;
    return std::unique_ptr<Pruner>(new PercentilePruner(o));
  }
  if (c.kind == "asha") {
    TRIALD_RETURN_IF_ERROR(AtLeast("min_resource", c.min_resource, 1));
    TRIALD_RETURN_IF_ERROR(AtLeast("reduction_factor", c.reduction_factor, 2));
    TRIALD_RETURN_IF_ERROR(AtLeast("min_early_stopping_rate", c.min_early_stopping_rate, 0));
    TRIALD_RETURN_IF_ERROR(AtLeast("bootstrap_count", c.bootstrap_count, 0));
    SuccessiveHalvingPrunerOptions o;
    o.min_resource = c.min_resource;
    o.reduction_factor = c.reduction_factor;
    o.min_early_stopping_rate = c.min_early_stopping_rate;
    o.bootstrap_count = c.bootstrap_count;
    return std::unique_ptr<Pruner>(new SuccessiveHalvingPruner(o));
  }
  if (c.kind == "hyperband") {
    TRIALD_RETURN_IF_ERROR(AtLeast("min_resource", c.min_resource, 1));
    TRIALD_RETURN_IF_ERROR(AtLeast("reduction_factor", c.reduction_factor, 2));
    TRIALD_RETURN_IF_ERROR(AtLeast("max_resource", c.max_resource, 0));
    TRIALD_RETURN_IF_ERROR(AtLeast("bootstrap_count", c.bootstrap_count, 0));
    if (c.max_resource != 0 && c.max_resource < c.min_resource) {
      return common::InvalidArgument(
          "[pruner] max_resource = " + std::to_string(c.max_resource) +
          " is less than min_resource = " + std::to_string(c.min_resource) +
          "; expected max_resource >= min_resource, or 0 for the largest step seen");
    }
    if (c.bootstrap_count > 0 && c.max_resource == 0) {
      // Optuna refuses the combination too: the brackets, and so the bootstrap, are unknown
      // until a trial completes.
      return common::InvalidArgument(
          "[pruner] bootstrap_count = " + std::to_string(c.bootstrap_count) +
          " needs a fixed max_resource; expected max_resource >= "
          "min_resource, or bootstrap_count = 0");
    }
    HyperbandPrunerOptions o;
    o.min_resource = c.min_resource;
    o.max_resource = c.max_resource;
    o.reduction_factor = c.reduction_factor;
    o.bootstrap_count = c.bootstrap_count;
    return std::unique_ptr<Pruner>(new HyperbandPruner(o));
  }
  if (c.kind == "threshold") {
    TRIALD_RETURN_IF_ERROR(AtLeast("n_warmup_steps", c.n_warmup_steps, 0));
    TRIALD_RETURN_IF_ERROR(AtLeast("interval_steps", c.interval_steps, 1));
    if (!c.lower && !c.upper) {
      return common::InvalidArgument(
          "[pruner] kind = \"threshold\" has neither lower nor upper; expected at least one");
    }
    ThresholdPrunerOptions o;
    if (c.lower) o.lower = *c.lower;
    if (c.upper) o.upper = *c.upper;
    // Not `!(lower <= upper)`: Optuna accepts NaN bounds, which then never prune.
    if (o.lower > o.upper) {
      std::ostringstream m;
      m << "[pruner] lower = " << o.lower << " is greater than upper = " << o.upper
        << "; expected lower <= upper";
      return common::InvalidArgument(m.str());
    }
    o.n_warmup_steps = c.n_warmup_steps;
    o.interval_steps = c.interval_steps;
    return std::unique_ptr<Pruner>(new ThresholdPruner(o));
  }
  if (c.kind == "patient") {
    TRIALD_RETURN_IF_ERROR(AtLeast("patience", c.patience, 0));
    if (!(c.min_delta >= 0)) {
      std::ostringstream m;
      m << "[pruner] min_delta = " << c.min_delta << "; expected a number >= 0";
      return common::InvalidArgument(m.str());
    }
    PatientPrunerOptions o;
    o.patience = c.patience;
    o.min_delta = c.min_delta;
    if (c.wrapped != nullptr) {
      auto wrapped = MakePruner(*c.wrapped);
      if (!wrapped.ok()) {
        return common::InvalidArgument("[pruner] wrapped: " + wrapped.status().message());
      }
      o.wrapped = std::move(wrapped).value();
    }
    return std::unique_ptr<Pruner>(new PatientPruner(std::move(o)));
  }
  if (c.kind == "wilcoxon") {
    if (!(c.p_threshold >= 0 && c.p_threshold <= 1)) {
      std::ostringstream m;
      m << "[pruner] p_threshold = " << c.p_threshold << "; expected a number in [0, 1]";
      return common::InvalidArgument(m.str());
    }
    TRIALD_RETURN_IF_ERROR(AtLeast("n_startup_steps", c.n_startup_steps, 0));
    WilcoxonPrunerOptions o;
    o.p_threshold = c.p_threshold;
    o.n_startup_steps = c.n_startup_steps;
    return std::unique_ptr<Pruner>(new WilcoxonPruner(o));
  }
  return common::InvalidArgument("[pruner] kind = \"" + c.kind + "\" is unknown; expected one of " +
                                 PrunerKinds());
}

}  // namespace triald::pruner
