// [study]: the study's name, its directions and objectives, how many trials run and how, and what
// one trial may use and report.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/utf8.h"
#include "config/sweep/tables.h"

namespace triald::config {
namespace {

constexpr size_t kMaxStudyNameChars = 128;

bool IsAsciiAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

}  // namespace

const char* const kStudyNameExpected =
    "1 to 128 characters from A-Z a-z 0-9 _ . -, starting with a letter or digit";

// The first character is a letter or digit: a name is a folder under studies/ ("." and ".."
// are not) and a command-line argument ("-rf" is not).
bool IsMetricName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && s.find_first_of("\n\r\t") == std::string_view::npos &&
         common::DescribeInvalidUtf8(s).empty();
}

bool IsStudyName(std::string_view s) {
  if (s.empty() || s.size() > kMaxStudyNameChars) return false;
  if (!IsAsciiAlnum(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAsciiAlnum(c) || c == '_' || c == '.' || c == '-'; });
}

}  // namespace triald::config

namespace triald::config::sweep {

namespace {

using common::InvalidArgument;
using common::Status;
using K = Key<StudyConfig>;
using S = StudyConfig;

const char* const kNameExpected = kStudyNameExpected;

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

Status ReadDirection(const SweepReader& r, const Field& f, Direction* out) {
  std::string dir;
  const std::string expected = "\"minimize\" or \"maximize\"";
  TRIALD_RETURN_IF_ERROR(r.ReadString(f, expected, &dir));
  if (dir == "minimize") {
    *out = Direction::kMinimize;
  } else if (dir == "maximize") {
    *out = Direction::kMaximize;
  } else {
    return r.ValueError(f, "", expected);
  }
  return Status::Ok();
}

// [study] directions = ["minimize", "maximize", ...]: two or more, exclusive with direction.
Status ReadDirections(const TableContext& ctx, const Field& f, StudyConfig* out) {
  const SweepReader& r = ctx.reader;
  const toml::node& n = *f.node;
  if (const toml::node* d = ctx.table.get("direction")) {
    return InvalidArgument(r.Where(n.source()) + ": [study] directions = " + r.Repr(n) +
                           " and direction = " + r.Repr(*d) + " (at " + r.Where(d->source()) +
                           ") are both given; expected one of them: direction for one "
                           "objective, directions for two or more");
  }
  const std::string expected =
      "an array of two or more of \"minimize\" and \"maximize\", one per objective";
  const toml::array* arr = n.as_array();
  if (arr == nullptr) return r.ValueError(f, "", expected);
  if (arr->size() < 2) {
    return r.ValueError(f, arr->empty() ? "no objectives" : "a single objective",
                        expected +
                            " (for one objective write direction = \"minimize\" or "
                            "\"maximize\")");
  }
  std::vector<Direction> dirs(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    TRIALD_RETURN_IF_ERROR(ReadDirection(
        r, {f.table, "directions[" + std::to_string(i) + "]", arr->get(i)}, &dirs[i]));
  }
  out->directions = std::move(dirs);
  out->direction = out->directions.front();
  return Status::Ok();
}

Status ReadRetryOn(const TableContext& ctx, const Field& f, StudyConfig* out) {
  const SweepReader& r = ctx.reader;
  const std::string one = "one of " + QuotedAlternatives(RetryableReasons());
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr) {
    return r.ValueError(
        f, "", "an array of failure reasons from " + QuotedAlternatives(RetryableReasons()));
  }
  for (size_t i = 0; i < arr->size(); ++i) {
    Field ef{f.table, "retry_on[" + std::to_string(i) + "]", arr->get(i)};
    std::string reason;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, one, &reason));
    if (!Contains(RetryableReasons(), reason)) {
      return r.ValueError(ef, "not a retryable failure reason", one);
    }
    if (std::find(out->retry_on.begin(), out->retry_on.end(), reason) == out->retry_on.end()) {
      out->retry_on.push_back(reason);
    }
  }
  if (out->retries == 0) {
    return r.ValueError(f, "has no effect while retries = 0",
                        "retries >= 1 with retry_on, or no retry_on");
  }
  return Status::Ok();
}

