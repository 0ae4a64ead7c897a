#include "config/space.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>

#include "common/json.h"
#include "common/json_text.h"

namespace triald::config {

namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

// Integers up to 2^53 are exactly representable in a double, the internal representation.
constexpr double kMaxExactInt = 9007199254740992.0;

// Relative tolerance for "is this a whole number of steps": grids are built as low + k * step in
// floating point, so exact divisibility would reject 0.1-steps that a user obviously meant.
constexpr double kGridTolerance = 1e-9;

bool NearInteger(double k) {
  return std::fabs(k - std::round(k)) <= kGridTolerance * std::max(1.0, std::fabs(k));
}

bool IsIntegral(double x) { return std::isfinite(x) && x == std::floor(x); }

std::string FormatInt(double d) {
  if (IsIntegral(d) && std::fabs(d) <= kMaxExactInt) {
    return std::to_string(static_cast<int64_t>(d));
  }
  return DoubleRepr(d);
}

// How a bound or step of `type` is shown in messages: ints without a fraction.
std::string FormatBound(ParamType type, double d) {
  return type == ParamType::kInt ? FormatInt(d) : DoubleRepr(d);
}

std::string ChoiceJson(const Choice& c) {
  if (const auto* b = std::get_if<bool>(&c)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&c)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&c)) return common::JsonDoubleText(*d);
  return common::JsonQuote(std::get<std::string>(c));
}

// Choices for messages: like JSON, but a non-finite float shows as what it is.
// At most `max_shown` choices (then the count), so that a message about a long list stays
// readable; DistributionText shows them all (two distributions that differ must read apart).
std::string ChoicesText(const std::vector<Choice>& choices,
                        size_t max_shown = std::numeric_limits<size_t>::max()) {
  std::string out = "[";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += ", ";
    if (i == max_shown) {
      out += "... (" + std::to_string(choices.size()) + " choices)";
      break;
    }
    const auto* d = std::get_if<double>(&choices[i]);
    out += d != nullptr ? DoubleRepr(*d) : ChoiceJson(choices[i]);
  }
  return out + "]";
}

