#pragma once
// The control protocol between trialctl and triald over the daemon's unix socket: one JSON
// object per line each way. A request names its verb; a response is
//   {"ok":true,"result":...}   or   {"ok":false,"code":"not_found","error":"..."}.
// Requests are capped at kMaxRequestBytes (a sweep file travels inside "submit").
//
// Verbs and their arguments (the verb table and the replies: daemon/control/verbs.h):
//   submit {sweep: TOML text, path: absolute path of the file, name?: a study name replacing
//           the file's, python?: the trials' interpreter (absolute), python_version?}
//   studies {}            status {study}          trials {study}
//   best {study}          cancel {study}          logs {study, trial, stream: stdout|stderr}
//   ping {}               nodes {}                export {study}   (the study and its trials
//                                                 with distributions)
//   enqueue {study, params: {name: value text}}
//   pause {study}         resume {study}          extend {study, n_trials}
//   set {study, parallelism}                      delete {study, purge}
//   events {study?}
//
// Thread-safety: pure functions.

#include <boost/json.hpp>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace triald::proto {

inline constexpr size_t kMaxRequestBytes = 4 * 1024 * 1024;
// The largest sweep file "submit" takes (its text, before JSON escaping, which may grow it; the
// request as a whole must still fit kMaxRequestBytes).
inline constexpr size_t kMaxSweepBytes = 2 * 1024 * 1024;
inline constexpr size_t kMaxResponseBytes = 256 * 1024 * 1024;

struct Request {
  std::string verb;
  boost::json::object args;  // the whole request object, verb included
};

common::Result<Request> ParseRequest(std::string_view line);
std::string EncodeRequest(const std::string& verb, boost::json::object args);

struct Response {
  bool ok = false;
  boost::json::value result;  // when ok
  common::Status error;       // when !ok
};

std::string EncodeOk(boost::json::value result);
std::string EncodeError(const common::Status& status);
common::Result<Response> ParseResponse(std::string_view line);

// Typed access to request arguments, with errors naming the argument.
common::Result<std::string> GetString(const boost::json::object& args, const char* key);
common::Result<int64_t> GetInt(const boost::json::object& args, const char* key);

}  // namespace triald::proto
