#pragma once
// Checks for command-line values shared by triald and trialctl (CLI11 validators). A failed
// check reads "--OPTION: MESSAGE" (CLI11 adds the option's name), e.g.
// "--request-timeout: expected a positive number of seconds (at most 86400)".
//
// Thread-safety: each validator is a value; checking a value has no side effects.

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace triald::cli {

// Whole-text numbers only: "12x", "" and " 1" are not numbers.
inline bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return *end == '\0';
}

inline bool ParseLong(const std::string& text, long* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtol(text.c_str(), &end, 10);
  return *end == '\0' && errno == 0;
}

// Seconds > 0 and at most `max` (default 365 days: longer ones overflow the clocks they are
// converted to).
inline CLI::Validator PositiveSeconds(double max = 365.0 * 24 * 3600) {
  const std::string expected = max > 0 ? "expected a positive number of seconds (at most " +
                                             std::to_string(static_cast<long>(max)) + ")"
                                       : "expected a positive number of seconds";
  return CLI::Validator(
      [max, expected](std::string& text) {
        double s = 0;
        if (!ParseDouble(text, &s) || !(s > 0) || (max > 0 && s > max)) return expected;
        return std::string();
      },
      "");
}

// Seconds in [low, high].
inline CLI::Validator SecondsBetween(double low, double high, const std::string& range_text) {
  return CLI::Validator(
      [low, high, range_text](std::string& text) {
        double s = 0;
        if (!ParseDouble(text, &s) || !(s >= low && s <= high)) {
          return "\"" + text + "\": expected seconds between " + range_text;
        }
        return std::string();
      },
      "");
}

// An integer in [low, high].
inline CLI::Validator IntegerFrom(long low, long high) {
  return CLI::Validator(
      [low, high](std::string& text) {
        long n = 0;
        if (!ParseLong(text, &n) || n < low || n > high) {
          return "expected an integer from " + std::to_string(low) + " to " + std::to_string(high);
        }
        return std::string();
      },
      "");
}

// Any text but the empty one; `what` says what was expected, e.g. "a group name or gid".
inline CLI::Validator NotEmpty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) { return text.empty() ? "expected " + what : std::string(); }, "");
}

}  // namespace triald::cli
