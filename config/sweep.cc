#include "config/sweep.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

namespace triald::config {

namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

constexpr size_t kMaxReprChars = 80;
constexpr size_t kMaxStudyNameChars = 128;
constexpr int64_t kMaxExactInt = int64_t{1} << 53;

const char* const kTopLevelTables = "[study], [objective], [space], [sampler], [pruner]";

bool IsAsciiAlpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

bool IsStudyName(std::string_view s) {
  if (s.empty() || s.size() > kMaxStudyNameChars) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_' || c == '.' || c == '-';
  });
}

bool IsParamName(std::string_view s) {
  if (s.empty() || !(IsAsciiAlpha(s[0]) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_' || c == '.' || c == '-';
  });
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || !(IsAsciiAlpha(s[0]) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_'; });
}

// The daemon owns these variables: a sweep that set them would break the report protocol or the
// GPU assignment.
bool IsReservedEnvName(std::string_view s) {
  return s.rfind("TRIALD_", 0) == 0 || s == "CUDA_VISIBLE_DEVICES";
}

bool IsBareKey(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_' || c == '-';
  });
}

// A double-quoted string, escaped enough to be read back unambiguously.
std::string Quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A key as TOML would need it written: bare when possible, quoted otherwise.
std::string KeyText(std::string_view key) {
  if (IsBareKey(key)) return std::string(key);
  return Quoted(key);
}

