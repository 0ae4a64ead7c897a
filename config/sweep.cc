#include "config/sweep.h"

#include <toml++/toml.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/json.h"
#include "config/lm_fields.h"
#include "config/toml_diag.h"

namespace triald::config {

namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

constexpr size_t kMaxStudyNameChars = 128;
constexpr int64_t kMaxExactInt = int64_t{1} << 53;

const char* const kTopLevelTables = "[study], [objective], [space], [sampler], [pruner]";

bool IsAsciiAlpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// The first character is a letter or digit: a name is a folder under studies/ ("." and ".."
// are not) and a command-line argument ("-rf" is not).
bool IsStudyName(std::string_view s) {
  if (s.empty() || s.size() > kMaxStudyNameChars) return false;
  if (!IsAsciiAlpha(s[0]) && !IsAsciiDigit(s[0])) return false;
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

// The keys a table accepts when its `kind` is `kind`, in the order messages list them.
struct KindKeys {
  const char* kind;
  std::vector<const char*> keys;
};

const KindKeys* FindKind(const std::vector<KindKeys>& kinds, std::string_view kind) {
  for (const KindKeys& k : kinds) {
    if (kind == k.kind) return &k;
  }
  return nullptr;
}

std::vector<const char*> KindNames(const std::vector<KindKeys>& kinds) {
  std::vector<const char*> names;
  for (const KindKeys& k : kinds) names.push_back(k.kind);
  return names;
}

const std::vector<KindKeys>& ObjectiveKinds() {
  static const std::vector<KindKeys> kKinds = [] {
    std::vector<const char*> lm = {"kind"};
    for (const char* name : LmFieldNames(false)) lm.push_back(name);
    lm.push_back("env");
    lm.push_back("workdir");
    lm.push_back("objectives");
    lm.push_back("fork_server");
    return std::vector<KindKeys>{{"exec", {"kind", "command", "env", "workdir"}},
                                 {"lm", lm},
                                 {"python",
                                  {"kind", "function", "python", "env", "workdir", "constraints",
                                   "preload", "preload_objective", "fork_server"}}};
  }();
  return kKinds;
}

const std::vector<KindKeys>& SamplerKinds() {
  static const std::vector<KindKeys> kKinds = {
      {"random", {"kind", "seed"}},
      {"grid", {"kind", "seed"}},
      {"tpe",
       {"kind", "seed", "n_startup_trials", "n_ei_candidates", "multivariate", "group",
        "constant_liar", "prior_weight", "consider_endpoints", "consider_magic_clip", "gamma_max",
        "gamma_fraction"}},
      {"qmc", {"kind", "seed", "scramble"}},
      {"nsga2",
       {"kind", "seed", "population_size", "mutation_prob", "crossover_prob", "swapping_prob"}},
      {"cmaes",
       {"kind", "seed", "n_startup_trials", "sigma0", "popsize", "x0", "restart_strategy",
        "inc_popsize", "consider_pruned_trials"}},
  };
  return kKinds;
}

const std::vector<KindKeys>& PrunerKinds() {
  static const std::vector<KindKeys> kKinds = {
      {"nop", {"kind"}},
      {"median", {"kind", "n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"}},
      {"percentile",
       {"kind", "percentile", "n_startup_trials", "n_warmup_steps", "interval_steps",
        "n_min_trials"}},
      {"asha",
       {"kind", "min_resource", "reduction_factor", "min_early_stopping_rate", "bootstrap_count"}},
      {"hyperband", {"kind", "min_resource", "max_resource", "reduction_factor"}},
      {"threshold", {"kind", "lower", "upper", "n_warmup_steps", "interval_steps"}},
      {"patient", {"kind", "patience", "min_delta", "wrapped"}},
      {"wilcoxon", {"kind", "p_threshold", "n_startup_steps"}},
  };
  return kKinds;
}

using Entry = TomlEntry;

// "2G", "512M", "1.5G", "64KiB", "1048576": bytes, K/M/G/T being powers of 1024. Nothing when
// the text is not such a size (or overflows).
std::optional<uint64_t> ParseByteSize(const std::string& text) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double number = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(number)) return std::nullopt;
  std::string unit(end);
  for (const char* suffix : {"iB", "B"}) {
    if (unit.size() > 1 && unit.size() >= std::strlen(suffix) &&
        unit.compare(unit.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
      unit.resize(unit.size() - std::strlen(suffix));
      break;
    }
  }
  double scale = 1;
  if (unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (!unit.empty() && unit != "B") {
    return std::nullopt;
  }
  double bytes = number * scale;
  if (bytes < 1 || bytes > 9.0e18) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

// Turns TOML nodes into SweepSpec fields and every problem into a message that points at the
// file, line and column. One parser per document; it borrows `source`, which must outlive it.
// Not thread-safe, and need not be: ParseSweep makes a fresh one per call.
class SweepParser {
 public:
  explicit SweepParser(const SweepSource& source)
      : source_(source), diag_(source_.text, source.path.empty() ? "<sweep>" : source.path) {}

  Result<SweepSpec> Parse();

 private:
  // A key in a table, for messages: "[study] n_trials = 0: ...".
  struct Field {
    std::string table;  // "[study]"
    std::string key;    // as written in messages, e.g. "n_trials" or "command[1]"
    const toml::node* node;
  };

  std::string Where(const toml::source_region& region) const { return diag_.Where(region); }
  std::string Repr(const toml::node& node) const { return diag_.Repr(node); }

  // "PATH:L:C: [table] key = <value>: <problem>; expected <expected>"; problem may be empty.
  Status ValueError(const Field& f, const std::string& problem, const std::string& expected) const {
    return diag_.ValueError(f.table, f.key, *f.node, problem, expected);
  }
  Status MissingKey(const std::string& table_name, const toml::node& table, const char* key,
                    const std::string& expected) const {
    return diag_.MissingKey(table_name, table, key, expected);
  }
  // Rejects any key not in `allowed`, in file order; `what` qualifies the table in the message.
  Status CheckKeys(const std::string& table_name, const toml::table& table,
                   const std::vector<const char*>& allowed, const std::string& what = "") const {
    return diag_.CheckKeys(table_name, table, allowed, what);
  }

  Status ReadString(const Field& f, const std::string& expected, std::string* out) const;
  Status ReadInt(const Field& f, int64_t min, int64_t max, const std::string& expected,
                 int64_t* out) const;
  Status ReadSeconds(const Field& f, double* out) const;
  Status ReadBool(const Field& f, bool* out) const;
  // Any TOML number (integer or float) that `rule` accepts.
  Status ReadNumber(const Field& f, const NumberRule& rule, const std::string& expected,
                    double* out) const;
  // Optional keys of `t`: when the key is absent, *out keeps its default.
  Status ReadOptionalInt(const std::string& table_name, const toml::table& t, const char* key,
                         int64_t min, const std::string& expected, int* out) const;
  Status ReadOptionalNumber(const std::string& table_name, const toml::table& t, const char* key,
                            const NumberRule& rule, const std::string& expected, double* out) const;
  Status ReadOptionalBool(const std::string& table_name, const toml::table& t, const char* key,
                          bool* out) const;
  // Reads `kind` when present (else *out keeps its default) and checks it names one of `kinds`.
  Status ReadKind(const std::string& table_name, const toml::table& t,
                  const std::vector<KindKeys>& kinds, const std::string& what,
                  const std::string& expected, std::string* out) const;
  // Like CheckKeys for a table whose keys depend on its kind: a key that belongs to another kind
  // is reported as such, naming the kinds it belongs to. With no `kind` (the table lacks one),
  // every key of every kind passes.
  Status CheckKindKeys(const std::string& table_name, const toml::table& t,
                       const std::vector<KindKeys>& kinds, const std::string* kind) const;

  Status ParseStudy(const toml::table& t, StudyConfig* out) const;
  // [study] resource_constraints = ["peak_memory <= 8G", ...] and objectives = ["value",
  // "peak_gpu_memory"]: measured metrics as constraints and as objectives. Read after
  // directions and gpus_per_trial, which they are checked against.
  Status ParseResourceConstraints(const toml::table& t, StudyConfig* out) const;
  Status ParseStudyObjectives(const toml::table& t, StudyConfig* out) const;
  // A measured metric named in `f` (an entry of one of the keys above): known, and not a GPU
  // metric in a study without GPUs.
  Status CheckMetricName(const Field& f, const std::string& name, int gpus_per_trial) const;
  // [study] directions = ["minimize", "maximize", ...]: two or more, exclusive with direction.
  Status ParseDirections(const toml::table& t, const toml::node& n, StudyConfig* out) const;
  // A study with several objectives: its [sampler] kind must be one of
  // MultiObjectiveSamplerKinds() and it may have no pruner (as in Optuna).
  Status CheckMultiObjective(const toml::table& root, const SweepSpec& spec) const;
  Status ParseObjective(const toml::table& t, ObjectiveConfig* out) const;
  Status ParseCommand(const Field& f, std::vector<std::string>* out) const;
  Status ParseEnv(const Field& f, std::map<std::string, std::string>* out) const;
  Status ResolvePath(const Field* f, const std::string& expected, std::string* out) const;
  Status ParseLm(const toml::table& t, LmObjectiveConfig* out) const;
  // kind = "python": function (file or module form) and python.
  Status ParsePythonFunction(const toml::table& t, ObjectiveConfig* out) const;
  // kind = "python": preload, preload_objective and fork_server, with their defaults.
  Status ParsePreload(const toml::table& t, ObjectiveConfig* out) const;
  // A "PATH.py:NAME" or "package.module:NAME" value (function, constraints): the spec as written,
  // the absolute file or the module, NAME and where the value is.
  Status ParsePythonSpec(const Field& f, const std::string& expected, std::string* spec,
                         std::string* file, std::string* module, std::string* name,
                         std::string* at) const;
  // kind = "lm": objectives, the metrics sent as the trial's values.
  Status ParseLmObjectives(const toml::table& t, LmObjectiveConfig* out) const;
  // With kind = "lm", [space] may only override the worker's tunable hyperparameters, with
  // values each of them accepts.
  Status CheckLmParam(const Entry& e, const ParamSpec& spec) const;
  Status ParseSpace(const toml::table& t, bool lm, SearchSpace* out) const;
  Status ParseParam(const std::string& name, const toml::table& t, Distribution* out) const;
  Status ParseSampler(const toml::table& t, SamplerConfig* out) const;
  // `tn` names the table in messages: "[pruner]", or "[pruner.wrapped]" for the pruner a
  // patient pruner wraps (parsed by the same function).
  Status ParsePruner(const toml::table& t, PrunerConfig* out,
                     const std::string& tn = "[pruner]") const;
  // kind = "cmaes": its options; x0 is checked against [space] by CheckCmaesX0.
  Status ParseCmaes(const toml::table& t, CmaesConfig* out) const;
  Status CheckCmaesX0(const toml::table& t, const SweepSpec& spec) const;

  const SweepSource& source_;
  TomlDiagnostics diag_;
};

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
  return ReadNumber(
      f, Within(0, false, kMaxSeconds, false),
      "a number of seconds from 0 to " + std::to_string(kMaxSecondsWhole) + " (365 days)", out);
}

Status SweepParser::ReadBool(const Field& f, bool* out) const {
  const auto* v = f.node->as_boolean();
  if (v == nullptr) return ValueError(f, "", "true or false");
  *out = v->get();
  return Status::Ok();
}

Status SweepParser::ReadNumber(const Field& f, const NumberRule& rule, const std::string& expected,
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

Status SweepParser::ReadOptionalInt(const std::string& table_name, const toml::table& t,
                                    const char* key, int64_t min, const std::string& expected,
                                    int* out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  int64_t v = 0;
  TRIALD_RETURN_IF_ERROR(ReadInt({table_name, key, n}, min, INT_MAX, expected, &v));
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status SweepParser::ReadOptionalNumber(const std::string& table_name, const toml::table& t,
                                       const char* key, const NumberRule& rule,
                                       const std::string& expected, double* out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  return ReadNumber({table_name, key, n}, rule, expected, out);
}

Status SweepParser::ReadOptionalBool(const std::string& table_name, const toml::table& t,
                                     const char* key, bool* out) const {
  const toml::node* n = t.get(key);
  if (n == nullptr) return Status::Ok();
  return ReadBool({table_name, key, n}, out);
}

Status SweepParser::ReadKind(const std::string& table_name, const toml::table& t,
                             const std::vector<KindKeys>& kinds, const std::string& what,
                             const std::string& expected, std::string* out) const {
  const toml::node* n = t.get("kind");
  if (n == nullptr) return Status::Ok();
  Field f{table_name, "kind", n};
  TRIALD_RETURN_IF_ERROR(ReadString(f, expected, out));
  if (FindKind(kinds, *out) == nullptr) return ValueError(f, "unknown " + what + " kind", expected);
  return Status::Ok();
}

Status SweepParser::CheckKindKeys(const std::string& table_name, const toml::table& t,
                                  const std::vector<KindKeys>& kinds,
                                  const std::string* kind) const {
  const KindKeys* current = kind != nullptr ? FindKind(kinds, *kind) : nullptr;
  std::vector<const char*> allowed;
  if (current != nullptr) {
    allowed = current->keys;
  } else {
    for (const KindKeys& k : kinds) {
      for (const char* key : k.keys) {
        if (!Contains(allowed, key)) allowed.push_back(key);
      }
    }
  }
  for (const Entry& e : InFileOrder(t)) {
    const std::string key(e.key->str());
    if (Contains(allowed, key)) continue;
    std::vector<const char*> owners;
    for (const KindKeys& k : kinds) {
      if (Contains(k.keys, key)) owners.push_back(k.kind);
    }
    if (owners.empty() || current == nullptr) {
      const std::string what = current != nullptr ? " for kind = " + Quoted(current->kind) : "";
      return InvalidArgument(Where(e.key->source()) + ": " + table_name + " unknown key " +
                             Quoted(key) + what + "; expected one of " + JoinList(allowed));
    }
    return InvalidArgument(Where(e.key->source()) + ": " + table_name + " " + KeyText(key) + " = " +
                           Repr(*e.node) + ": an option of kind = " + QuotedAlternatives(owners) +
                           ", not of kind = " + Quoted(current->kind) + "; expected kind = " +
                           QuotedAlternatives(owners) + " to use it, or only " + JoinList(allowed) +
                           " with kind = " + Quoted(current->kind));
  }
  return Status::Ok();
}

Status SweepParser::ParseDirections(const toml::table& t, const toml::node& n,
                                    StudyConfig* out) const {
  const std::string tn = "[study]";
  Field f{tn, "directions", &n};
  if (const toml::node* d = t.get("direction")) {
    return InvalidArgument(Where(n.source()) + ": [study] directions = " + Repr(n) +
                           " and direction = " + Repr(*d) + " (at " + Where(d->source()) +
                           ") are both given; expected one of them: direction for one "
                           "objective, directions for two or more");
  }
  const std::string expected =
      "an array of two or more of \"minimize\" and \"maximize\", one per objective";
  const toml::array* arr = n.as_array();
  if (arr == nullptr) return ValueError(f, "", expected);
  if (arr->size() < 2) {
    return ValueError(f, arr->empty() ? "no objectives" : "a single objective",
                      expected +
                          " (for one objective write direction = \"minimize\" or "
                          "\"maximize\")");
  }
  std::vector<Direction> dirs;
  for (size_t i = 0; i < arr->size(); ++i) {
    Field ef{tn, "directions[" + std::to_string(i) + "]", arr->get(i)};
    std::string dir;
    const std::string one = "\"minimize\" or \"maximize\"";
    TRIALD_RETURN_IF_ERROR(ReadString(ef, one, &dir));
    if (dir == "minimize") {
      dirs.push_back(Direction::kMinimize);
    } else if (dir == "maximize") {
      dirs.push_back(Direction::kMaximize);
    } else {
      return ValueError(ef, "", one);
    }
  }
  out->directions = std::move(dirs);
  out->direction = out->directions.front();
  return Status::Ok();
}

Status SweepParser::CheckMultiObjective(const toml::table& root, const SweepSpec& spec) const {
  if (spec.study.directions.size() < 2) return Status::Ok();
  const std::string count = std::to_string(spec.study.directions.size()) + " objectives";
  const toml::table* sampler = root.get_as<toml::table>("sampler");
  if (!Contains(MultiObjectiveSamplerKinds(), spec.sampler.kind)) {
    const toml::node* kind = sampler != nullptr ? sampler->get("kind") : nullptr;
    return InvalidArgument(Where(kind != nullptr ? kind->source() : root.source()) +
                           ": [sampler] kind = " + Quoted(spec.sampler.kind) +
                           ": does not handle several objectives ([study] directions has " + count +
                           "); expected one of " + JoinList(MultiObjectiveSamplerKinds()));
  }
  const toml::table* pruner = root.get_as<toml::table>("pruner");
  if (pruner != nullptr && spec.pruner.kind != "nop") {
    const toml::node* kind = pruner->get("kind");
    return InvalidArgument(Where(kind != nullptr ? kind->source() : pruner->source()) +
                           ": [pruner] kind = " + Quoted(spec.pruner.kind) +
                           ": pruning is not supported for a study with several "
                           "objectives ([study] directions has " +
                           count +
                           "), as in Optuna; expected no [pruner] "
                           "table (or kind = \"nop\")");
  }
  return Status::Ok();
}

Status SweepParser::ParseStudy(const toml::table& t, StudyConfig* out) const {
  const std::string tn = "[study]";
  TRIALD_RETURN_IF_ERROR(
      CheckKeys(tn, t,
                {"name", "direction", "n_trials", "parallelism", "trial_timeout", "kill_grace",
                 "stall_timeout", "gpus_per_trial", "retries", "retry_on", "memory_limit",
                 "pids_limit", "max_intermediate_steps", "max_attrs", "max_attr_bytes",
                 "max_report_bytes", "directions", "resource_constraints", "objectives"}));
  const std::string name_expected =
      "1 to 128 characters from A-Z a-z 0-9 _ . -, starting with a letter or digit";
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
  out->directions = {out->direction};
  if (const toml::node* n = t.get("directions")) {
    TRIALD_RETURN_IF_ERROR(ParseDirections(t, *n, out));
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
  if (const toml::node* n = t.get("stall_timeout")) {
    TRIALD_RETURN_IF_ERROR(ReadNumber({tn, "stall_timeout", n},
                                      Within(0, true, kMaxStallTimeout, false),
                                      "a number of seconds > 0 and at most " +
                                          std::to_string(static_cast<int>(kMaxStallTimeout)) +
                                          " (7 days); leave it out for no stall timeout",
                                      &out->stall_timeout));
  }
  if (const toml::node* n = t.get("gpus_per_trial")) {
    TRIALD_RETURN_IF_ERROR(
        ReadInt({tn, "gpus_per_trial", n}, 0, 1024, "an integer >= 0 (GPUs per trial)", &v));
    out->gpus_per_trial = static_cast<int>(v);
  }
  if (const toml::node* n = t.get("retries")) {
    TRIALD_RETURN_IF_ERROR(
        ReadInt({tn, "retries", n}, 0, 100, "an integer >= 0 (retries per configuration)", &v));
    out->retries = static_cast<int>(v);
  }
  const std::string reasons_expected =
      "an array of failure reasons from " + QuotedAlternatives(RetryableReasons());
  if (const toml::node* n = t.get("retry_on")) {
    Field f{tn, "retry_on", n};
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return ValueError(f, "", reasons_expected);
    for (size_t i = 0; i < arr->size(); ++i) {
      Field ef{tn, "retry_on[" + std::to_string(i) + "]", arr->get(i)};
      std::string reason;
      TRIALD_RETURN_IF_ERROR(
          ReadString(ef, "one of " + QuotedAlternatives(RetryableReasons()), &reason));
      if (!Contains(RetryableReasons(), reason)) {
        return ValueError(ef, "not a retryable failure reason",
                          "one of " + QuotedAlternatives(RetryableReasons()));
      }
      if (std::find(out->retry_on.begin(), out->retry_on.end(), reason) == out->retry_on.end()) {
        out->retry_on.push_back(reason);
      }
    }
    if (out->retries == 0) {
      return ValueError(f, "has no effect while retries = 0",
                        "retries >= 1 with retry_on, or no retry_on");
    }
  } else if (out->retries > 0) {
    out->retry_on = DefaultRetryOn();
  }
  // A size: an integer number of bytes or a string such as "512M", within [min, max].
  auto read_size = [&](const char* key, uint64_t min, uint64_t max, const std::string& expected,
                       uint64_t* size) -> Status {
    const toml::node* n = t.get(key);
    if (n == nullptr) return Status::Ok();
    std::optional<uint64_t> bytes;
    if (const auto* i = n->as_integer()) {
      if (i->get() > 0) bytes = static_cast<uint64_t>(i->get());
    } else if (const auto* s = n->as_string()) {
      bytes = ParseByteSize(s->get());
    }
    if (!bytes || *bytes < min || *bytes > max) return ValueError({tn, key, n}, "", expected);
    *size = *bytes;
    return Status::Ok();
  };
  TRIALD_RETURN_IF_ERROR(
      read_size("memory_limit", 1u << 20, UINT64_MAX,
                "a size in bytes >= 1048576, as an integer or a string such as \"512M\" or \"2G\"",
                &out->memory_limit));
  // What one trial may report (config/README.md, "Per-trial caps").
  if (const toml::node* n = t.get("max_intermediate_steps")) {
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "max_intermediate_steps", n}, 1, kMaxCapSteps,
                                   "an integer from 1 to " + std::to_string(kMaxCapSteps) +
                                       " (distinct steps with an intermediate value per trial)",
                                   &v));
    out->max_intermediate_steps = v;
  }
  if (const toml::node* n = t.get("max_attrs")) {
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "max_attrs", n}, 1, kMaxCapAttrs,
                                   "an integer from 1 to " + std::to_string(kMaxCapAttrs) +
                                       " (distinct attribute keys per trial)",
                                   &v));
    out->max_attrs = v;
  }
  TRIALD_RETURN_IF_ERROR(read_size("max_attr_bytes", 1024, kMaxCapAttrBytes,
                                   "a size from 1024 to " + std::to_string(kMaxCapAttrBytes) +
                                       " bytes (\"64M\"), as an integer or a string such as \"1M\"",
                                   &out->max_attr_bytes));
  TRIALD_RETURN_IF_ERROR(
      read_size("max_report_bytes", 1024, kMaxCapReportBytes,
                "a size from 1024 to " + std::to_string(kMaxCapReportBytes) +
                    " bytes (\"64G\"), as an integer or a string such as \"256M\"",
                &out->max_report_bytes));
  if (const toml::node* n = t.get("pids_limit")) {
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "pids_limit", n}, 1, INT32_MAX,
                                   "an integer >= 1 (processes and threads per trial)", &v));
    out->pids_limit = v;
  }
  TRIALD_RETURN_IF_ERROR(ParseResourceConstraints(t, out));
  TRIALD_RETURN_IF_ERROR(ParseStudyObjectives(t, out));
  return Status::Ok();
}

