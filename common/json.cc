#include "common/json.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>
#include <charconv>
#include <cmath>
#include <string>

namespace triald::common {
namespace {

bool ParseDouble(std::string_view s, double* out) {
  auto res = std::from_chars(s.data(), s.data() + s.size(), *out);
  return res.ec == std::errc() && res.ptr == s.data() + s.size() && !s.empty();
}

// A Boost.JSON handler that builds a value like boost::json::parse does, except that doubles are
// converted from their text with std::from_chars: Boost 1.81's own conversion can be off by an
// ulp, and a stored distribution must compare equal to the one it was made from.
class ExactDoubleHandler {
 public:
  static constexpr std::size_t max_object_size = boost::json::object::max_size();
  static constexpr std::size_t max_array_size = boost::json::array::max_size();
  static constexpr std::size_t max_key_size = boost::json::string::max_size();
  static constexpr std::size_t max_string_size = boost::json::string::max_size();

  ExactDoubleHandler() { st_.reset(); }

  boost::json::value Release() { return st_.release(); }

  bool on_document_begin(boost::json::error_code&) { return true; }
  bool on_document_end(boost::json::error_code&) { return true; }
  bool on_object_begin(boost::json::error_code&) { return true; }
  bool on_object_end(std::size_t n, boost::json::error_code&) {
    st_.push_object(n);
    return true;
  }
  bool on_array_begin(boost::json::error_code&) { return true; }
  bool on_array_end(std::size_t n, boost::json::error_code&) {
    st_.push_array(n);
    return true;
  }
  bool on_key_part(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    st_.push_chars(s);
    return true;
  }
  bool on_key(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    st_.push_key(s);
    return true;
  }
  bool on_string_part(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    st_.push_chars(s);
    return true;
  }
  bool on_string(boost::json::string_view s, std::size_t, boost::json::error_code&) {
    st_.push_string(s);
    return true;
  }
  bool on_number_part(boost::json::string_view s, boost::json::error_code&) {
    number_.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t i, boost::json::string_view, boost::json::error_code&) {
    number_.clear();
    st_.push_int64(i);
    return true;
  }
  bool on_uint64(uint64_t u, boost::json::string_view, boost::json::error_code&) {
    number_.clear();
    st_.push_uint64(u);
    return true;
  }
  bool on_double(double d, boost::json::string_view s, boost::json::error_code&) {
    number_.append(s.data(), s.size());
    double exact = 0;
    // from_chars rejects only what Boost accepted as a number in ways we do not expect; then the
    // parser's own value is the best there is.
    st_.push_double(ParseDouble(number_, &exact) ? exact : d);
    number_.clear();
    return true;
  }
  bool on_bool(bool b, boost::json::error_code&) {
    st_.push_bool(b);
    return true;
  }
  bool on_null(boost::json::error_code&) {
    st_.push_null();
    return true;
  }
  bool on_comment_part(boost::json::string_view, boost::json::error_code&) { return true; }
  bool on_comment(boost::json::string_view, boost::json::error_code&) { return true; }

 private:
  boost::json::value_stack st_;
  std::string number_;
};

}  // namespace

Result<boost::json::value> ParseJsonExact(std::string_view text, int max_depth) {
  boost::json::parse_options opts;
  opts.max_depth = static_cast<std::size_t>(max_depth);
  boost::json::basic_parser<ExactDoubleHandler> parser{opts};
  boost::json::error_code ec;
  std::size_t n = parser.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size()) ec = boost::json::error::extra_data;
  if (ec) return InvalidArgument(ec.message());
  return parser.handler().Release();
}

bool AllFinite(const boost::json::value& v) {
  if (v.is_double()) return std::isfinite(v.get_double());
  if (v.is_array()) {
    for (const boost::json::value& e : v.get_array()) {
      if (!AllFinite(e)) return false;
    }
  }
  if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      if (!AllFinite(kv.value())) return false;
    }
  }
  return true;
}

namespace {

void AppendJson(const boost::json::value& v, std::string* out);

void AppendArray(const boost::json::array& a, std::string* out) {
  *out += '[';
  bool first = true;
  for (const boost::json::value& e : a) {
    if (!first) *out += ',';
    first = false;
    AppendJson(e, out);
  }
  *out += ']';
}

void AppendObject(const boost::json::object& o, std::string* out) {
  *out += '{';
  bool first = true;
  for (const auto& kv : o) {
    if (!first) *out += ',';
    first = false;
    AppendJsonQuoted(kv.key(), out);
    *out += ':';
    AppendJson(kv.value(), out);
  }
  *out += '}';
}

void AppendJson(const boost::json::value& v, std::string* out) {
  switch (v.kind()) {
    case boost::json::kind::null:
      *out += "null";
      return;
    case boost::json::kind::bool_:
      *out += v.get_bool() ? "true" : "false";
      return;
    case boost::json::kind::int64:
      *out += std::to_string(v.get_int64());
      return;
    case boost::json::kind::uint64:
      *out += std::to_string(v.get_uint64());
      return;
    case boost::json::kind::double_:
      if (std::isfinite(v.get_double())) {
        AppendDoubleRepr(v.get_double(), out);
      } else {
        *out += "null";
      }
      return;
    case boost::json::kind::string:
      AppendJsonQuoted(v.get_string(), out);
      return;
    case boost::json::kind::array:
      AppendArray(v.get_array(), out);
      return;
    case boost::json::kind::object:
      AppendObject(v.get_object(), out);
      return;
  }
}

}  // namespace

std::string SerializeJson(const boost::json::value& v) {
  std::string out;
  AppendJson(v, &out);
  return out;
}

std::string SerializeJson(const boost::json::object& o) {
  std::string out;
  AppendObject(o, &out);
  return out;
}

std::string SerializeJson(const boost::json::array& a) {
  std::string out;
  AppendArray(a, &out);
  return out;
}

}  // namespace triald::common
