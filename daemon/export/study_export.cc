#include "daemon/export/study_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "daemon/model/records.h"
#include "daemon/model/resources_json.h"
#include "daemon/sampler/pareto.h"

namespace triald::exports {
namespace json = boost::json;
using common::InvalidArgument;
using common::Result;
using common::Status;

namespace {

// A number as the daemon sends it: a JSON number, or "nan" / "inf" / "-inf".
std::optional<double> Number(const json::value& v) {
  if (v.is_number()) return v.to_number<double>();
  if (v.is_string()) {
    if (v.get_string() == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (v.get_string() == "inf") return std::numeric_limits<double>::infinity();
    if (v.get_string() == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

// An array of numbers as the daemon sends them ("nan" / "inf" / "-inf" as strings); a missing
// or null field is empty. False when it is anything else.
bool NumberList(const json::object& o, const char* key, std::vector<double>* out) {
  out->clear();
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return true;
  if (!v->is_array()) return false;
  for (const json::value& e : v->get_array()) {
    std::optional<double> x = Number(e);
    if (!x) return false;
    out->push_back(*x);
  }
  return true;
}

double TimeField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : 0;
}

std::string StringField(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

// The "resources" object of a trial's JSON (model/resources_json.h): nothing for null or
// missing; an error naming the trial and the field that has the wrong type.
Result<std::optional<model::TrialResources>> ParseResources(const json::object& o,
                                                            const std::string& where) {
  const json::value* v = o.if_contains("resources");
  if (v == nullptr || v->is_null()) return std::optional<model::TrialResources>();
  TRIALD_ASSIGN_OR_RETURN(model::TrialResources r, model::ResourcesFromJson(*v, where));
  return std::optional<model::TrialResources>(std::move(r));
}

void AppendEscaped(std::string& out, std::string_view s, bool html_safe) {
  common::JsonQuoteOptions options;
  options.html_safe = html_safe;
  common::AppendJsonQuoted(s, &out, options);
}

void Write(std::string& out, const json::value& v, const JsonStyle& style) {
  switch (v.kind()) {
    case json::kind::null:
      out += "null";
      return;
    case json::kind::bool_:
      out += v.get_bool() ? "true" : "false";
      return;
    case json::kind::int64:
      out += std::to_string(v.get_int64());
      return;
    case json::kind::uint64:
      out += std::to_string(v.get_uint64());
      return;
    case json::kind::double_:
      out += common::JsonDoubleText(v.get_double());
      return;
    case json::kind::string:
      AppendEscaped(out, v.get_string(), style.html_safe);
      return;
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const json::value& e : v.get_array()) {
        if (!first) out += style.python_spacing ? ", " : ",";
        first = false;
        Write(out, e, style);
      }
      out += ']';
      return;
    }
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first) out += style.python_spacing ? ", " : ",";
        first = false;
        AppendEscaped(out, kv.key(), style.html_safe);
        out += style.python_spacing ? ": " : ":";
        Write(out, kv.value(), style);
      }
      out += '}';
      return;
    }
  }
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos &&
      (s.empty() || (s.front() != ' ' && s.back() != ' '))) {
    return s;
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// A text cell (a string parameter value, a fail reason): one that a spreadsheet would take for a
// formula (starting with '=', '+', '-' or '@', or a tab or carriage return before one) gets a
// leading apostrophe, so opening the export never runs what a sweep file or a worker put there.
// Numbers are written as numbers, -0.5 included: only text cells are changed.
std::string CsvText(const std::string& s) {
  if (!s.empty() && std::string_view("=+-@\t\r").find(s.front()) != std::string_view::npos) {
    return CsvField("'" + s);
  }
  return CsvField(s);
}

std::string CsvNumber(std::optional<double> v) {
  if (!v) return "";
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return config::DoubleRepr(*v);
}

// A parameter's value as a CSV cell: strings bare, numbers as JSON writes them.
std::string CsvValue(const json::value& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return std::string(v.get_string());
  return WriteJson(v);
}

// `unix_seconds` in local time as strftime(`format`), with its microseconds (rounded; a
// rounding to the next second carries into the date) and broken-down time.
std::string LocalTime(double unix_seconds, const char* format, long* micros, std::tm* tm) {
  double whole = std::floor(unix_seconds);
  *micros = std::lround((unix_seconds - whole) * 1e6);
  if (*micros >= 1000000) {
    whole += 1;
    *micros -= 1000000;
  }
  const std::time_t t = static_cast<std::time_t>(whole);
  ::localtime_r(&t, tm);
  char date[40];
  std::strftime(date, sizeof(date), format, tm);
  return date;
}

// ISO 8601 in local time with the UTC offset, microseconds: 2026-01-02T03:04:05.678901+01:00.
std::string IsoLocal(double unix_seconds) {
  if (unix_seconds <= 0) return "";
  long micros = 0;
  std::tm tm{};
  const std::string date = LocalTime(unix_seconds, "%Y-%m-%dT%H:%M:%S", &micros, &tm);
  long off = tm.tm_gmtoff;
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%s.%06ld%c%02ld:%02ld", date.c_str(), micros,
                off < 0 ? '-' : '+', std::labs(off) / 3600, (std::labs(off) % 3600) / 60);
  return buf;
}

}  // namespace