namespace {

std::string TrimSpaces(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e + 1 - b);
}

bool IsMemoryMetric(const std::string& metric) {
  return metric == "peak_memory" || metric == "peak_gpu_memory";
}

// A plain number of seconds in [0, kMaxSeconds] ("3600", "90.5"); nothing otherwise.
std::optional<double> ParsePlainSeconds(const std::string& text) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(x) || x < 0 ||
      x > kMaxSeconds) {
    return std::nullopt;
  }
  return x;
}

}  // namespace

Status SweepParser::CheckMetricName(const Field& f, const std::string& name,
                                    int gpus_per_trial) const {
  if (!IsResourceMetric(name)) {
    return ValueError(f, Quoted(name) + " is not a metric triald measures",
                      "one of " + JoinList(ResourceMetrics()));
  }
  if (name == "peak_gpu_memory" && gpus_per_trial == 0) {
    return ValueError(f,
                      "peak_gpu_memory is measured on GPU slots only and [study] has no "
                      "gpus_per_trial",
                      "[study] gpus_per_trial >= 1 with peak_gpu_memory, or another metric");
  }
  return Status::Ok();
}

Status SweepParser::ParseResourceConstraints(const toml::table& t, StudyConfig* out) const {
  const toml::node* n = t.get("resource_constraints");
  if (n == nullptr) return Status::Ok();
  const std::string tn = "[study]";
  const std::string expected =
      "an array of constraints \"METRIC <= LIMIT\" or \"METRIC >= LIMIT\", e.g. "
      "[\"peak_memory <= 8G\", \"cpu_time <= 3600\"]; metrics: " +
      JoinList(ResourceMetrics());
  const toml::array* arr = n->as_array();
  if (arr == nullptr || arr->empty())
    return ValueError({tn, "resource_constraints", n}, "", expected);
  for (size_t i = 0; i < arr->size(); ++i) {
    const Field ef{tn, "resource_constraints[" + std::to_string(i) + "]", arr->get(i)};
    const std::string one = "\"METRIC <= LIMIT\" or \"METRIC >= LIMIT\" with METRIC one of " +
                            JoinList(ResourceMetrics()) + ", e.g. \"peak_memory <= 8G\"";
    std::string text;
    TRIALD_RETURN_IF_ERROR(ReadString(ef, one, &text));
    ResourceConstraint c;
    c.text = text;
    size_t op = text.find("<=");
    const size_t ge = text.find(">=");
    if (op == std::string::npos || (ge != std::string::npos && ge < op)) op = ge;
    if (op == std::string::npos) {
      return ValueError(ef, "no operator (<= or >=)", one);
    }
    c.at_most = text[op] == '<';
    c.metric = TrimSpaces(text.substr(0, op));
    const std::string limit = TrimSpaces(text.substr(op + 2));
    if (c.metric.empty()) return ValueError(ef, "no metric before " + text.substr(op, 2), one);
    TRIALD_RETURN_IF_ERROR(CheckMetricName(ef, c.metric, out->gpus_per_trial));
    if (IsMemoryMetric(c.metric)) {
      std::optional<uint64_t> bytes = ParseByteSize(limit);
      if (!bytes) {
        return ValueError(ef, "the limit " + Quoted(limit) + " is not a size",
                          "a size in bytes >= 1 after " + text.substr(op, 2) +
                              ", as a number or with K/M/G/T (powers of 1024), e.g. \"" + c.metric +
                              " <= 8G\"");
      }
      c.limit = static_cast<double>(*bytes);
    } else {
      std::optional<double> seconds = ParsePlainSeconds(limit);
      if (!seconds) {
        return ValueError(ef, "the limit " + Quoted(limit) + " is not a number of seconds",
                          "a number of seconds from 0 to " + std::to_string(kMaxSecondsWhole) +
                              " after " + text.substr(op, 2) + ", e.g. \"" + c.metric +
                              " <= 3600\"");
      }
      c.limit = *seconds;
    }
    out->resource_constraints.push_back(std::move(c));
  }
  return Status::Ok();
}