// "[low, high]" plus the grid or scale, for messages about values out of range.
std::string RangeText(const Distribution& d) {
  std::string out = "[" + FormatBound(d.type, d.low) + ", " + FormatBound(d.type, d.high) + "]";
  if (d.log) out += " (log scale)";
  bool stepped = d.type == ParamType::kFloat ? d.step > 0 : d.step > 1;
  if (stepped) out += " on the grid low + k * " + FormatBound(d.type, d.step);
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool ParseDouble(std::string_view s, double* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto res = std::from_chars(s.data(), s.data() + s.size(), *out);
  return res.ec == std::errc() && res.ptr == s.data() + s.size() && !s.empty();
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto res = std::from_chars(s.data(), s.data() + s.size(), *out);
  return res.ec == std::errc() && res.ptr == s.data() + s.size() && !s.empty();
}

// Validate's messages start with "<key> = <value>" naming the field at fault (low, high, log,
// step or choices). The sweep parser relies on that prefix to point at the right line of the
// file, so keep it when adding checks.
Status CheckFloat(const Distribution& d) {
  if (!std::isfinite(d.low)) {
    return InvalidArgument("low = " + DoubleRepr(d.low) + ": expected a finite number");
  }
  if (!std::isfinite(d.high)) {
    return InvalidArgument("high = " + DoubleRepr(d.high) + ": expected a finite number");
  }
  if (d.low > d.high) {
    return InvalidArgument("low = " + DoubleRepr(d.low) + " is greater than high = " +
                           DoubleRepr(d.high) + "; expected low <= high");
  }
  if (!std::isfinite(d.high - d.low)) {
    return InvalidArgument("high = " + DoubleRepr(d.high) +
                           ": high - low = " + DoubleRepr(d.high - d.low) +
                           " overflows a double; expected a range no wider than 1.79e308");
  }
  if (d.log && d.low <= 0) {
    return InvalidArgument(
        "low = " + DoubleRepr(d.low) +
        ": a log-scale range must be positive; expected low > 0 with log = true");
  }
  if (!std::isfinite(d.step) || d.step < 0) {
    return InvalidArgument("step = " + DoubleRepr(d.step) + ": expected a number > 0");
  }
  if (d.step > 0) {
    // As in Optuna: a log-scale float has no grid.
    if (d.log) {
      return InvalidArgument("step = " + DoubleRepr(d.step) +
                             ": step cannot be combined with log = true; expected either a "
                             "step or log = true, not both");
    }
    if (!NearInteger((d.high - d.low) / d.step)) {
      return InvalidArgument("step = " + DoubleRepr(d.step) +
                             " does not divide high - low = " + DoubleRepr(d.high - d.low) +
                             "; expected high - low to be a whole multiple of step");
    }
  }
  return Status::Ok();
}

Status CheckInt(const Distribution& d) {
  const std::string kExpectedInt = ": expected an integer between -2^53 and 2^53";
  if (!IsIntegral(d.low) || std::fabs(d.low) > kMaxExactInt) {
    return InvalidArgument("low = " + FormatInt(d.low) + kExpectedInt);
  }
  if (!IsIntegral(d.high) || std::fabs(d.high) > kMaxExactInt) {
    return InvalidArgument("high = " + FormatInt(d.high) + kExpectedInt);
  }
  if (d.low > d.high) {
    return InvalidArgument("low = " + FormatInt(d.low) + " is greater than high = " +
                           FormatInt(d.high) + "; expected low <= high");
  }
  if (!IsIntegral(d.step) || d.step < 1 || d.step > kMaxExactInt) {
    return InvalidArgument("step = " + FormatInt(d.step) + ": expected an integer >= 1");
  }
  if (d.log && d.low < 1) {
    return InvalidArgument("low = " + FormatInt(d.low) +
                           ": a log-scale range must be positive; expected low >= 1 with log = "
                           "true");
  }
  if (d.log && d.step != 1) {
    return InvalidArgument("step = " + FormatInt(d.step) +
                           ": step cannot be combined with log = true; expected step = 1 with "
                           "log = true");
  }
  if (std::fmod(d.high - d.low, d.step) != 0) {
    return InvalidArgument("step = " + FormatInt(d.step) +
                           " does not divide high - low = " + FormatInt(d.high - d.low) +
                           "; expected high - low to be a whole multiple of step");
  }
  return Status::Ok();
}

Status CheckCategorical(const Distribution& d) {
  constexpr size_t kChoicesShown = 20;
  if (d.choices.empty()) {
    return InvalidArgument("choices = []: expected at least one choice");
  }
  for (const Choice& c : d.choices) {
    if (const auto* x = std::get_if<double>(&c); x && !std::isfinite(*x)) {
      return InvalidArgument("choices = " + ChoicesText(d.choices, kChoicesShown) + ": choice " +
                             DoubleRepr(*x) + " is not a finite number; expected finite numbers");
    }
  }
  // Duplicates by sorting positions (O(n log n): a sweep may list many choices). The message
  // names the first choice, in file order, that repeats an earlier one.
  std::vector<size_t> order(d.choices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Numbers compare by value, whatever their type: a parameter's value reaches the objective as a
  // JSON number, where 1 and 1.0 are one value (long double holds every int64 exactly).
  auto key = [&d](size_t i) {
    const Choice& c = d.choices[i];
    if (const auto* n = std::get_if<int64_t>(&c)) return std::pair<int, long double>(1, *n);
    if (const auto* x = std::get_if<double>(&c)) return std::pair<int, long double>(1, *x);
    return std::pair<int, long double>(c.index() == 0 ? 0 : 2, 0);
  };
  auto less = [&](size_t a, size_t b) {
    auto ka = key(a);
    auto kb = key(b);
    if (ka != kb) return ka < kb;
    return ka.first != 1 && d.choices[a] < d.choices[b];
  };
  auto same = [&](size_t a, size_t b) { return !less(a, b) && !less(b, a); };
  std::stable_sort(order.begin(), order.end(), less);
  // In each run of equal choices the stable sort keeps file order: the run's second element is
  // its first repeat, of the run's first.
  size_t first_repeat = d.choices.size();
  size_t repeated = 0;
  for (size_t start = 0, end = 0; start < order.size(); start = end) {
    for (end = start + 1; end < order.size() && same(order[start], order[end]);) ++end;
    if (end - start >= 2 && order[start + 1] < first_repeat) {
      first_repeat = order[start + 1];
      repeated = order[start];
    }
  }
  if (first_repeat < d.choices.size()) {
    const Choice& a = d.choices[repeated];
    const Choice& b = d.choices[first_repeat];
    if (a == b) {
      return InvalidArgument("choices = " + ChoicesText(d.choices, kChoicesShown) + ": " +
                             ChoiceJson(b) + " appears more than once; expected distinct choices");
    }
    return InvalidArgument("choices = " + ChoicesText(d.choices, kChoicesShown) + ": " +
                           ChoiceJson(b) + " equals " + ChoiceJson(a) +
                           " as a number (an objective receives both as the same JSON number); "
                           "expected distinct choices");
  }
  return Status::Ok();
}

Result<double> JsonToDouble(const boost::json::object& obj, const char* key) {
  const boost::json::value* v = obj.if_contains(key);
  if (v == nullptr) return InvalidArgument(std::string("missing \"") + key + "\"");
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  return InvalidArgument(std::string("\"") + key + "\" is not a number");
}

Result<Choice> JsonToChoice(const boost::json::value& v) {
  if (v.is_bool()) return Choice(v.get_bool());
  if (v.is_int64()) return Choice(v.get_int64());
  if (v.is_double()) return Choice(v.get_double());
  if (v.is_string()) return Choice(std::string(v.get_string()));
  return InvalidArgument("choice " + boost::json::serialize(v) +
                         " is not a string, boolean, 64-bit integer or float");
}

Result<Distribution> DistributionFromObject(const boost::json::object& obj) {
  const boost::json::value* type = obj.if_contains("type");
  if (type == nullptr || !type->is_string()) return InvalidArgument("missing string \"type\"");
  Distribution d;
  if (type->get_string() == "categorical") {
    d.type = ParamType::kCategorical;
    for (const auto& kv : obj) {
      if (kv.key() != "type" && kv.key() != "choices") {
        return InvalidArgument("unknown key \"" + std::string(kv.key()) + "\"");
      }
    }
    const boost::json::value* choices = obj.if_contains("choices");
    if (choices == nullptr || !choices->is_array()) {
      return InvalidArgument("missing array \"choices\"");
    }
    for (const auto& c : choices->get_array()) {
      TRIALD_ASSIGN_OR_RETURN(Choice choice, JsonToChoice(c));
      d.choices.push_back(std::move(choice));
    }
    return d;
  }
  if (type->get_string() == "float") {
    d.type = ParamType::kFloat;
  } else if (type->get_string() == "int") {
    d.type = ParamType::kInt;
    d.step = 1;
  } else {
    return InvalidArgument("unknown type " + boost::json::serialize(*type) +
                           "; expected \"float\", \"int\" or \"categorical\"");
  }
  for (const auto& kv : obj) {
    std::string_view k = kv.key();
    if (k != "type" && k != "low" && k != "high" && k != "log" && k != "step") {
      return InvalidArgument("unknown key \"" + std::string(k) + "\"");
    }
  }
  TRIALD_ASSIGN_OR_RETURN(d.low, JsonToDouble(obj, "low"));
  TRIALD_ASSIGN_OR_RETURN(d.high, JsonToDouble(obj, "high"));
  if (const boost::json::value* log = obj.if_contains("log")) {
    if (!log->is_bool()) return InvalidArgument("\"log\" is not a boolean");
    d.log = log->get_bool();
  }
  if (obj.contains("step")) {
    TRIALD_ASSIGN_OR_RETURN(d.step, JsonToDouble(obj, "step"));
  }
  return d;
}

}  // namespace

const char* ParamTypeName(ParamType type) {
  switch (type) {
    case ParamType::kFloat:
      return "float";
    case ParamType::kInt:
      return "int";
    case ParamType::kCategorical:
      return "categorical";
  }
  return "unknown";
}

Status Distribution::Validate() const {
  switch (type) {
    case ParamType::kFloat:
      return CheckFloat(*this);
    case ParamType::kInt:
      return CheckInt(*this);
    case ParamType::kCategorical:
      return CheckCategorical(*this);
  }
  return common::Internal("unknown parameter type");
}

bool Distribution::Contains(double internal) const {
  if (!std::isfinite(internal)) return false;
  switch (type) {
    case ParamType::kFloat:
      if (internal < low || internal > high) return false;
      return step <= 0 || NearInteger((internal - low) / step);
    case ParamType::kInt: {
      if (!IsIntegral(internal) || internal < low || internal > high) return false;
      // The parser never yields step 0 for an int, but a hand-built Distribution may: read it as 1.
      double s = step >= 1 ? step : 1;
      return std::fmod(internal - low, s) == 0;
    }
    case ParamType::kCategorical:
      return IsIntegral(internal) && internal >= 0 &&
             internal < static_cast<double>(choices.size());
  }
  return false;
}

std::string Distribution::ToJson() const {
  std::string out = "{\"type\":\"";
  out += ParamTypeName(type);
  out += "\"";
  if (type == ParamType::kCategorical) {
    out += ",\"choices\":[";
    for (size_t i = 0; i < choices.size(); ++i) {
      if (i > 0) out += ",";
      out += ChoiceJson(choices[i]);
    }
    return out + "]}";
  }
  auto number = [this](double x) {
    if (!std::isfinite(x)) return std::string("null");
    return type == ParamType::kInt ? FormatInt(x) : DoubleRepr(x);
  };
  out += ",\"low\":" + number(low);
  out += ",\"high\":" + number(high);
  out += ",\"log\":";
  out += log ? "true" : "false";
  out += ",\"step\":" + number(step);
  return out + "}";
}

bool Distribution::operator==(const Distribution& o) const {
  return type == o.type && low == o.low && high == o.high && log == o.log && step == o.step &&
         choices == o.choices;
}

Result<Distribution> DistributionFromJson(const std::string& json) {
  auto fail = [&json](const Status& s) {
    return InvalidArgument("invalid distribution JSON " + json + ": " + s.message());
  };
  Result<boost::json::value> parsed = common::ParseJsonExact(json);
  if (!parsed.ok()) return fail(parsed.status());
  if (!parsed->is_object()) return fail(InvalidArgument("expected a JSON object"));
  Result<Distribution> d = DistributionFromObject(parsed->get_object());
  if (!d.ok()) return fail(d.status());
  if (Status st = d->Validate(); !st.ok()) return fail(st);
  return d;
}

std::string ExternalJson(const Distribution& d, double internal) {
  switch (d.type) {
    case ParamType::kFloat:
      return common::JsonDoubleText(internal);
    case ParamType::kInt:
      return std::isfinite(internal) ? FormatInt(std::round(internal)) : "null";
    case ParamType::kCategorical:
      if (!IsIntegral(internal) || internal < 0 ||
          internal >= static_cast<double>(d.choices.size())) {
        return "null";
      }
      return ChoiceJson(d.choices[static_cast<size_t>(internal)]);
  }
  return "null";
}

Result<double> InternalFromText(const Distribution& d, const std::string& text) {
  std::string_view t = Trim(text);
  std::string quoted = common::JsonQuote(text);
  switch (d.type) {
    case ParamType::kFloat: {
      double x = 0;
      if (!ParseDouble(t, &x) || !d.Contains(x)) {
        return InvalidArgument(quoted + " is not a valid float value; expected a number in " +
                               RangeText(d));
      }
      return x;
    }
    case ParamType::kInt: {
      int64_t i = 0;
      if (!ParseInt(t, &i) || !d.Contains(static_cast<double>(i))) {
        return InvalidArgument(quoted + " is not a valid int value; expected an integer in " +
                               RangeText(d));
      }
      return static_cast<double>(i);
    }
    case ParamType::kCategorical:
      break;
  }
  // A JSON-quoted text ("\"1\"") can only mean a string choice; otherwise a string choice spelled
  // exactly like the text wins over a number or boolean that reads the same.
  std::string_view unquoted = t;
  bool forced_string = t.size() >= 2 && t.front() == '"' && t.back() == '"';
  if (forced_string) unquoted = t.substr(1, t.size() - 2);
  for (size_t i = 0; i < d.choices.size(); ++i) {
    const auto* s = std::get_if<std::string>(&d.choices[i]);
    if (s != nullptr && (*s == unquoted || *s == text)) return static_cast<double>(i);
  }
  if (!forced_string) {
    int64_t as_int = 0;
    double as_double = 0;
    bool is_int = ParseInt(t, &as_int);
    bool is_double = ParseDouble(t, &as_double);
    for (size_t i = 0; i < d.choices.size(); ++i) {
      const Choice& c = d.choices[i];
      if (const auto* b = std::get_if<bool>(&c); b && t == (*b ? "true" : "false")) {
        return static_cast<double>(i);
      }
      if (const auto* n = std::get_if<int64_t>(&c);
          n && ((is_int && *n == as_int) || (!is_int && is_double && *n == as_double))) {
        return static_cast<double>(i);
      }
      if (const auto* x = std::get_if<double>(&c); x && is_double && *x == as_double) {
        return static_cast<double>(i);
      }
    }
  }
  std::string expected;
  for (size_t i = 0; i < d.choices.size(); ++i) {
    if (i > 0) expected += ", ";
    expected += ChoiceJson(d.choices[i]);
  }
  return InvalidArgument(quoted + " is not one of the choices; expected one of " + expected);
}

size_t MaxExternalJsonBytes(const Distribution& d) {
  size_t most = 0;
  if (d.type == ParamType::kCategorical) {
    for (const Choice& c : d.choices) most = std::max(most, ChoiceJson(c).size());
    return most;
  }
  // The longest double text ("-2.2250738585072014e-308") or the bounds' integers.
  if (d.type == ParamType::kFloat) return 24;
  return std::max(FormatInt(d.low).size(), FormatInt(d.high).size());
}

std::string DistributionText(const Distribution& d) {
  std::string out = ParamTypeName(d.type);
  if (d.type == ParamType::kCategorical) return out + " " + ChoicesText(d.choices);
  out += " [" + FormatBound(d.type, d.low) + ", " + FormatBound(d.type, d.high) + "]";
  bool stepped = d.type == ParamType::kFloat ? d.step != 0 : d.step != 1;
  if (d.log && stepped) return out + " (log, step " + FormatBound(d.type, d.step) + ")";
  if (d.log) return out + " (log)";
  if (stepped) return out + " (step " + FormatBound(d.type, d.step) + ")";
  return out;
}

std::string ChoiceToString(const Choice& c) {
  if (const auto* s = std::get_if<std::string>(&c)) return *s;
  return ChoiceJson(c);
}

}  // namespace triald::config