// A size: an integer number of bytes or a string such as "512M", within [min, max].
K SizeKey(const char* name, uint64_t S::*m, uint64_t min, uint64_t max, std::string expected,
          std::string doc) {
  return CustomKey<S>(name, std::move(doc),
                      [m, min, max, expected](const TableContext& ctx, const Field& f, S* out) {
                        std::optional<uint64_t> bytes;
                        if (const auto* i = f.node->as_integer()) {
                          if (i->get() > 0) bytes = static_cast<uint64_t>(i->get());
                        } else if (const auto* s = f.node->as_string()) {
                          bytes = ParseByteSize(s->get());
                        }
                        if (!bytes || *bytes < min || *bytes > max) {
                          return ctx.reader.ValueError(f, "", expected);
                        }
                        out->*m = *bytes;
                        return Status::Ok();
                      });
}

// A measured metric named in `f` (an entry of resource_constraints or objectives): known, and
// not a GPU metric in a study without GPUs.
Status CheckMetricName(const SweepReader& r, const Field& f, const std::string& name,
                       int gpus_per_trial) {
  if (!IsResourceMetric(name)) {
    return r.ValueError(f, Quoted(name) + " is not a metric triald measures",
                        "one of " + JoinList(ResourceMetrics()));
  }
  if (name == "peak_gpu_memory" && gpus_per_trial == 0) {
    return r.ValueError(f,
                        "peak_gpu_memory is measured on GPU slots only and [study] has no "
                        "gpus_per_trial",
                        "[study] gpus_per_trial >= 1 with peak_gpu_memory, or another metric");
  }
  return Status::Ok();
}

// resource_constraints = ["peak_memory <= 8G", ...]: measured metrics as constraints.
Status ReadResourceConstraints(const TableContext& ctx, const Field& f, StudyConfig* out) {
  const SweepReader& r = ctx.reader;
  const std::string expected =
      "an array of constraints \"METRIC <= LIMIT\" or \"METRIC >= LIMIT\", e.g. "
      "[\"peak_memory <= 8G\", \"cpu_time <= 3600\"]; metrics: " +
      JoinList(ResourceMetrics());
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr || arr->empty()) return r.ValueError(f, "", expected);
  for (size_t i = 0; i < arr->size(); ++i) {
    const Field ef{f.table, "resource_constraints[" + std::to_string(i) + "]", arr->get(i)};
    const std::string one = "\"METRIC <= LIMIT\" or \"METRIC >= LIMIT\" with METRIC one of " +
                            JoinList(ResourceMetrics()) + ", e.g. \"peak_memory <= 8G\"";
    std::string text;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, one, &text));
    ResourceConstraint c;
    c.text = text;
    size_t op = text.find("<=");
    const size_t ge = text.find(">=");
    if (op == std::string::npos || (ge != std::string::npos && ge < op)) op = ge;
    if (op == std::string::npos) {
      return r.ValueError(ef, "no operator (<= or >=)", one);
    }
    c.at_most = text[op] == '<';
    c.metric = TrimSpaces(text.substr(0, op));
    const std::string limit = TrimSpaces(text.substr(op + 2));
    if (c.metric.empty()) return r.ValueError(ef, "no metric before " + text.substr(op, 2), one);
    TRIALD_RETURN_IF_ERROR(CheckMetricName(r, ef, c.metric, out->gpus_per_trial));
    if (IsMemoryMetric(c.metric)) {
      std::optional<uint64_t> bytes = ParseByteSize(limit);
      if (!bytes) {
        return r.ValueError(ef, "the limit " + Quoted(limit) + " is not a size",
                            "a size in bytes >= 1 after " + text.substr(op, 2) +
                                ", as a number or with K/M/G/T (powers of 1024), e.g. \"" +
                                c.metric + " <= 8G\"");
      }
      c.limit = static_cast<double>(*bytes);
    } else {
      std::optional<double> seconds = ParsePlainSeconds(limit);
      if (!seconds) {
        return r.ValueError(ef, "the limit " + Quoted(limit) + " is not a number of seconds",
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

// objectives = ["value", "peak_gpu_memory"]: measured metrics as objectives, after the worker's
// values; one entry per direction.
// [study] metric_names: one name per objective (Optuna's study.set_metric_names), shown for the
// objectives in the views, reports and exports.
Status ReadMetricNames(const TableContext& ctx, const Field& f, StudyConfig* out) {
  const SweepReader& r = ctx.reader;
  const size_t n = out->directions.size();
  const std::string expected = "an array of " + std::to_string(n) + " distinct name" +
                               (n == 1 ? "" : "s") +
                               ", one per objective in the order of directions (1 to 64 "
                               "characters each), e.g. [\"loss\", \"accuracy\"]";
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr) return r.ValueError(f, "", expected);
  if (arr->size() != n) {
    return r.ValueError(f,
                        "names " + std::to_string(arr->size()) + " objective" +
                            (arr->size() == 1 ? "" : "s") + " but [study] has " +
                            std::to_string(n) + " direction" + (n == 1 ? "" : "s"),
                        expected);
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < arr->size(); ++i) {
    const Field ef{f.table, "metric_names[" + std::to_string(i) + "]", arr->get(i)};
    std::string name;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, "a name of 1 to 64 characters", &name));
    if (!IsMetricName(name)) {
      return r.ValueError(ef, "", "a name of 1 to 64 characters on one line");
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      return r.ValueError(ef, Quoted(name) + " is already in metric_names", "distinct names");
    }
    names.push_back(std::move(name));
  }
  out->metric_names = std::move(names);
  return Status::Ok();
}