Status SweepParser::ParseStudyObjectives(const toml::table& t, StudyConfig* out) const {
  const toml::node* n = t.get("objectives");
  if (n == nullptr) return Status::Ok();
  const std::string tn = "[study]";
  const size_t n_directions = out->directions.size();
  const std::string expected =
      "an array with one entry per direction: \"value\" for each value the objective reports "
      "(first), then measured metrics from " +
      JoinList(ResourceMetrics()) + ", e.g. [\"value\", \"peak_gpu_memory\"]";
  const toml::array* arr = n->as_array();
  const Field f{tn, "objectives", n};
  if (arr == nullptr || arr->empty()) return ValueError(f, "", expected);
  if (arr->size() != n_directions) {
    return ValueError(f,
                      "names " + std::to_string(arr->size()) + " objective" +
                          (arr->size() == 1 ? "" : "s") + " but [study] has " +
                          std::to_string(n_directions) + " direction" +
                          (n_directions == 1 ? "" : "s"),
                      "one entry per direction, in the same order (directions = [...] for two "
                      "or more)");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < arr->size(); ++i) {
    const Field ef{tn, "objectives[" + std::to_string(i) + "]", arr->get(i)};
    const std::string one = "\"value\" or one of " + JoinList(ResourceMetrics());
    std::string name;
    TRIALD_RETURN_IF_ERROR(ReadString(ef, one, &name));
    if (name == "value") {
      if (!names.empty() && names.back() != "value") {
        return ValueError(ef, "\"value\" after the measured metric " + Quoted(names.back()),
                          "the objective's values first, then measured metrics");
      }
    } else {
      if (names.empty()) {
        return ValueError(ef, "the first objective is a measured metric",
                          "\"value\" first (at least one value the objective reports), then "
                          "measured metrics");
      }
      TRIALD_RETURN_IF_ERROR(CheckMetricName(ef, name, out->gpus_per_trial));
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        return ValueError(ef, Quoted(name) + " is already in objectives",
                          "each measured metric once");
      }
    }
    names.push_back(std::move(name));
  }
  out->objectives = std::move(names);
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