std::string JoinList(std::initializer_list<const char*> items) {
  std::string out;
  for (const char* item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

bool Contains(std::initializer_list<const char*> items, std::string_view s) {
  return std::any_of(items.begin(), items.end(), [s](const char* item) { return s == item; });
}

struct Entry {
  const toml::key* key;
  const toml::node* node;
};

// toml++ keeps a table's keys sorted by name; a user reads the file top to bottom, so checks
// (and the search space) follow the order in which keys appear in the file.
std::vector<Entry> InFileOrder(const toml::table& table) {
  std::vector<Entry> entries;
  for (auto&& [k, v] : table) entries.push_back(Entry{&k, &v});
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const toml::source_position& pa = a.key->source().begin;
    const toml::source_position& pb = b.key->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

// Turns TOML nodes into SweepSpec fields and every problem into a message that points at the
// file, line and column. One parser per document; it borrows `source`, which must outlive it.
// Not thread-safe, and need not be: ParseSweep makes a fresh one per call.
class SweepParser {
 public:
  explicit SweepParser(const SweepSource& source)
      : source_(source), display_path_(source.path.empty() ? "<sweep>" : source.path) {
    std::string_view text = source_.text;
    while (true) {
      size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines_.push_back(line);
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
    }
  }

  Result<SweepSpec> Parse();

 private:
  // A key in a table, for messages: "[study] n_trials = 0: ...".
  struct Field {
    std::string table;  // "[study]"
    std::string key;    // as written in messages, e.g. "n_trials" or "command[1]"
    const toml::node* node;
  };

  std::string Where(const toml::source_region& region) const {
    return display_path_ + ":" + std::to_string(region.begin.line) + ":" +
           std::to_string(region.begin.column);
  }

  std::string SourceText(const toml::source_region& region) const;
  std::string Repr(const toml::node& node) const;

  // "PATH:L:C: [table] key = <value>: <problem>; expected <expected>"; problem may be empty.
  Status ValueError(const Field& f, const std::string& problem, const std::string& expected) const {
    std::string msg =
        Where(f.node->source()) + ": " + f.table + " " + f.key + " = " + Repr(*f.node) + ":";
    if (!problem.empty()) msg += " " + problem + ";";
    return InvalidArgument(msg + " expected " + expected);
  }
  Status MissingKey(const std::string& table_name, const toml::node& table, const char* key,
                    const std::string& expected) const {
    return InvalidArgument(Where(table.source()) + ": " + table_name + " missing required key " +
                           Quoted(key) + "; expected " + expected);
  }
  // Rejects any key not in `allowed`, in file order; `what` qualifies the table in the message.
  Status CheckKeys(const std::string& table_name, const toml::table& table,
                   std::initializer_list<const char*> allowed, const std::string& what = "") const;

  Status ReadString(const Field& f, const std::string& expected, std::string* out) const;
  Status ReadInt(const Field& f, int64_t min, int64_t max, const std::string& expected,
                 int64_t* out) const;
  Status ReadSeconds(const Field& f, double* out) const;
  Status ReadBool(const Field& f, bool* out) const;

  Status ParseStudy(const toml::table& t, StudyConfig* out) const;
  Status ParseObjective(const toml::table& t, ObjectiveConfig* out) const;
  Status ParseCommand(const Field& f, std::vector<std::string>* out) const;
  Status ParseEnv(const Field& f, std::map<std::string, std::string>* out) const;
  Status ResolveWorkdir(const Field* f, std::string* out) const;
  Status ParseSpace(const toml::table& t, SearchSpace* out) const;
  Status ParseParam(const std::string& name, const toml::table& t, Distribution* out) const;
  Status ParseSampler(const toml::table& t, SamplerConfig* out) const;
  Status ParsePruner(const toml::table& t, PrunerConfig* out) const;

  const SweepSource& source_;
  std::string display_path_;
  std::vector<std::string_view> lines_;
};

// The value exactly as the user wrote it, when it sits on one line: "5.0" stays "5.0" and "1e-4"
// stays "1e-4" instead of toml++'s re-rendering. toml++ counts columns in code points.
std::string SweepParser::SourceText(const toml::source_region& region) const {
  if (region.begin.line != region.end.line || region.begin.line == 0 ||
      region.begin.line > lines_.size() || region.end.column <= region.begin.column) {
    return "";
  }
  std::string_view line = lines_[region.begin.line - 1];
  auto advance = [&line](size_t pos, size_t code_points) {
    while (code_points > 0 && pos < line.size()) {
      ++pos;
      while (pos < line.size() && (static_cast<unsigned char>(line[pos]) & 0xC0) == 0x80) ++pos;
      --code_points;
    }
    return pos;
  };
  size_t begin = advance(0, region.begin.column - 1);
  size_t end = advance(begin, region.end.column - region.begin.column);
  return std::string(line.substr(begin, end - begin));
}

std::string SweepParser::Repr(const toml::node& node) const {
  // A [header] table's source is its header line, which is no value.
  if (node.is_table() && !node.as_table()->is_inline()) return "<table>";
  std::string text = SourceText(node.source());
  if (text.empty()) {
    std::ostringstream os;
    os << toml::toml_formatter(node, toml::format_flags::none);
    text = os.str();
    std::replace(text.begin(), text.end(), '\n', ' ');
  }
  if (text.size() > kMaxReprChars) {
    size_t cut = kMaxReprChars;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

Status SweepParser::CheckKeys(const std::string& table_name, const toml::table& table,
                              std::initializer_list<const char*> allowed,
                              const std::string& what) const {
  for (const Entry& e : InFileOrder(table)) {
    if (Contains(allowed, e.key->str())) continue;
    return InvalidArgument(Where(e.key->source()) + ": " + table_name + " unknown key " +
                           Quoted(e.key->str()) + what + "; expected one of " + JoinList(allowed));
  }
  return Status::Ok();
}

Status SweepParser::ReadString(const Field& f, const std::string& expected,
                               std::string* out) const {
  const auto* v = f.node->as_string();
  if (v == nullptr) return ValueError(f, "", expected);
  *out = v->get();
  return Status::Ok();
}

Status SweepParser::ReadInt(const Field& f, int64_t min, int64_t max, const std::string& expected,
                            int64_t* out) const {
  const auto* v = f.node->as_integer();
  if (v == nullptr || v->get() < min) return ValueError(f, "", expected);
  if (v->get() > max)
    return ValueError(f, "too large", expected + " and <= " + std::to_string(max));
  *out = v->get();
  return Status::Ok();
}

Status SweepParser::ReadSeconds(const Field& f, double* out) const {
  const std::string expected = "a number of seconds >= 0";
  double x = 0;
  if (const auto* i = f.node->as_integer()) {
    x = static_cast<double>(i->get());
  } else if (const auto* d = f.node->as_floating_point()) {
    x = d->get();
  } else {
    return ValueError(f, "", expected);
  }
  if (!std::isfinite(x) || x < 0) return ValueError(f, "", expected);
  *out = x;
  return Status::Ok();
}

Status SweepParser::ReadBool(const Field& f, bool* out) const {
  const auto* v = f.node->as_boolean();
  if (v == nullptr) return ValueError(f, "", "true or false");
  *out = v->get();
  return Status::Ok();
}

Status SweepParser::ParseStudy(const toml::table& t, StudyConfig* out) const {
  const std::string tn = "[study]";
  TRIALD_RETURN_IF_ERROR(CheckKeys(
      tn, t, {"name", "direction", "n_trials", "parallelism", "trial_timeout", "kill_grace"}));
  const std::string name_expected = "1 to 128 characters from A-Z a-z 0-9 _ . -";
  if (const toml::node* n = t.get("name")) {
    Field f{tn, "name", n};
    TRIALD_RETURN_IF_ERROR(ReadString(f, "a string of " + name_expected, &out->name));
    if (!IsStudyName(out->name)) return ValueError(f, "not a valid study name", name_expected);
  } else {
    return MissingKey(tn, t, "name", "a study name of " + name_expected);
  }
  if (const toml::node* n = t.get("direction")) {
    Field f{tn, "direction", n};
    std::string dir;
    const std::string expected = "\"minimize\" or \"maximize\"";
    TRIALD_RETURN_IF_ERROR(ReadString(f, expected, &dir));
    if (dir == "minimize") {
      out->direction = Direction::kMinimize;
    } else if (dir == "maximize") {
      out->direction = Direction::kMaximize;
    } else {
      return ValueError(f, "", expected);
    }
  }
  int64_t v = 0;
  if (const toml::node* n = t.get("n_trials")) {
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "n_trials", n}, 1, INT_MAX, "an integer >= 1", &v));
    out->n_trials = static_cast<int>(v);
  } else {
    return MissingKey(tn, t, "n_trials", "an integer >= 1");
  }
  if (const toml::node* n = t.get("parallelism")) {
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "parallelism", n}, 1, INT_MAX, "an integer >= 1", &v));
    out->parallelism = static_cast<int>(v);
  }
  if (const toml::node* n = t.get("trial_timeout")) {
    TRIALD_RETURN_IF_ERROR(ReadSeconds({tn, "trial_timeout", n}, &out->trial_timeout));
  }
  if (const toml::node* n = t.get("kill_grace")) {
    TRIALD_RETURN_IF_ERROR(ReadSeconds({tn, "kill_grace", n}, &out->kill_grace));
  }
  return Status::Ok();
}

