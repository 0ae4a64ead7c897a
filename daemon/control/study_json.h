#pragma once
// The JSON views of studies and trials that the control replies carry (and so trialctl's --json
// output, its report and its exports). Field by field they are described in daemon/README.md
// (CLI reference, trialctl) and read back by daemon/export/study_export.h.
//
// Thread-safety: pure functions.

#include <boost/json.hpp>
#include <optional>
#include <vector>

#include "daemon/model/records.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

// A number as JSON: null when absent, "nan", "inf" or "-inf" when not finite (JSON has none).
boost::json::value JsonNumber(std::optional<double> v);

// A trial as the views show it. "intermediate" ([[step, value], ...]) is there when the read
// loaded the values and left out when it counted them (storage::Curves::kCount);
// "intermediate_steps" is their number either way.
boost::json::object TrialToJson(const model::TrialRecord& trial);
// A study with its progress (trial counts, mean run time) and best trial (null when none; without
// "intermediate", whatever it holds), as `studies` and `status` show it; built from
// Storage::CountTrials and GetBestTrial, so its cost and size do not grow with the study or
// with what its trials reported.
boost::json::object StudySummaryJson(const model::StudyRecord& study,
                                     const storage::TrialCounts& counts,
                                     const model::TrialRecord* best);
// One trial of the "export" reply: TrialToJson plus params_internal {name: internal value (a
// categorical's choice index)} and distributions {name: Distribution::ToJson as an object}.
// The reply is {study: StudySummaryJson, trials: [ExportTrialJson]}: everything trialctl's
// report and exports need.
boost::json::object ExportTrialJson(const model::TrialRecord& trial);
// The study's objective names ([study] metric_names, set_metric_names) as a JSON array; null
// when it has none.
boost::json::value MetricNamesJson(const model::StudyRecord& study);
// The objective's files kept at submit: [{path, sha256, bytes, ...}], with "source_kept", or
// with "source" (null where not kept) when `with_source` (the `code` verb, for the owner).
boost::json::array CodeFilesJson(const std::vector<config::CodeFile>& files, bool with_source);

}  // namespace triald::daemon