// Relative paths (workdir, the LM objective's files) are anchored at the sweep file, not at
// wherever the daemon happens to run, so a sweep next to its script and data works from any
// current directory. Without `f`, the sweep file's own folder. Nothing is checked on disk.
Status SweepParser::ResolvePath(const Field* f, const std::string& expected,
                                std::string* out) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path base = fs::path(source_.path).parent_path();
  base = base.empty() ? fs::current_path(ec) : fs::absolute(base, ec);
  if (ec) {
    return common::IoError("cannot resolve the directory of " + diag_.path() + ": " + ec.message());
  }
  fs::path dir = base;
  if (f != nullptr) {
    std::string given;
    TRIALD_RETURN_IF_ERROR(ReadString(*f, expected, &given));
    if (given.empty()) return ValueError(*f, "empty path", expected);
    // open() and chdir() take NUL-terminated strings: an embedded NUL would cut the path.
    if (given.find('\0') != std::string::npos) {
      return ValueError(*f, "contains a NUL character", expected);
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
  const std::vector<KindKeys>& kinds = ObjectiveKinds();
  const toml::node* kind_node = t.get("kind");
  TRIALD_RETURN_IF_ERROR(
      ReadKind(tn, t, kinds, "objective", "\"exec\", \"lm\" or \"python\"", &out->kind));
  if (kind_node != nullptr && out->kind == "lm") {
    // Said outright rather than as "an option of kind = exec": a user adding `command` to an lm
    // objective wants to know that the worker is chosen for them.
    if (const toml::node* n = t.get("command")) {
      return ValueError({tn, "command", n},
                        "kind = \"lm\" runs the daemon's built-in trial-worker, which needs no "
                        "command",
                        "no command with kind = \"lm\" (or kind = \"exec\" to run your own)");
    }
  }
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(tn, t, kinds, kind_node != nullptr ? &out->kind : nullptr));
  if (kind_node == nullptr) {
    return MissingKey(tn, t, "kind",
                      "kind = \"exec\" (run a command), kind = \"lm\" (the built-in "
                      "language-model worker) or kind = \"python\" (an Optuna-style objective "
                      "function)");
  }
  if (out->kind == "exec") {
    if (const toml::node* n = t.get("command")) {
      TRIALD_RETURN_IF_ERROR(ParseCommand({tn, "command", n}, &out->command));
    } else {
      return MissingKey(tn, t, "command",
                        "a non-empty array of strings, e.g. command = [\"python3\", \"train.py\"]");
    }
  } else if (out->kind == "python") {
    TRIALD_RETURN_IF_ERROR(ParsePythonFunction(t, out));
  } else {
    TRIALD_RETURN_IF_ERROR(ParseLm(t, &out->lm));
    TRIALD_RETURN_IF_ERROR(ParseLmObjectives(t, &out->lm));
    if (const toml::node* n = t.get("fork_server")) {
      TRIALD_RETURN_IF_ERROR(ReadBool({tn, "fork_server", n}, &out->fork_server));
    }
  }
  if (const toml::node* n = t.get("env")) {
    TRIALD_RETURN_IF_ERROR(ParseEnv({tn, "env", n}, &out->env));
  }
  const std::string workdir_expected = "a directory path";
  if (const toml::node* n = t.get("workdir")) {
    Field f{tn, "workdir", n};
    return ResolvePath(&f, workdir_expected, &out->workdir);
  }
  return ResolvePath(nullptr, workdir_expected, &out->workdir);
}

Status SweepParser::ParsePythonFunction(const toml::table& t, ObjectiveConfig* out) const {
  const std::string tn = "[objective]";
  const std::string expected =
      "\"PATH.py:NAME\" (a file, relative to the sweep file's folder) or "
      "\"package.module:NAME\", NAME the objective function";
  const toml::node* n = t.get("function");
  if (n == nullptr) return MissingKey(tn, t, "function", expected);
  TRIALD_RETURN_IF_ERROR(ParsePythonSpec({tn, "function", n}, expected, &out->function,
                                         &out->function_file, &out->function_module,
                                         &out->function_name, &out->function_at));
  if (const toml::node* c = t.get("constraints")) {
    const std::string constraints_expected =
        "\"PATH.py:NAME\" (a file, relative to the sweep file's folder) or "
        "\"package.module:NAME\", NAME a function of the finished trial returning its "
        "constraint values";
    TRIALD_RETURN_IF_ERROR(ParsePythonSpec(
        {tn, "constraints", c}, constraints_expected, &out->constraints, &out->constraints_file,
        &out->constraints_module, &out->constraints_name, &out->constraints_at));
  }
  TRIALD_RETURN_IF_ERROR(ParsePreload(t, out));
  if (const toml::node* p = t.get("python")) {
    Field pf{tn, "python", p};
    const std::string python_expected = "an interpreter, e.g. \"python3\" or \"/usr/bin/python3\"";
    TRIALD_RETURN_IF_ERROR(ReadString(pf, python_expected, &out->python));
    if (out->python.empty()) return ValueError(pf, "empty", python_expected);
    if (out->python.find('\0') != std::string::npos) {
      return ValueError(pf, "contains a NUL character", python_expected);
    }
  }
  return Status::Ok();
}

