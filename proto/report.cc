#include "proto/report.h"

#include <boost/json.hpp>
#include <cmath>
#include <utility>

#include "common/json.h"
#include "common/utf8.h"

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
    case ReportType::kSuggest:
      return "suggest";
    case ReportType::kShouldPrune:
      return "should_prune";
    case ReportType::kPruned:
      return "pruned";
    case ReportType::kConstraints:
      return "constraints";
    case ReportType::kRelativeParams:
      return "relative_params";
  }
  return "?";
}

const char* AnswerTypeName(AnswerType type) {
  switch (type) {
    case AnswerType::kSuggestion:
      return "suggestion";
    case AnswerType::kShouldPrune:
      return "should_prune";
    case AnswerType::kError:
      return "error";
    case AnswerType::kRelativeParams:
      return "relative_params";
  }
  return "?";
}

namespace {

bool SameDouble(double a, double b) {
  // Bit for bit, so that -0.0 and 0.0 differ as they do on the wire.
  return a == b && std::signbit(a) == std::signbit(b);
}

bool SameNumber(const std::optional<SuggestNumber>& a, const std::optional<SuggestNumber>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  if (a->is_integer != b->is_integer) return false;
  return a->is_integer ? a->integer == b->integer : SameDouble(a->value, b->value);
}

bool SameChoice(const SuggestChoice& a, const SuggestChoice& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) return SameDouble(*x, std::get<double>(b));
  return a == b;
}

}  // namespace

