#pragma once
// The descriptor mechanism of the sweep parser: every key of a sweep-file table is one Key row
// (its name, the reference text config/README.md shows for it, how its value is read and what
// its absence means), and a table is a list of rows, or one list per `kind` for the tables whose
// keys depend on their kind ([objective], [sampler], [pruner]). The allowed keys a message lists,
// the order in which values are read and checked, and the key reference (SweepKeyReference) all
// come from the rows, so a new key is one row.
//
// SweepReader holds what every row needs to read a value and to word a message: the document's
// diagnostics (file, line, column, the value as written) and the sweep file's folder.
//
// Thread-safety: the row tables are built once (thread-safe static initialisation) and never
// changed. A SweepReader is immutable after construction; it borrows the SweepSource it is made
// from, which must outlive it.

#include <toml++/toml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/number_rule.h"
#include "config/sweep.h"
#include "config/toml_diag.h"

namespace triald::config::sweep {

// A key in a table, for messages: "[study] n_trials = 0: ...".
struct Field {
  std::string table;  // "[study]"
  std::string key;    // as written in messages, e.g. "n_trials" or "command[1]"
  const toml::node* node;
};

// Reads TOML values into C++ ones, and words every problem as a message that points at the file,
// line and column ("PATH:L:C: [table] key = <value>: <problem>; expected <expected>").
class SweepReader {
 public:
  explicit SweepReader(const SweepSource& source);

  const TomlDiagnostics& diag() const { return diag_; }
  std::string Where(const toml::source_region& region) const { return diag_.Where(region); }
  std::string Repr(const toml::node& node) const { return diag_.Repr(node); }

  // "PATH:L:C: [table] key = <value>: <problem>; expected <expected>"; problem may be empty.
  common::Status ValueError(const Field& f, const std::string& problem,
                            const std::string& expected) const {
    return diag_.ValueError(f.table, f.key, *f.node, problem, expected);
  }
  common::Status MissingKey(const std::string& table_name, const toml::node& table, const char* key,
                            const std::string& expected) const {
    return diag_.MissingKey(table_name, table, key, expected);
  }
  // Rejects any key not in `allowed`, in file order; `what` qualifies the table in the message.
  common::Status CheckKeys(const std::string& table_name, const toml::table& table,
                           const std::vector<const char*>& allowed,
                           const std::string& what = "") const {
    return diag_.CheckKeys(table_name, table, allowed, what);
  }

  common::Status ReadString(const Field& f, const std::string& expected, std::string* out) const;
  common::Status ReadInt(const Field& f, int64_t min, int64_t max, const std::string& expected,
                         int64_t* out) const;
  // A number of seconds from 0 to kMaxSeconds.
  common::Status ReadSeconds(const Field& f, double* out) const;
  common::Status ReadBool(const Field& f, bool* out) const;
  // Any TOML number (integer or float) that `rule` accepts.
  common::Status ReadNumber(const Field& f, const NumberRule& rule, const std::string& expected,
                            double* out) const;
  // Relative paths (workdir, the LM objective's files) are anchored at the sweep file, not at
  // wherever the daemon happens to run, so a sweep next to its script and data works from any
  // current directory. Without `f`, the sweep file's own folder. Nothing is checked on disk.
  common::Status ResolvePath(const Field* f, const std::string& expected, std::string* out) const;
  // The sweep file's folder, absolute.
  common::Result<std::string> SweepDir() const;

