// Measured metrics as constraints and objectives (daemon/scheduler/measured_metrics.h), one row
// per case, and ClassifyExit keeping the process's resources.

#include "daemon/scheduler/measured_metrics.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {
namespace {

using model::TrialState;

constexpr double kMetricMiB = 1024.0 * 1024;

config::ResourceConstraint Constraint(const std::string& metric, bool at_most, double limit) {
  config::ResourceConstraint c;
  c.metric = metric;
  c.at_most = at_most;
  c.limit = limit;
  c.text = metric + (at_most ? " <= " : " >= ") + std::to_string(limit);
  return c;
}

model::TrialResources Measured() {
  model::TrialResources r;
  r.peak_memory_bytes = static_cast<uint64_t>(200 * kMetricMiB);
  r.memory_source = "cgroup2 memory.peak";
  r.cpu_time_s = 12.5;
  r.cpu_source = "cgroup2 cpu.stat";
  r.wall_s = 30;
  return r;
}

struct MetricRow {
  const char* name;
  // The study.
  std::vector<std::string> objectives;  // [study] objectives (empty: none)
  size_t directions = 1;
  std::vector<config::ResourceConstraint> constraints;
  // The outcome ClassifyExit gave.
  TrialState state = TrialState::kComplete;
  std::vector<double> values;
  std::vector<double> reported;  // constraints the trial reported
  std::optional<model::TrialResources> resources;
  // What ApplyMeasured makes of it.
  TrialState want_state = TrialState::kComplete;
  std::optional<double> want_value;
  std::vector<double> want_values;
  std::vector<double> want_constraints;
  std::string want_detail;  // FAIL(protocol) only
};

TEST_CASE("measured metrics become constraints and objectives", "[scheduler][resources]") {
  const model::TrialResources m = Measured();
  model::TrialResources gpu = m;
  gpu.peak_gpu_memory_bytes = static_cast<uint64_t>(3 * kMetricMiB);
  const std::vector<MetricRow> rows = {
      {"no constraints and no metric objectives: unchanged",
       {},
       1,
       {},
       TrialState::kComplete,
       {0.5},
       {},
       m,
       TrialState::kComplete,
       0.5,
       {0.5},
       {},
       ""},
      {"<= holds (measured - limit < 0), >= violated (limit - measured > 0)",
       {},
       1,
       {Constraint("peak_memory", true, 256 * kMetricMiB), Constraint("wall", false, 40)},
       TrialState::kComplete,
       {0.5},
       {},
       m,
       TrialState::kComplete,
       0.5,
       {0.5},
       {-56 * kMetricMiB, 10},
       ""},
      {"measured constraints come after the reported ones",
       {},
       1,
       {Constraint("cpu_time", true, 10)},
       TrialState::kComplete,
       {0.5},
       {-1, 0},
       m,
       TrialState::kComplete,
       0.5,
       {0.5},
       {-1, 0, 2.5},
       ""},
      {"an unmeasured metric counts as violated with 1.0",
       {},
       1,
       {Constraint("peak_gpu_memory", true, 8 * kMetricMiB), Constraint("wall", true, 60)},
       TrialState::kComplete,
       {0.5},
       {},
       m,
       TrialState::kComplete,
       0.5,
       {0.5},
       {1.0, -30},
       ""},
      {"no resources at all: every constraint violated",
       {},
       1,
       {Constraint("peak_memory", true, 1), Constraint("wall", false, 0)},
       TrialState::kComplete,
       {0.5},
       {},
       std::nullopt,
       TrialState::kComplete,
       0.5,
       {0.5},
       {1.0, 1.0},
       ""},
      {"a PRUNED trial gets constraints too, and keeps its value",
       {},
       1,
       {Constraint("peak_memory", true, 100 * kMetricMiB)},
       TrialState::kPruned,
       {},
       {},
       m,
       TrialState::kPruned,
       0.75,
       {},
       {100 * kMetricMiB},
       ""},
      {"metric objectives follow the value, in objectives order; value unset",
       {"value", "cpu_time", "peak_memory"},
       3,
       {},
       TrialState::kComplete,
       {0.5},
       {},
       m,
       TrialState::kComplete,
       std::nullopt,
       {0.5, 12.5, 200 * kMetricMiB},
       {},
       ""},
      {"two worker values, then peak_gpu_memory, then a constraint",
       {"value", "value", "peak_gpu_memory"},
       3,
       {Constraint("peak_gpu_memory", true, 2 * kMetricMiB)},
       TrialState::kComplete,
       {0.5, 7},
       {},
       gpu,
       TrialState::kComplete,
       std::nullopt,
       {0.5, 7, 3 * kMetricMiB},
       {1 * kMetricMiB},
       ""},
      {"an unmeasured metric objective: FAIL(protocol) naming it",
       {"value", "peak_gpu_memory"},
       2,
       {Constraint("wall", true, 60)},
       TrialState::kComplete,
       {0.5},
       {-1},
       m,
       TrialState::kFail,
       std::nullopt,
       {},
       {},
       "objective peak_gpu_memory was not measured (no GPU memory sample of the trial's "
       "processes succeeded); [study] objectives needs it for every COMPLETE trial"},
      {"an unmeasured wall objective names triald's measurement",
       {"value", "wall"},
       2,
       {},
       TrialState::kComplete,
       {0.5},
       {},
       std::nullopt,
       TrialState::kFail,
       std::nullopt,
       {},
       {},
       "objective wall was not measured (triald could not measure it for this trial); [study] "
       "objectives needs it for every COMPLETE trial"},
      {"a PRUNED trial of a study with metric objectives has no values and no value",
       {"value", "peak_memory"},
       2,
       {Constraint("peak_memory", false, 300 * kMetricMiB)},
       TrialState::kPruned,
       {},
       {},
       std::nullopt,
       TrialState::kPruned,
       std::nullopt,
       {},
       {1.0},
       ""},
      {"a FAIL is left alone",
       {"value", "peak_memory"},
       2,
       {Constraint("peak_memory", true, 1)},
       TrialState::kFail,
       {},
       {},
       m,
       TrialState::kFail,
       std::nullopt,
       {},
       {},
       "exited with code 1"},
  };
  for (const MetricRow& row : rows) {
    INFO(row.name);
    config::StudyConfig study;
    study.objectives = row.objectives;
    study.directions.assign(row.directions, config::Direction::kMinimize);
    study.resource_constraints = row.constraints;
    model::TrialOutcome out;
    out.state = row.state;
    out.values = row.values;
    // As ClassifyExit sets value: the single worker value (COMPLETE), the last intermediate
    // value (PRUNED), nothing for FAIL.
    if (row.state == TrialState::kComplete && row.values.size() == 1) out.value = row.values[0];
    if (row.state == TrialState::kPruned) out.value = 0.75;
    out.constraints = row.reported;
    out.resources = row.resources;
    if (row.state == TrialState::kFail) {
      out.fail.reason = "exit";
      out.fail.exit_code = 1;
      out.fail.detail = "exited with code 1";
    }
    ApplyMeasured(study, &out);
    CHECK(out.state == row.want_state);
    CHECK(out.value == row.want_value);
    CHECK(out.values == row.want_values);
    CHECK(out.constraints == row.want_constraints);
    CHECK(out.resources == row.resources);
    if (row.want_state == TrialState::kFail) {
      CHECK(out.fail.detail == row.want_detail);
      if (row.state != TrialState::kFail) {
        CHECK(out.fail.reason == "protocol");
        CHECK(out.fail.exit_code == 0);
      }
    }
  }
}

TEST_CASE("ClassifyExit keeps the process's resources whatever the ending",
          "[scheduler][resources]") {
  for (int code : {0, 3}) {
    TrialObservation seen;
    seen.process.exit.code = code;
    seen.process.resources = Measured();
    seen.final_values = {1.5};
    model::TrialOutcome out = ClassifyExit(seen);
    CHECK(out.state == (code == 0 ? TrialState::kComplete : TrialState::kFail));
    REQUIRE(out.resources);
    CHECK(*out.resources == Measured());
  }
}

}  // namespace
}  // namespace triald::daemon