bool SuggestDistribution::operator==(const SuggestDistribution& o) const {
  if (type != o.type || !SameNumber(low, o.low) || !SameNumber(high, o.high) ||
      !SameNumber(step, o.step) || step_null != o.step_null || log != o.log ||
      choices.has_value() != o.choices.has_value()) {
    return false;
  }
  if (!choices) return true;
  if (choices->size() != o.choices->size()) return false;
  for (size_t i = 0; i < choices->size(); ++i) {
    if (!SameChoice((*choices)[i], (*o.choices)[i])) return false;
  }
  return true;
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

// A number field of a suggest's distribution (`field` is its full name for messages).
Result<SuggestNumber> DistributionNumber(const json::value& v, const std::string& field) {
  SuggestNumber n;
  if (v.is_int64()) {
    n.is_integer = true;
    n.integer = v.get_int64();
    n.value = static_cast<double>(n.integer);
    return n;
  }
  if (v.is_uint64()) {  // above INT64_MAX: no int distribution can use it, a float one may
    n.value = static_cast<double>(v.get_uint64());
    return n;
  }
  if (!v.is_double()) {
    return InvalidArgument("field \"" + field + "\" must be a number, not " + json::serialize(v));
  }
  n.value = v.get_double();
  if (!std::isfinite(n.value)) {
    return InvalidArgument("field \"" + field + "\" must be finite");
  }
  return n;
}

Status ParseDistribution(const json::value& v, SuggestDistribution& d) {
  if (!v.is_object()) {
    return InvalidArgument("field \"distribution\" must be an object, not " + json::serialize(v));
  }
  const json::object& obj = v.get_object();
  for (const auto& kv : obj) {
    std::string_view k = kv.key();
    if (k != "type" && k != "low" && k != "high" && k != "step" && k != "log" && k != "choices") {
      return InvalidArgument("unknown field \"distribution." + std::string(k) +
                             "\"; expected type, low, high, step, log or choices");
    }
  }
  const json::value* type = obj.if_contains("type");
  if (type == nullptr || !type->is_string()) {
    return InvalidArgument("missing string field \"distribution.type\"");
  }
  d.type = std::string(type->get_string());
  for (const char* field : {"low", "high"}) {
    if (const json::value* x = obj.if_contains(field)) {
      TRIALD_ASSIGN_OR_RETURN(SuggestNumber n,
                              DistributionNumber(*x, std::string("distribution.") + field));
      (field[0] == 'l' ? d.low : d.high) = n;
    }
  }
  if (const json::value* step = obj.if_contains("step")) {
    if (step->is_null()) {
      d.step_null = true;
    } else {
      TRIALD_ASSIGN_OR_RETURN(d.step, DistributionNumber(*step, "distribution.step"));
    }
  }
  if (const json::value* log = obj.if_contains("log")) {
    if (!log->is_bool()) {
      return InvalidArgument("field \"distribution.log\" must be true or false, not " +
                             json::serialize(*log));
    }
    d.log = log->get_bool();
  }
  if (const json::value* choices = obj.if_contains("choices")) {
    if (!choices->is_array()) {
      return InvalidArgument("field \"distribution.choices\" must be an array, not " +
                             json::serialize(*choices));
    }
    d.choices.emplace();
    const json::array& a = choices->get_array();
    for (size_t i = 0; i < a.size(); ++i) {
      const json::value& c = a[i];
      std::string field = "distribution.choices[" + std::to_string(i) + "]";
      if (c.is_bool()) {
        d.choices->emplace_back(c.get_bool());
      } else if (c.is_int64()) {
        d.choices->emplace_back(c.get_int64());
      } else if (c.is_string()) {
        d.choices->emplace_back(std::string(c.get_string()));
      } else if (c.is_double()) {
        if (!std::isfinite(c.get_double())) {
          return InvalidArgument("field \"" + field + "\" must be finite");
        }
        d.choices->emplace_back(c.get_double());
      } else if (c.is_uint64()) {
        return InvalidArgument("field \"" + field + "\" = " + json::serialize(c) +
                               " is beyond the 64-bit signed integer range");
      } else {
        return InvalidArgument("field \"" + field + "\" must be a string, integer, float or " +
                               "bool, not " + json::serialize(c));
      }
    }
  }
  return Status::Ok();
}

// The body of an "error" line, either direction: {"type":"error","message":"..."}.
Status ErrorMessage(const json::object& obj, std::string& message) {
  TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "message"}));
  const json::value* msg = obj.if_contains("message");
  if (msg == nullptr || !msg->is_string()) {
    return InvalidArgument("error needs a string field \"message\"");
  }
  message = std::string(msg->get_string());
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
  if (t == "constraints") {
    m.type = ReportType::kConstraints;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "values"}));
    const json::value* values = obj.if_contains("values");
    const std::string expected = "an array of 1 to " + std::to_string(kMaxConstraints) +
                                 " finite numbers (feasible when every one is <= 0)";
    if (values == nullptr)
      return InvalidArgument("constraints needs a field \"values\": " + expected);
    if (!values->is_array() || values->get_array().empty() ||
        values->get_array().size() > kMaxConstraints) {
      const std::string got = values->is_array()
                                  ? std::to_string(values->get_array().size()) + " values"
                                  : json::serialize(*values).substr(0, 40);
      return InvalidArgument("field \"values\" must be " + expected + ", not " + got);
    }
    for (const json::value& e : values->get_array()) {
      Result<double> v = Number(e, "values");
      if (!v.ok()) return v.status();
      m.values.push_back(*v);
    }
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
    return ErrorMessage(obj, m.message);
  }
  if (t == "heartbeat") {
    m.type = ReportType::kHeartbeat;
    return OnlyFields(obj, {"type"});
  }
  if (t == "suggest") {
    m.type = ReportType::kSuggest;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "name", "distribution"}));
    const json::value* name = obj.if_contains("name");
    if (name == nullptr || !name->is_string() || name->get_string().empty()) {
      return InvalidArgument("suggest needs a non-empty string field \"name\"");
    }
    if (name->get_string().size() > kMaxParamNameBytes) {
      return InvalidArgument("field \"name\" is longer than " + std::to_string(kMaxParamNameBytes) +
                             " bytes");
    }
    m.name = std::string(name->get_string());
    const json::value* dist = obj.if_contains("distribution");
    if (dist == nullptr) return InvalidArgument("suggest needs an object field \"distribution\"");
    return ParseDistribution(*dist, m.distribution);
  }
  if (t == "should_prune") {
    m.type = ReportType::kShouldPrune;
    return OnlyFields(obj, {"type"});
  }
  if (t == "pruned") {
    m.type = ReportType::kPruned;
    return OnlyFields(obj, {"type"});
  }
  if (t == "relative_params") {
    m.type = ReportType::kRelativeParams;
    return OnlyFields(obj, {"type"});
  }
  return InvalidArgument("unknown type \"" + std::string(t) +
                         "\"; expected report, final, constraints, attr, error, heartbeat, "
                         "suggest, should_prune, relative_params or pruned");
}

