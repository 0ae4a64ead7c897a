#include "daemon/ctl/format.h"

#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/json.h"
#include "daemon/ctl/resources_view.h"

namespace triald::ctl {
namespace json = boost::json;

std::string EscapeForTerminal(std::string_view text, bool keep_lines) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (keep_lines && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      const unsigned char d = static_cast<unsigned char>(text[++i]);
      out += "\\u00";
      out += kHex[d >> 4];
      out += kHex[d & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string FormatValue(const json::value& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return EscapeForTerminal(v.get_string());
  if (v.is_double() || v.is_int64() || v.is_uint64()) {
    double d = v.to_number<double>();
    std::ostringstream o;
    o << std::setprecision(6) << d;
    return o.str();
  }
  return common::SerializeJson(v);
}

std::string FormatParams(const json::value& params) {
  std::string s;
  if (!params.is_object()) return s;
  for (const auto& kv : params.get_object()) {
    if (!s.empty()) s += " ";
    s += EscapeForTerminal(kv.key()) + "=" + FormatValue(kv.value());
  }
  return s;
}

std::string FormatDuration(const json::value& v) {
  if (v.is_null()) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << v.to_number<double>() << "s";
  return o.str();
}

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v ? FormatValue(*v) : "-";
}

void PrintTrial(std::ostream& out, const json::object& t) {
  out << "trial " << Str(t, "number") << ": " << Str(t, "state") << "  value " << Str(t, "value")
      << "  (" << FormatDuration(t.at("duration_s")) << ")\n";
  out << "  params: " << FormatParams(t.at("params")) << "\n";
  if (t.contains("fail_reason") && !t.at("fail_reason").is_null()) {
    out << "  failed: " << Str(t, "fail_reason") << ": " << Str(t, "fail_detail") << "\n";
  }
  if (std::string res = ResourcesLine(t); !res.empty()) out << "  " << res << "\n";
}

std::string MetricNamesText(const boost::json::object& reply) {
  const boost::json::value* names = reply.if_contains("metric_names");
  if (names == nullptr || !names->is_array()) return "";
  std::string text;
  for (const boost::json::value& n : names->get_array()) {
    text += (text.empty() ? "" : ", ") + FormatValue(n);
  }
  return text;
}

std::string DirectionsText(const boost::json::object& reply) {
  const boost::json::value* d = reply.if_contains("directions");
  if (d == nullptr || !d->is_array() || d->get_array().empty()) {
    return reply.contains("direction") ? Str(reply, "direction") : "";
  }
  const boost::json::value* names = reply.if_contains("metric_names");
  const bool named =
      names != nullptr && names->is_array() && names->get_array().size() == d->get_array().size();
  std::string text;
  for (size_t i = 0; i < d->get_array().size(); ++i) {
    text += (text.empty() ? "" : ", ") + FormatValue(d->get_array()[i]);
    if (named) text += " " + FormatValue(names->get_array()[i]);
  }
  return text;
}

std::string StorageHoldText(const boost::json::object& s) {
  const boost::json::value* so = s.if_contains("storage");
  if (so == nullptr || !so->is_object()) return "";
  const boost::json::object& o = so->get_object();
  std::string kept = "trial ends are kept";
  if (const boost::json::value* w = o.if_contains("writes_kept"); w != nullptr && w->is_number()) {
    const int64_t n = w->to_number<int64_t>();
    if (n > 0) kept += ", and " + std::to_string(n) + " of their writes";
  }
  std::ostringstream retry;
  const boost::json::value* r = o.if_contains("retry_in_s");
  retry << std::fixed << std::setprecision(0)
        << (r != nullptr && r->is_number() ? r->to_number<double>() : 0.0);
  return "HELD: storage refuses writes: " + Str(o, "reason") + " (" + Str(o, "failures") +
         " refused; " + kept + "; next try in " + retry.str() + " s)";
}

std::string FailuresText(const boost::json::object& s) {
  const boost::json::value* f = s.if_contains("failures");
  if (f == nullptr || !f->is_object()) return "";
  const boost::json::object& o = f->get_object();
  const std::string tallied = Str(o, "tallied");
  const std::string failed = Str(s, "failed");
  std::string text = failed + " failed; most often (" + Str(o, "count") + " of ";
  text += tallied == failed ? "them" : "the last " + tallied;
  return text + "): " + Str(o, "reason") + ": " + Str(o, "summary");
}

}  // namespace triald::ctl
