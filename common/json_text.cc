#include "common/json_text.h"

#include <charconv>
#include <cmath>

#include "common/utf8.h"

namespace triald::common {

void AppendDoubleRepr(double d, std::string* out) {
  if (std::isnan(d)) {
    *out += "nan";
    return;
  }
  if (std::isinf(d)) {
    *out += d > 0 ? "inf" : "-inf";
    return;
  }
  // The shortest round-trip digits in exponent form ("-1.2345e-04"), then laid out as Python's
  // repr(): positional for exponents from -4 to 15, exponent form otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e = sci.find('e');
  int exp = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp);
  if (exp < -4 || exp >= 16) {
    out->append(sci);
    return;
  }
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  if (negative) *out += '-';
  if (exp < 0) {
    *out += "0.";
    out->append(static_cast<size_t>(-exp - 1), '0');
    *out += digits;
    return;
  }
  const size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) {
    *out += digits;
    out->append(int_len - digits.size(), '0');
    *out += ".0";
    return;
  }
  out->append(digits, 0, int_len);
  *out += '.';
  out->append(digits, int_len, std::string::npos);
}

std::string DoubleRepr(double d) {
  std::string out;
  AppendDoubleRepr(d, &out);
  return out;
}

std::string JsonDoubleText(double d) { return std::isfinite(d) ? DoubleRepr(d) : "null"; }

void AppendJsonQuoted(std::string_view s, std::string* out, const JsonQuoteOptions& options) {
  static const char kHex[] = "0123456789abcdef";
  *out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      char32_t code_point = 0;
      const size_t n = DecodeUtf8(s, i, &code_point);
      if (n == 0) {
        *out += "\xEF\xBF\xBD";  // U+FFFD for a byte that starts no well-formed sequence
        ++i;
      } else {
        out->append(s.data() + i, n);
        i += n;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (options.html_safe && (c == '<' || c == '>' || c == '&'))) {
      *out += "\\u00";
      *out += kHex[c >> 4];
      *out += kHex[c & 0xf];
    } else {
      *out += static_cast<char>(c);
    }
  }
  *out += '"';
}

std::string JsonQuote(std::string_view s, const JsonQuoteOptions& options) {
  std::string out;
  AppendJsonQuoted(s, &out, options);
  return out;
}

}  // namespace triald::common
