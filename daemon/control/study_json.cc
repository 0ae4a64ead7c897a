#include "daemon/control/study_json.h"

#include <cmath>

#include "common/json.h"
#include "common/utf8.h"
#include "daemon/model/resources_json.h"

namespace triald::daemon {
namespace json = boost::json;
using common::Result;
using model::TrialRecord;
using model::TrialState;

json::value JsonNumber(std::optional<double> v) {
  if (!v) return nullptr;
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return *v;
}

json::object TrialToJson(const TrialRecord& t) {
  json::object o;
  o["number"] = t.number;
  o["state"] = model::TrialStateName(t.state);
  o["value"] = JsonNumber(t.value);
  // One value per objective (a COMPLETE trial; a single-objective one has [value]), the
  // constraints it reported, and whether they hold (every one <= 0; true without any).
  json::array values;
  for (double v : t.values) values.push_back(JsonNumber(v));
  o["values"] = t.values.empty() ? json::value(nullptr) : json::value(std::move(values));
  json::array constraints;
  for (double v : t.constraints) constraints.push_back(JsonNumber(v));
  o["constraints"] =
      t.constraints.empty() ? json::value(nullptr) : json::value(std::move(constraints));
  o["feasible"] = t.Feasible();
  json::object params;
  for (const auto& [name, pv] : t.params) {
    // Exact parsing: boost::json::parse may be one ulp off (common/json.h).
    Result<json::value> v = common::ParseJsonExact(config::ExternalJson(pv.dist, pv.internal));
    params[name] = v.ok() ? std::move(*v) : json::value(nullptr);
  }
  o["params"] = std::move(params);
  // The learning curve as read; a read that counted it (storage::Curves::kCount) leaves it out.
  if (t.intermediate_not_loaded == 0) {
    json::array inter;
    for (const auto& [step, v] : t.intermediate) inter.push_back(json::array{step, JsonNumber(v)});
    o["intermediate"] = std::move(inter);
  }
  o["intermediate_steps"] = t.IntermediateSteps();
  json::object attrs;
  for (const auto& [k, v] : t.attrs) {
    Result<json::value> parsed = common::ParseJsonExact(v);
    attrs[k] = parsed.ok() ? std::move(*parsed) : json::value(v);
  }
  o["attrs"] = std::move(attrs);
  // What the daemon measured of the trial (model/resources_json.h); null while it runs and for
  // trials stored before accounting. A trial that reported a planned_memory_bytes attribute (the
  // LM worker's memory plan) has it beside the measured peak.
  if (t.resources) {
    json::object r = model::ResourcesToJson(*t.resources);
    auto planned = t.attrs.find("planned_memory_bytes");
    if (planned != t.attrs.end()) {
      Result<json::value> v = common::ParseJsonExact(planned->second);
      if (v.ok() && v->is_number()) r["planned_memory_bytes"] = *v;
    }
    o["resources"] = std::move(r);
  } else {
    o["resources"] = nullptr;
  }
  if (t.state == TrialState::kFail) {
    o["fail_reason"] = t.fail.reason;
    o["fail_detail"] = t.fail.detail;
    // The failure in one line (model::FailSummary): what `trials` shows; fail_detail and
    // stderr_tail keep the whole text.
    o["fail_summary"] = model::FailSummary(t.fail);
    o["exit_code"] = t.fail.exit_code >= 0 ? json::value(t.fail.exit_code) : json::value(nullptr);
    o["signal"] = t.fail.signal > 0 ? json::value(t.fail.signal) : json::value(nullptr);
    o["core_dumped"] = t.fail.core_dumped;
    o["stderr_tail"] = t.fail.stderr_tail;
  } else {
    o["fail_reason"] = nullptr;
  }
  o["duration_s"] = t.started_at > 0 ? json::value(t.DurationSeconds()) : json::value(nullptr);
  o["created_at"] = t.created_at;
  o["started_at"] = t.started_at > 0 ? json::value(t.started_at) : json::value(nullptr);
  o["finished_at"] = t.finished_at > 0 ? json::value(t.finished_at) : json::value(nullptr);
  o["pid"] = t.process.pid > 0 ? json::value(t.process.pid) : json::value(nullptr);
  // The daemon (node) that claimed or ran it; null while no node has claimed it.
  o["node"] = t.node.empty() ? json::value(nullptr) : json::value(t.node);
  // The number of the trial this one retries (same study); null for a first attempt.
  o["retry_of"] = t.retry_of_number ? json::value(*t.retry_of_number) : json::value(nullptr);
  return o;
}

json::object ExportTrialJson(const TrialRecord& t) {
  json::object j = TrialToJson(t);
  json::object internal, dists;
  for (const auto& [name, pv] : t.params) {
    internal[name] = JsonNumber(pv.internal);
    Result<json::value> d = common::ParseJsonExact(pv.dist.ToJson());
    dists[name] = d.ok() ? std::move(*d) : json::value(nullptr);
  }
  j["params_internal"] = std::move(internal);
  j["distributions"] = std::move(dists);
  return j;
}

json::object StudySummaryJson(const model::StudyRecord& s, const storage::TrialCounts& c,
                              const TrialRecord* best) {
  json::object o;
  o["name"] = s.name;
  o["state"] = model::StudyStateName(s.state);
  o["direction"] = config::DirectionName(s.direction);
  json::array directions;
  for (config::Direction d :
       s.directions.empty() ? std::vector<config::Direction>{s.direction} : s.directions) {
    directions.push_back(json::string(config::DirectionName(d)));
  }
  o["directions"] = std::move(directions);
  // [study] metric_names: the objectives' names, in the order of directions; null: none.
  o["metric_names"] = MetricNamesJson(s);
  o["n_trials"] = s.n_trials;
  // Control after submit: a paused study starts no trial (trialctl shows it PAUSED while its
  // state is RUNNING); parallelism is the override set after submit, null for the sweep's.
  o["paused"] = s.paused;
  o["parallelism"] = s.parallelism > 0 ? json::value(s.parallelism) : json::value(nullptr);
  o["waiting"] = c.waiting;
  o["running"] = c.running;
  o["complete"] = c.complete;
  o["pruned"] = c.pruned;
  o["failed"] = c.failed;
  // A failed trial that a retry replaced does not count toward n_trials: "finished" counts
  // configurations, "retried" the attempts replaced.
  o["retried"] = c.retries;
  o["finished"] = c.finished();
  // Mean run time of the finished trials that ran (trialctl watch's ETA); null before any.
  o["mean_duration_s"] =
      c.ran > 0 ? json::value(c.ran_seconds / static_cast<double>(c.ran)) : json::value(nullptr);
  o["seed"] = std::to_string(s.seed);
  o["created_at"] = s.created_at;
  o["finished_at"] = s.finished_at > 0 ? json::value(s.finished_at) : json::value(nullptr);
  o["spec_path"] = s.spec_path;
  // Who submitted it (SO_PEERCRED at submit); null when unknown (stored before submitters were
  // recorded). name is null when the uid had no passwd entry.
  o["submitter"] = s.submitter.known()
                       ? json::value(json::object{
                             {"uid", s.submitter.uid},
                             {"name", s.submitter.name.empty()
                                          ? json::value(nullptr)
                                          : json::value(common::SanitizeUtf8(s.submitter.name))}})
                       : json::value(nullptr);
  // kind = "python": the interpreter its trials run, as trialctl resolved it in the submitter's
  // environment ({path, version}); null when the daemon's PATH picks it (an older trialctl).
  o["python"] =
      s.submit.python.empty()
          ? json::value(nullptr)
          : json::value(json::object{
                {"path", common::SanitizeUtf8(s.submit.python)},
                {"version", s.submit.python_version.empty()
                                ? json::value(nullptr)
                                : json::value(common::SanitizeUtf8(s.submit.python_version))}});
  // The objective's files as trialctl read them at submit (config::CodeFile), without their
  // source (the `code` verb gives it to the study's owner); null when none were recorded.
  o["code"] = s.submit.code.empty() ? json::value(nullptr)
                                    : json::value(CodeFilesJson(s.submit.code, false));
  // Without its learning curve: a summary's size does not grow with what trials report.
  if (best) {
    json::object b = TrialToJson(*best);
    b.erase("intermediate");
    o["best"] = std::move(b);
  } else {
    o["best"] = nullptr;
  }
  return o;
}

json::value MetricNamesJson(const model::StudyRecord& s) {
  if (s.submit.metric_names.empty()) return nullptr;
  json::array names;
  for (const std::string& n : s.submit.metric_names) names.emplace_back(common::SanitizeUtf8(n));
  return names;
}

json::array CodeFilesJson(const std::vector<config::CodeFile>& files, bool with_source) {
  json::array out;
  for (const config::CodeFile& f : files) {
    json::object o{
        {"path", common::SanitizeUtf8(f.path)}, {"sha256", f.sha256}, {"bytes", f.bytes}};
    if (with_source) {
      o["source"] = f.source_kept() ? json::value(common::SanitizeUtf8(f.source)) : nullptr;
    } else {
      o["source_kept"] = f.source_kept();
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace triald::daemon