Status SweepParser::ParsePreload(const toml::table& t, ObjectiveConfig* out) const {
  const std::string tn = "[objective]";
  const std::string expected = "an array of module names, e.g. preload = [\"torch\", \"numpy\"]";
  auto dotted = [](std::string_view s) {
    if (s.empty()) return false;
    size_t start = 0;
    for (;;) {
      const size_t dot = s.find('.', start);
      const std::string_view part =
          s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
      if (part.empty() || IsAsciiDigit(part[0])) return false;
      if (!std::all_of(part.begin(), part.end(),
                       [](char c) { return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_'; })) {
        return false;
      }
      if (dot == std::string_view::npos) return true;
      start = dot + 1;
    }
  };
  const toml::node* n = t.get("preload");
  if (n != nullptr) {
    Field f{tn, "preload", n};
    const toml::array* arr = n->as_array();
    if (arr == nullptr) return ValueError(f, "", expected);
    for (size_t i = 0; i < arr->size(); ++i) {
      Field ef{tn, "preload[" + std::to_string(i) + "]", arr->get(i)};
      std::string name;
      TRIALD_RETURN_IF_ERROR(ReadString(ef, "a module name, e.g. \"torch\"", &name));
      if (!dotted(name)) {
        return ValueError(ef, "not a module name",
                          "a dotted Python module name (letters, digits, '_', separated by '.'), "
                          "e.g. \"torch\" or \"torch.nn\"");
      }
      if (std::find(out->preload.begin(), out->preload.end(), name) != out->preload.end()) {
        return ValueError(ef, Quoted(name) + " is already in preload", "each module once");
      }
      out->preload.push_back(std::move(name));
    }
  }
  // Defaults: with preload, the objective's file is imported in the server too and trials are
  // forks; without it, trials are exec'd unless fork_server = true asks for the server anyway
  // (it still saves the interpreter's start).
  out->preload_objective = n != nullptr;
  out->fork_server = n != nullptr;
  if (const toml::node* p = t.get("preload_objective")) {
    TRIALD_RETURN_IF_ERROR(ReadBool({tn, "preload_objective", p}, &out->preload_objective));
  }
  if (const toml::node* fs = t.get("fork_server")) {
    TRIALD_RETURN_IF_ERROR(ReadBool({tn, "fork_server", fs}, &out->fork_server));
  }
  if (out->preload_objective && !out->fork_server) {
    const toml::node* p = t.get("preload_objective");
    if (p != nullptr) {
      return ValueError({tn, "preload_objective", p},
                        "preload_objective = true with fork_server = false: nothing would import "
                        "it once",
                        "fork_server = true, or no preload_objective");
    }
    out->preload_objective = false;
  }
  return Status::Ok();
}

Status SweepParser::ParsePythonSpec(const Field& f, const std::string& expected,
                                    std::string* spec_out, std::string* file_out,
                                    std::string* module_out, std::string* name_out,
                                    std::string* at_out) const {
  TRIALD_RETURN_IF_ERROR(ReadString(f, expected, spec_out));
  const std::string& spec = *spec_out;
  if (spec.find('\0') != std::string::npos) {
    return ValueError(f, "contains a NUL character", expected);
  }
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return ValueError(f, "no \":NAME\"", expected);
  const std::string target = spec.substr(0, colon);
  *name_out = spec.substr(colon + 1);
  auto identifier = [](std::string_view s) {
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
  };
  if (!identifier(*name_out)) {
    return ValueError(f, Quoted(*name_out) + " is not a Python name", expected);
  }
  if (target.empty()) return ValueError(f, "no file or module before \":\"", expected);
  const bool is_file = target.size() > 3 && target.compare(target.size() - 3, 3, ".py") == 0;
  if (is_file) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path base = fs::path(source_.path).parent_path();
    base = base.empty() ? fs::current_path(ec) : fs::absolute(base, ec);
    if (ec) {
      return common::IoError("cannot resolve the directory of " + diag_.path() + ": " +
                             ec.message());
    }
    *file_out = (base / fs::path(target)).lexically_normal().string();
  } else {
    size_t start = 0;
    while (true) {
      const size_t dot = target.find('.', start);
      const std::string part =
          target.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!identifier(part)) {
        return ValueError(f, Quoted(target) + " is neither a .py file nor a dotted module name",
                          expected);
      }
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    *module_out = target;
  }
  *at_out = Where(f.node->source());
  return Status::Ok();
}

Status SweepParser::ParseLmObjectives(const toml::table& t, LmObjectiveConfig* out) const {
  const toml::node* n = t.get("objectives");
  if (n == nullptr) return Status::Ok();
  const std::string tn = "[objective]";
  const std::string metrics = JoinList(LmObjectiveMetrics());
  const std::string expected =
      "an array of the metrics the worker measures, one per [study] directions entry, e.g. "
      "[\"eval_loss\", \"planned_memory_bytes\"]; metrics: " +
      metrics;
  const toml::array* a = n->as_array();
  if (a == nullptr || a->empty()) return ValueError({tn, "objectives", n}, "", expected);
  for (size_t i = 0; i < a->size(); ++i) {
    const toml::node& e = *a->get(i);
    const Field ef{tn, "objectives[" + std::to_string(i) + "]", &e};
    std::string name;
    TRIALD_RETURN_IF_ERROR(ReadString(ef, "one of " + metrics, &name));
    const auto& known = LmObjectiveMetrics();
    if (std::none_of(known.begin(), known.end(), [&](const char* m) { return name == m; })) {
      return ValueError(ef, "not a metric the lm worker measures", "one of " + metrics);
    }
    if (std::find(out->objectives.begin(), out->objectives.end(), name) != out->objectives.end()) {
      return ValueError(ef, Quoted(name) + " is already in objectives",
                        "each metric once (its direction is in [study] directions)");
    }
    out->objectives.push_back(name);
  }
  return Status::Ok();
}

Status SweepParser::ParseLm(const toml::table& t, LmObjectiveConfig* out) const {
  const std::string tn = "[objective]";
  for (const LmField& field : LmFields()) {
    const toml::node* n = t.get(field.name);
    if (n == nullptr) {
      if (field.is_path()) return MissingKey(tn, t, field.name, field.expected);
      continue;  // the default stays
    }
    const Field f{tn, field.name, n};
    auto read = [&](auto member) -> Status {
      auto& dst = out->*member;
      using T = std::remove_reference_t<decltype(dst)>;
      if constexpr (std::is_same_v<T, std::string>) {
        if (field.is_path()) return ResolvePath(&f, field.expected, &dst);
        TRIALD_RETURN_IF_ERROR(ReadString(f, field.expected, &dst));
        return field.AcceptsString(dst) ? Status::Ok() : ValueError(f, "", field.expected);
      } else if constexpr (std::is_same_v<T, double>) {
        return ReadNumber(f, field.number, field.expected, &dst);
      } else {
        int64_t v = 0;
        TRIALD_RETURN_IF_ERROR(ReadInt(f, field.int_min, field.int_max(), field.expected, &v));
        dst = static_cast<T>(v);
        return Status::Ok();
      }
    };
    TRIALD_RETURN_IF_ERROR(std::visit(read, field.member));
  }
  return Status::Ok();
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

Status SweepParser::CheckLmParam(const Entry& e, const ParamSpec& spec) const {
  const std::string tn = "[space." + KeyText(spec.name) + "]";
  const LmField* field = FindLmField(spec.name);
  if (field == nullptr || !field->tunable()) {
    std::string note;
    if (field != nullptr) {
      note = " (" + spec.name + " is fixed for the whole study: set it in [objective])";
    }
    return InvalidArgument(Where(e.key->source()) + ": " + tn + " kind = \"lm\" tunes only: " +
                           JoinList(LmFieldNames(true)) + "; expected one of those names" + note);
  }
  const toml::table& param = *e.node->as_table();
  ParamType want = ParamType::kCategorical;
  std::string takes = "one of " + field->expected;
  if (std::holds_alternative<double LmObjectiveConfig::*>(field->member)) {
    want = ParamType::kFloat;
    takes = "numbers";
  } else if (!std::holds_alternative<std::string LmObjectiveConfig::*>(field->member)) {
    want = ParamType::kInt;
    takes = "integers";
  }
  // A numeric hyperparameter may also be tuned over a list of values of its kind
  // (type = "categorical", choices = [1e-5, 3e-4]); each choice is checked below.
  const bool numeric_choices =
      want != ParamType::kCategorical && spec.dist.type == ParamType::kCategorical;
  if (spec.dist.type != want && !numeric_choices) {
    std::string expected = std::string("type = \"") + ParamTypeName(want) + "\"";
    if (want == ParamType::kCategorical) {
      expected += " with choices among " + field->expected;
    } else {
      expected += ", or \"categorical\" with " + takes + " as choices";
    }
    return ValueError({tn, "type", param.get("type")},
                      spec.name + " takes " + takes + " with kind = \"lm\"", expected);
  }
  if (numeric_choices) {
    for (const Choice& c : spec.dist.choices) {
      const auto* i = std::get_if<int64_t>(&c);
      const auto* d = std::get_if<double>(&c);
      const bool ok = want == ParamType::kInt
                          ? i != nullptr && field->AcceptsInt(*i)
                          : (i != nullptr && field->number.Accepts(static_cast<double>(*i))) ||
                                (d != nullptr && field->number.Accepts(*d));
      if (!ok) {
        const auto* str = std::get_if<std::string>(&c);
        return ValueError(
            {tn, "choices", param.get("choices")},
            (str != nullptr ? Quoted(*str) : ChoiceToString(c)) + " is not a value of " + spec.name,
            "choices that are each " + field->expected);
      }
    }
    return Status::Ok();
  }
  const std::string outside = "outside the values " + spec.name + " accepts";
  switch (want) {
    case ParamType::kFloat:
      if (!field->number.Accepts(spec.dist.low)) {
        return ValueError({tn, "low", param.get("low")}, outside, field->expected);
      }
      if (!field->number.Accepts(spec.dist.high)) {
        return ValueError({tn, "high", param.get("high")}, outside, field->expected);
      }
      break;
    case ParamType::kInt:
      if (spec.dist.low < static_cast<double>(field->int_min)) {
        return ValueError({tn, "low", param.get("low")}, outside, field->expected);
      }
      if (spec.dist.high > static_cast<double>(field->int_max())) {
        return ValueError({tn, "high", param.get("high")}, outside,
                          field->expected + " and <= " + std::to_string(field->int_max()));
      }
      break;
    case ParamType::kCategorical:
      for (const Choice& c : spec.dist.choices) {
        const auto* s = std::get_if<std::string>(&c);
        if (s == nullptr || !field->AcceptsString(*s)) {
          return ValueError(
              {tn, "choices", param.get("choices")},
              (s != nullptr ? Quoted(*s) : ChoiceToString(c)) + " is not a value of " + spec.name,
              "choices among " + field->expected);
        }
      }
      break;
  }
  return Status::Ok();
}

Status SweepParser::ParseSpace(const toml::table& t, bool lm, SearchSpace* out) const {
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
    if (lm) TRIALD_RETURN_IF_ERROR(CheckLmParam(e, spec));
    out->push_back(std::move(spec));
  }
  return Status::Ok();
}

Status SweepParser::ParseSampler(const toml::table& t, SamplerConfig* out) const {
  const std::string tn = "[sampler]";
  const std::vector<KindKeys>& kinds = SamplerKinds();
  TRIALD_RETURN_IF_ERROR(
      ReadKind(tn, t, kinds, "sampler", "one of " + JoinList(KindNames(kinds)), &out->kind));
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(tn, t, kinds, &out->kind));
  if (const toml::node* n = t.get("seed")) {
    int64_t seed = 0;
    TRIALD_RETURN_IF_ERROR(ReadInt({tn, "seed", n}, 0, std::numeric_limits<int64_t>::max(),
                                   "a non-negative integer", &seed));
    out->seed = static_cast<uint64_t>(seed);
    out->seed_given = true;
  }
  if (out->kind == "tpe") {
    TpeConfig& c = out->tpe;
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_startup_trials", 0, "an integer >= 0", &c.n_startup_trials));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_ei_candidates", 1, "an integer >= 1", &c.n_ei_candidates));
    TRIALD_RETURN_IF_ERROR(ReadOptionalBool(tn, t, "multivariate", &c.multivariate));
    TRIALD_RETURN_IF_ERROR(ReadOptionalBool(tn, t, "group", &c.group));
    if (c.group && !c.multivariate) {
      return ValueError({tn, "group", t.get("group")},
                        "group decomposition refines the multivariate estimator",
                        "group = true only with multivariate = true (as in Optuna)");
    }
    TRIALD_RETURN_IF_ERROR(ReadOptionalBool(tn, t, "constant_liar", &c.constant_liar));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalNumber(tn, t, "prior_weight", Above(0), "a number > 0", &c.prior_weight));
    TRIALD_RETURN_IF_ERROR(ReadOptionalBool(tn, t, "consider_endpoints", &c.consider_endpoints));
    TRIALD_RETURN_IF_ERROR(ReadOptionalBool(tn, t, "consider_magic_clip", &c.consider_magic_clip));
    TRIALD_RETURN_IF_ERROR(ReadOptionalInt(tn, t, "gamma_max", 1, "an integer >= 1", &c.gamma_max));
    TRIALD_RETURN_IF_ERROR(ReadOptionalNumber(tn, t, "gamma_fraction", Within(0, true, 1, false),
                                              "a number in (0, 1]", &c.gamma_fraction));
  } else if (out->kind == "qmc") {
    TRIALD_RETURN_IF_ERROR(ReadOptionalBool(tn, t, "scramble", &out->qmc.scramble));
  } else if (out->kind == "nsga2") {
    Nsga2Config& c = out->nsga2;
    TRIALD_RETURN_IF_ERROR(ReadOptionalInt(tn, t, "population_size", 2,
                                           "an integer >= 2 (a crossover needs two parents)",
                                           &c.population_size));
    if (t.get("mutation_prob") != nullptr) {
      double p = 0;
      TRIALD_RETURN_IF_ERROR(ReadOptionalNumber(tn, t, "mutation_prob", Within(0, false, 1, false),
                                                "a number in [0, 1]", &p));
      c.mutation_prob = p;
    }
    TRIALD_RETURN_IF_ERROR(ReadOptionalNumber(tn, t, "crossover_prob", Within(0, false, 1, false),
                                              "a number in [0, 1]", &c.crossover_prob));
    TRIALD_RETURN_IF_ERROR(ReadOptionalNumber(tn, t, "swapping_prob", Within(0, false, 1, false),
                                              "a number in [0, 1]", &c.swapping_prob));
  } else if (out->kind == "cmaes") {
    TRIALD_RETURN_IF_ERROR(ParseCmaes(t, &out->cmaes));
  }
  return Status::Ok();
}

