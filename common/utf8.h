#pragma once
// The one UTF-8 validator (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
// Text that comes from workers (stderr tails, error messages, logs) and is stored or sent as
// JSON goes through SanitizeUtf8, so a worker writing binary garbage cannot make a reply
// unreadable; IsValidUtf8 checks text that must be refused rather than repaired; DecodeUtf8 is
// the step both are built on, for callers that need the code points (the worker's tokenizer).
//
// Thread-safety: pure functions.

#include <cstddef>
#include <string>
#include <string_view>

namespace triald::common {

// The length (1-4) of the well-formed UTF-8 sequence that starts at text[i] and its code point
// in *code_point, or 0 (and *code_point untouched) when text[i] does not start one: a stray
// continuation byte, an overlong form, a surrogate, a value above U+10FFFF, or a sequence cut
// short by the end of text. Requires i < text.size(). Inline: the tokenizer calls it per
// character.
inline size_t DecodeUtf8(std::string_view text, size_t i, char32_t* code_point) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  const size_t avail = text.size() - i;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < avail && p[k] >= lo && p[k] <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return 0;
    *code_point = (char32_t{b0} & 0x1F) << 6 | (p[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    // E0 needs A0.. (no overlong forms), ED needs ..9F (no surrogates).
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = b0 == 0xED ? 0x9F : 0xBF;
    if (!cont(1, lo, hi) || !cont(2)) return 0;
    *code_point = (char32_t{b0} & 0x0F) << 12 | char32_t{p[1] & 0x3Fu} << 6 | (p[2] & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    // F0 needs 90.. (no overlong forms), F4 needs ..8F (nothing above U+10FFFF).
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (!cont(1, lo, hi) || !cont(2) || !cont(3)) return 0;
    *code_point = (char32_t{b0} & 0x07) << 18 | char32_t{p[1] & 0x3Fu} << 12 |
                  char32_t{p[2] & 0x3Fu} << 6 | (p[3] & 0x3F);
    return 4;
  }
  return 0;
}

// The offset of the first byte of text that does not start a well-formed sequence, or
// std::string_view::npos when all of text is well-formed UTF-8.
size_t FirstInvalidUtf8(std::string_view text);

// Where the first ill-formed byte of `text` is, for a message naming it: "byte 0xFF at line 3,
// column 7 (byte offset 42)"; lines and columns count from 1, columns in bytes. Empty when all of
// text is well-formed.
std::string DescribeInvalidUtf8(std::string_view text);

// Whether all of text is well-formed UTF-8 (the empty string is).
inline bool IsValidUtf8(std::string_view text) {
  return FirstInvalidUtf8(text) == std::string_view::npos;
}

// Where to cut `text` to keep at most max_bytes of it without splitting a UTF-8 character:
// text.size() when that is at most max_bytes, else the offset of the last character start at or
// before max_bytes (continuation bytes are stepped over whether or not the text is well-formed).
size_t Utf8CutPoint(std::string_view text, size_t max_bytes);

// text with each byte that does not start a well-formed sequence replaced by U+FFFD (so a
// sequence cut short becomes one U+FFFD per byte); well-formed text comes back unchanged.
std::string SanitizeUtf8(std::string_view text);

}  // namespace triald::common