Status ReadObjectives(const TableContext& ctx, const Field& f, StudyConfig* out) {
  const SweepReader& r = ctx.reader;
  const size_t n_directions = out->directions.size();
  const std::string expected =
      "an array with one entry per direction: \"value\" for each value the objective reports "
      "(first), then measured metrics from " +
      JoinList(ResourceMetrics()) + ", e.g. [\"value\", \"peak_gpu_memory\"]";
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr || arr->empty()) return r.ValueError(f, "", expected);
  if (arr->size() != n_directions) {
    return r.ValueError(f,
                        "names " + std::to_string(arr->size()) + " objective" +
                            (arr->size() == 1 ? "" : "s") + " but [study] has " +
                            std::to_string(n_directions) + " direction" +
                            (n_directions == 1 ? "" : "s"),
                        "one entry per direction, in the same order (directions = [...] for two "
                        "or more)");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < arr->size(); ++i) {
    const Field ef{f.table, "objectives[" + std::to_string(i) + "]", arr->get(i)};
    const std::string one = "\"value\" or one of " + JoinList(ResourceMetrics());
    std::string name;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, one, &name));
    if (name == "value") {
      if (!names.empty() && names.back() != "value") {
        return r.ValueError(ef, "\"value\" after the measured metric " + Quoted(names.back()),
                            "the objective's values first, then measured metrics");
      }
    } else {
      if (names.empty()) {
        return r.ValueError(ef, "the first objective is a measured metric",
                            "\"value\" first (at least one value the objective reports), then "
                            "measured metrics");
      }
      TRIALD_RETURN_IF_ERROR(CheckMetricName(r, ef, name, out->gpus_per_trial));
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        return r.ValueError(ef, Quoted(name) + " is already in objectives",
                            "each measured metric once");
      }
    }
    names.push_back(std::move(name));
  }
  out->objectives = std::move(names);
  return Status::Ok();
}

}  // namespace

