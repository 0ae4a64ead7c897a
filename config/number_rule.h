#pragma once
// The numbers a setting accepts: an interval whose ends may be open; an infinite end is no
// bound. Shared by the sweep parser and trial-worker (through config/lm_fields.h), so both sides
// check a number against the same interval.
//
// Thread-safety: a plain value.

#include <cmath>
#include <limits>

namespace triald::config {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct NumberRule {
  double low = -kInf;
  bool low_open = false;
  double high = kInf;
  bool high_open = false;

  // Whether x lies in the interval (NaN never does; an infinity may, when that end is
  // unbounded).
  bool InRange(double x) const {
    return (low_open ? x > low : x >= low) && (high_open ? x < high : x <= high);
  }
  // A setting's test: in range and finite (TOML can spell inf and nan).
  bool Accepts(double x) const { return std::isfinite(x) && InRange(x); }
};

inline NumberRule AtLeast(double low) { return NumberRule{low, false, kInf, false}; }
inline NumberRule Above(double low) { return NumberRule{low, true, kInf, false}; }
inline NumberRule Within(double low, bool low_open, double high, bool high_open) {
  return NumberRule{low, low_open, high, high_open};
}

}  // namespace triald::config
