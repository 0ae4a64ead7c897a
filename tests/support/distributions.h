#pragma once
// Distribution factories for the sampler, search-space and sweep tests. Header-only.

#include <string>
#include <vector>

#include "config/space.h"

namespace triald::testing {

inline config::Distribution Float(double low, double high, bool log = false, double step = 0) {
  config::Distribution d;
  d.type = config::ParamType::kFloat;
  d.low = low;
  d.high = high;
  d.log = log;
  d.step = step;
  return d;
}

inline config::Distribution Int(double low, double high, bool log = false, double step = 1) {
  config::Distribution d = Float(low, high, log, step);
  d.type = config::ParamType::kInt;
  return d;
}

// n string choices named prefix0, prefix1, ...
inline config::Distribution Categorical(int n, const std::string& prefix = "c") {
  config::Distribution d;
  d.type = config::ParamType::kCategorical;
  for (int i = 0; i < n; ++i) d.choices.emplace_back(prefix + std::to_string(i));
  return d;
}

// The given choices, in order (strings, integers, floats or booleans).
inline config::Distribution Choices(std::vector<config::Choice> choices) {
  config::Distribution d;
  d.type = config::ParamType::kCategorical;
  d.choices = std::move(choices);
  return d;
}

// String choices, in order.
inline config::Distribution Strings(const std::vector<std::string>& names) {
  std::vector<config::Choice> choices(names.begin(), names.end());
  return Choices(std::move(choices));
}

}  // namespace triald::testing
