#pragma once
// Text forms of the daemon's JSON replies, shared by trialctl's verbs and its live view.
//
// Thread-safety: pure functions.

#include <boost/json.hpp>
#include <iosfwd>
#include <string>

namespace triald::ctl {

// A scalar as a person reads it: "-" for null, numbers to 6 significant digits.
std::string FormatValue(const boost::json::value& v);
// "name=value name=value" of a params object.
std::string FormatParams(const boost::json::value& params);
// "1.23s", or "-" for null.
std::string FormatDuration(const boost::json::value& v);
// FormatValue of o[key], "-" when missing.
std::string Str(const boost::json::object& o, const char* key);
// A trial's state, value, duration, parameters and failure, on two or three lines.
void PrintTrial(std::ostream& out, const boost::json::object& t);

}  // namespace triald::ctl