Status SweepParser::ParseCmaes(const toml::table& t, CmaesConfig* out) const {
  const std::string tn = "[sampler]";
  CmaesConfig& c = *out;
  TRIALD_RETURN_IF_ERROR(
      ReadOptionalInt(tn, t, "n_startup_trials", 0, "an integer >= 0", &c.n_startup_trials));
  TRIALD_RETURN_IF_ERROR(ReadOptionalNumber(tn, t, "sigma0", Within(0, true, 1e300, false),
                                            "a number > 0", &c.sigma0));
  TRIALD_RETURN_IF_ERROR(ReadOptionalInt(tn, t, "popsize", 2, "an integer >= 2", &c.popsize));
  TRIALD_RETURN_IF_ERROR(
      ReadOptionalInt(tn, t, "inc_popsize", 1, "an integer >= 1", &c.inc_popsize));
  TRIALD_RETURN_IF_ERROR(
      ReadOptionalBool(tn, t, "consider_pruned_trials", &c.consider_pruned_trials));
  if (const toml::node* n = t.get("restart_strategy")) {
    Field f{tn, "restart_strategy", n};
    const std::string expected = "\"ipop\" (or no restart_strategy for no restarts)";
    TRIALD_RETURN_IF_ERROR(ReadString(f, expected, &c.restart_strategy));
    if (c.restart_strategy != "ipop") return ValueError(f, "unknown restart strategy", expected);
  }
  if (const toml::node* n = t.get("x0")) {
    const std::string expected = "a table of initial values such as x0 = { lr = 0.01, layers = 4 }";
    const toml::table* x0 = n->as_table();
    if (x0 == nullptr) return ValueError({tn, "x0", n}, "", expected);
    for (const Entry& e : InFileOrder(*x0)) {
      const std::string name(e.key->str());
      TRIALD_RETURN_IF_ERROR(ReadNumber({tn, "x0." + KeyText(name), e.node},
                                        Within(-1e300, false, 1e300, false), "a number",
                                        &c.x0[name]));
    }
  }
  return Status::Ok();
}

