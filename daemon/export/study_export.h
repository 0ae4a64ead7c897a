#pragma once
// A study as trialctl exports and reports it, read from the control socket's "export" reply
// (daemon/control/study_json.h, StudyExportJson), and the exports written from it:
//   - CSV: one row per trial, columns number,state,value,reason,params_<name>... (parameter
//     names sorted, as Optuna's trials_dataframe does),user_attrs_<key>... (the trials' user
//     attributes, keys sorted, as trials_dataframe names them; JSON for values that are not
//     strings),datetime_start,datetime_complete,duration
//     (seconds); RFC 4180 quoting; datetimes in local time with their UTC offset. A study with
//     several objectives has values_0..values_{n-1} in place of value (as trials_dataframe
//     names them); a study where any trial reported constraints has constraints_0..
//     constraints_{k-1} (k: the most any trial reported) and feasible (True/False) after them.
//     After duration, what triald measured: peak_memory_bytes, peak_gpu_memory_bytes,
//     cpu_time_s, wall_s, memory_source, cpu_source (empty cells where not measured).
//   - JSON: the reply itself, with numbers written as Python writes them (shortest exact form).
//   - Optuna: an SQLite file with Optuna 3.1's schema (alembic head v3.0.0.d, version_info
//     schema 12), so optuna.load_study and optuna-dashboard read it as one of their own: every
//     direction, every objective's value, and constraints in the trial system attribute
//     "constraints", where Optuna 3.1's samplers read them (optuna.samplers._base
//     _CONSTRAINTS_KEY).
//
// Trialctl reads everything through the control socket, so exports work wherever trialctl
// reaches the daemon; only this target links SQLite on the client side.
//
// Thread-safety: pure functions over plain values.

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "daemon/model/records.h"

namespace triald::exports {

struct ExportParam {
  std::string name;
  double internal = 0;  // Optuna's internal representation (a categorical's choice index)
  config::Distribution dist;
  boost::json::value external;  // the value as the worker saw it
};

struct ExportTrial {
  int number = 0;
  std::string state;            // WAITING RUNNING COMPLETE PRUNED FAIL
  std::optional<double> value;  // may be NaN or infinite; unset with several objectives
  // COMPLETE: one per objective ({value} for one objective); empty otherwise.
  std::vector<double> values;
  std::vector<double> constraints;  // as reported; empty: none
  bool feasible = true;             // every constraint <= 0 (model::Feasible)
  std::string fail_reason;          // FAIL only
  std::string fail_detail;
  std::vector<ExportParam> params;                       // sorted by name
  std::vector<std::pair<int64_t, double>> intermediate;  // by step
  boost::json::object attrs;                             // worker attributes, parsed JSON
  double created_at = 0;                                 // unix seconds
  double started_at = 0;                                 // 0: never started
  double finished_at = 0;                                // 0: not finished
  std::optional<int64_t> retry_of;
  // What triald measured ("resources" of the trial's JSON); unset when nothing was (a trial
  // not yet run, or stored before triald measured resources).
  std::optional<model::TrialResources> resources;
};

struct StudyData {
  std::string name;
  std::string state;                    // RUNNING COMPLETE CANCELLED
  std::string direction;                // minimize | maximize (directions[0])
  std::vector<std::string> directions;  // one per objective
  // [study] metric_names: one per objective, or none. The CSV names its value columns after
  // them (value_NAME, values_NAME) and Optuna's storage keeps them (study:metric_names), as
  // Optuna's set_metric_names does.
  std::vector<std::string> metric_names;
  int n_trials = 0;
  std::vector<std::string> param_names;  // every trial's parameters, sorted
  std::vector<ExportTrial> trials;       // by number
  boost::json::value reply;              // the reply as received
  // The best trials by `trialctl best`'s rule (daemon/control/best.h): one objective, the best
  // feasible COMPLETE trial (none or one number); several, the Pareto front of the feasible
  // COMPLETE trials. Trial numbers, ascending.
  std::vector<int> best;
};

// StudyData::best of `study`'s trials (ParseStudyExport fills it in).
std::vector<int> BestTrialNumbers(const StudyData& study);
// The Pareto front of the feasible COMPLETE trials over the objectives `a` and `b` alone (trial
// numbers, ascending): the report's pairwise plots for three or more objectives.
std::vector<int> PairwiseFront(const StudyData& study, size_t a, size_t b);

// Checks and reads an "export" reply; errors name the trial and field that is wrong.
common::Result<StudyData> ParseStudyExport(boost::json::value reply);

struct JsonStyle {
  bool python_spacing = false;  // ", " and ": " between items, as Python's json.dumps
  bool html_safe = false;       // '<', '>' and '&' as \u escapes, for embedding in <script>
};
// JSON text of `v`: doubles in their shortest exact form with Python's layout (0.1, 1e-05,
// 1.0), strings escaped per RFC 8259.
std::string WriteJson(const boost::json::value& v, JsonStyle style = {});

std::string ToCsv(const StudyData& study);
std::string ToJson(const StudyData& study);

// Optuna's distribution_json for `d`, as optuna.distributions.distribution_to_json writes it.
std::string OptunaDistributionJson(const config::Distribution& d);
// "YYYY-MM-DD HH:MM:SS.ffffff" in local time, as SQLAlchemy stores Optuna's datetime.now().
std::string OptunaDatetime(double unix_seconds);

// Writes the study as a new Optuna 3.1 SQLite storage at `path` (built beside it and renamed
// into place, so a failure leaves no half-written file). An existing file is an error unless
// `overwrite`. Trial ids are number + 1; failed trials carry triald_fail_reason and
// triald_fail_detail, retries triald_retry_of, as user attributes; measured resources are the
// user attributes triald_peak_memory_bytes, triald_peak_gpu_memory_bytes (integers),
// triald_cpu_time_s, triald_wall_s (floats), triald_memory_source and triald_cpu_source
// (strings), each present only when measured.
common::Status WriteOptunaStorage(const StudyData& study, const std::string& path, bool overwrite);

}  // namespace triald::exports
