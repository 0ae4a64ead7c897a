#pragma once
// Exact JSON parsing. Boost 1.81's JSON parser converts decimal numbers with a fast method that
// can be one ulp off (about one value in ten between 0 and 1), so a worker's 0.11935319286735585
// would be stored as ...84. ParseJsonExact builds the same boost::json::value as
// boost::json::parse but converts every double from its text with std::from_chars, which is
// exact. Everything that reads numbers a person or a worker wrote uses it.
//
// Thread-safety: pure function.

#include <boost/json/value.hpp>
#include <string_view>

#include "common/status.h"

namespace triald::common {

// Parses one complete JSON document (trailing data is an error). `max_depth` bounds nesting.
Result<boost::json::value> ParseJsonExact(std::string_view text, int max_depth = 32);

// True when no number anywhere inside `v` is infinite or NaN: JSON cannot carry them back out
// (Boost reads 1e999 as infinity).
bool AllFinite(const boost::json::value& v);

}  // namespace triald::common