Status SweepParser::ParseCommand(const Field& f, std::vector<std::string>* out) const {
  const std::string expected = "a non-empty array of strings, e.g. [\"python3\", \"train.py\"]";
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr || arr->empty()) return ValueError(f, "", expected);
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& elem = *arr->get(i);
    Field ef{f.table, f.key + "[" + std::to_string(i) + "]", &elem};
    std::string arg;
    TRIALD_RETURN_IF_ERROR(ReadString(ef, "a string", &arg));
    // exec() takes NUL-terminated strings: an embedded NUL would silently cut the argument.
    if (arg.find('\0') != std::string::npos) {
      return ValueError(ef, "contains a NUL character", "a string without NUL");
    }
    if (i == 0 && arg.empty()) return ValueError(ef, "", "the program to run");
    out->push_back(std::move(arg));
  }
  return Status::Ok();
}

Status SweepParser::ParseEnv(const Field& f, std::map<std::string, std::string>* out) const {
  const toml::table* env = f.node->as_table();
  if (env == nullptr) return ValueError(f, "", "a table of NAME = \"value\" strings");
  const std::string tn = "[objective.env]";
  for (const Entry& e : InFileOrder(*env)) {
    const std::string name(e.key->str());
    if (!IsEnvName(name)) {
      return InvalidArgument(Where(e.key->source()) + ": " + tn + " " + Quoted(name) +
                             " is not a valid environment variable name; expected a name "
                             "matching [A-Za-z_][A-Za-z0-9_]*");
    }
    if (IsReservedEnvName(name)) {
      return InvalidArgument(Where(e.key->source()) + ": " + tn + " " + name +
                             " is reserved: the daemon sets it for every trial; expected a name "
                             "that does not start with TRIALD_ and is not CUDA_VISIBLE_DEVICES");
    }
    Field vf{tn, name, e.node};
    std::string value;
    TRIALD_RETURN_IF_ERROR(ReadString(vf, "a string", &value));
    if (value.find('\0') != std::string::npos) {
      return ValueError(vf, "contains a NUL character", "a string without NUL");
    }
    (*out)[name] = std::move(value);
  }
  return Status::Ok();
}

