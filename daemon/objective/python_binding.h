#pragma once
// Whether a Python file binds a name at module level, decided by reading it, never running it.
//
// The daemon checks `[objective] function = "PATH.py:NAME"` at submit, possibly as root, so the
// user's code must not run there. This is a small tokenizer (strings of every prefix and quote
// form, comments, brackets, line continuations, `;`) and a reader of the statements that can
// bind a module-level name: def, async def, class, assignments (plain, chained, annotated, tuple
// targets), `import` and `from ... import` (also `*`). Statements count at module level and in
// the bodies of module-level if/elif/else, try/except/else/finally, with, for and while blocks
// (at any depth of those), but not in def or class bodies nor under
// `if __name__ == "__main__":` (the runner imports the file under another module name, so that
// block does not run).
//
// A binding inside a block is conditional: it may or may not happen. The verdict follows
// Python's order: a later unconditional binding replaces everything before it; a conditional
// one adds a possibility. NAME passes if any possible binding may be callable; it is refused if
// there is none, or if every possible one is to a literal or a module.
//
// Thread-safety: a pure function.

#include <string>

namespace triald::daemon {

// "" when `source` (a Python file's text) binds `name` at module level to something that may be
// callable; else why not, naming the line and column of the binding where there is one:
//   "no top-level def, class, assignment or import of NAME (...)"
//   "NAME is bound to a literal at line 3, column 1, which is not callable"
//   "NAME is bound to a module (import at line 2, column 8), which is not callable"
// For a dotted NAME (Class.method) the first part is checked.
std::string CheckPythonBinding(const std::string& source, const std::string& name);

}  // namespace triald::daemon
