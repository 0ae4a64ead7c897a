#include "config/sweep/key_table.h"

#include <filesystem>
#include <system_error>

namespace triald::config::sweep {

using common::InvalidArgument;
using common::Status;

SweepReader::SweepReader(const SweepSource& source)
    : source_(source), diag_(source_.text, source.path.empty() ? "<sweep>" : source.path) {}

Status SweepReader::ReadString(const Field& f, const std::string& expected,
                               std::string* out) const {
  const auto* v = f.node->as_string();
  if (v == nullptr) return ValueError(f, "", expected);
  *out = v->get();
  return Status::Ok();
}

Status SweepReader::ReadInt(const Field& f, int64_t min, int64_t max, const std::string& expected,
                            int64_t* out) const {
  const auto* v = f.node->as_integer();
  if (v == nullptr || v->get() < min) return ValueError(f, "", expected);
  if (v->get() > max)
    return ValueError(f, "too large", expected + " and <= " + std::to_string(max));
  *out = v->get();
  return Status::Ok();
}

Status SweepReader::ReadSeconds(const Field& f, double* out) const {
  return ReadNumber(
      f, Within(0, false, kMaxSeconds, false),
      "a number of seconds from 0 to " + std::to_string(kMaxSecondsWhole) + " (365 days)", out);
}

Status SweepReader::ReadBool(const Field& f, bool* out) const {
  const auto* v = f.node->as_boolean();
  if (v == nullptr) return ValueError(f, "", "true or false");
  *out = v->get();
  return Status::Ok();
}

Status SweepReader::ReadNumber(const Field& f, const NumberRule& rule, const std::string& expected,
                               double* out) const {
  double x = 0;
  if (const auto* i = f.node->as_integer()) {
    x = static_cast<double>(i->get());
  } else if (const auto* d = f.node->as_floating_point()) {
    x = d->get();
  } else {
    return ValueError(f, "", expected);
  }
  if (!rule.Accepts(x)) return ValueError(f, "", expected);
  *out = x;
  return Status::Ok();
}

common::Result<std::string> SweepReader::SweepDir() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path base = fs::path(source_.path).parent_path();
  base = base.empty() ? fs::current_path(ec) : fs::absolute(base, ec);
  if (ec) {
    return common::IoError("cannot resolve the directory of " + diag_.path() + ": " + ec.message());
  }
  return base.string();
}

Status SweepReader::ResolvePath(const Field* f, const std::string& expected,
                                std::string* out) const {
  namespace fs = std::filesystem;
  TRIALD_ASSIGN_OR_RETURN(const std::string base, SweepDir());
  fs::path dir = base;
  if (f != nullptr) {
    std::string given;
    TRIALD_RETURN_IF_ERROR(ReadString(*f, expected, &given));
    if (given.empty()) return ValueError(*f, "empty path", expected);
    // open() and chdir() take NUL-terminated strings: an embedded NUL would cut the path.
    if (given.find('\0') != std::string::npos) {
      return ValueError(*f, "contains a NUL character", expected);
    }
    dir = fs::path(base) / fs::path(given);  // an absolute `given` replaces `base`
  }
  dir = dir.lexically_normal();
  if (!dir.has_filename() && dir.has_relative_path()) dir = dir.parent_path();
  *out = dir.string();
  return Status::Ok();
}

std::vector<const char*> KindList(const std::vector<KindNames>& kinds) {
  std::vector<const char*> names;
  for (const KindNames& k : kinds) names.push_back(k.kind);
  return names;
}

namespace {

const KindNames* FindKindNames(const std::vector<KindNames>& kinds, std::string_view kind) {
  for (const KindNames& k : kinds) {
    if (kind == k.kind) return &k;
  }
  return nullptr;
}

}  // namespace

Status ReadKind(const TableContext& ctx, const std::vector<KindNames>& kinds,
                const std::string& what, const std::string& expected, std::string* out) {
  const toml::node* n = ctx.table.get("kind");
  if (n == nullptr) return Status::Ok();
  Field f{ctx.name, "kind", n};
  TRIALD_RETURN_IF_ERROR(ctx.reader.ReadString(f, expected, out));
  if (FindKindNames(kinds, *out) == nullptr) {
    return ctx.reader.ValueError(f, "unknown " + what + " kind", expected);
  }
  return Status::Ok();
}

Status CheckKindKeys(const TableContext& ctx, const std::vector<KindNames>& kinds,
                     const std::string* kind) {
  const KindNames* current = kind != nullptr ? FindKindNames(kinds, *kind) : nullptr;
  std::vector<const char*> allowed;
  if (current != nullptr) {
    allowed = current->keys;
  } else {
    for (const KindNames& k : kinds) {
      for (const char* key : k.keys) {
        if (!Contains(allowed, key)) allowed.push_back(key);
      }
    }
  }
  const SweepReader& r = ctx.reader;
  for (const TomlEntry& e : InFileOrder(ctx.table)) {
    const std::string key(e.key->str());
    if (Contains(allowed, key)) continue;
    std::vector<const char*> owners;
    for (const KindNames& k : kinds) {
      if (Contains(k.keys, key)) owners.push_back(k.kind);
    }
    if (owners.empty() || current == nullptr) {
      const std::string what = current != nullptr ? " for kind = " + Quoted(current->kind) : "";
      return InvalidArgument(r.Where(e.key->source()) + ": " + ctx.name + " unknown key " +
                             Quoted(key) + what + "; expected one of " + JoinList(allowed));
    }
    return InvalidArgument(r.Where(e.key->source()) + ": " + ctx.name + " " + KeyText(key) + " = " +
                           r.Repr(*e.node) + ": an option of kind = " + QuotedAlternatives(owners) +
                           ", not of kind = " + Quoted(current->kind) + "; expected kind = " +
                           QuotedAlternatives(owners) + " to use it, or only " + JoinList(allowed) +
                           " with kind = " + Quoted(current->kind));
  }
  return Status::Ok();
}

}  // namespace triald::config::sweep
