// [objective] kind = "python": a define-by-run objective function, run by the Python runner,
// optionally with a constraints function and a fork server that preloads modules.

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string_view>

#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::Status;
using O = ObjectiveConfig;

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// "torch", "numpy.linalg": ASCII letters, digits and '_', separated by '.'.
bool IsDottedName(std::string_view s) {
  if (s.empty()) return false;
  auto word = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  };
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    const std::string_view part =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (part.empty() || (part[0] >= '0' && part[0] <= '9')) return false;
    if (!std::all_of(part.begin(), part.end(), word)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// A "PATH.py:NAME" or "package.module:NAME" value (function, constraints): the spec as written,
// the absolute file or the module, NAME and where the value is.
Status ReadPythonSpec(const SweepReader& r, const Field& f, const std::string& expected,
                      std::string* spec_out, std::string* file_out, std::string* module_out,
                      std::string* name_out, std::string* at_out) {
  TRIALD_RETURN_IF_ERROR(r.ReadString(f, expected, spec_out));
  const std::string& spec = *spec_out;
  if (spec.find('\0') != std::string::npos) {
    return r.ValueError(f, "contains a NUL character", expected);
  }
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return r.ValueError(f, "no \":NAME\"", expected);
  const std::string target = spec.substr(0, colon);
  *name_out = spec.substr(colon + 1);
  if (!IsIdentifier(*name_out)) {
    return r.ValueError(f, Quoted(*name_out) + " is not a Python name", expected);
  }
  if (target.empty()) return r.ValueError(f, "no file or module before \":\"", expected);
  const bool is_file = target.size() > 3 && target.compare(target.size() - 3, 3, ".py") == 0;
  if (is_file) {
    namespace fs = std::filesystem;
    TRIALD_ASSIGN_OR_RETURN(const std::string base, r.SweepDir());
    *file_out = (fs::path(base) / fs::path(target)).lexically_normal().string();
  } else {
    size_t start = 0;
    while (true) {
      const size_t dot = target.find('.', start);
      const std::string part =
          target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!IsIdentifier(part)) {
        return r.ValueError(f, Quoted(target) + " is neither a .py file nor a dotted module name",
                            expected);
      }
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    *module_out = target;
  }
  *at_out = r.Where(f.node->source());
  return Status::Ok();
}

const char* const kFunctionExpected =
    "\"PATH.py:NAME\" (a file, relative to the sweep file's folder) or "
    "\"package.module:NAME\", NAME the objective function";
const char* const kConstraintsExpected =
    "\"PATH.py:NAME\" (a file, relative to the sweep file's folder) or "
    "\"package.module:NAME\", NAME a function of the finished trial returning its "
    "constraint values";
const char* const kPythonExpected = "an interpreter, e.g. \"python3\" or \"/usr/bin/python3\"";

Status ReadPreload(const TableContext& ctx, const Field& f, O* out) {
  const SweepReader& r = ctx.reader;
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr) {
    return r.ValueError(f, "", "an array of module names, e.g. preload = [\"torch\", \"numpy\"]");
  }
  for (size_t i = 0; i < arr->size(); ++i) {
    Field ef{f.table, "preload[" + std::to_string(i) + "]", arr->get(i)};
    std::string name;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, "a module name, e.g. \"torch\"", &name));
    if (!IsDottedName(name)) {
      return r.ValueError(ef, "not a module name",
                          "a dotted Python module name (letters, digits, '_', separated by '.'), "
                          "e.g. \"torch\" or \"torch.nn\"");
    }
    if (std::find(out->preload.begin(), out->preload.end(), name) != out->preload.end()) {
      return r.ValueError(ef, Quoted(name) + " is already in preload", "each module once");
    }
    out->preload.push_back(std::move(name));
  }
  // Defaults: with preload, the objective's file is imported in the server too and trials are
  // forks; without it, trials are exec'd unless fork_server = true asks for the server anyway
  // (it still saves the interpreter's start).
  out->preload_objective = true;
  out->fork_server = true;
  return Status::Ok();
}

// Run after fork_server, given or not: preload_objective needs the fork server.
Status CheckPreloadObjective(const TableContext& ctx, O* out) {
  if (!out->preload_objective || out->fork_server) return Status::Ok();
  if (const toml::node* p = ctx.table.get("preload_objective")) {
    return ctx.reader.ValueError({ctx.name, "preload_objective", p},
                                 "preload_objective = true with fork_server = false: nothing "
                                 "would import it once",
                                 "fork_server = true, or no preload_objective");
  }
  out->preload_objective = false;  // the default that preload gave
  return Status::Ok();
}

}  // namespace

std::vector<Key<ObjectiveConfig>> PythonObjectiveKeys() {
  Key<O> fork_server = BoolKey("fork_server", Of(&O::fork_server),
                               "start trials as forks of the study's fork server (default true "
                               "when preload is given, else false)");
  auto read_fork_server = fork_server.read;
  fork_server.read = [read_fork_server](const TableContext& ctx, const Field& f, O* out) {
    TRIALD_RETURN_IF_ERROR(read_fork_server(ctx, f, out));
    return CheckPreloadObjective(ctx, out);
  };
  fork_server.absent = CheckPreloadObjective;
  return {
      ObjectiveKindKey(),
      Required(CustomKey<O>("function",
                            "required: the objective, \"PATH.py:NAME\" (relative to the sweep "
                            "file's folder) or \"package.module:NAME\"",
                            [](const TableContext& ctx, const Field& f, O* out) {
                              return ReadPythonSpec(ctx.reader, f, kFunctionExpected,
                                                    &out->function, &out->function_file,
                                                    &out->function_module, &out->function_name,
                                                    &out->function_at);
                            }),
               kFunctionExpected),
      CustomKey<O>("python",
                   "the interpreter (default \"python3\"): trialctl submit finds a name in "
                   "$VIRTUAL_ENV/bin, $CONDA_PREFIX/bin, then its PATH, and the trials run "
                   "that one; a path with '/' is taken relative to workdir",
                   [](const TableContext& ctx, const Field& f, O* out) {
                     const SweepReader& r = ctx.reader;
                     TRIALD_RETURN_IF_ERROR(r.ReadString(f, kPythonExpected, &out->python));
                     if (out->python.empty()) return r.ValueError(f, "empty", kPythonExpected);
                     if (out->python.find('\0') != std::string::npos) {
                       return r.ValueError(f, "contains a NUL character", kPythonExpected);
                     }
                     return Status::Ok();
                   }),
      EnvKey(),
      WorkdirKey(),
      CustomKey<O>("constraints",
                   "a function of the finished trial returning its constraint values, written "
                   "as function is; default none",
                   [](const TableContext& ctx, const Field& f, O* out) {
                     return ReadPythonSpec(ctx.reader, f, kConstraintsExpected, &out->constraints,
                                           &out->constraints_file, &out->constraints_module,
                                           &out->constraints_name, &out->constraints_at);
                   }),
      CustomKey<O>("preload",
                   "module names the fork server imports once, e.g. [\"torch\", \"numpy\"]; "
                   "default none",
                   ReadPreload),
      BoolKey("preload_objective", Of(&O::preload_objective),
              "the fork server also imports the file of function (and of constraints); needs "
              "fork_server (default true when preload is given, else false)"),
      std::move(fork_server),
      ForkTwiceKey(),
  };
}

}  // namespace triald::config::sweep