// One line of either direction: at most `limit` bytes, one JSON object, decoded by `body`.
// Errors quote the line. Exact number conversion: a stored objective must be the worker's
// double, bit for bit.
template <class Message, class Body>
Result<Message> ParseObjectLine(std::string_view line, const char* what, size_t limit, Body body) {
  if (line.size() > limit) {
    return InvalidArgument(std::string(what) + " line of " + std::to_string(line.size()) +
                           " bytes exceeds the limit of " + std::to_string(limit));
  }
  Result<json::value> v = common::ParseJsonExact(line, /*max_depth=*/16);
  if (!v.ok()) return InvalidArgument("not JSON (" + v.status().message() + "): " + Quote(line));
  if (!v->is_object()) return InvalidArgument("not a JSON object: " + Quote(line));
  Message m;
  Status st = body(v->get_object(), m);
  if (!st.ok()) return InvalidArgument(st.message() + ": " + Quote(line));
  return m;
}

}  // namespace

Result<ReportMessage> ParseReportLine(std::string_view line) {
  return ParseObjectLine<ReportMessage>(line, "report", kMaxReportLineBytes, ParseBody);
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
    case ReportType::kConstraints: {
      json::array a;
      for (double d : m.values) a.push_back(d);
      o["values"] = std::move(a);
      break;
    }
    case ReportType::kHeartbeat:
    case ReportType::kShouldPrune:
    case ReportType::kPruned:
    case ReportType::kRelativeParams:
      break;
    case ReportType::kSuggest: {
      o["name"] = m.name;
      const SuggestDistribution& d = m.distribution;
      json::object dist;
      dist["type"] = d.type;
      auto number = [](const SuggestNumber& n) {
        return n.is_integer ? json::value(n.integer) : json::value(n.value);
      };
      if (d.low) dist["low"] = number(*d.low);
      if (d.high) dist["high"] = number(*d.high);
      if (d.step) {
        dist["step"] = number(*d.step);
      } else if (d.step_null) {
        dist["step"] = nullptr;
      }
      if (d.log) dist["log"] = *d.log;
      if (d.choices) {
        json::array a;
        for (const SuggestChoice& c : *d.choices) {
          std::visit([&a](const auto& x) { a.emplace_back(x); }, c);
        }
        dist["choices"] = std::move(a);
      }
      o["distribution"] = std::move(dist);
      break;
    }
  }
  return json::serialize(o) + "\n";
}

// ---- Answers ----

std::string EncodeSuggestionAnswer(std::string_view name, std::string_view value_json) {
  Result<json::value> v = common::ParseJsonExact(value_json, /*max_depth=*/16);
  if (!v.ok() || !common::AllFinite(*v) ||
      value_json.find_first_of("\n\r") != std::string_view::npos) {
    return EncodeErrorAnswer(
        "triald cannot encode the value of parameter \"" + common::SanitizeUtf8(name) +
        "\": " + common::SanitizeUtf8(value_json.substr(0, 200)) + " is not one finite JSON value");
  }
  // The value text is copied as given: serialising the parsed value would write 1.0 as 1E0.
  return "{\"type\":\"suggestion\",\"name\":" + common::JsonQuote(name) +
         ",\"value\":" + std::string(value_json) + "}\n";
}

std::string EncodeShouldPruneAnswer(bool prune) {
  return prune ? "{\"type\":\"should_prune\",\"value\":true}\n"
               : "{\"type\":\"should_prune\",\"value\":false}\n";
}

