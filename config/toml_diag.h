#pragma once
// How configuration files (sweep files, triald.toml) talk about TOML in messages: where a key or
// value is ("PATH:LINE:COLUMN"), the value as the user wrote it (cut to a readable length at a
// character boundary), and the shapes of the messages every parser shares: a value of the wrong
// type or range, an unknown key, a missing key, a syntax error. One module, so the two config
// parsers cannot drift apart.
//
// Thread-safety: TomlDiagnostics is immutable after construction; its const methods may be
// called from several threads. The free functions are pure.

#include <toml++/toml.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace triald::config {

// Longest value text quoted in a message, in bytes; a longer one is cut at the last character
// boundary at or before it and followed by "...".
inline constexpr size_t kMaxReprBytes = 80;

// `text` cut as messages show values: unchanged when at most kMaxReprBytes, else its longest
// prefix of at most kMaxReprBytes bytes that does not split a UTF-8 character, plus "...".
std::string CutForMessage(std::string text);

// A double-quoted string, escaped enough to be read back unambiguously: "a\"b".
std::string Quoted(std::string_view s);

// A key as TOML would need it written: bare when possible, quoted otherwise.
std::string KeyText(std::string_view key);

// "a, b, c".
std::string JoinList(const std::vector<const char*>& items);

bool Contains(const std::vector<const char*>& items, std::string_view s);

// "\"a\", \"b\" or \"c\"": the allowed values of a string setting, for messages.
std::string QuotedAlternatives(const std::vector<const char*>& items);

// One key of a table with its value.
struct TomlEntry {
  const toml::key* key;
  const toml::node* node;
};

// toml++ keeps a table's keys sorted by name; a user reads the file top to bottom, so checks
// follow the order in which keys appear in the file.
std::vector<TomlEntry> InFileOrder(const toml::table& table);

// The diagnostics of one document. Borrows `text`, which must outlive it.
class TomlDiagnostics {
 public:
  // `display_path` names the document in messages ("<sweep>" for one with no file).
  TomlDiagnostics(std::string_view text, std::string display_path);

  const std::string& path() const { return path_; }

  // Parses the document; a syntax error becomes "PATH:L:C: <syntax_prefix><toml++'s words>".
  common::Result<toml::table> Parse(std::string_view syntax_prefix) const;

  // "PATH:LINE:COLUMN" of the start of `region`.
  std::string Where(const toml::source_region& region) const;

  // The value for messages: as written when on one line, else as toml++ renders it (on one
  // line); "<table>" for a [header] table; cut by CutForMessage.
  std::string Repr(const toml::node& node) const;

  // "PATH:L:C: TABLE KEY = VALUE: PROBLEM; expected EXPECTED", without "PROBLEM;" when problem
  // is empty. `key` is as messages write it ("n_trials", "command[1]").
  common::Status ValueError(const std::string& table, const std::string& key,
                            const toml::node& node, const std::string& problem,
                            const std::string& expected) const;

  // "PATH:L:C: TABLE missing required key \"KEY\"; expected EXPECTED", at the table.
  common::Status MissingKey(const std::string& table_name, const toml::node& table, const char* key,
                            const std::string& expected) const;

  // The first key of `table` (in file order) that is not in `allowed`, as "PATH:L:C: TABLE
  // unknown key \"KEY\"WHAT; expected one of A, B"; OK when there is none. `what` qualifies the
  // table (" for a categorical parameter").
  common::Status CheckKeys(const std::string& table_name, const toml::table& table,
                           const std::vector<const char*>& allowed,
                           const std::string& what = "") const;

 private:
  // The text of `region` exactly as the user wrote it, when it sits on one line ("5.0" stays
  // "5.0", "1e-4" stays "1e-4"); "" otherwise. toml++ counts columns in code points.
  std::string SourceText(const toml::source_region& region) const;

  std::string_view text_;
  std::string path_;
  std::vector<std::string_view> lines_;  // without their "\n" or "\r\n"
};

}  // namespace triald::config