// Relative workdirs are anchored at the sweep file, not at wherever the daemon happens to run,
// so a sweep next to its script works from any current directory.
Status SweepParser::ResolveWorkdir(const Field* f, std::string* out) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path base = fs::path(source_.path).parent_path();
  base = base.empty() ? fs::current_path(ec) : fs::absolute(base, ec);
  if (ec) {
    return common::IoError("cannot resolve the directory of " + display_path_ + ": " +
                           ec.message());
  }
  fs::path dir = base;
  if (f != nullptr) {
    std::string given;
    TRIALD_RETURN_IF_ERROR(ReadString(*f, "a directory path", &given));
    if (given.empty() || given.find('\0') != std::string::npos) {
      return ValueError(*f, "", "a non-empty directory path");
    }
    dir = base / fs::path(given);  // an absolute `given` replaces `base`
  }
  dir = dir.lexically_normal();
  if (!dir.has_filename() && dir.has_relative_path()) dir = dir.parent_path();
  *out = dir.string();
  return Status::Ok();
}

Status SweepParser::ParseObjective(const toml::table& t, ObjectiveConfig* out) const {
  const std::string tn = "[objective]";
  TRIALD_RETURN_IF_ERROR(CheckKeys(tn, t, {"kind", "command", "env", "workdir"}));
  if (const toml::node* n = t.get("kind")) {
    Field f{tn, "kind", n};
    TRIALD_RETURN_IF_ERROR(ReadString(f, "\"exec\"", &out->kind));
    if (out->kind == "lm") {
      return ValueError(f, "kind = \"lm\" is not supported yet by this build", "\"exec\"");
    }
    if (out->kind != "exec") return ValueError(f, "unknown objective kind", "\"exec\"");
  } else {
    return MissingKey(tn, t, "kind", "kind = \"exec\"");
  }
  if (const toml::node* n = t.get("command")) {
    TRIALD_RETURN_IF_ERROR(ParseCommand({tn, "command", n}, &out->command));
  } else {
    return MissingKey(tn, t, "command",
                      "a non-empty array of strings, e.g. command = [\"python3\", \"train.py\"]");
  }
  if (const toml::node* n = t.get("env")) {
    TRIALD_RETURN_IF_ERROR(ParseEnv({tn, "env", n}, &out->env));
  }
  if (const toml::node* n = t.get("workdir")) {
    Field f{tn, "workdir", n};
    return ResolveWorkdir(&f, &out->workdir);
  }
  return ResolveWorkdir(nullptr, &out->workdir);
}

