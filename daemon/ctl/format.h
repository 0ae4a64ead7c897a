#pragma once
// Text forms of the daemon's JSON replies, shared by trialctl's verbs and its live view.
//
// Thread-safety: pure functions.

#include <boost/json.hpp>
#include <iosfwd>
#include <string>
#include <string_view>

namespace triald::ctl {

// `text` with every control character made visible, so that what a worker or a sweep file put
// in a string (an escape sequence, a carriage return, a bell) cannot drive the terminal: \n,
// \r and \t as in C, other C0 controls and DEL as \xHH, C1 controls (U+0080..U+009F, which
// some terminals take as CSI and friends) as \u00HH. Everything else, UTF-8 included, is kept.
// `keep_lines`: newlines and tabs pass (an error message's own layout).
std::string EscapeForTerminal(std::string_view text, bool keep_lines = false);

// A scalar as a person reads it: "-" for null, numbers to 6 significant digits, strings with
// EscapeForTerminal.
std::string FormatValue(const boost::json::value& v);
// "name=value name=value" of a params object.
std::string FormatParams(const boost::json::value& params);
// "1.23s", or "-" for null.
std::string FormatDuration(const boost::json::value& v);
// FormatValue of o[key], "-" when missing.
std::string Str(const boost::json::object& o, const char* key);
// How a study's trials failed, from a status reply's "failures": "20 failed; most often (20 of
// them): exit: ModuleNotFoundError: No module named 'torch'"; "" when none failed.
std::string FailuresText(const boost::json::object& status);
// A status reply's storage hold ("storage"): "HELD: storage refuses writes: database or disk is
// full (3 refused; trial ends are kept, and 12 of their writes; next try in 4 s)"; "" when the
// storage takes writes.
std::string StorageHoldText(const boost::json::object& status);
// A reply's "directions" with its "metric_names" ([study] metric_names) when it has them:
// "minimize loss, maximize accuracy"; else "minimize, maximize"; "" without directions.
std::string DirectionsText(const boost::json::object& reply);
// The objectives' names of a reply with "metric_names" ("loss, accuracy"); "" without.
std::string MetricNamesText(const boost::json::object& reply);
// A trial's state, value, duration, parameters, failure and resources (ResourcesLine, when the
// trial's JSON has them), on two to four lines.
void PrintTrial(std::ostream& out, const boost::json::object& t);

}  // namespace triald::ctl
