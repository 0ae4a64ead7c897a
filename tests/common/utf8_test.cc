// The one UTF-8 validator: DecodeUtf8, FirstInvalidUtf8, IsValidUtf8 and SanitizeUtf8.

#include "common/utf8.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>

namespace triald::common {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

TEST_CASE("DecodeUtf8 returns the length and code point of each well-formed sequence", "[common]") {
  struct Case {
    std::string_view text;
    size_t length;
    char32_t code_point;
  };
  const Case cases[] = {
      {"A", 1, U'A'},
      {std::string_view("\0", 1), 1, 0},
      {"\xC2\x80", 2, 0x80},
      {"\xC3\xA9", 2, 0xE9},  // é
      {"\xDF\xBF", 2, 0x7FF},
      {"\xE0\xA0\x80", 3, 0x800},
      {"\xE2\x82\xAC", 3, 0x20AC},  // €
      {"\xED\x9F\xBF", 3, 0xD7FF},  // last before the surrogates
      {"\xEE\x80\x80", 3, 0xE000},  // first after them
      {"\xEF\xBF\xBF", 3, 0xFFFF},
      {"\xF0\x90\x80\x80", 4, 0x10000},
      {"\xF0\x9F\x98\x80", 4, 0x1F600},  // 😀
      {"\xF4\x8F\xBF\xBF", 4, 0x10FFFF},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    char32_t code_point = 0xDEAD;
    CHECK(DecodeUtf8(c.text, 0, &code_point) == c.length);
    CHECK(code_point == c.code_point);
  }
  // From an offset inside the text.
  char32_t code_point = 0;
  CHECK(DecodeUtf8("ab\xE2\x82\xAC", 2, &code_point) == 3);
  CHECK(code_point == 0x20AC);
}

TEST_CASE("DecodeUtf8 refuses malformed sequences and leaves the code point alone", "[common]") {
  const std::string_view bad[] = {
      "\x80",  // stray continuation byte
      "\xBF",
      "\xC0\x80",          // overlong NUL
      "\xC1\xBF",          // overlong
      "\xE0\x9F\xBF",      // overlong three-byte form
      "\xED\xA0\x80",      // surrogate U+D800
      "\xED\xBF\xBF",      // surrogate U+DFFF
      "\xF0\x8F\xBF\xBF",  // overlong four-byte form
      "\xF4\x90\x80\x80",  // U+110000
      "\xF5\x80\x80\x80",  // lead byte past F4
      "\xFF",
      "\xC3",  // cut short
      "\xE2\x82",
      "\xF0\x9F\x98",
      "\xC3(",  // continuation missing
      "\xE2(\xAC",
  };
  for (std::string_view text : bad) {
    CAPTURE(text);
    char32_t code_point = 0xDEAD;
    CHECK(DecodeUtf8(text, 0, &code_point) == 0);
    CHECK(code_point == 0xDEAD);
  }
}

TEST_CASE("FirstInvalidUtf8 gives the offset of the first bad byte", "[common]") {
  CHECK(FirstInvalidUtf8("") == std::string_view::npos);
  CHECK(FirstInvalidUtf8("plain ascii") == std::string_view::npos);
  CHECK(FirstInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == std::string_view::npos);
  CHECK(FirstInvalidUtf8("\xFF") == 0);
  CHECK(FirstInvalidUtf8("caf\xC3\xA9\x80") == 5);
  CHECK(FirstInvalidUtf8("ab\xED\xA0\x80") == 2);
  CHECK(FirstInvalidUtf8("abc\xE2\x82") == 3);  // cut short at the end
  CHECK(IsValidUtf8(""));
  CHECK(IsValidUtf8("caf\xC3\xA9"));
  CHECK(IsValidUtf8(std::string_view("a\0b", 3)));  // NUL is valid UTF-8
  CHECK_FALSE(IsValidUtf8("caf\xC3"));
  CHECK_FALSE(IsValidUtf8("\xC0\x80"));
}

TEST_CASE("SanitizeUtf8 replaces each bad byte with U+FFFD and keeps the rest", "[common]") {
  const std::string good = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  CHECK(SanitizeUtf8(good) == good);
  CHECK(SanitizeUtf8("") == "");
  CHECK(SanitizeUtf8("a\xFF"
                     "b") == "a" + std::string(kReplacement) + "b");
  // A sequence cut short: one replacement per byte, the next character kept.
  CHECK(SanitizeUtf8("\xE2\x82"
                     "A") == std::string(kReplacement) + std::string(kReplacement) + "A");
  // A surrogate's three bytes each become one replacement.
  CHECK(SanitizeUtf8("\xED\xA0\x80") ==
        std::string(kReplacement) + std::string(kReplacement) + std::string(kReplacement));
  // The output is always valid.
  CHECK(IsValidUtf8(SanitizeUtf8("\x80\xC0\xF5\xFF\xE0\x9F\xBF\xF4\x90\x80\x80")));
}

TEST_CASE("Utf8CutPoint never splits a character", "[common]") {
  const std::string text = "ab\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a b é € 😀: 11 bytes
  CHECK(Utf8CutPoint(text, 11) == 11);
  CHECK(Utf8CutPoint(text, 100) == 11);
  CHECK(Utf8CutPoint(text, 2) == 2);   // before é
  CHECK(Utf8CutPoint(text, 3) == 2);   // inside é
  CHECK(Utf8CutPoint(text, 4) == 4);   // before €
  CHECK(Utf8CutPoint(text, 6) == 4);   // inside €
  CHECK(Utf8CutPoint(text, 7) == 7);   // before 😀
  CHECK(Utf8CutPoint(text, 10) == 7);  // inside 😀
  CHECK(Utf8CutPoint(text, 0) == 0);
  CHECK(Utf8CutPoint("", 0) == 0);
  // Only continuation bytes: nowhere to cut but the start.
  CHECK(Utf8CutPoint("\x80\x80\x80", 2) == 0);
}

TEST_CASE("DescribeInvalidUtf8 names the first bad byte with its line, column and offset",
          "[common]") {
  CHECK(DescribeInvalidUtf8("all fine \xC3\xA9") == "");
  CHECK(DescribeInvalidUtf8("\xFF") == "byte 0xFF at line 1, column 1 (byte offset 0)");
  CHECK(DescribeInvalidUtf8("a\nbc\n\xC3\xA9x\xC3(") ==
        "byte 0xC3 at line 3, column 4 (byte offset 8)");
}

}  // namespace
}  // namespace triald::common