Status SweepParser::ParseParam(const std::string& name, const toml::table& t,
                               Distribution* out) const {
  const std::string tn = "[space." + KeyText(name) + "]";
  const std::string type_expected = "\"float\", \"int\" or \"categorical\"";
  // Keys no parameter takes are reported before a missing type: a misspelt key often is the type.
  TRIALD_RETURN_IF_ERROR(CheckKeys(tn, t, {"type", "low", "high", "log", "step", "choices"}));
  const toml::node* type_node = t.get("type");
  if (type_node == nullptr) return MissingKey(tn, t, "type", "type = " + type_expected);
  std::string type;
  Field type_field{tn, "type", type_node};
  TRIALD_RETURN_IF_ERROR(ReadString(type_field, type_expected, &type));
  if (type == "float") {
    out->type = ParamType::kFloat;
  } else if (type == "int") {
    out->type = ParamType::kInt;
  } else if (type == "categorical") {
    out->type = ParamType::kCategorical;
  } else {
    return ValueError(type_field, "", type_expected);
  }

  if (out->type == ParamType::kCategorical) {
    TRIALD_RETURN_IF_ERROR(CheckKeys(tn, t, {"type", "choices"}, " for a categorical parameter"));
    const toml::node* n = t.get("choices");
    const std::string expected = "a non-empty array of strings, integers, floats or booleans";
    if (n == nullptr) return MissingKey(tn, t, "choices", "choices = " + expected);
    Field f{tn, "choices", n};
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return ValueError(f, "", expected);
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& elem = *arr->get(i);
      if (const auto* s = elem.as_string()) {
        out->choices.emplace_back(s->get());
      } else if (const auto* b = elem.as_boolean()) {
        out->choices.emplace_back(b->get());
      } else if (const auto* in = elem.as_integer()) {
        out->choices.emplace_back(in->get());
      } else if (const auto* d = elem.as_floating_point()) {
        out->choices.emplace_back(d->get());
      } else {
        return ValueError({tn, "choices[" + std::to_string(i) + "]", &elem}, "",
                          "a string, integer, float or boolean");
      }
    }
  } else {
    const bool is_int = out->type == ParamType::kInt;
    const char* what = is_int ? " for an int parameter" : " for a float parameter";
    TRIALD_RETURN_IF_ERROR(CheckKeys(tn, t, {"type", "low", "high", "log", "step"}, what));
    const std::string number = is_int ? "an integer (type = \"int\")" : "a number";
    auto read_number = [&](const char* key, const std::string& expected, double* dst) -> Status {
      Field f{tn, key, t.get(key)};
      if (const auto* i = f.node->as_integer()) {
        // Internal values are doubles: beyond 2^53 an int parameter would lose its exact value.
        if (is_int && (i->get() > kMaxExactInt || i->get() < -kMaxExactInt)) {
          return ValueError(f, "too large", "an integer between -2^53 and 2^53");
        }
        *dst = static_cast<double>(i->get());
      } else if (const auto* d = f.node->as_floating_point(); d != nullptr && !is_int) {
        *dst = d->get();
      } else {
        return ValueError(f, "", expected);
      }
      return Status::Ok();
    };
    for (const char* key : {"low", "high"}) {
      if (t.get(key) == nullptr) return MissingKey(tn, t, key, number);
    }
    TRIALD_RETURN_IF_ERROR(read_number("low", number, &out->low));
    TRIALD_RETURN_IF_ERROR(read_number("high", number, &out->high));
    if (const toml::node* n = t.get("log"))
      TRIALD_RETURN_IF_ERROR(ReadBool({tn, "log", n}, &out->log));
    out->step = is_int ? 1 : 0;
    if (const toml::node* n = t.get("step")) {
      const std::string expected =
          is_int ? "an integer >= 1" : "a number > 0 (omit step for a continuous range)";
      TRIALD_RETURN_IF_ERROR(read_number("step", expected, &out->step));
      // For a float, Validate reads step 0 as "continuous"; written out it is a mistake.
      if (!(out->step > 0)) return ValueError({tn, "step", n}, "", expected);
    }
  }

  Status st = out->Validate();
  if (st.ok()) return st;
  // Validate names the field at fault first ("low = 5.0 is greater than ..."): point there.
  const std::string& msg = st.message();
  std::string key = msg.substr(0, msg.find(" = "));
  const toml::node* at = t.get(key);
  return InvalidArgument(Where(at != nullptr ? at->source() : t.source()) + ": " + tn + " " + msg);
}

Status SweepParser::ParseSpace(const toml::table& t, SearchSpace* out) const {
  const std::vector<Entry> entries = InFileOrder(t);
  if (entries.empty()) {
    return InvalidArgument(Where(t.source()) +
                           ": [space] has no parameters; expected at least one [space.NAME] table");
  }
  for (const Entry& e : entries) {
    const std::string name(e.key->str());
    if (!IsParamName(name)) {
      return InvalidArgument(Where(e.key->source()) + ": [space] parameter name " + Quoted(name) +
                             " is not valid; expected a name matching [A-Za-z_][A-Za-z0-9_.-]*");
    }
    const toml::table* param = e.node->as_table();
    if (param == nullptr) {
      return ValueError({"[space]", KeyText(name), e.node}, "",
                        "a table such as [space." + KeyText(name) +
                            "] with type = \"float\", \"int\" or \"categorical\"");
    }
    ParamSpec spec;
    spec.name = name;
    TRIALD_RETURN_IF_ERROR(ParseParam(name, *param, &spec.dist));
    out->push_back(std::move(spec));
  }
  return Status::Ok();
}

Status SweepParser::ParseSampler(const toml::table& t, SamplerConfig* out) const {
  const std::string tn = "[sampler]";
  TRIALD_RETURN_IF_ERROR(CheckKeys(tn, t, {"kind", "seed"}));
  const std::string expected = "one of random, grid";
  if (const toml::node* n = t.get("kind")) {
    Field f{tn, "kind", n};
    TRIALD_RETURN_IF_ERROR(ReadString(f, expected, &out->kind));
    if (out->kind == "tpe" || out->kind == "qmc") {
      return ValueError(f, "sampler kind " + Quoted(out->kind) + " is not available in this build",
                        expected);
    }
    if (out->kind != "random" && out->kind != "grid") {
      return ValueError(f, "unknown sampler kind", expected);
    }
  }
  if (const toml::node* n = t.get("seed")) {
    int64_t seed = 0;
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "seed", n}, 0, std::numeric_limits<int64_t>::max(),
                                   "a non-negative integer", &seed));
    out->seed = static_cast<uint64_t>(seed);
    out->seed_given = true;
  }
  return Status::Ok();
}