Status SweepParser::CheckCmaesX0(const toml::table& t, const SweepSpec& spec) const {
  const toml::table* x0 = t.get_as<toml::table>("x0");
  if (x0 == nullptr) return Status::Ok();
  const std::string tn = "[sampler]";
  std::string known;
  for (const ParamSpec& p : spec.space) {
    if (p.dist.type != ParamType::kCategorical) known += (known.empty() ? "" : ", ") + p.name;
  }
  for (const Entry& e : InFileOrder(*x0)) {
    const std::string name(e.key->str());
    const Field f{tn, "x0." + KeyText(name), e.node};
    auto p = std::find_if(spec.space.begin(), spec.space.end(),
                          [&](const ParamSpec& s) { return s.name == name; });
    if (p == spec.space.end()) {
      // A python objective may suggest the parameter at run time.
      if (spec.objective.kind == "python") continue;
      return ValueError(f, "no numeric parameter " + Quoted(name) + " in [space]",
                        "one of: " + (known.empty() ? std::string("(none)") : known));
    }
    if (p->dist.type == ParamType::kCategorical) {
      return ValueError(f, Quoted(name) + " is categorical, which CMA-ES samples independently",
                        "x0 for float and int parameters only");
    }
    const double v = spec.sampler.cmaes.x0.at(name);
    if (v < p->dist.low || v > p->dist.high) {
      return ValueError(f, "outside the range of " + Quoted(name),
                        "a value in " + DistributionText(p->dist));
    }
  }
  return Status::Ok();
}

Status SweepParser::ParsePruner(const toml::table& t, PrunerConfig* out,
                                const std::string& tn) const {
  const std::vector<KindKeys>& kinds = PrunerKinds();
  TRIALD_RETURN_IF_ERROR(
      ReadKind(tn, t, kinds, "pruner", "one of " + JoinList(KindNames(kinds)), &out->kind));
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(tn, t, kinds, &out->kind));
  PrunerConfig& c = *out;
  if (c.kind == "median" || c.kind == "percentile") {
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_startup_trials", 0, "an integer >= 0", &c.n_startup_trials));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_warmup_steps", 0, "an integer >= 0", &c.n_warmup_steps));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "interval_steps", 1, "an integer >= 1", &c.interval_steps));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_min_trials", 1, "an integer >= 1", &c.n_min_trials));
    const std::string percentile_expected = "a number in (0, 100)";
    if (c.kind == "median") {
      c.percentile = 50;  // as in Optuna, the median pruner is the 50th-percentile pruner
    } else if (const toml::node* n = t.get("percentile")) {
      TRIALD_RETURN_IF_ERROR(ReadNumber({tn, "percentile", n}, Within(0, true, 100, true),
                                        percentile_expected, &c.percentile));
    } else {
      return MissingKey(tn, t, "percentile",
                        percentile_expected +
                            " with kind = \"percentile\" (kind = \"median\" "
                            "is percentile = 50)");
    }
  } else if (c.kind == "asha" || c.kind == "hyperband") {
    TRIALD_RETURN_IF_ERROR(ReadOptionalInt(tn, t, "min_resource", 1,
                                           "an integer >= 1 (a number of steps; \"auto\" is not "
                                           "supported)",
                                           &c.min_resource));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "reduction_factor", 2, "an integer >= 2", &c.reduction_factor));
    if (c.kind == "asha") {
      TRIALD_RETURN_IF_ERROR(ReadOptionalInt(tn, t, "min_early_stopping_rate", 0, "an integer >= 0",
                                             &c.min_early_stopping_rate));
      TRIALD_RETURN_IF_ERROR(
          ReadOptionalInt(tn, t, "bootstrap_count", 0, "an integer >= 0", &c.bootstrap_count));
    } else if (const toml::node* n = t.get("max_resource")) {
      Field f{tn, "max_resource", n};
      int64_t v = 0;
      TRIALD_RETURN_IF_ERROR(ReadInt(
          f, 1, INT_MAX,
          "an integer >= 1 (a number of steps; omit max_resource for the largest step reported)",
          &v));
      if (v <= c.min_resource) {
        return ValueError(f, "not greater than min_resource = " + std::to_string(c.min_resource),
                          "max_resource > min_resource");
      }
      c.max_resource = static_cast<int>(v);
    }
  } else if (c.kind == "threshold") {
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_warmup_steps", 0, "an integer >= 0", &c.n_warmup_steps));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "interval_steps", 1, "an integer >= 1", &c.interval_steps));
    for (const char* key : {"lower", "upper"}) {
      const toml::node* n = t.get(key);
      if (n == nullptr) continue;
      double v = 0;
      TRIALD_RETURN_IF_ERROR(ReadNumber({tn, key, n}, NumberRule{}, "a finite number", &v));
      (std::string(key) == "lower" ? c.lower : c.upper) = v;
    }
    if (!c.lower && !c.upper) {
      return InvalidArgument(Where(t.source()) + ": " + tn +
                             " has neither lower nor upper; expected lower, upper or both with "
                             "kind = \"threshold\" (a trial is pruned when its latest value is "
                             "below lower or above upper)");
    }
    if (c.lower && c.upper && *c.lower > *c.upper) {
      return ValueError({tn, "upper", t.get("upper")}, "less than lower = " + Repr(*t.get("lower")),
                        "upper >= lower");
    }
  } else if (c.kind == "patient") {
    if (const toml::node* n = t.get("patience")) {
      int64_t v = 0;
      TRIALD_RETURN_IF_ERROR(ReadInt({tn, "patience", n}, 0, INT_MAX, "an integer >= 0", &v));
      c.patience = static_cast<int>(v);
    } else {
      return MissingKey(tn, t, "patience",
                        "an integer >= 0 with kind = \"patient\" (steps without improvement "
                        "before the wrapped pruner decides)");
    }
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalNumber(tn, t, "min_delta", AtLeast(0), "a number >= 0", &c.min_delta));
    if (const toml::node* n = t.get("wrapped")) {
      const std::string inner = tn.substr(0, tn.size() - 1) + ".wrapped]";
      const toml::table* w = n->as_table();
      if (w == nullptr) {
        return ValueError({tn, "wrapped", n}, "",
                          "a table " + inner +
                              " with the kind and options of the pruner to wrap, e.g. kind = "
                              "\"median\"; leave it out to prune on patience alone");
      }
      auto wrapped = std::make_shared<PrunerConfig>();
      TRIALD_RETURN_IF_ERROR(ParsePruner(*w, wrapped.get(), inner));
      c.wrapped = std::move(wrapped);
    }
  } else if (c.kind == "wilcoxon") {
    TRIALD_RETURN_IF_ERROR(ReadOptionalNumber(tn, t, "p_threshold", Within(0, false, 1, false),
                                              "a number in [0, 1]", &c.p_threshold));
    TRIALD_RETURN_IF_ERROR(
        ReadOptionalInt(tn, t, "n_startup_steps", 0, "an integer >= 0", &c.n_startup_steps));
  }
  return Status::Ok();
}

