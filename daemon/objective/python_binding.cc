#include "daemon/objective/python_binding.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <vector>

namespace triald::daemon {
namespace {

enum class Kind { kName, kNumber, kString, kOp };

struct Token {
  Kind kind;
  std::string text;  // names, numbers and operators as written; strings with prefix and quotes
  int line;
  int col;  // 1-based, in bytes
};

// One logical line (physical lines joined by brackets or a trailing backslash) and the width of
// its indentation, tabs to the next multiple of 8 as Python counts them.
struct LogicalLine {
  int indent = 0;
  std::vector<Token> tokens;
};

bool IsNameStart(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool IsNameChar(unsigned char c) { return IsNameStart(c) || std::isdigit(c); }

bool IsOp(const Token& t, const char* op) { return t.kind == Kind::kOp && t.text == op; }
bool IsName(const Token& t, const char* word) { return t.kind == Kind::kName && t.text == word; }

std::vector<LogicalLine> Tokenize(const std::string& s) {
  static const char* const kOps3[] = {"**=", "//=", ">>=", "<<=", "..."};
  static const char* const kOps2[] = {"==", "!=", "<=", ">=", ":=", "->", "+=", "-=", "*=", "/=",
                                      "%=", "&=", "|=", "^=", "@=", "**", "//", ">>", "<<"};
  std::vector<LogicalLine> out;
  LogicalLine cur;
  const size_t n = s.size();
  size_t i = s.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // a UTF-8 byte-order mark
  size_t line_start = i;
  int line = 1;
  int depth = 0;
  bool at_line_start = true;
  auto newline_at = [&](size_t pos) {
    ++line;
    line_start = pos + 1;
  };
  while (i < n) {
    const unsigned char c = s[i];
    if (at_line_start) {
      int width = 0;
      for (; i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\f'); ++i) {
        width = s[i] == '\t' ? (width / 8 + 1) * 8 : s[i] == '\f' ? 0 : width + 1;
      }
      cur.indent = width;
      at_line_start = false;
      continue;
    }
    if (c == '\n') {
      newline_at(i);
      ++i;
      if (depth == 0) {
        if (!cur.tokens.empty()) out.push_back(std::move(cur));
        cur = LogicalLine();
        at_line_start = true;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\f' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '#') {
      while (i < n && s[i] != '\n') ++i;
      continue;
    }
    if (c == '\\') {  // a line continuation: the logical line goes on
      size_t j = i + 1;
      if (j < n && s[j] == '\r') ++j;
      if (j < n && s[j] == '\n') newline_at(j);
      i = j + 1;
      continue;
    }
    const int col = static_cast<int>(i - line_start) + 1;
    const int tok_line = line;
    size_t j = i;
    if (IsNameStart(c)) {
      while (j < n && IsNameChar(s[j])) ++j;
      const std::string word = s.substr(i, j - i);
      const bool prefix =
          j < n && (s[j] == '"' || s[j] == '\'') && word.size() <= 2 &&
          std::all_of(word.begin(), word.end(), [](char p) { return std::strchr("rRbBuUfF", p); });
      if (!prefix) {
        cur.tokens.push_back({Kind::kName, word, tok_line, col});
        i = j;
        continue;
      }
    }
    if (j < n && (s[j] == '"' || s[j] == '\'')) {
      const char q = s[j];
      const bool triple = j + 2 < n && s[j + 1] == q && s[j + 2] == q;
      j += triple ? 3 : 1;
      while (j < n) {
        if (s[j] == '\\') {  // skips the next character, in raw strings as well
          if (j + 1 < n && s[j + 1] == '\n') newline_at(j + 1);
          j += 2;
          continue;
        }
        if (s[j] == '\n') {
          if (!triple) break;  // unterminated: the string ends with its line
          newline_at(j);
        }
        if (s[j] == q && (!triple || (j + 2 < n && s[j + 1] == q && s[j + 2] == q))) {
          j += triple ? 3 : 1;
          break;
        }
        ++j;
      }
      j = std::min(j, n);
      cur.tokens.push_back({Kind::kString, s.substr(i, j - i), tok_line, col});
      i = j;
      continue;
    }
    if (std::isdigit(c) ||
        (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      const bool hex = c == '0' && i + 1 < n && (s[i + 1] == 'x' || s[i + 1] == 'X');
      while (j < n) {
        const unsigned char d = s[j];
        if (IsNameChar(d) || d == '.') {
          ++j;
        } else if ((d == '+' || d == '-') && !hex && (s[j - 1] == 'e' || s[j - 1] == 'E')) {
          ++j;
        } else {
          break;
        }
      }
      cur.tokens.push_back({Kind::kNumber, s.substr(i, j - i), tok_line, col});
      i = j;
      continue;
    }
    std::string op(1, static_cast<char>(c));
    for (const char* o : kOps3) {
      if (s.compare(i, 3, o) == 0) op = o;
    }
    if (op.size() == 1) {
      for (const char* o : kOps2) {
        if (s.compare(i, 2, o) == 0) op = o;
      }
    }
    if (op == "(" || op == "[" || op == "{") ++depth;
    if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
    cur.tokens.push_back({Kind::kOp, op, tok_line, col});
    i += op.size();
  }
  if (!cur.tokens.empty()) out.push_back(std::move(cur));
  return out;
}

using Tokens = std::vector<Token>;

// Splits `t` at the operator `sep` outside brackets. Stops looking for `=` after a `lambda`
// outside brackets (its defaults are not assignments).
std::vector<Tokens> SplitTop(const Tokens& t, const char* sep) {
  std::vector<Tokens> parts(1);
  int depth = 0;
  bool in_lambda = false;
  for (const Token& tok : t) {
    if (tok.kind == Kind::kOp && std::strchr("([{", tok.text[0]) && tok.text.size() == 1) ++depth;
    if (tok.kind == Kind::kOp && std::strchr(")]}", tok.text[0]) && tok.text.size() == 1) {
      depth = std::max(0, depth - 1);
    }
    if (depth == 0 && IsName(tok, "lambda")) in_lambda = true;
    if (depth == 0 && IsOp(tok, sep) && !in_lambda) {
      parts.emplace_back();
    } else {
      parts.back().push_back(tok);
    }
  }
  return parts;
}

// The index of the first ':' outside brackets, or t.size().
size_t TopColon(const Tokens& t) {
  int depth = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const Token& tok = t[i];
    if (tok.kind != Kind::kOp || tok.text.size() != 1) continue;
    if (std::strchr("([{", tok.text[0])) ++depth;
    if (std::strchr(")]}", tok.text[0])) depth = std::max(0, depth - 1);
    if (depth == 0 && tok.text == ":") return i;
  }
  return t.size();
}

// A value that is certainly not callable: a number, string, True/False/None/..., or a list,
// dict or set display (comprehensions included).
bool IsLiteral(const Tokens& v) {
  if (v.empty()) return false;
  if (std::all_of(v.begin(), v.end(), [](const Token& t) { return t.kind == Kind::kString; })) {
    return true;
  }
  size_t i = 0;
  while (i + 1 < v.size() && (IsOp(v[i], "-") || IsOp(v[i], "+"))) ++i;
  if (i + 1 == v.size()) {
    const Token& t = v[i];
    return t.kind == Kind::kNumber || IsName(t, "True") || IsName(t, "False") ||
           IsName(t, "None") || IsOp(t, "...");
  }
  if (IsOp(v[0], "[") || IsOp(v[0], "{")) {
    int depth = 0;
    for (size_t k = 0; k < v.size(); ++k) {
      const Token& t = v[k];
      if (t.kind == Kind::kOp && t.text.size() == 1 && std::strchr("([{", t.text[0])) ++depth;
      if (t.kind == Kind::kOp && t.text.size() == 1 && std::strchr(")]}", t.text[0])) {
        if (--depth == 0) return k + 1 == v.size();  // the display is the whole value
      }
    }
  }
  return false;
}

struct Binding {
  enum What { kMaybeCallable, kLiteral, kModule } what;
  int line;
  int col;
};

class BindingReader {
 public:
  explicit BindingReader(std::string name) : name_(std::move(name)) {}

  std::string Read(const std::string& source) {
    struct Block {
      int indent;
      bool opaque;  // a def or class body, or the __main__ guard: not module-level bindings
    };
    std::vector<Block> blocks;
    for (const LogicalLine& ll : Tokenize(source)) {
      while (!blocks.empty() && ll.indent <= blocks.back().indent) blocks.pop_back();
      const bool live =
          std::none_of(blocks.begin(), blocks.end(), [](const Block& b) { return b.opaque; });
      const bool conditional = !blocks.empty();
      const Tokens& t = ll.tokens;
      const size_t head = IsName(t[0], "async") && t.size() > 1 ? 1 : 0;
      static const char* const kCompound[] = {"if",   "elif", "else",  "try", "except", "finally",
                                              "with", "for",  "while", "def", "class"};
      const bool compound = std::any_of(std::begin(kCompound), std::end(kCompound),
                                        [&](const char* k) { return IsName(t[head], k); });
      const size_t colon = compound ? TopColon(t) : t.size();
      if (compound && colon < t.size()) {
        const bool scope = IsName(t[head], "def") || IsName(t[head], "class");
        if (live && scope) Statement(Tokens(t.begin(), t.begin() + colon), conditional);
        const bool opaque = scope || IsMainGuard(Tokens(t.begin(), t.begin() + colon));
        if (colon + 1 == t.size()) {
          blocks.push_back({ll.indent, opaque});
        } else if (live && !opaque) {  // `if x: objective = f` has its body on the same line
          for (const Tokens& st : SplitTop(Tokens(t.begin() + colon + 1, t.end()), ";")) {
            Statement(st, /*conditional=*/true);
          }
        }
        continue;
      }
      // A header this reader does not know (match, case, ...) opens a block it looks into.
      if (IsOp(t.back(), ":")) {
        blocks.push_back({ll.indent, false});
        continue;
      }
      if (!live) continue;
      for (const Tokens& st : SplitTop(t, ";")) Statement(st, conditional);
    }
    if (possible_.empty()) {
      return "no top-level def, class, assignment or import of " + name_ +
             " (one inside a def or class, or under if __name__ == \"__main__\":, does not "
             "count)";
    }
    for (const Binding& b : possible_) {
      if (b.what == Binding::kMaybeCallable) return "";
    }
    const Binding& last = possible_.back();
    const std::string at =
        "line " + std::to_string(last.line) + ", column " + std::to_string(last.col);
    if (last.what == Binding::kModule) {
      return name_ + " is bound to a module (import at " + at + "), which is not callable";
    }
    return name_ + " is bound to a literal at " + at + ", which is not callable";
  }

 private:
  static bool IsMainGuard(const Tokens& h) {
    auto main = [](const Token& t) {
      return t.kind == Kind::kString && (t.text == "\"__main__\"" || t.text == "'__main__'");
    };
    return h.size() == 4 && IsName(h[0], "if") && IsOp(h[2], "==") &&
           ((IsName(h[1], "__name__") && main(h[3])) || (main(h[1]) && IsName(h[3], "__name__")));
  }

  void Add(Binding::What what, const Token& at, bool conditional) {
    if (!conditional) possible_.clear();  // an unconditional binding replaces all before it
    possible_.push_back({what, at.line, at.col});
  }

  void Statement(const Tokens& t, bool conditional) {
    if (t.empty()) return;
    const size_t head = IsName(t[0], "async") && t.size() > 1 ? 1 : 0;
    if ((IsName(t[head], "def") || IsName(t[head], "class")) && t.size() > head + 1) {
      if (t[head + 1].kind == Kind::kName && t[head + 1].text == name_) {
        Add(Binding::kMaybeCallable, t[head + 1], conditional);
      }
      return;
    }
    if (IsName(t[0], "import")) {  // import a.b [as c], ...: binds a (or c) to a module
      for (const Tokens& item : SplitTop(Tokens(t.begin() + 1, t.end()), ",")) {
        const Token* bound = item.empty() ? nullptr : &item[0];
        for (size_t k = 0; k + 1 < item.size(); ++k) {
          if (IsName(item[k], "as")) bound = &item[k + 1];
        }
        if (bound != nullptr && bound->kind == Kind::kName && bound->text == name_) {
          Add(Binding::kModule, *bound, conditional);
        }
      }
      return;
    }
    if (IsName(t[0], "from")) {  // from m import a [as b], (c, d), *
      auto imp =
          std::find_if(t.begin(), t.end(), [](const Token& x) { return IsName(x, "import"); });
      if (imp == t.end()) return;
      Tokens names;
      for (auto k = imp + 1; k != t.end(); ++k) {
        if (!IsOp(*k, "(") && !IsOp(*k, ")")) names.push_back(*k);
      }
      for (const Tokens& item : SplitTop(names, ",")) {
        if (item.empty()) continue;
        if (IsOp(item[0], "*")) {  // may bind anything: only running it would tell
          Add(Binding::kMaybeCallable, item[0], /*conditional=*/true);
          continue;
        }
        const Token* bound = &item[0];
        for (size_t k = 0; k + 1 < item.size(); ++k) {
          if (IsName(item[k], "as")) bound = &item[k + 1];
        }
        if (bound->kind == Kind::kName && bound->text == name_) {
          Add(Binding::kMaybeCallable, *bound, conditional);
        }
      }
      return;
    }
    // NAME: T = v (annotated), NAME = v, a = NAME = v, a, NAME = v
    if (t.size() >= 2 && t[0].kind == Kind::kName && IsOp(t[1], ":")) {
      const std::vector<Tokens> parts = SplitTop(t, "=");
      if (parts.size() == 2 && t[0].text == name_) {
        Add(IsLiteral(parts[1]) ? Binding::kLiteral : Binding::kMaybeCallable, t[0], conditional);
      }
      return;  // an annotation alone binds nothing
    }
    const std::vector<Tokens> parts = SplitTop(t, "=");
    if (parts.size() < 2) return;
    const bool literal = IsLiteral(parts.back());
    for (size_t p = 0; p + 1 < parts.size(); ++p) {
      const Tokens& target = parts[p];
      if (target.size() == 1 && target[0].kind == Kind::kName && target[0].text == name_) {
        Add(literal ? Binding::kLiteral : Binding::kMaybeCallable, target[0], conditional);
        continue;
      }
      // Unpacking (a, NAME = ...; [NAME, *rest] = ...): NAME gets some element of the value.
      // Not a call or subscript (f()[k] = ...): no bracket right after a name or a bracket.
      bool unpacking = true;
      for (size_t k = 0; k < target.size() && unpacking; ++k) {
        const Token& x = target[k];
        const bool open = IsOp(x, "(") || IsOp(x, "[");
        const bool after_operand = k > 0 && (target[k - 1].kind == Kind::kName ||
                                             IsOp(target[k - 1], ")") || IsOp(target[k - 1], "]"));
        unpacking = (x.kind == Kind::kName || IsOp(x, ",") || IsOp(x, ")") || IsOp(x, "]") ||
                     IsOp(x, "*") || open) &&
                    !(open && after_operand);
      }
      if (!unpacking) continue;
      for (const Token& x : target) {
        if (x.kind == Kind::kName && x.text == name_) {
          Add(Binding::kMaybeCallable, x, conditional);
          break;
        }
      }
    }
  }

  const std::string name_;
  std::vector<Binding> possible_;  // the bindings that may be in effect at the end, in order
};

}  // namespace

std::string CheckPythonBinding(const std::string& source, const std::string& name) {
  return BindingReader(name.substr(0, name.find('.'))).Read(source);
}

}  // namespace triald::daemon
