#include "common/utf8.h"

#include <cstdio>

namespace triald::common {

size_t FirstInvalidUtf8(std::string_view text) {
  char32_t code_point = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t length = DecodeUtf8(text, i, &code_point);
    if (length == 0) return i;
    i += length;
  }
  return std::string_view::npos;
}

std::string DescribeInvalidUtf8(std::string_view text) {
  const size_t at = FirstInvalidUtf8(text);
  if (at == std::string_view::npos) return "";
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[at]));
  return std::string("byte ") + byte + " at line " + std::to_string(line) + ", column " +
         std::to_string(at - line_start + 1) + " (byte offset " + std::to_string(at) + ")";
}

size_t Utf8CutPoint(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text.size();
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

std::string SanitizeUtf8(std::string_view text) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(text.size());
  char32_t code_point = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t length = DecodeUtf8(text, i, &code_point);
    if (length == 0) {
      out.append(kReplacement);
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

}  // namespace triald::common
