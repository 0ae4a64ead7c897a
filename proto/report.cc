#include "proto/report.h"

#include <boost/json.hpp>
#include <cmath>

#include "common/json.h"

namespace triald::proto {
namespace json = boost::json;
using common::InvalidArgument;
using common::Result;
using common::Status;

const char* ReportTypeName(ReportType type) {
  switch (type) {
    case ReportType::kReport:
      return "report";
    case ReportType::kFinal:
      return "final";
    case ReportType::kAttr:
      return "attr";
    case ReportType::kError:
      return "error";
    case ReportType::kHeartbeat:
      return "heartbeat";
  }
  return "?";
}

namespace {

std::string Quote(std::string_view line) {
  constexpr size_t kMax = 200;
  std::string s(line.substr(0, kMax));
  if (line.size() > kMax) s += "...";
  return "`" + s + "`";
}

Result<double> Number(const json::value& v, const char* field) {
  double d;
  if (v.is_double()) {
    d = v.get_double();
  } else if (v.is_int64()) {
    d = static_cast<double>(v.get_int64());
  } else if (v.is_uint64()) {
    d = static_cast<double>(v.get_uint64());
  } else {
    return InvalidArgument(std::string("field \"") + field + "\" must be a number");
  }
  if (!std::isfinite(d)) {
    return InvalidArgument(std::string("field \"") + field + "\" must be finite");
  }
  return d;
}

// Every field of `obj` must be in `allowed`.
Status OnlyFields(const json::object& obj, std::initializer_list<const char*> allowed) {
  for (const auto& kv : obj) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || kv.key() == a;
    if (!ok) return InvalidArgument("unknown field \"" + std::string(kv.key()) + "\"");
  }
  return Status::Ok();
}

Status ParseBody(const json::object& obj, ReportMessage& m) {
  const json::value* type = obj.if_contains("type");
  if (type == nullptr || !type->is_string()) {
    return InvalidArgument("missing string field \"type\"");
  }
  const json::string& t = type->get_string();
  if (t == "report") {
    m.type = ReportType::kReport;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "step", "value"}));
    const json::value* step = obj.if_contains("step");
    if (step == nullptr) return InvalidArgument("report needs an integer field \"step\"");
    if (step->is_int64()) {
      m.step = step->get_int64();
    } else if (step->is_uint64() && step->get_uint64() <= INT64_MAX) {
      m.step = static_cast<int64_t>(step->get_uint64());
    } else {
      return InvalidArgument("field \"step\" must be an integer");
    }
    if (m.step < 0) return InvalidArgument("field \"step\" must be >= 0");
    const json::value* value = obj.if_contains("value");
    if (value == nullptr) return InvalidArgument("report needs a number field \"value\"");
    Result<double> v = Number(*value, "value");
    if (!v.ok()) return v.status();
    m.value = *v;
    return Status::Ok();
  }
  if (t == "final") {
    m.type = ReportType::kFinal;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "value", "values"}));
    const json::value* value = obj.if_contains("value");
    const json::value* values = obj.if_contains("values");
    if ((value == nullptr) == (values == nullptr)) {
      return InvalidArgument("final needs exactly one of \"value\" or \"values\"");
    }
    if (value != nullptr) {
      Result<double> v = Number(*value, "value");
      if (!v.ok()) return v.status();
      m.values = {*v};
    } else {
      if (!values->is_array() || values->get_array().empty()) {
        return InvalidArgument("field \"values\" must be a non-empty array of numbers");
      }
      for (const json::value& e : values->get_array()) {
        Result<double> v = Number(e, "values");
        if (!v.ok()) return v.status();
        m.values.push_back(*v);
      }
    }
    m.value = m.values.front();
    return Status::Ok();
  }
  if (t == "attr") {
    m.type = ReportType::kAttr;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "key", "value"}));
    const json::value* key = obj.if_contains("key");
    if (key == nullptr || !key->is_string() || key->get_string().empty()) {
      return InvalidArgument("attr needs a non-empty string field \"key\"");
    }
    if (key->get_string().size() > kMaxAttrKeyBytes) {
      return InvalidArgument("attr key longer than " + std::to_string(kMaxAttrKeyBytes) + " bytes");
    }
    const json::value* value = obj.if_contains("value");
    if (value == nullptr) return InvalidArgument("attr needs a field \"value\"");
    if (!common::AllFinite(*value))
      return InvalidArgument("field \"value\" must hold finite numbers only");
    m.key = std::string(key->get_string());
    m.json_value = json::serialize(*value);
    return Status::Ok();
  }
  if (t == "error") {
    m.type = ReportType::kError;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "message"}));
    const json::value* msg = obj.if_contains("message");
    if (msg == nullptr || !msg->is_string()) {
      return InvalidArgument("error needs a string field \"message\"");
    }
    m.message = std::string(msg->get_string());
    return Status::Ok();
  }
  if (t == "heartbeat") {
    m.type = ReportType::kHeartbeat;
    return OnlyFields(obj, {"type"});
  }
  return InvalidArgument("unknown type \"" + std::string(t) +
                         "\"; expected report, final, attr, error or heartbeat");
}

}  // namespace

Result<ReportMessage> ParseReportLine(std::string_view line) {
  if (line.size() > kMaxReportLineBytes) {
    return InvalidArgument("report line of " + std::to_string(line.size()) +
                           " bytes exceeds the limit of " + std::to_string(kMaxReportLineBytes));
  }
  // Exact number conversion: the stored objective must be the worker's double, bit for bit.
  Result<json::value> v = common::ParseJsonExact(line, /*max_depth=*/16);
  if (!v.ok()) return InvalidArgument("not JSON (" + v.status().message() + "): " + Quote(line));
  if (!v->is_object()) return InvalidArgument("not a JSON object: " + Quote(line));
  ReportMessage m;
  Status st = ParseBody(v->get_object(), m);
  if (!st.ok()) return InvalidArgument(st.message() + ": " + Quote(line));
  return m;
}

std::string EncodeReportLine(const ReportMessage& m) {
  json::object o;
  o["type"] = ReportTypeName(m.type);
  switch (m.type) {
    case ReportType::kReport:
      o["step"] = m.step;
      o["value"] = m.value;
      break;
    case ReportType::kFinal:
      if (m.values.size() > 1) {
        json::array a;
        for (double d : m.values) a.push_back(d);
        o["values"] = std::move(a);
      } else {
        o["value"] = m.values.empty() ? m.value : m.values.front();
      }
      break;
    case ReportType::kAttr: {
      o["key"] = m.key;
      // Exact parsing: boost::json::parse may be one ulp off (common/json.h), and the value
      // must reach the daemon as the worker's double, bit for bit.
      Result<json::value> v = common::ParseJsonExact(m.json_value, /*max_depth=*/16);
      o["value"] = v.ok() ? std::move(*v) : json::value(m.json_value);
      break;
    }
    case ReportType::kError:
      o["message"] = m.message;
      break;
    case ReportType::kHeartbeat:
      break;
  }
  return json::serialize(o) + "\n";
}

}  // namespace triald::proto