std::string EncodeRelativeParamsAnswer(std::string_view params_json) {
  common::Result<json::value> parsed = common::ParseJsonExact(params_json);
  if (!parsed.ok() || !parsed->is_object() || !common::AllFinite(*parsed)) {
    return EncodeErrorAnswer("triald cannot encode the relative parameters: " +
                             common::SanitizeUtf8(params_json.substr(0, 200)) +
                             " is not a JSON object of finite values");
  }
  // The values' text is copied as given, as a suggestion's is (a float stays a float).
  std::string line = "{\"type\":\"relative_params\",\"params\":" + std::string(params_json) + "}";
  if (line.size() > kMaxAnswerLineBytes) {
    return EncodeErrorAnswer("the trial's relative parameters take " + std::to_string(line.size()) +
                             " bytes, more than an answer line's " +
                             std::to_string(kMaxAnswerLineBytes));
  }
  return line + "\n";
}

std::string EncodeErrorAnswer(std::string_view message) {
  std::string text = common::SanitizeUtf8(message);
  auto line = [](const std::string& m) {
    json::object o;
    o["type"] = "error";
    o["message"] = m;
    return json::serialize(o);
  };
  std::string out = line(text);
  if (out.size() > kMaxReportLineBytes) {
    // Escapes (\" \\ \u0001) make the line up to six times the text: halve until it fits, as
    // the Python client does with its own error lines.
    const std::string kCut = " [...]";
    while (out.size() > kMaxReportLineBytes && !text.empty()) {
      size_t keep = text.size() / 2;
      // Back to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
      while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
      text.resize(keep);
      out = line(text + kCut);
    }
  }
  return out + "\n";
}

namespace {

Status ParseAnswerBody(const json::object& obj, AnswerMessage& m) {
  const json::value* type = obj.if_contains("type");
  if (type == nullptr || !type->is_string()) {
    return InvalidArgument("missing string field \"type\"");
  }
  const json::string& t = type->get_string();
  if (t == "suggestion") {
    m.type = AnswerType::kSuggestion;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "name", "value"}));
    const json::value* name = obj.if_contains("name");
    if (name == nullptr || !name->is_string()) {
      return InvalidArgument("suggestion needs a string field \"name\"");
    }
    const json::value* value = obj.if_contains("value");
    if (value == nullptr) return InvalidArgument("suggestion needs a field \"value\"");
    if (!value->is_number() && !value->is_string() && !value->is_bool()) {
      return InvalidArgument("field \"value\" must be a number, string or bool, not " +
                             json::serialize(*value));
    }
    if (!common::AllFinite(*value)) return InvalidArgument("field \"value\" must be finite");
    m.name = std::string(name->get_string());
    m.value_json = json::serialize(*value);
    return Status::Ok();
  }
  if (t == "should_prune") {
    m.type = AnswerType::kShouldPrune;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "value"}));
    const json::value* value = obj.if_contains("value");
    if (value == nullptr || !value->is_bool()) {
      return InvalidArgument("should_prune needs a field \"value\" that is true or false");
    }
    m.prune = value->get_bool();
    return Status::Ok();
  }
  if (t == "error") {
    m.type = AnswerType::kError;
    return ErrorMessage(obj, m.message);
  }
  if (t == "relative_params") {
    m.type = AnswerType::kRelativeParams;
    TRIALD_RETURN_IF_ERROR(OnlyFields(obj, {"type", "params"}));
    const json::value* params = obj.if_contains("params");
    if (params == nullptr || !params->is_object()) {
      return InvalidArgument("relative_params needs an object field \"params\"");
    }
    if (!common::AllFinite(*params)) return InvalidArgument("field \"params\" must be finite");
    m.params_json = json::serialize(*params);
    return Status::Ok();
  }
  return InvalidArgument("unknown type \"" + std::string(t) +
                         "\"; expected suggestion, should_prune, relative_params or error");
}

}  // namespace

Result<AnswerMessage> ParseAnswerLine(std::string_view line) {
  return ParseObjectLine<AnswerMessage>(line, "answer", kMaxAnswerLineBytes, ParseAnswerBody);
}

}  // namespace triald::proto
