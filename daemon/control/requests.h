#pragma once
// Request decoding for the control verbs: each function reads one verb's arguments out of a
// request object (proto::Request::args, already checked to be JSON with a string verb) and
// returns them typed, or an error naming the field. Generic typed access (proto::GetString,
// proto::GetInt) is in proto/control.h; what is specific to a verb is here.
//
// Thread-safety: pure functions, except LookUpStudy, which reads Storage (event-loop thread).

#include <boost/json.hpp>
#include <map>
#include <string>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/storage/read_model.h"

namespace triald::daemon {

// The study named by field "study": invalid_argument when the field is missing or not a string,
// not_found (pointing at `trialctl studies`) when no study has that name.
common::Result<model::StudyRecord> LookUpStudy(storage::ReadModel& storage,
                                               const boost::json::object& args);

// submit: the sweep text ("sweep", required) and the file it came from ("path", optional).
common::Result<config::SweepSource> DecodeSubmit(const boost::json::object& args);

// delete: the study ("study", required) and whether its folder goes too ("purge", optional:
// true or false).
struct DeleteArgs {
  std::string study;
  bool purge = false;
};
common::Result<DeleteArgs> DecodeDelete(const boost::json::object& args);

// enqueue: field "params" ({name: value text}; missing or null: none). A JSON number or boolean
// value is taken as its text, as a user would have typed it.
common::Result<std::map<std::string, std::string>> DecodeEnqueueParams(
    const boost::json::object& args);

// enqueue: the study ("study", required), its params (DecodeEnqueueParams) and
// "skip_if_exists" (optional: true or false).
struct EnqueueArgs {
  std::string study;
  std::map<std::string, std::string> params;
  bool skip_if_exists = false;
};
common::Result<EnqueueArgs> DecodeEnqueue(const boost::json::object& args);

// logs: field "stream", "stdout" (the default) or "stderr".
common::Result<std::string> DecodeLogStream(const boost::json::object& args);

}  // namespace triald::daemon