std::string WriteJson(const json::value& v, JsonStyle style) {
  std::string out;
  Write(out, v, style);
  return out;
}

Result<StudyData> ParseStudyExport(json::value reply) {
  if (!reply.is_object() || !reply.get_object().contains("study") ||
      !reply.get_object().contains("trials") || !reply.at("study").is_object() ||
      !reply.at("trials").is_array()) {
    return InvalidArgument("export reply from triald: expected {study: {...}, trials: [...]}");
  }
  StudyData s;
  const json::object& study = reply.at("study").get_object();
  s.name = StringField(study, "name");
  s.state = StringField(study, "state");
  s.direction = StringField(study, "direction");
  if (const json::value* n = study.if_contains("n_trials"); n != nullptr && n->is_number()) {
    s.n_trials = static_cast<int>(n->to_number<double>());
  }
  if (const json::value* dirs = study.if_contains("directions"); dirs && dirs->is_array()) {
    for (const json::value& d : dirs->get_array()) {
      if (!d.is_string() || (d.get_string() != "minimize" && d.get_string() != "maximize")) {
        return InvalidArgument(
            "export reply from triald: directions must be \"minimize\" or \"maximize\"");
      }
      s.directions.emplace_back(d.get_string());
    }
    if (!s.directions.empty() && s.direction.empty()) s.direction = s.directions[0];
  }
  if (s.name.empty() || (s.direction != "minimize" && s.direction != "maximize")) {
    return InvalidArgument("export reply from triald: study without a name or direction");
  }
  if (s.directions.empty()) s.directions = {s.direction};
  if (const json::value* names = study.if_contains("metric_names"); names && names->is_array()) {
    for (const json::value& n : names->get_array()) {
      if (!n.is_string())
        return InvalidArgument(
            "export reply from triald: a metric name is not "
            "a string");
      s.metric_names.emplace_back(n.get_string());
    }
    if (s.metric_names.size() != s.directions.size()) {
      return InvalidArgument("export reply from triald: " + std::to_string(s.metric_names.size()) +
                             " metric names for " + std::to_string(s.directions.size()) +
                             " objectives");
    }
  }
  std::set<std::string> names;
  for (const json::value& tv : reply.at("trials").get_array()) {
    if (!tv.is_object())
      return InvalidArgument("export reply from triald: a trial is not an object");
    const json::object& o = tv.get_object();
    ExportTrial t;
    const json::value* number = o.if_contains("number");
    if (number == nullptr || !number->is_int64()) {
      return InvalidArgument("export reply from triald: a trial without a number");
    }
    t.number = static_cast<int>(number->get_int64());
    const std::string where = "export reply from triald: trial " + std::to_string(t.number);
    t.state = StringField(o, "state");
    if (const json::value* v = o.if_contains("value"); v != nullptr && !v->is_null()) {
      t.value = Number(*v);
      if (!t.value) return InvalidArgument(where + ": value is not a number");
    }
    if (!NumberList(o, "values", &t.values)) {
      return InvalidArgument(where + ": values is not a list of numbers");
    }
    if (t.values.empty() && t.state == "COMPLETE" && t.value) t.values = {*t.value};
    if (!NumberList(o, "constraints", &t.constraints)) {
      return InvalidArgument(where + ": constraints is not a list of numbers");
    }
    t.feasible = model::Feasible(t.constraints);
    t.fail_reason = StringField(o, "fail_reason");
    t.fail_detail = StringField(o, "fail_detail");
    t.created_at = TimeField(o, "created_at");
    t.started_at = TimeField(o, "started_at");
    t.finished_at = TimeField(o, "finished_at");
    if (const json::value* r = o.if_contains("retry_of"); r != nullptr && r->is_int64()) {
      t.retry_of = r->get_int64();
    }
    TRIALD_ASSIGN_OR_RETURN(t.resources, ParseResources(o, where));
    if (const json::value* a = o.if_contains("attrs"); a != nullptr && a->is_object()) {
      t.attrs = a->get_object();
    }
    const json::value* params = o.if_contains("params");
    const json::value* internal = o.if_contains("params_internal");
    const json::value* dists = o.if_contains("distributions");
    if (params == nullptr || internal == nullptr || dists == nullptr || !params->is_object() ||
        !internal->is_object() || !dists->is_object()) {
      return InvalidArgument(where + ": expected params, params_internal and distributions");
    }
    for (const auto& kv : internal->get_object()) {
      ExportParam p;
      p.name = std::string(kv.key());
      std::optional<double> x = Number(kv.value());
      if (!x) return InvalidArgument(where + ": params_internal." + p.name + " is not a number");
      p.internal = *x;
      const json::value* d = dists->get_object().if_contains(kv.key());
      if (d == nullptr) return InvalidArgument(where + ": no distribution for " + p.name);
      Result<config::Distribution> dist = config::DistributionFromJson(WriteJson(*d));
      if (!dist.ok()) return dist.status().WithContext(where + ": parameter " + p.name);
      p.dist = std::move(*dist);
      if (const json::value* e = params->get_object().if_contains(kv.key())) p.external = *e;
      names.insert(p.name);
      t.params.push_back(std::move(p));
    }
    std::sort(t.params.begin(), t.params.end(),
              [](const ExportParam& a, const ExportParam& b) { return a.name < b.name; });
    if (const json::value* inter = o.if_contains("intermediate"); inter && inter->is_array()) {
      for (const json::value& e : inter->get_array()) {
        if (!e.is_array() || e.get_array().size() != 2 || !e.get_array()[0].is_int64()) {
          return InvalidArgument(where + ": intermediate values must be [step, value] pairs");
        }
        std::optional<double> x = Number(e.get_array()[1]);
        if (!x) return InvalidArgument(where + ": an intermediate value is not a number");
        t.intermediate.emplace_back(e.get_array()[0].get_int64(), *x);
      }
    }
    s.trials.push_back(std::move(t));
  }
  std::sort(s.trials.begin(), s.trials.end(),
            [](const ExportTrial& a, const ExportTrial& b) { return a.number < b.number; });
  s.param_names.assign(names.begin(), names.end());
  s.reply = std::move(reply);
  s.best = BestTrialNumbers(s);
  return s;
}

