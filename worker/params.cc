#include "worker/params.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/json.h"

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;

const char* KindName(boost::json::kind kind) {
  switch (kind) {
    case boost::json::kind::null:
      return "null";
    case boost::json::kind::bool_:
      return "a boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64:
    case boost::json::kind::double_:
      return "a number";
    case boost::json::kind::string:
      return "a string";
    case boost::json::kind::array:
      return "an array";
    case boost::json::kind::object:
      return "an object";
  }
  return "an unknown JSON value";
}

// "got a string "abc"": the kind and the value itself, shortened so an error about a large
// array stays readable.
std::string Describe(const boost::json::value& value) {
  std::string text = boost::json::serialize(value);
  constexpr size_t kMaxShown = 80;
  if (text.size() > kMaxShown) text = text.substr(0, kMaxShown) + "...";
  if (value.is_null()) return "got null";
  return std::string("got ") + KindName(value.kind()) + " " + text;
}

common::Status WrongType(std::string_view name, const char* expected,
                         const boost::json::value& value) {
  return InvalidArgument("TRIALD_PARAMS: parameter '" + std::string(name) + "' must be " +
                         expected + ", " + Describe(value));
}

}  // namespace

Result<Params> Params::Parse(std::string_view json) {
  // Exact conversion: a learning rate of 0.11935319286735585 must not arrive one ulp off.
  Result<boost::json::value> value = common::ParseJsonExact(json);
  if (!value.ok()) {
    return InvalidArgument("TRIALD_PARAMS is not valid JSON: " + value.status().message());
  }
  if (!value->is_object()) {
    return InvalidArgument(std::string("TRIALD_PARAMS must be a JSON object of parameters, ") +
                           Describe(*value));
  }
  return Params(std::move(value->as_object()));
}

Result<double> Params::GetDouble(std::string_view name, double default_value) const {
  read_.emplace(name);
  const boost::json::value* value = values_.if_contains(name);
  if (value == nullptr) return default_value;
  switch (value->kind()) {
    case boost::json::kind::int64:
      return static_cast<double>(value->get_int64());
    case boost::json::kind::uint64:
      return static_cast<double>(value->get_uint64());
    case boost::json::kind::double_:
      // The parser turns an out-of-range literal such as 1e999 into infinity.
      if (!std::isfinite(value->get_double())) {
        return InvalidArgument("TRIALD_PARAMS: parameter '" + std::string(name) +
                               "' must be a finite number, got one out of range");
      }
      return value->get_double();
    default:
      return WrongType(name, "a number", *value);
  }
}

Result<int64_t> Params::GetInt(std::string_view name, int64_t default_value) const {
  read_.emplace(name);
  const boost::json::value* value = values_.if_contains(name);
  if (value == nullptr) return default_value;
  switch (value->kind()) {
    case boost::json::kind::int64:
      return value->get_int64();
    case boost::json::kind::uint64:
      if (value->get_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return WrongType(name, "an integer that fits in 64 bits", *value);
      }
      return static_cast<int64_t>(value->get_uint64());
    case boost::json::kind::double_: {
      double d = value->get_double();
      // 2^63 is exactly representable and is the first double past int64's range.
      constexpr double kLimit = 9223372036854775808.0;
      if (std::trunc(d) != d || d >= kLimit || d < -kLimit) {
        return WrongType(name, "an integer", *value);
      }
      return static_cast<int64_t>(d);
    }
    default:
      return WrongType(name, "an integer", *value);
  }
}

Result<std::string> Params::GetString(std::string_view name, std::string_view default_value) const {
  read_.emplace(name);
  const boost::json::value* value = values_.if_contains(name);
  if (value == nullptr) return std::string(default_value);
  if (!value->is_string()) return WrongType(name, "a string", *value);
  return std::string(value->get_string());
}

std::vector<std::string> Params::UnreadNames() const {
  std::vector<std::string> unread;
  for (const auto& entry : values_) {
    if (read_.find(std::string_view(entry.key())) == read_.end()) {
      unread.emplace_back(entry.key());
    }
  }
  std::sort(unread.begin(), unread.end());
  return unread;
}

Result<TrialEnv> TrialEnvFromValues(const char* params, const char* study, const char* trial,
                                    const char* trial_dir, const char* resume_dir) {
  TrialEnv env;
  if (params != nullptr) {
    TRIALD_ASSIGN_OR_RETURN(env.params, Params::Parse(params));
  }
  if (study != nullptr) env.study = study;
  if (trial != nullptr) {
    errno = 0;
    char* end = nullptr;
    long long number = std::strtoll(trial, &end, 10);
    if (*trial == '\0' || *end != '\0' || errno != 0 || number < 0) {
      return InvalidArgument(std::string("TRIALD_TRIAL='") + trial +
                             "' is not a trial number (expected a non-negative integer)");
    }
    env.trial = number;
  }
  if (trial_dir != nullptr) env.trial_dir = trial_dir;
  if (resume_dir != nullptr) env.resume_dir = resume_dir;
  return env;
}

Result<TrialEnv> TrialEnvFromEnv() {
  return TrialEnvFromValues(std::getenv("TRIALD_PARAMS"), std::getenv("TRIALD_STUDY"),
                            std::getenv("TRIALD_TRIAL"), std::getenv("TRIALD_TRIAL_DIR"),
                            std::getenv("TRIALD_RESUME_DIR"));
}

}  // namespace triald::worker
