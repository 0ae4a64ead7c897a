#pragma once
// The search space: parameter distributions and parameter values.
//
// A parameter value is stored in its "internal" representation, as Optuna does: floats and ints
// as their numeric value, a categorical as the index of its choice. The external representation
// (what a worker sees in TRIALD_PARAMS and a user in `trialctl trials`) is a JSON value.
//
// Thread-safety: plain values; const methods may be called concurrently.

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/json_text.h"
#include "common/status.h"

namespace triald::config {

enum class ParamType { kFloat, kInt, kCategorical };

const char* ParamTypeName(ParamType type);

// A categorical choice: TOML strings, integers, floats and booleans are allowed.
using Choice = std::variant<bool, int64_t, double, std::string>;

struct Distribution {
  ParamType type = ParamType::kFloat;
  double low = 0;   // float/int
  double high = 0;  // float/int, inclusive
  bool log = false;
  double step = 0;              // 0 = continuous (float) / 1 (int)
  std::vector<Choice> choices;  // categorical

  // Checks the invariants the parser enforces; returns a message naming what is wrong.
  common::Status Validate() const;

  // True when `internal` is a value this distribution can produce.
  bool Contains(double internal) const;

  // JSON text that round-trips through DistributionFromJson; stored with every param.
  std::string ToJson() const;

  bool operator==(const Distribution& o) const;
  bool operator!=(const Distribution& o) const { return !(*this == o); }
};

common::Result<Distribution> DistributionFromJson(const std::string& json);

// Internal value -> external JSON text ("0.01", "64", "\"adamw\"", "true").
std::string ExternalJson(const Distribution& d, double internal);

// Parses a user-written value (e.g. from `--param lr=0.01`) into the internal representation.
common::Result<double> InternalFromText(const Distribution& d, const std::string& text);

std::string ChoiceToString(const Choice& c);

// The longest JSON text a value of `d` can have as an objective receives it (ExternalJson):
// the longest choice, or the longest number in the range.
size_t MaxExternalJsonBytes(const Distribution& d);

// The most that the [space] parameters of one trial may take as TRIALD_PARAMS (a JSON object in
// one environment variable): Linux refuses to start a process with any one argument or
// environment string over 128 KiB (MAX_ARG_STRLEN), whatever the stack limit; this leaves room
// for the variable's name.
inline constexpr size_t kMaxParamsJsonBytes = 120 * 1024;

// A distribution as a person reads it, for messages: "float [1e-05, 0.1] (log)",
// "float [0.0, 1.0] (step 0.25)", "int [2, 64] (step 2)", "int [1, 1024] (log)",
// "categorical [\"adam\", \"sgd\"]". Two distributions that differ (operator!=) give different
// texts, so a message naming both shows where they differ.
std::string DistributionText(const Distribution& d);

// The shortest text that reads back as exactly `d`, laid out as Python's repr() does: "0.0005",
// "1e-05", "1e+16", and whole numbers with ".0" ("1.0", "-0.0") so that JSON keeps them floats.
// Non-finite values give "nan", "inf" and "-inf", which are not JSON. (common/json_text.h)
using common::DoubleRepr;

struct ParamSpec {
  std::string name;
  Distribution dist;
};

// Parameters in declaration order (the order of the sweep file).
using SearchSpace = std::vector<ParamSpec>;

// name -> internal value.
using ParamValues = std::map<std::string, double>;

}  // namespace triald::config
