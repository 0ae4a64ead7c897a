#include "config/toml_diag.h"

#include <algorithm>
#include <sstream>

#include "common/utf8.h"

namespace triald::config {
namespace {

bool IsBareKeyChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::string CutForMessage(std::string text) {
  if (text.size() <= kMaxReprBytes) return text;
  text.resize(common::Utf8CutPoint(text, kMaxReprBytes));
  return text + "...";
}

std::string Quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string KeyText(std::string_view key) {
  if (!key.empty() && std::all_of(key.begin(), key.end(), IsBareKeyChar)) return std::string(key);
  return Quoted(key);
}

std::string JoinList(const std::vector<const char*>& items) {
  std::string out;
  for (const char* item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

bool Contains(const std::vector<const char*>& items, std::string_view s) {
  return std::any_of(items.begin(), items.end(), [s](const char* item) { return s == item; });
}

std::string QuotedAlternatives(const std::vector<const char*>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += Quoted(items[i]);
  }
  return out;
}

std::vector<TomlEntry> InFileOrder(const toml::table& table) {
  std::vector<TomlEntry> entries;
  for (auto&& [k, v] : table) entries.push_back(TomlEntry{&k, &v});
  std::stable_sort(entries.begin(), entries.end(), [](const TomlEntry& a, const TomlEntry& b) {
    const toml::source_position& pa = a.key->source().begin;
    const toml::source_position& pb = b.key->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

TomlDiagnostics::TomlDiagnostics(std::string_view text, std::string display_path)
    : text_(text), path_(std::move(display_path)) {
  while (true) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines_.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

common::Result<toml::table> TomlDiagnostics::Parse(std::string_view syntax_prefix) const {
  // TOML is UTF-8: name the first byte that is not, with its place, before the parser's own
  // (vaguer) complaint.
  if (std::string bad = common::DescribeInvalidUtf8(text_); !bad.empty()) {
    return common::InvalidArgument(path_ + ": not UTF-8 text: " + bad +
                                   "; expected a UTF-8 file (save it as UTF-8)");
  }
  auto syntax_error = [&](const toml::parse_error& e) {
    return common::InvalidArgument(Where(e.source()) + ": " + std::string(syntax_prefix) +
                                   std::string(e.description()));
  };
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text_, std::string_view(path_));
  } catch (const toml::parse_error& e) {
    return syntax_error(e);
  }
#else
  toml::parse_result parsed = toml::parse(text_, std::string_view(path_));
  if (!parsed) return syntax_error(parsed.error());
  return std::move(parsed).table();
#endif
}

std::string TomlDiagnostics::Where(const toml::source_region& region) const {
  return path_ + ":" + std::to_string(region.begin.line) + ":" +
         std::to_string(region.begin.column);
}

std::string TomlDiagnostics::SourceText(const toml::source_region& region) const {
  if (region.begin.line != region.end.line || region.begin.line == 0 ||
      region.begin.line > lines_.size() || region.end.column <= region.begin.column) {
    return "";
  }
  std::string_view line = lines_[region.begin.line - 1];
  auto advance = [&line](size_t pos, size_t code_points) {
    while (code_points > 0 && pos < line.size()) {
      ++pos;
      while (pos < line.size() && IsContinuationByte(line[pos])) ++pos;
      --code_points;
    }
    return pos;
  };
  size_t begin = advance(0, region.begin.column - 1);
  size_t end = advance(begin, region.end.column - region.begin.column);
  return std::string(line.substr(begin, end - begin));
}

std::string TomlDiagnostics::Repr(const toml::node& node) const {
  // A [header] table's source is its header line, which is no value.
  if (node.is_table() && !node.as_table()->is_inline()) return "<table>";
  std::string text = SourceText(node.source());
  if (text.empty()) {
    std::ostringstream os;
    os << toml::toml_formatter(node, toml::format_flags::none);
    text = os.str();
    std::replace(text.begin(), text.end(), '\n', ' ');
  }
  return CutForMessage(std::move(text));
}

common::Status TomlDiagnostics::ValueError(const std::string& table, const std::string& key,
                                           const toml::node& node, const std::string& problem,
                                           const std::string& expected) const {
  std::string msg = Where(node.source()) + ": " + table + " " + key + " = " + Repr(node) + ":";
  if (!problem.empty()) msg += " " + problem + ";";
  return common::InvalidArgument(msg + " expected " + expected);
}

common::Status TomlDiagnostics::MissingKey(const std::string& table_name, const toml::node& table,
                                           const char* key, const std::string& expected) const {
  return common::InvalidArgument(Where(table.source()) + ": " + table_name +
                                 " missing required key " + Quoted(key) + "; expected " + expected);
}

common::Status TomlDiagnostics::CheckKeys(const std::string& table_name, const toml::table& table,
                                          const std::vector<const char*>& allowed,
                                          const std::string& what) const {
  for (const TomlEntry& e : InFileOrder(table)) {
    if (Contains(allowed, e.key->str())) continue;
    return common::InvalidArgument(Where(e.key->source()) + ": " + table_name + " unknown key " +
                                   Quoted(e.key->str()) + what + "; expected one of " +
                                   JoinList(allowed));
  }
  return common::Status::Ok();
}

}  // namespace triald::config
