#include "daemon/control/requests.h"

#include "common/json.h"
#include "common/utf8.h"
#include "proto/control.h"

namespace triald::daemon {
namespace json = boost::json;
using common::Result;

Result<model::StudyRecord> LookUpStudy(storage::ReadModel& storage, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  Result<model::StudyRecord> rec = storage.GetStudy(name);
  if (!rec.ok() && rec.status().code() == common::Code::kNotFound) {
    return common::NotFound("no study named \"" + name + "\" (see `trialctl studies`)");
  }
  return rec;
}

namespace {

// submit's "code": the objective's files as trialctl read them (config::CodeFile), checked for
// shape and size only: what they say is the submitter's account, shown back to them.
Result<std::vector<config::CodeFile>> DecodeCode(const json::object& args) {
  std::vector<config::CodeFile> files;
  const json::value* code = args.if_contains("code");
  if (code == nullptr || code->is_null()) return files;
  const std::string expected =
      "field \"code\" must be an array of at most " + std::to_string(config::kMaxCodeFiles) +
      " objects {path: an absolute path, sha256: 64 hex digits, bytes: an integer >= 0, source: "
      "UTF-8 text of at most " +
      std::to_string(config::kMaxKeptSourceBytes) + " bytes}";
  if (!code->is_array() || code->as_array().size() > config::kMaxCodeFiles) {
    return common::InvalidArgument(expected);
  }
  for (const json::value& e : code->as_array()) {
    const json::object* f = e.if_object();
    if (f == nullptr) return common::InvalidArgument(expected);
    config::CodeFile file;
    const json::value* path = f->if_contains("path");
    const json::value* sha = f->if_contains("sha256");
    const json::value* bytes = f->if_contains("bytes");
    const json::value* source = f->if_contains("source");
    if (path == nullptr || !path->is_string() || path->as_string().empty() ||
        path->as_string()[0] != '/' || path->as_string().size() > 4096 || sha == nullptr ||
        !sha->is_string() || sha->as_string().size() != 64 || bytes == nullptr ||
        !bytes->is_int64() || bytes->as_int64() < 0 ||
        (source != nullptr && !source->is_null() &&
         (!source->is_string() || source->as_string().size() > config::kMaxKeptSourceBytes))) {
      return common::InvalidArgument(expected);
    }
    file.path = std::string(path->as_string());
    file.sha256 = std::string(sha->as_string());
    if (file.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return common::InvalidArgument(expected);
    }
    file.bytes = static_cast<uint64_t>(bytes->as_int64());
    if (source != nullptr && source->is_string()) file.source = std::string(source->as_string());
    if (!common::DescribeInvalidUtf8(file.path).empty() ||
        !common::DescribeInvalidUtf8(file.source).empty()) {
      return common::InvalidArgument(expected);
    }
    files.push_back(std::move(file));
  }
  return files;
}

}  // namespace

Result<EnqueueArgs> DecodeEnqueue(const json::object& args) {
  EnqueueArgs e;
  TRIALD_ASSIGN_OR_RETURN(e.study, proto::GetString(args, "study"));
  TRIALD_ASSIGN_OR_RETURN(e.params, DecodeEnqueueParams(args));
  if (const json::value* v = args.if_contains("skip_if_exists"); v != nullptr && !v->is_null()) {
    if (!v->is_bool()) return common::InvalidArgument("field \"skip_if_exists\" must be a boolean");
    e.skip_if_exists = v->as_bool();
  }
  return e;
}

Result<DeleteArgs> DecodeDelete(const json::object& args) {
  DeleteArgs d;
  TRIALD_ASSIGN_OR_RETURN(d.study, proto::GetString(args, "study"));
  if (const json::value* p = args.if_contains("purge"); p != nullptr && !p->is_null()) {
    if (!p->is_bool()) return common::InvalidArgument("argument \"purge\" must be true or false");
    d.purge = p->get_bool();
  }
  return d;
}

Result<config::SweepSource> DecodeSubmit(const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string text, proto::GetString(args, "sweep"));
  std::string path;
  if (const json::value* p = args.if_contains("path"); p && p->is_string()) {
    path = std::string(p->get_string());
  }
  if (text.size() > proto::kMaxSweepBytes) {
    return common::InvalidArgument("sweep " + (path.empty() ? std::string("<sweep>") : path) +
                                   " is " + std::to_string(text.size()) +
                                   " bytes; expected at most " +
                                   std::to_string(proto::kMaxSweepBytes) + " bytes (2 MiB)");
  }
  config::SweepSource source{text, path, {}};
  // The submitter's choices outside the file (trialctl submit --name, and the interpreter it
  // resolved in the submitter's environment); ParseSweep checks them.
  for (auto [key, out] : {std::pair<const char*, std::string*>{"name", &source.submit.name},
                          {"python", &source.submit.python},
                          {"python_version", &source.submit.python_version}}) {
    const json::value* v = args.if_contains(key);
    if (v == nullptr || v->is_null()) continue;
    if (!v->is_string() || v->get_string().size() > 4096) {
      return common::InvalidArgument(std::string("field \"") + key +
                                     "\" must be a string of at most 4096 bytes");
    }
    *out = std::string(v->get_string());
  }
  TRIALD_ASSIGN_OR_RETURN(source.submit.code, DecodeCode(args));
  if (const json::value* r = args.if_contains("resume"); r != nullptr && !r->is_null()) {
    if (!r->is_bool()) return common::InvalidArgument("field \"resume\" must be a boolean");
    source.resume = r->as_bool();
  }
  return source;
}

Result<std::map<std::string, std::string>> DecodeEnqueueParams(const json::object& args) {
  std::map<std::string, std::string> params;
  const json::value* p = args.if_contains("params");
  if (p == nullptr || p->is_null()) return params;
  if (!p->is_object()) {
    return common::InvalidArgument(
        "field \"params\" must be an object of parameter name to value text");
  }
  for (const auto& kv : p->get_object()) {
    const json::value& v = kv.value();
    // Values are text as a user typed them; a JSON number or boolean is taken as its text.
    if (v.is_string()) {
      params[std::string(kv.key())] = std::string(v.get_string());
    } else if (v.is_number() || v.is_bool()) {
      params[std::string(kv.key())] = common::SerializeJson(v);
    } else {
      return common::InvalidArgument("params." + std::string(kv.key()) +
                                     " must be a string (the value as text)");
    }
  }
  return params;
}

Result<std::string> DecodeLogStream(const json::object& args) {
  std::string stream = "stdout";
  if (const json::value* v = args.if_contains("stream"); v && v->is_string()) {
    stream = std::string(v->get_string());
  }
  if (stream != "stdout" && stream != "stderr") {
    return common::InvalidArgument("stream \"" + stream + "\"; expected stdout or stderr");
  }
  return stream;
}

}  // namespace triald::daemon
