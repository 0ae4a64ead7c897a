#pragma once
// The trial's view of its environment: TRIALD_PARAMS as typed parameters, plus the study, trial
// number and private working folder the daemon hands every worker (see proto/README.md, "The
// worker's environment").
//
// Thread-safety: Params records which names were read (for UnreadNames) and so is not safe to
// use from several threads at once without external synchronization.

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace triald::worker {

// Typed, read-only access to the trial's parameters. A parameter that is absent yields the
// caller's default; one that is present with the wrong JSON type is an InvalidArgument error
// naming the parameter, the expected type and the value given, so a mistyped sweep is reported
// instead of silently falling back to the default.
class Params {
 public:
  Params() = default;  // no parameters
  explicit Params(boost::json::object values) : values_(std::move(values)) {}

  // Parses the text of TRIALD_PARAMS, which must be a JSON object.
  static common::Result<Params> Parse(std::string_view json);

  // Any JSON number. Integers are converted to double.
  common::Result<double> GetDouble(std::string_view name, double default_value) const;
  // A JSON integer, or a number with no fractional part (20.0) that fits in int64: samplers
  // and hand-written JSON do not always keep the distinction.
  common::Result<int64_t> GetInt(std::string_view name, int64_t default_value) const;
  common::Result<std::string> GetString(std::string_view name,
                                        std::string_view default_value) const;

  const boost::json::object& values() const { return values_; }

  // Names present in the parameters that no Get* call has asked for yet, sorted. An objective
  // checks this after reading its parameters to catch typos ("learning_rat") that would
  // otherwise run the trial with a default.
  std::vector<std::string> UnreadNames() const;

 private:
  boost::json::object values_;
  mutable std::set<std::string, std::less<>> read_;
};

// Everything the daemon tells a worker through its environment, apart from the report fd (see
// Reporter::FromEnv).
struct TrialEnv {
  Params params;                 // TRIALD_PARAMS; empty when unset
  std::string study;             // TRIALD_STUDY; empty when unset
  std::optional<int64_t> trial;  // TRIALD_TRIAL; nullopt when unset
  std::string trial_dir;         // TRIALD_TRIAL_DIR; empty when unset
  std::string resume_dir;        // TRIALD_RESUME_DIR (a retry's); empty when unset
};

// Reads TrialEnv from the process environment. Unset variables are allowed (a worker started by
// hand for debugging); set but malformed ones are errors naming the variable and its value.
common::Result<TrialEnv> TrialEnvFromEnv();

// The same from explicit values (nullptr = unset); the seam tests use.
common::Result<TrialEnv> TrialEnvFromValues(const char* params, const char* study,
                                            const char* trial, const char* trial_dir,
                                            const char* resume_dir = nullptr);

}  // namespace triald::worker