 private:
  const SweepSource& source_;
  TomlDiagnostics diag_;
};

// The table a row is read from.
struct TableContext {
  const SweepReader& reader;
  const std::string& name;  // "[study]", "[pruner.wrapped]"
  const toml::table& table;
};

// One key of a table whose values fill a C (StudyConfig, SamplerConfig...).
template <typename C>
struct Key {
  const char* name = "";
  // The key's line in the reference (config/README.md, "Every key"): what it is, what values it
  // takes, its default.
  std::string doc;
  // Reads the value when the key is present. Rows are read in table order, so a row may check
  // its value against those of the rows before it, which are already in *out. Null for `kind`,
  // which the table reads before any row.
  std::function<common::Status(const TableContext&, const Field&, C*)> read;
  // Called when the key is absent: a required key's MissingKey, or a default that depends on
  // other keys. Null: the member keeps its default.
  std::function<common::Status(const TableContext&, C*)> absent;
};

// The keys a table accepts when its `kind` is `name`, in the order messages list them and
// values are read.
template <typename C>
struct Kind {
  const char* name = "";
  std::vector<Key<C>> keys;
};

// Reads every row of `keys` from ctx.table into *out, in row order.
template <typename C>
common::Status ReadKeys(const TableContext& ctx, const std::vector<Key<C>>& keys, C* out) {
  for (const Key<C>& k : keys) {
    if (const toml::node* n = ctx.table.get(k.name)) {
      if (k.read) TRIALD_RETURN_IF_ERROR(k.read(ctx, Field{ctx.name, k.name, n}, out));
    } else if (k.absent) {
      TRIALD_RETURN_IF_ERROR(k.absent(ctx, out));
    }
  }
  return common::Status::Ok();
}

template <typename C>
std::vector<const char*> KeyNames(const std::vector<Key<C>>& keys) {
  std::vector<const char*> names;
  for (const Key<C>& k : keys) names.push_back(k.name);
  return names;
}

// A kinded table's kinds as (kind, its key names), which CheckKindKeys works on.
struct KindNames {
  const char* kind;
  std::vector<const char*> keys;
};

template <typename C>
std::vector<KindNames> KindKeyNames(const std::vector<Kind<C>>& kinds) {
  std::vector<KindNames> out;
  for (const Kind<C>& k : kinds) out.push_back({k.name, KeyNames(k.keys)});
  return out;
}

std::vector<const char*> KindList(const std::vector<KindNames>& kinds);

// Reads `kind` when present (else *out keeps its default) and checks it names one of `kinds`:
// "[sampler] kind = "bayes": unknown sampler kind; expected ..." (`what` = "sampler").
common::Status ReadKind(const TableContext& ctx, const std::vector<KindNames>& kinds,
                        const std::string& what, const std::string& expected, std::string* out);

// Like CheckKeys for a table whose keys depend on its kind: a key that belongs to another kind
// is reported as such, naming the kinds it belongs to. With no `kind` (the table lacks one),
// every key of every kind passes.
common::Status CheckKindKeys(const TableContext& ctx, const std::vector<KindNames>& kinds,
                             const std::string* kind);

// The row of `kinds` called `kind`, or nullptr.
template <typename C>
const Kind<C>* FindKind(const std::vector<Kind<C>>& kinds, const std::string& kind) {
  for (const Kind<C>& k : kinds) {
    if (kind == k.name) return &k;
  }
  return nullptr;
}

// Where a row's value goes: a member of C, or a member of a member (SamplerConfig::tpe's
// n_startup_trials).
template <typename C, typename T>
struct Member {
  std::function<T*(C*)> get;
};
template <typename C, typename T>
Member<C, T> Of(T C::*m) {
  return {[m](C* c) { return &(c->*m); }};
}
template <typename C, typename S, typename T>
Member<C, T> Of(S C::*s, T S::*m) {
  return {[s, m](C* c) { return &((c->*s).*m); }};
}

// The builders of the common rows.

// `kind`: read by the table (ReadKind) before its rows.
template <typename C>
Key<C> KindKey(std::string doc) {
  Key<C> k;
  k.name = "kind";
  k.doc = std::move(doc);
  return k;
}

// An integer from `min` to `max` (default: the largest the member holds); a value above `max`
// is "too large".
template <typename C, typename T>
Key<C> IntKey(const char* name, Member<C, T> m, int64_t min, int64_t max, std::string expected,
              std::string doc) {
  Key<C> k;
  k.name = name;
  k.doc = std::move(doc);
  k.read = [m, min, max, expected](const TableContext& ctx, const Field& f, C* out) {
    int64_t v = 0;
    TRIALD_RETURN_IF_ERROR(ctx.reader.ReadInt(f, min, max, expected, &v));
    *m.get(out) = static_cast<T>(v);
    return common::Status::Ok();
  };
  return k;
}
template <typename C, typename T>
Key<C> IntKey(const char* name, Member<C, T> m, int64_t min, std::string expected,
              std::string doc) {
  return IntKey(name, std::move(m), min, static_cast<int64_t>(std::numeric_limits<T>::max()),
                std::move(expected), std::move(doc));
}

// A number (integer or float) that `rule` accepts, into a double or an optional<double>.
template <typename C, typename T>
Key<C> NumberKey(const char* name, Member<C, T> m, NumberRule rule, std::string expected,
                 std::string doc) {
  Key<C> k;
  k.name = name;
  k.doc = std::move(doc);
  k.read = [m, rule, expected](const TableContext& ctx, const Field& f, C* out) {
    double v = 0;
    TRIALD_RETURN_IF_ERROR(ctx.reader.ReadNumber(f, rule, expected, &v));
    *m.get(out) = v;
    return common::Status::Ok();
  };
  return k;
}

template <typename C>
Key<C> BoolKey(const char* name, Member<C, bool> m, std::string doc) {
  Key<C> k;
  k.name = name;
  k.doc = std::move(doc);
  k.read = [m](const TableContext& ctx, const Field& f, C* out) {
    return ctx.reader.ReadBool(f, m.get(out));
  };
  return k;
}

// A row with its own reader.
template <typename C>
Key<C> CustomKey(const char* name, std::string doc,
                 std::function<common::Status(const TableContext&, const Field&, C*)> read) {
  Key<C> k;
  k.name = name;
  k.doc = std::move(doc);
  k.read = std::move(read);
  return k;
}

// `k`, made required: its absence is "[table] missing required key "NAME"; expected EXPECTED".
template <typename C>
Key<C> Required(Key<C> k, std::string expected) {
  const char* name = k.name;
  k.absent = [name, expected](const TableContext& ctx, C*) {
    return ctx.reader.MissingKey(ctx.name, ctx.table, name, expected);
  };
  return k;
}

}  // namespace triald::config::sweep