Result<SweepSpec> SweepParser::Parse() {
  TRIALD_ASSIGN_OR_RETURN(toml::table root, diag_.Parse("invalid TOML: "));

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
      return InvalidArgument(diag_.path() + ":1:1: missing required table [" + name +
                             "]; expected " + expected);
    }
    return t;
  };
  TRIALD_ASSIGN_OR_RETURN(const toml::table* study,
                          required("study", "a [study] table with at least name and n_trials"));
  TRIALD_RETURN_IF_ERROR(ParseStudy(*study, &spec.study));
  TRIALD_ASSIGN_OR_RETURN(
      const toml::table* objective,
      required("objective", "an [objective] table with kind (and command for kind = \"exec\")"));
  TRIALD_RETURN_IF_ERROR(ParseObjective(*objective, &spec.objective));
  // A CUDA trial sees only the GPUs the scheduler gives it (CUDA_VISIBLE_DEVICES), so asking for
  // CUDA without asking for a GPU would fail every trial at start-up: refuse it here instead.
  if (spec.objective.kind == "lm" && spec.objective.lm.device == "cuda" &&
      spec.study.gpus_per_trial == 0) {
    const toml::node* device = objective->get("device");
    return InvalidArgument(Where(device != nullptr ? device->source() : objective->source()) +
                           ": [objective] device = \"cuda\" needs [study] gpus_per_trial >= 1: "
                           "each trial sees only the GPUs triald gives it (CUDA_VISIBLE_DEVICES); "
                           "use device = \"auto\" to fall back to the CPU");
  }
  // kind = "lm": one metric per direction, in their order.
  if (spec.objective.kind == "lm") {
    // With [study] objectives, measured metrics are not the worker's to send.
    const size_t n_directions = spec.study.worker_objectives();
    const std::vector<std::string>& objectives = spec.objective.lm.objectives;
    if (!objectives.empty() && objectives.size() != n_directions) {
      const toml::node* n = objective->get("objectives");
      return InvalidArgument(Where(n->source()) + ": [objective] objectives names " +
                             std::to_string(objectives.size()) + " metric" +
                             (objectives.size() == 1 ? "" : "s") + " but [study] has " +
                             std::to_string(n_directions) +
                             (spec.study.objectives.empty()
                                  ? std::string(" direction") + (n_directions == 1 ? "" : "s")
                                  : std::string(" \"value\" objective") +
                                        (n_directions == 1 ? "" : "s") + " in objectives") +
                             "; expected one metric per direction, in the same order");
    }
    if (objectives.empty() && n_directions > 1) {
      return MissingKey("[objective]", *objective, "objectives",
                        "one metric per [study] directions entry (" + std::to_string(n_directions) +
                            "), e.g. objectives = [\"eval_loss\", \"planned_memory_bytes\"]; "
                            "metrics: " +
                            JoinList(LmObjectiveMetrics()));
    }
  }
  // kind = "python": the objective suggests its own parameters; [space] adds ones drawn up front.
  if (spec.objective.kind != "python" || root.get("space") != nullptr) {
    TRIALD_ASSIGN_OR_RETURN(const toml::table* space,
                            required("space", "at least one [space.NAME] parameter table"));
    TRIALD_RETURN_IF_ERROR(ParseSpace(*space, spec.objective.kind == "lm", &spec.space));
  }
  if (const toml::table* t = root.get_as<toml::table>("sampler")) {
    TRIALD_RETURN_IF_ERROR(ParseSampler(*t, &spec.sampler));
    if (spec.sampler.kind == "cmaes") TRIALD_RETURN_IF_ERROR(CheckCmaesX0(*t, spec));
  }
  if (const toml::table* t = root.get_as<toml::table>("pruner")) {
    TRIALD_RETURN_IF_ERROR(ParsePruner(*t, &spec.pruner));
  }
  TRIALD_RETURN_IF_ERROR(CheckMultiObjective(root, spec));
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

const std::vector<const char*>& MultiObjectiveSamplerKinds() {
  static const std::vector<const char*> kKinds = {"random", "qmc", "grid", "tpe", "nsga2"};
  return kKinds;
}

const std::vector<const char*>& ResourceMetrics() {
  static const std::vector<const char*> kMetrics = {"peak_memory", "peak_gpu_memory", "cpu_time",
                                                    "wall"};
  return kMetrics;
}

size_t StudyConfig::worker_objectives() const {
  if (objectives.empty()) return directions.size();
  size_t n = 0;
  for (const std::string& o : objectives) n += o == "value" ? 1 : 0;
  return n;
}

const std::vector<const char*>& RetryableReasons() {
  static const std::vector<const char*> kReasons = {"lost", "signal",   "oom",    "timeout",
                                                    "exit", "shutdown", "stalled"};
  return kReasons;
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

namespace {

std::string JsonString(std::string_view s) { return common::JsonQuote(s); }

// Doubles as DoubleRepr writes them (exact, and always a JSON float: "1.0" rather than "1", and
// "-0.0", which a JSON integer could not keep); JSON has no spelling for the non-finite ones.
std::string JsonDouble(double d) { return common::JsonDoubleText(d); }

// A JSON value for messages, cut like TOML values are.
std::string JsonRepr(const boost::json::value& v) {
  // Boost writes 1.5 as "1.5E0"; show a number as it would be written.
  std::string text = v.is_double() ? JsonDouble(v.get_double()) : boost::json::serialize(v);
  return CutForMessage(std::move(text));
}

}  // namespace

std::string LmObjectiveToJson(const LmObjectiveConfig& config) {
  std::string out = "{";
  for (const LmField& field : LmFields()) {
    if (out.size() > 1) out += ",";
    out += JsonString(field.name) + ":";
    std::visit(
        [&](auto member) {
          const auto& v = config.*member;
          using T = std::remove_cv_t<std::remove_reference_t<decltype(v)>>;
          if constexpr (std::is_same_v<T, std::string>) {
            out += JsonString(v);
          } else if constexpr (std::is_same_v<T, double>) {
            out += JsonDouble(v);
          } else {
            out += std::to_string(v);
          }
        },
        field.member);
  }
  if (!config.objectives.empty()) {
    out += ",\"objectives\":[";
    for (size_t i = 0; i < config.objectives.size(); ++i) {
      out += (i ? "," : "") + JsonString(config.objectives[i]);
    }
    out += "]";
  }
  return out + "}";
}

Result<LmObjectiveConfig> LmObjectiveFromJson(std::string_view json) {
  auto fail = [](const std::string& problem) {
    return InvalidArgument("invalid LM objective JSON: " + problem);
  };
  const std::string all_fields = JoinList(LmFieldNames(false));
  Result<boost::json::value> parsed = common::ParseJsonExact(json);
  if (!parsed.ok()) return fail(parsed.status().message());
  if (!parsed->is_object()) {
    return fail(JsonRepr(*parsed) + ": expected an object with the fields " + all_fields);
  }
  const boost::json::object& obj = parsed->get_object();
  for (const auto& kv : obj) {
    if (FindLmField(kv.key()) == nullptr && kv.key() != "objectives") {
      return fail("unknown field " + JsonString(kv.key()) + "; expected one of " + all_fields);
    }
  }
  LmObjectiveConfig config;
  // Optional (absent: the evaluation loss alone): the metrics sent as the trial's values.
  if (const boost::json::value* v = obj.if_contains("objectives")) {
    const std::string expected = "a non-empty array of " + JoinList(LmObjectiveMetrics());
    if (!v->is_array() || v->get_array().empty()) {
      return fail("\"objectives\" = " + JsonRepr(*v) + ": expected " + expected);
    }
    const auto& known = LmObjectiveMetrics();
    for (const boost::json::value& e : v->get_array()) {
      if (!e.is_string() || std::none_of(known.begin(), known.end(),
                                         [&](const char* m) { return e.get_string() == m; })) {
        return fail("\"objectives\" holds " + JsonRepr(e) + ": expected " + expected);
      }
      config.objectives.emplace_back(e.get_string());
    }
  }
  for (const LmField& field : LmFields()) {
    const boost::json::value* v = obj.if_contains(field.name);
    if (v == nullptr) {
      return fail("missing field " + JsonString(field.name) + "; expected " + field.expected);
    }
    const std::string bad = JsonString(field.name) + " = " + JsonRepr(*v) + ": expected ";
    auto read = [&](auto member) -> Status {
      auto& dst = config.*member;
      using T = std::remove_reference_t<decltype(dst)>;
      if constexpr (std::is_same_v<T, std::string>) {
        if (!v->is_string()) return fail(bad + field.expected);
        dst = std::string(v->get_string());
        if (field.AcceptsString(dst)) return Status::Ok();
        const std::string problem = field.is_path()
                                        ? JsonString(field.name) + " = " + JsonRepr(*v) +
                                              ": contains a NUL character; expected "
                                        : bad;
        return fail(problem + field.expected);
      } else if constexpr (std::is_same_v<T, double>) {
        // A whole number is a fine double: a person writing the JSON may well omit the ".0".
        if (v->is_double()) {
          dst = v->get_double();
        } else if (v->is_int64()) {
          dst = static_cast<double>(v->get_int64());
        } else if (v->is_uint64()) {
          dst = static_cast<double>(v->get_uint64());
        } else {
          return fail(bad + field.expected);
        }
        return field.number.Accepts(dst) ? Status::Ok() : fail(bad + field.expected);
      } else {
        if (!v->is_int64() || !field.AcceptsInt(v->get_int64())) {
          return fail(bad + field.expected + " and <= " + std::to_string(field.int_max()));
        }
        dst = static_cast<T>(v->get_int64());
        return Status::Ok();
      }
    };
    TRIALD_RETURN_IF_ERROR(std::visit(read, field.member));
  }
  return config;
}

}  // namespace triald::config
