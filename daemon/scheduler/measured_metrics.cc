#include "daemon/scheduler/measured_metrics.h"

#include <optional>
#include <string>

namespace triald::daemon {
namespace {

// Why a metric may be missing, for the FAIL detail.
std::string WhyUnmeasured(const std::string& metric) {
  if (metric == "peak_gpu_memory") {
    return "no GPU memory sample of the trial's processes succeeded";
  }
  return "triald could not measure it for this trial";
}

}  // namespace

double MeasuredConstraint(const config::ResourceConstraint& c,
                          const model::TrialResources& resources) {
  std::optional<double> measured = model::MeasuredMetric(resources, c.metric);
  if (!measured) return 1.0;
  return c.at_most ? *measured - c.limit : c.limit - *measured;
}

void ApplyMeasured(const config::StudyConfig& study, model::TrialOutcome* out) {
  if (out->state == model::TrialState::kFail) return;
  const model::TrialResources resources = out->resources.value_or(model::TrialResources{});
  if (out->state == model::TrialState::kComplete) {
    for (const std::string& metric : study.objectives) {
      if (metric == "value") continue;
      std::optional<double> measured = model::MeasuredMetric(resources, metric);
      if (!measured) {
        out->state = model::TrialState::kFail;
        out->value.reset();
        out->values.clear();
        out->constraints.clear();
        out->fail = model::FailInfo{};
        out->fail.reason = "protocol";
        out->fail.exit_code = 0;  // it exited 0 with its value(s): only the metric is missing
        out->fail.detail = "objective " + metric + " was not measured (" + WhyUnmeasured(metric) +
                           "); [study] objectives needs it for every COMPLETE trial";
        return;
      }
      out->values.push_back(*measured);
    }
  }
  if (study.directions.size() >= 2) out->value.reset();
  for (const config::ResourceConstraint& c : study.resource_constraints) {
    out->constraints.push_back(MeasuredConstraint(c, resources));
  }
}

}  // namespace triald::daemon