const std::vector<Key<StudyConfig>>& StudyKeys() {
  static const std::vector<K> kKeys = [] {
    std::vector<K> keys;
    keys.push_back(Required(
        CustomKey<S>("name",
                     std::string("required; the study's name, unique per daemon: ") + kNameExpected,
                     [](const TableContext& ctx, const Field& f, S* out) {
                       TRIALD_RETURN_IF_ERROR(ctx.reader.ReadString(
                           f, std::string("a string of ") + kNameExpected, &out->name));
                       if (!IsStudyName(out->name)) {
                         return ctx.reader.ValueError(f, "not a valid study name", kNameExpected);
                       }
                       return Status::Ok();
                     }),
        std::string("a study name of ") + kNameExpected));
    keys.push_back(CustomKey<S>("direction", "\"minimize\" (default) or \"maximize\"",
                                [](const TableContext& ctx, const Field& f, S* out) {
                                  TRIALD_RETURN_IF_ERROR(
                                      ReadDirection(ctx.reader, f, &out->direction));
                                  out->directions = {out->direction};
                                  return Status::Ok();
                                }));
    keys.push_back(Required(IntKey("n_trials", Of(&S::n_trials), 1, "an integer >= 1",
                                   "required, >= 1: the study ends after this many finished "
                                   "trials (configurations, when trials are retried)"),
                            "an integer >= 1"));
    keys.push_back(IntKey("parallelism", Of(&S::parallelism), 1, "an integer >= 1",
                          "trials of this study running at once, >= 1 (default 1)"));
    keys.push_back(CustomKey<S>(
        "trial_timeout", "seconds a trial may run, at most 31536000 (365 days); 0 = none (default)",
        [](const TableContext& ctx, const Field& f, S* out) {
          return ctx.reader.ReadSeconds(f, &out->trial_timeout);
        }));
    keys.push_back(CustomKey<S>(
        "kill_grace", "seconds between SIGTERM and SIGKILL, at most 365 days (default 10)",
        [](const TableContext& ctx, const Field& f, S* out) {
          return ctx.reader.ReadSeconds(f, &out->kill_grace);
        }));
    keys.push_back(NumberKey("stall_timeout", Of(&S::stall_timeout),
                             Within(0, true, kMaxStallTimeout, false),
                             "a number of seconds > 0 and at most " +
                                 std::to_string(static_cast<int>(kMaxStallTimeout)) +
                                 " (7 days); leave it out for no stall timeout",
                             "seconds a trial may send no line on its trial channel before it "
                             "ends FAIL(stalled); > 0, at most 604800 (7 days); default none"));
    keys.push_back(IntKey("gpus_per_trial", Of(&S::gpus_per_trial), 0, 1024,
                          "an integer >= 0 (GPUs per trial)",
                          "GPU slots each trial holds, 0 to 1024 (default 0: CPU only)"));
    keys.push_back(IntKey(
        "max_failures_in_a_row", Of(&S::max_failures_in_a_row), 0, 1000000,
        "an integer >= 0 (0: never stop)",
        "fail-fast: the study stops and ends FAILED once this many trials in a row (its first "
        "ones included) failed the same way (the same reason and last line, numbers aside); 0 "
        "never stops it (default 5)"));
    keys.push_back(BoolKey(
        "requeue_on_shutdown", Of(&S::requeue_on_shutdown),
        "a trial that a stop of triald (SIGTERM, systemctl stop or restart) ends is run again "
        "when triald starts: a new WAITING trial with its parameters, resuming from its folder, "
        "counted neither against n_trials nor retries (default true; false: it ends "
        "FAIL(shutdown), retried only per retry_on)"));
    keys.push_back(BoolKey(
        "load_if_exists", Of(&S::load_if_exists),
        "submitting the file again while a study of its name exists continues that study, as "
        "Optuna's load_if_exists: the space, objective and directions must be the same (else "
        "refused, naming what differs), and n_trials more trials run (default false: the name "
        "must be new; trialctl submit --resume asks for it once)"));
    keys.push_back(IntKey("retries", Of(&S::retries), 0, 100,
                          "an integer >= 0 (retries per configuration)",
                          "retries per configuration of a failed trial, 0 to 100 (default 0)"));
    K retry_on = CustomKey<S>(
        "retry_on",
        "the failure reasons retried, from " + JoinList(RetryableReasons()) +
            " (default [\"lost\", \"signal\", \"oom\", \"preempted\", \"node_failure\"]); needs "
            "retries >= 1",
        ReadRetryOn);
    retry_on.absent = [](const TableContext&, S* out) {
      if (out->retries > 0) out->retry_on = DefaultRetryOn();
      return Status::Ok();
    };
    keys.push_back(std::move(retry_on));
    keys.push_back(
        SizeKey("memory_limit", &S::memory_limit, 1u << 20, UINT64_MAX,
                "a size in bytes >= 1048576, as an integer or a string such as \"512M\" or \"2G\"",
                "per trial: bytes, or \"512M\", \"2G\" (K/M/G/T = 1024^n), >= 1M; default none"));
    keys.push_back(IntKey("pids_limit", Of(&S::pids_limit), 1, INT32_MAX,
                          "an integer >= 1 (processes and threads per trial)",
                          "per trial: processes and threads (pids.max), >= 1; default none"));
    // What one trial may report (config/README.md, "Per-trial caps").
    keys.push_back(IntKey("max_intermediate_steps", Of(&S::max_intermediate_steps), 1, kMaxCapSteps,
                          "an integer from 1 to " + std::to_string(kMaxCapSteps) +
                              " (distinct steps with an intermediate value per trial)",
                          "per-trial cap: distinct steps with an intermediate value, 1 to "
                          "10000000 (default 10000)"));
    keys.push_back(IntKey("max_attrs", Of(&S::max_attrs), 1, kMaxCapAttrs,
                          "an integer from 1 to " + std::to_string(kMaxCapAttrs) +
                              " (distinct attribute keys per trial)",
                          "per-trial cap: distinct attribute keys, 1 to 100000 (default 1000)"));
    keys.push_back(SizeKey("max_attr_bytes", &S::max_attr_bytes, 1024, kMaxCapAttrBytes,
                           "a size from 1024 to " + std::to_string(kMaxCapAttrBytes) +
                               " bytes (\"64M\"), as an integer or a string such as \"1M\"",
                           "per-trial cap: bytes of attributes, 1024 to \"64M\" (default \"1M\")"));
    keys.push_back(SizeKey("max_report_bytes", &S::max_report_bytes, 1024, kMaxCapReportBytes,
                           "a size from 1024 to " + std::to_string(kMaxCapReportBytes) +
                               " bytes (\"64G\"), as an integer or a string such as \"256M\"",
                           "per-trial cap: bytes sent on the trial channel, 1024 to \"64G\" "
                           "(default \"64M\")"));
    keys.push_back(CustomKey<S>("directions",
                                "instead of direction: two or more of \"minimize\" and "
                                "\"maximize\", one per objective",
                                ReadDirections));
    keys.push_back(CustomKey<S>("resource_constraints",
                                "constraints on what triald measured of each trial, "
                                "\"METRIC <= LIMIT\" or \"METRIC >= LIMIT\", METRIC one of " +
                                    JoinList(ResourceMetrics()),
                                ReadResourceConstraints));
    keys.push_back(CustomKey<S>("objectives",
                                "what each direction optimizes: \"value\" for each value the "
                                "objective reports, then measured metrics; default all \"value\"",
                                ReadObjectives));
    keys.push_back(CustomKey<S>("metric_names",
                                "a name for each objective, in the order of directions (Optuna's "
                                "set_metric_names): the views, report, dashboard and exports "
                                "show them; default none (\"objective 0\", ...)",
                                ReadMetricNames));
    return keys;
  }();
  return kKeys;
}

Status ParseStudy(const SweepReader& r, const toml::table& t, StudyConfig* out) {
  const std::string tn = "[study]";
  const TableContext ctx{r, tn, t};
  TRIALD_RETURN_IF_ERROR(r.CheckKeys(tn, t, KeyNames(StudyKeys())));
  return ReadKeys(ctx, StudyKeys(), out);
}

}  // namespace triald::config::sweep
