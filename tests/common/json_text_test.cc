// DoubleRepr and JsonQuote: the one double formatter and the one JSON string quoter. The cases
// are those where the formatters and quoters they replaced disagreed: "%.17g" (the samplers'
// messages) against the shortest round-trip text, "nan"/"inf" against "null" for non-finite
// values, \b and \f written short or as \u00XX, and invalid UTF-8 copied as it was (Boost's
// serializer, the export writer) or replaced (the C++ client).
#include "common/json_text.h"

#include <triald/trial.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/utf8.h"

namespace triald::common {
namespace {

// The string a JSON string literal reads back as (through Boost's parser, which refuses invalid
// UTF-8 in its input).
std::string ReadBack(const std::string& literal) {
  INFO(literal);
  boost::json::error_code ec;
  boost::json::value v = boost::json::parse(literal, ec);
  REQUIRE(!ec);
  REQUIRE(v.is_string());
  return std::string(v.get_string());
}

}  // namespace

TEST_CASE("DoubleRepr writes the shortest text that reads back exactly", "[json]") {
  // "%.17g" wrote these as 0.10000000000000001, 1, 0 and 1.0000000000000001e-05.
  CHECK(DoubleRepr(0.1) == "0.1");
  CHECK(DoubleRepr(1.0) == "1.0");
  CHECK(DoubleRepr(0.0) == "0.0");
  CHECK(DoubleRepr(-0.0) == "-0.0");
  CHECK(DoubleRepr(1e-05) == "1e-05");
  CHECK(DoubleRepr(0.0001) == "0.0001");
  CHECK(DoubleRepr(1e16) == "1e+16");
  CHECK(DoubleRepr(123456789012345.6) == "123456789012345.6");
  CHECK(DoubleRepr(-2.5e-300) == "-2.5e-300");
  CHECK(DoubleRepr(5e-324) == "5e-324");
  CHECK(DoubleRepr(std::numeric_limits<double>::max()) == "1.7976931348623157e+308");
}

TEST_CASE("DoubleRepr names non-finite values, JsonDoubleText writes them as null", "[json]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(DoubleRepr(nan) == "nan");
  CHECK(DoubleRepr(-nan) == "nan");  // "%.17g" wrote "-nan"
  CHECK(DoubleRepr(inf) == "inf");
  CHECK(DoubleRepr(-inf) == "-inf");
  CHECK(JsonDoubleText(nan) == "null");
  CHECK(JsonDoubleText(inf) == "null");
  CHECK(JsonDoubleText(-inf) == "null");
  CHECK(JsonDoubleText(0.5) == DoubleRepr(0.5));
  std::string out = "x=";
  AppendDoubleRepr(2.0, &out);
  CHECK(out == "x=2.0");
}

TEST_CASE("JsonQuote escapes quotes, backslashes and control characters", "[json]") {
  CHECK(JsonQuote("") == "\"\"");
  CHECK(JsonQuote("adam") == "\"adam\"");
  CHECK(JsonQuote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(JsonQuote("\b\f\n\r\t") == "\"\\b\\f\\n\\r\\t\"");
  CHECK(JsonQuote(std::string("\0\x01\x1f", 3)) == "\"\\u0000\\u0001\\u001f\"");
  CHECK(JsonQuote("\x7f") == "\"\x7f\"");  // DEL is not a JSON control character
  CHECK(JsonQuote("</script>&") == "\"</script>&\"");
  JsonQuoteOptions html;
  html.html_safe = true;
  CHECK(JsonQuote("</script>&") == "\"</script>&\"");
  CHECK(JsonQuote("</script>&", html) == "\"\\u003c/script\\u003e\\u0026\"");
  std::string out = "k:";
  AppendJsonQuoted("v", &out);
  CHECK(out == "k:\"v\"");
}

TEST_CASE("JsonQuote writes valid UTF-8 as Boost's serializer does", "[json]") {
  std::vector<std::string> texts = {
      "plain",     "caf\xC3\xA9",     "\xE2\x82\xAC 100", "\xF0\x9F\x98\x80",
      "tab\there", "\xF4\x8F\xBF\xBF"};
  for (int c = 0; c < 0x80; ++c) texts.emplace_back(1, static_cast<char>(c));
  for (const std::string& s : texts) {
    INFO(s);
    CHECK(JsonQuote(s) == boost::json::serialize(boost::json::string_view(s)));
    CHECK(ReadBack(JsonQuote(s)) == s);
  }
}

TEST_CASE("JsonQuote replaces bytes that are not UTF-8 with U+FFFD, as SanitizeUtf8 does",
          "[json]") {
  const std::string kFffd = "\xEF\xBF\xBD";
  CHECK(JsonQuote("a\xFFz") == "\"a" + kFffd + "z\"");
  CHECK(JsonQuote("\xE2\x82") == "\"" + kFffd + kFffd + "\"");              // cut short
  CHECK(JsonQuote("\xC0\xAF") == "\"" + kFffd + kFffd + "\"");              // overlong '/'
  CHECK(JsonQuote("\xED\xA0\x80") == "\"" + kFffd + kFffd + kFffd + "\"");  // a surrogate
  CHECK(JsonQuote("\xF4\x90\x80\x80") == "\"" + kFffd + kFffd + kFffd + kFffd + "\"");
  for (const std::string s : {"a\xFFz", "\xE2\x82", "\xC0\xAF", "x\xED\xA0\x80\"\n"}) {
    INFO(s);
    const std::string quoted = JsonQuote(s);
    CHECK(IsValidUtf8(quoted));
    CHECK(ReadBack(quoted) == SanitizeUtf8(s));
  }
  // SerializeJson writes strings and keys with it.
  boost::json::object o;
  o["k\xFF"] = "v\xFF";
  CHECK(SerializeJson(o) == "{\"k" + kFffd + "\":\"v" + kFffd + "\"}");
}

TEST_CASE("the C++ client's own quoter and formatter read back as JsonQuote and DoubleRepr do",
          "[json]") {
  // The installed header-only client (proto/client/cpp/triald/trial.h) depends on nothing of
  // triald's, so it keeps its own copy; its text may differ ("\u0008" for "\b", "%.17g") but
  // must mean the same.
  std::vector<std::string> texts = {"plain",  "a\"b\\c",  "\b\f\n\r\t",   "caf\xC3\xA9",
                                    "a\xFFz", "\xE2\x82", "\xED\xA0\x80", "<&>"};
  for (int c = 0; c < 0x20; ++c) texts.emplace_back(1, static_cast<char>(c));
  for (const std::string& s : texts) {
    INFO(s);
    std::string client;
    triald::detail::AppendJsonString(client, s);
    CHECK(ReadBack(client) == ReadBack(JsonQuote(s)));
  }
  for (double d : {0.1, 1.0, -0.0, 1e-05, 123456789012345.6, 5e-324, 1.7976931348623157e308}) {
    INFO(d);
    Result<boost::json::value> client = ParseJsonExact(triald::detail::FormatNumber(d, "value"));
    Result<boost::json::value> ours = ParseJsonExact(JsonDoubleText(d));
    REQUIRE(client.ok());
    REQUIRE(ours.ok());
    // Equal values; for -0.0 the client writes "-0", which reads back as the integer 0 (the
    // sign is lost where the daemon reads a value), JsonDoubleText "-0.0".
    CHECK(client->to_number<double>() == ours->to_number<double>());
    CHECK(std::signbit(ours->to_number<double>()) == std::signbit(d));
  }
}

}  // namespace triald::common
