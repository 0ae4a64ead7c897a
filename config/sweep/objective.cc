// [objective]: which kind of objective runs the trials, and the keys every kind shares (env,
// workdir). Each kind's own keys are in objective_exec.cc, objective_python.cc and
// objective_lm.cc.

#include <string_view>

#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::InvalidArgument;
using common::Status;
using O = ObjectiveConfig;

bool IsEnvName(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (s.empty() || !alpha(s[0])) return false;
  for (char c : s) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

// The daemon owns these variables: a sweep that set them would break the report protocol or the
// GPU assignment.
bool IsReservedEnvName(std::string_view s) {
  return s.rfind("TRIALD_", 0) == 0 || s == "CUDA_VISIBLE_DEVICES";
}

Status ReadEnv(const TableContext& ctx, const Field& f, O* out) {
  const SweepReader& r = ctx.reader;
  const toml::table* env = f.node->as_table();
  if (env == nullptr) return r.ValueError(f, "", "a table of NAME = \"value\" strings");
  const std::string tn = "[objective.env]";
  for (const TomlEntry& e : InFileOrder(*env)) {
    const std::string name(e.key->str());
    if (!IsEnvName(name)) {
      return InvalidArgument(r.Where(e.key->source()) + ": " + tn + " " + Quoted(name) +
                             " is not a valid environment variable name; expected a name "
                             "matching [A-Za-z_][A-Za-z0-9_]*");
    }
    if (IsReservedEnvName(name)) {
      return InvalidArgument(r.Where(e.key->source()) + ": " + tn + " " + name +
                             " is reserved: the daemon sets it for every trial; expected a name "
                             "that does not start with TRIALD_ and is not CUDA_VISIBLE_DEVICES");
    }
    Field vf{tn, name, e.node};
    std::string value;
    TRIALD_RETURN_IF_ERROR(r.ReadString(vf, "a string", &value));
    if (value.find('\0') != std::string::npos) {
      return r.ValueError(vf, "contains a NUL character", "a string without NUL");
    }
    out->env[name] = std::move(value);
  }
  return Status::Ok();
}

const char* const kWorkdirExpected = "a directory path";

}  // namespace

Key<O> ObjectiveKindKey() {
  return KindKey<O>(
      "required: \"exec\" (run a command), \"lm\" (the built-in language-model worker), "
      "\"python\" (an Optuna-style objective function) or \"client\" (a program asks for each "
      "trial and tells its result: ask and tell)");
}

Key<O> EnvKey() {
  return CustomKey<O>("env",
                      "a table of NAME = \"value\" strings added to the worker's environment "
                      "(no name starting with TRIALD_, nor CUDA_VISIBLE_DEVICES); it may override "
                      "PYTHONUNBUFFERED=1 and OPENBLAS_THREAD_TIMEOUT=20, which triald sets",
                      ReadEnv);
}

Key<O> ForkTwiceKey() {
  Key<O> k = BoolKey("fork_twice", Of(&O::fork_twice),
                     "the fork server forks each trial twice, through a middle process that "
                     "exits, instead of once as triald's child (clone with CLONE_PARENT), so the "
                     "C libraries' pthread_atfork handlers run in each trial; needs fork_server "
                     "(default false)");
  auto read = k.read;
  k.read = [read](const TableContext& ctx, const Field& f, O* out) {
    TRIALD_RETURN_IF_ERROR(read(ctx, f, out));
    if (out->fork_twice && !out->fork_server) {
      return ctx.reader.ValueError(f, "true without a fork server: nothing is forked",
                                   "fork_server = true, or no fork_twice");
    }
    return Status::Ok();
  };
  return k;
}

Key<O> WorkdirKey() {
  Key<O> k = CustomKey<O>(
      "workdir",
      "the worker's folder, relative to the sweep file's folder (default: that folder); it "
      "must exist at submit",
      [](const TableContext& ctx, const Field& f, O* out) {
        return ctx.reader.ResolvePath(&f, kWorkdirExpected, &out->workdir);
      });
  k.absent = [](const TableContext& ctx, O* out) {
    return ctx.reader.ResolvePath(nullptr, kWorkdirExpected, &out->workdir);
  };
  return k;
}

const std::vector<Kind<ObjectiveConfig>>& ObjectiveKinds() {
  static const std::vector<Kind<O>> kKinds = {
      {"exec", ExecObjectiveKeys()},
      {"lm", LmObjectiveKeys()},
      {"python", PythonObjectiveKeys()},
      // The trials run in a client program that asks for each one (ask and tell): nothing to
      // configure, since triald starts no process.
      {"client", {ObjectiveKindKey()}},
  };
  return kKinds;
}

Status ParseObjective(const SweepReader& r, const toml::table& t, ObjectiveConfig* out) {
  const std::string tn = "[objective]";
  const TableContext ctx{r, tn, t};
  const std::vector<KindNames> kinds = KindKeyNames(ObjectiveKinds());
  const toml::node* kind_node = t.get("kind");
  TRIALD_RETURN_IF_ERROR(
      ReadKind(ctx, kinds, "objective", "\"exec\", \"lm\", \"python\" or \"client\"", &out->kind));
  if (kind_node != nullptr && out->kind == "lm") {
    // Said outright rather than as "an option of kind = exec": a user adding `command` to an lm
    // objective wants to know that the worker is chosen for them.
    if (const toml::node* n = t.get("command")) {
      return r.ValueError({tn, "command", n},
                          "kind = \"lm\" runs the daemon's built-in trial-worker, which needs no "
                          "command",
                          "no command with kind = \"lm\" (or kind = \"exec\" to run your own)");
    }
  }
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(ctx, kinds, kind_node != nullptr ? &out->kind : nullptr));
  if (kind_node == nullptr) {
    return r.MissingKey(tn, t, "kind",
                        "kind = \"exec\" (run a command), kind = \"lm\" (the built-in "
                        "language-model worker) or kind = \"python\" (an Optuna-style objective "
                        "function)");
  }
  return ReadKeys(ctx, FindKind(ObjectiveKinds(), out->kind)->keys, out);
}

}  // namespace triald::config::sweep
