#include "proto/control.h"

#include <cmath>

#include "common/json.h"
#include "common/utf8.h"

namespace triald::proto {
namespace json = boost::json;
using common::Code;
using common::InvalidArgument;
using common::Result;
using common::Status;

Result<Request> ParseRequest(std::string_view line) {
  if (line.size() > kMaxRequestBytes) {
    return InvalidArgument("request of " + std::to_string(line.size()) +
                           " bytes exceeds the limit of " + std::to_string(kMaxRequestBytes));
  }
  Result<json::value> v = common::ParseJsonExact(line, /*max_depth=*/32);
  if (!v.ok()) {
    // A JSON text is UTF-8: name the byte rather than a bare "syntax error".
    if (std::string bad = common::DescribeInvalidUtf8(line); !bad.empty()) {
      return InvalidArgument("request is not UTF-8 text: " + bad +
                             "; every string sent to triald (a sweep file included) must be UTF-8");
    }
    return InvalidArgument("request is not JSON: " + v.status().message());
  }
  if (!v->is_object()) return InvalidArgument("request is not a JSON object");
  if (!common::AllFinite(*v)) {
    return InvalidArgument("request has a number out of range (at most about 1.8e308)");
  }
  Request r;
  r.args = std::move(v->get_object());
  const json::value* verb = r.args.if_contains("verb");
  if (verb == nullptr || !verb->is_string()) {
    return InvalidArgument("request needs a string field \"verb\"");
  }
  r.verb = std::string(verb->get_string());
  return r;
}

std::string EncodeRequest(const std::string& verb, json::object args) {
  args["verb"] = verb;
  return common::SerializeJson(args) + "\n";
}

std::string EncodeOk(json::value result) {
  json::object o;
  o["ok"] = true;
  o["result"] = std::move(result);
  return common::SerializeJson(o) + "\n";
}

std::string EncodeError(const Status& status) {
  json::object o;
  o["ok"] = false;
  o["code"] = common::CodeName(status.code());
  o["error"] = status.message();
  return common::SerializeJson(o) + "\n";
}

namespace {
Code CodeFromName(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(Code::kInternal); ++c) {
    if (name == common::CodeName(static_cast<Code>(c))) return static_cast<Code>(c);
  }
  return Code::kInternal;
}
}  // namespace

Result<Response> ParseResponse(std::string_view line) {
  Result<json::value> v = common::ParseJsonExact(line, /*max_depth=*/64);
  if (!v.ok() || !v->is_object()) return common::Internal("malformed reply from triald");
  const json::object& o = v->get_object();
  const json::value* ok = o.if_contains("ok");
  if (ok == nullptr || !ok->is_bool()) return common::Internal("malformed reply from triald");
  Response r;
  r.ok = ok->get_bool();
  if (r.ok) {
    if (const json::value* res = o.if_contains("result")) r.result = *res;
  } else {
    const json::value* err = o.if_contains("error");
    const json::value* code = o.if_contains("code");
    std::string msg = err && err->is_string() ? std::string(err->get_string()) : "unknown error";
    Code c = code && code->is_string() ? CodeFromName(code->get_string()) : Code::kInternal;
    if (c == Code::kOk) c = Code::kInternal;
    r.error = Status(c, msg);
  }
  return r;
}

Result<std::string> GetString(const json::object& args, const char* key) {
  const json::value* v = args.if_contains(key);
  if (v == nullptr || !v->is_string()) {
    return InvalidArgument(std::string("request needs a string field \"") + key + "\"");
  }
  return std::string(v->get_string());
}

Result<int64_t> GetInt(const json::object& args, const char* key) {
  const json::value* v = args.if_contains(key);
  if (v != nullptr && v->is_int64()) return v->get_int64();
  if (v != nullptr && v->is_uint64() && v->get_uint64() <= INT64_MAX) {
    return static_cast<int64_t>(v->get_uint64());
  }
  return InvalidArgument(std::string("request needs an integer field \"") + key + "\"");
}

}  // namespace triald::proto
