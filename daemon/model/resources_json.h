#pragma once
// model::TrialResources as JSON: the one shape storage keeps (trials.resources_json) and the
// control replies carry ("resources" of a trial; trialctl's --json, its report and exports):
//   {"peak_memory_bytes": int|null, "memory_source": "...", "peak_gpu_memory_bytes": int|null,
//    "cpu_time_s": number|null, "cpu_source": "...", "wall_s": number|null}
// Unmeasured fields are null (sources ""). Reading takes missing keys as unmeasured, so rows
// written before a field existed read back.
//
// Thread-safety: pure functions.

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <string>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::model {

boost::json::object ResourcesToJson(const TrialResources& resources);
// kInvalidArgument naming `where` and the field when `v` is not such an object (a negative or
// fractional byte count, a non-number). Keys it does not know ("planned_memory_bytes" of the
// control replies) are skipped.
common::Result<TrialResources> ResourcesFromJson(const boost::json::value& v,
                                                 const std::string& where);

}  // namespace triald::model