namespace {

std::vector<config::Direction> Directions(const std::vector<std::string>& names) {
  std::vector<config::Direction> out;
  for (const std::string& n : names) {
    out.push_back(n == "maximize" ? config::Direction::kMaximize : config::Direction::kMinimize);
  }
  return out;
}

// The study's trials as the records sampler::pareto reads, with the objectives `objectives`.
std::vector<model::TrialRecord> Records(const StudyData& study,
                                        const std::vector<size_t>& objectives) {
  std::vector<model::TrialRecord> out;
  for (const ExportTrial& t : study.trials) {
    model::TrialRecord r;
    r.number = t.number;
    r.state = t.state == "COMPLETE" ? model::TrialState::kComplete : model::TrialState::kFail;
    if (t.values.size() == study.directions.size()) {
      for (size_t k : objectives) r.values.push_back(t.values[k]);
    }
    r.constraints = t.constraints;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<int> FrontNumbers(const StudyData& study, const std::vector<size_t>& objectives) {
  std::vector<config::Direction> all = Directions(study.directions), dirs;
  for (size_t k : objectives) dirs.push_back(all[k]);
  const std::vector<model::TrialRecord> records = Records(study, objectives);
  std::vector<int> out;
  for (size_t i : sampler::pareto::ParetoFront(records, dirs)) out.push_back(records[i].number);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<int> BestTrialNumbers(const StudyData& study) {
  if (study.directions.size() > 1) {
    std::vector<size_t> all(study.directions.size());
    for (size_t k = 0; k < all.size(); ++k) all[k] = k;
    return FrontNumbers(study, all);
  }
  const bool max = study.direction == "maximize";
  const ExportTrial* best = nullptr;
  for (const ExportTrial& t : study.trials) {  // by number: the first of equal values wins
    if (t.state != "COMPLETE" || !t.value || std::isnan(*t.value) || !t.feasible) continue;
    if (best == nullptr || (max ? *t.value > *best->value : *t.value < *best->value)) best = &t;
  }
  return best != nullptr ? std::vector<int>{best->number} : std::vector<int>{};
}

std::vector<int> PairwiseFront(const StudyData& study, size_t a, size_t b) {
  if (a >= study.directions.size() || b >= study.directions.size() || a == b) return {};
  return FrontNumbers(study, {a, b});
}

std::string ToCsv(const StudyData& study) {
  const size_t n_values = study.directions.size();
  size_t n_constraints = 0;
  bool any_constraints = false;
  for (const ExportTrial& t : study.trials) {
    n_constraints = std::max(n_constraints, t.constraints.size());
    any_constraints = any_constraints || !t.constraints.empty();
  }
  std::string out = "number,state";
  // Optuna's trials_dataframe names: values_0.. (value), or after the metric names.
  const bool named = study.metric_names.size() == study.directions.size();
  if (n_values > 1) {
    for (size_t k = 0; k < n_values; ++k) {
      out +=
          "," + CsvText("values_" + (named && k < study.metric_names.size() ? study.metric_names[k]
                                                                            : std::to_string(k)));
    }
  } else {
    out += named ? "," + CsvText("value_" + study.metric_names[0]) : std::string(",value");
  }
  for (size_t k = 0; k < n_constraints; ++k) out += ",constraints_" + std::to_string(k);
  if (any_constraints) out += ",feasible";
  out += ",reason";
  for (const std::string& n : study.param_names) out += "," + CsvText("params_" + n);
  // The trials' attributes, one column each, as Optuna's trials_dataframe names them: the
  // objective's as user_attrs_KEY, then triald's own ("triald.code", "triald.slurm", ...) as
  // system_attrs_KEY.
  std::set<std::string> user_keys, system_keys;
  for (const ExportTrial& t : study.trials) {
    for (const auto& kv : t.attrs) {
      const std::string key(kv.key());
      (model::IsSystemAttr(key) ? system_keys : user_keys).insert(key);
    }
  }
  std::vector<std::string> attr_keys(user_keys.begin(), user_keys.end());
  attr_keys.insert(attr_keys.end(), system_keys.begin(), system_keys.end());
  for (const std::string& k : attr_keys) {
    out += "," + CsvText((model::IsSystemAttr(k) ? "system_attrs_" : "user_attrs_") + k);
  }
  out += ",datetime_start,datetime_complete,duration";
  out += ",peak_memory_bytes,peak_gpu_memory_bytes,cpu_time_s,wall_s,memory_source,cpu_source\n";
  for (const ExportTrial& t : study.trials) {
    out += std::to_string(t.number) + "," + t.state;
    if (n_values > 1) {
      for (size_t k = 0; k < n_values; ++k) {
        out += "," + (k < t.values.size() ? CsvNumber(t.values[k]) : std::string());
      }
    } else {
      out += "," + CsvNumber(t.value);
    }
    for (size_t k = 0; k < n_constraints; ++k) {
      out += "," + (k < t.constraints.size() ? CsvNumber(t.constraints[k]) : std::string());
    }
    if (any_constraints) out += t.feasible ? ",True" : ",False";
    out += "," + CsvText(t.fail_reason);
    for (const std::string& n : study.param_names) {
      out += ",";
      for (const ExportParam& p : t.params) {
        if (p.name != n) continue;
        out += p.external.is_string() ? CsvText(std::string(p.external.get_string()))
                                      : CsvField(CsvValue(p.external));
      }
    }
    for (const std::string& k : attr_keys) {
      out += ",";
      const json::value* v = t.attrs.if_contains(k);
      if (v == nullptr) continue;
      out += v->is_string() ? CsvText(std::string(v->get_string())) : CsvField(CsvValue(*v));
    }
    out += "," + IsoLocal(t.started_at) + "," + IsoLocal(t.finished_at) + ",";
    if (t.started_at > 0 && t.finished_at > 0) {
      out += config::DoubleRepr(t.finished_at - t.started_at);
    }
    // Measured resources: empty cells where not measured (never 0).
    const model::TrialResources r = t.resources.value_or(model::TrialResources{});
    auto count = [](std::optional<uint64_t> b) { return b ? std::to_string(*b) : std::string(); };
    out += "," + count(r.peak_memory_bytes) + "," + count(r.peak_gpu_memory_bytes) + "," +
           CsvNumber(r.cpu_time_s) + "," + CsvNumber(r.wall_s) + "," + CsvText(r.memory_source) +
           "," + CsvText(r.cpu_source);
    out += "\n";
  }
  return out;
}

std::string ToJson(const StudyData& study) { return WriteJson(study.reply) + "\n"; }

std::string OptunaDistributionJson(const config::Distribution& d) {
  auto integer = [](double x) { return std::to_string(static_cast<int64_t>(std::llround(x))); };
  switch (d.type) {
    case config::ParamType::kFloat:
      return std::string("{\"name\": \"FloatDistribution\", \"attributes\": {\"step\": ") +
             (d.step > 0 ? config::DoubleRepr(d.step) : "null") +
             ", \"low\": " + config::DoubleRepr(d.low) +
             ", \"high\": " + config::DoubleRepr(d.high) +
             ", \"log\": " + (d.log ? "true" : "false") + "}}";
    case config::ParamType::kInt:
      return std::string("{\"name\": \"IntDistribution\", \"attributes\": {\"log\": ") +
             (d.log ? "true" : "false") + ", \"step\": " + integer(d.step > 0 ? d.step : 1) +
             ", \"low\": " + integer(d.low) + ", \"high\": " + integer(d.high) + "}}";
    case config::ParamType::kCategorical: {
      std::string out = "{\"name\": \"CategoricalDistribution\", \"attributes\": {\"choices\": [";
      for (size_t i = 0; i < d.choices.size(); ++i) {
        if (i > 0) out += ", ";
        const config::Choice& c = d.choices[i];
        if (const bool* b = std::get_if<bool>(&c)) {
          out += *b ? "true" : "false";
        } else if (const int64_t* n = std::get_if<int64_t>(&c)) {
          out += std::to_string(*n);
        } else if (const double* x = std::get_if<double>(&c)) {
          out += config::DoubleRepr(*x);
        } else {
          AppendEscaped(out, std::get<std::string>(c), false);
        }
      }
      return out + "]}}";
    }
  }
  return "null";
}

std::string OptunaDatetime(double unix_seconds) {
  long micros = 0;
  std::tm tm{};
  const std::string date = LocalTime(unix_seconds, "%Y-%m-%d %H:%M:%S", &micros, &tm);
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%s.%06ld", date.c_str(), micros);
  return buf;
}

}  // namespace triald::exports
