#pragma once
// Exact JSON parsing. Boost 1.81's JSON parser converts decimal numbers with a fast method that
// can be one ulp off (about one value in ten between 0 and 1), so a worker's 0.11935319286735585
// would be stored as ...84. ParseJsonExact builds the same boost::json::value as
// boost::json::parse but converts every double from its text with std::from_chars, which is
// exact. Everything that reads numbers a person or a worker wrote uses it.
//
// Thread-safety: pure function.

#include <boost/json/value.hpp>
#include <string>
#include <string_view>

#include "common/json_text.h"
#include "common/status.h"

namespace triald::common {

// Parses one complete JSON document (trailing data is an error). `max_depth` bounds nesting.
Result<boost::json::value> ParseJsonExact(std::string_view text, int max_depth = 32);

// True when no number anywhere inside `v` is infinite or NaN: JSON cannot carry them back out
// (Boost reads 1e999 as infinity).
bool AllFinite(const boost::json::value& v);

// JSON text of `v` as boost::json::serialize writes it, except for doubles: each is written with
// the shortest digits that read back as exactly the same double, laid out as Python's repr()
// does ("0.005", "1796087059.69", "1e-05", "1e+20") where Boost 1.81 writes "5E-3" and
// "1.79608705969E9". A whole-valued double keeps a fraction ("1.0", "-0.0") so that readers that
// tell integers from floats (Python's json, jq) read it back as a double. Non-finite doubles,
// which JSON cannot spell, are written as null. Everything triald and trialctl show to scripts
// or send over the control socket is written with it.
std::string SerializeJson(const boost::json::value& v);
std::string SerializeJson(const boost::json::object& o);
std::string SerializeJson(const boost::json::array& a);

}  // namespace triald::common
