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

namespace triald::daemon {

// A number as JSON: null when absent, "nan", "inf" or "-inf" when not finite (JSON has none).
boost::json::value JsonNumber(std::optional<double> v);

boost::json::object TrialToJson(const model::TrialRecord& trial);
boost::json::object StudySummaryJson(const model::StudyRecord& study,
                                     const std::vector<model::TrialRecord>& trials);
// The "export" reply: {study: StudySummaryJson, trials: [TrialToJson plus params_internal
// {name: internal value (a categorical's choice index)} and distributions {name:
// Distribution::ToJson as an object}]}; everything trialctl's report and exports need.
boost::json::object StudyExportJson(const model::StudyRecord& study,
                                    const std::vector<model::TrialRecord>& trials);
// The best COMPLETE trial for the direction, or nullptr.
const model::TrialRecord* BestTrial(const model::StudyRecord& study,
                                    const std::vector<model::TrialRecord>& trials);

}  // namespace triald::daemon