Status SweepParser::ParsePruner(const toml::table& t, PrunerConfig* out) const {
  const std::string tn = "[pruner]";
  TRIALD_RETURN_IF_ERROR(CheckKeys(tn, t, {"kind"}));
  const std::string expected = "one of nop";
  if (const toml::node* n = t.get("kind")) {
    Field f{tn, "kind", n};
    TRIALD_RETURN_IF_ERROR(ReadString(f, expected, &out->kind));
    if (Contains({"median", "percentile", "asha", "hyperband"}, out->kind)) {
      return ValueError(f, "pruner kind " + Quoted(out->kind) + " is not available in this build",
                        expected);
    }
    if (out->kind != "nop") return ValueError(f, "unknown pruner kind", expected);
  }
  return Status::Ok();
}

Result<SweepSpec> SweepParser::Parse() {
  toml::table root;
  auto syntax_error = [this](const toml::parse_error& e) {
    return InvalidArgument(Where(e.source()) + ": invalid TOML: " + std::string(e.description()));
  };
#if TOML_EXCEPTIONS
  try {
    root = toml::parse(std::string_view(source_.text), std::string_view(display_path_));
  } catch (const toml::parse_error& e) {
    return syntax_error(e);
  }
#else
  toml::parse_result parsed =
      toml::parse(std::string_view(source_.text), std::string_view(display_path_));
  if (!parsed) return syntax_error(parsed.error());
  root = std::move(parsed).table();
#endif

  for (const Entry& e : InFileOrder(root)) {
    const std::string name(e.key->str());
    const bool known = Contains({"study", "objective", "space", "sampler", "pruner"}, name);
    if (!known && e.node->is_table()) {
      return InvalidArgument(Where(e.node->source()) + ": unknown table [" + KeyText(name) +
                             "]; expected one of " + kTopLevelTables);
    }
    if (!known) {
      return InvalidArgument(Where(e.key->source()) + ": unknown key " + Quoted(name) +
                             " outside any table; expected one of the tables " + kTopLevelTables);
    }
    if (!e.node->is_table()) {
      return InvalidArgument(Where(e.node->source()) + ": " + name + " = " + Repr(*e.node) +
                             ": expected a [" + name + "] table");
    }
  }

  SweepSpec spec;
  auto required = [&](const char* name, const char* expected) -> Result<const toml::table*> {
    const toml::table* t = root.get_as<toml::table>(name);
    if (t == nullptr) {
      return InvalidArgument(display_path_ + ":1:1: missing required table [" + name +
                             "]; expected " + expected);
    }
    return t;
  };
  TRIALD_ASSIGN_OR_RETURN(const toml::table* study,
                          required("study", "a [study] table with at least name and n_trials"));
  TRIALD_RETURN_IF_ERROR(ParseStudy(*study, &spec.study));
  TRIALD_ASSIGN_OR_RETURN(const toml::table* objective,
                          required("objective", "an [objective] table with kind and command"));
  TRIALD_RETURN_IF_ERROR(ParseObjective(*objective, &spec.objective));
  TRIALD_ASSIGN_OR_RETURN(const toml::table* space,
                          required("space", "at least one [space.NAME] parameter table"));
  TRIALD_RETURN_IF_ERROR(ParseSpace(*space, &spec.space));
  if (const toml::table* t = root.get_as<toml::table>("sampler")) {
    TRIALD_RETURN_IF_ERROR(ParseSampler(*t, &spec.sampler));
  }
  if (const toml::table* t = root.get_as<toml::table>("pruner")) {
    TRIALD_RETURN_IF_ERROR(ParsePruner(*t, &spec.pruner));
  }
  return spec;
}

}  // namespace

const char* DirectionName(Direction d) {
  switch (d) {
    case Direction::kMinimize:
      return "minimize";
    case Direction::kMaximize:
      return "maximize";
  }
  return "unknown";
}

Result<SweepSpec> ParseSweep(const SweepSource& source) { return SweepParser(source).Parse(); }

Result<SweepSpec> ParseSweepFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return common::ErrnoError("cannot open sweep file " + path, errno);
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  // fread reports errors (EISDIR for a directory) only through ferror and errno.
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return common::ErrnoError("cannot read sweep file " + path, err);
  return ParseSweep(SweepSource{std::move(text), path});
}

}  // namespace triald::config
