#pragma once
// The text of single JSON values, written one way everywhere: DoubleRepr, the one double
// formatter (messages, sweep echoes, JSON numbers through JsonDoubleText), and JsonQuote, the one
// JSON string quoter (SerializeJson's strings and keys, JSON written by hand, quoted names in
// messages). The installed header-only C++ client (proto/client/cpp/triald/trial.h) keeps its
// own copy, since it depends on nothing of triald's; tests/common/json_text_test.cc checks that
// it agrees.
//
// Thread-safety: pure functions.

#include <string>
#include <string_view>

namespace triald::common {

// The one double formatter: the shortest text that reads back as exactly `d`, laid out as
// Python's repr() does ("0.0005", "1e-05", "1e+16", "123456789012345.6"), whole numbers with
// ".0" ("1.0", "-0.0") so that JSON readers keep them floats. Non-finite values give "nan",
// "inf" and "-inf" (not JSON: for messages; JsonDoubleText is the JSON form).
std::string DoubleRepr(double d);

// DoubleRepr appended to *out.
void AppendDoubleRepr(double d, std::string* out);

// One double as JSON (SerializeJson writes doubles so): DoubleRepr, or "null" when not finite.
std::string JsonDoubleText(double d);

struct JsonQuoteOptions {
  // Also escape '<', '>' and '&' (as \u003c, \u003e, \u0026), so that the text can sit inside
  // an HTML <script> element.
  bool html_safe = false;
};

// The one JSON string quoter: `s` as a JSON string literal, with its quotes. '"' and '\' are
// escaped, control characters below 0x20 are written as \b \f \n \r \t or \u00XX
// (lowercase hex), everything else is copied, except bytes that do not start a well-formed
// UTF-8 sequence, which become U+FFFD (as SanitizeUtf8 does): the result is always valid JSON in
// valid UTF-8. SerializeJson writes every string and key with it.
std::string JsonQuote(std::string_view s, const JsonQuoteOptions& options = {});
// JsonQuote appended to *out.
void AppendJsonQuoted(std::string_view s, std::string* out, const JsonQuoteOptions& options = {});

}  // namespace triald::common
