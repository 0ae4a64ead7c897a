#include "daemon/control/verbs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "common/fd.h"
#include "common/json.h"
#include "common/utf8.h"
#include "config/sweep.h"
#include "daemon/control/best.h"
#include "daemon/control/ping_board.h"
#include "daemon/control/requests.h"
#include "daemon/control/study_json.h"
#include "daemon/control/trial_log.h"
#include "daemon/sampler/auto_sampler.h"
#include "proto/control.h"

namespace triald::daemon {
namespace json = boost::json;
using common::Result;
using model::TrialRecord;

namespace {

// Storage refusing writes (ping_board.h's StorageHoldJson); null when it takes them (or when
// served from storage alone).
json::value StorageOutageJson(const VerbContext& c) {
  return c.scheduler == nullptr ? json::value(nullptr)
                                : StorageHoldJson(StorageHoldOf(*c.scheduler));
}

Result<json::value> PingVerb(const VerbContext& c, const json::object&) {
  return PingJson(PingFactsOf(*c.scheduler), c.state_dir, c.storage->node(), c.storage->shared());
}

Result<json::value> SubmitVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(Submission submission, AdmitSubmission(c, args));
  return SubmitAdmitted(c, std::move(submission));
}

// A FAILED study: why, from its last study_failed event; null otherwise.
Result<json::value> FailureJson(const VerbContext& c, const model::StudyRecord& s) {
  if (s.state != model::StudyState::kFailed) return json::value(nullptr);
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::EventRecord> events, c.storage->GetEvents(s.id));
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    if (it->kind == "study_failed") return json::value(common::SanitizeUtf8(it->detail));
  }
  return json::value("(no study_failed event)");
}

// A study's summary from Storage's counting and best-trial queries; its best is the best
// feasible trial (daemon/control/best.h), none for a study with several objectives (`best`
// gives their front); `failure` says why a FAILED study could not go on (null otherwise).
Result<json::object> Summary(const VerbContext& c, const model::StudyRecord& s) {
  TRIALD_ASSIGN_OR_RETURN(storage::TrialCounts counts, c.storage->CountTrials(s.id));
  std::optional<TrialRecord> best;
  if (StudyDirections(s).size() == 1) {
    TRIALD_ASSIGN_OR_RETURN(best, BestFeasibleTrial(*c.storage, s));
  }
  json::object summary = StudySummaryJson(s, counts, best ? &*best : nullptr);
  TRIALD_ASSIGN_OR_RETURN(summary["failure"], FailureJson(c, s));
  return summary;
}

Result<json::value> StudiesVerb(const VerbContext& c, const json::object&) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::StudyRecord> all, c.storage->ListStudies());
  json::array a;
  for (const auto& s : all) {
    TRIALD_ASSIGN_OR_RETURN(json::object summary, Summary(c, s));
    a.push_back(std::move(summary));
  }
  return json::value(std::move(a));
}

// A study whose trials could not be started lately: {held, failures, cause, reason,
// retry_in_s}; null otherwise.
json::value SpawnStatusJson(const VerbContext& c, int64_t study_id) {
  if (c.scheduler == nullptr) return nullptr;  // read verbs served from storage alone
  std::optional<SpawnBackoff::Snapshot> st = c.scheduler->spawn_status(study_id);
  if (!st) return nullptr;
  return json::object{{"held", st->held},
                      {"failures", st->failures},
                      {"cause", SpawnCauseName(st->cause)},
                      {"reason", common::SanitizeUtf8(st->reason)},
                      {"retry_in_s", st->retry_in_s}};
}

// An active study with a fork server: {state, pid, preloaded, objective_loaded, forks, forked,
// deaths_in_row, reason}; null otherwise.
// A study's Slurm jobs now ([executor] kind = "slurm"; daemon/slurm/), from its running trials'
// "triald.slurm" attributes in the scheduler's memory: {"running": N, "queued": M, "reasons":
// {Slurm's reason: count}}; null when none of its running trials is a Slurm job.
json::value SlurmJobsJson(const VerbContext& c, const std::string& study) {
  if (c.scheduler == nullptr) return nullptr;
  const StudyCache* s = c.scheduler->active_study(study);
  if (s == nullptr) return nullptr;
  int64_t running = 0, queued = 0;
  json::object reasons;
  bool any = false;
  for (const TrialRecord& t : s->trials) {
    if (t.state != model::TrialState::kRunning) continue;
    auto it = t.attrs.find("triald.slurm");
    if (it == t.attrs.end()) continue;
    boost::system::error_code ec;
    json::value v = json::parse(it->second, ec);
    if (ec || !v.is_object()) continue;
    any = true;
    const json::value* state = v.as_object().if_contains("state");
    const std::string st =
        state != nullptr && state->is_string() ? std::string(state->as_string()) : std::string();
    if (st == "PENDING") {
      ++queued;
      const json::value* r = v.as_object().if_contains("reason");
      const std::string reason = r != nullptr && r->is_string() && !r->as_string().empty()
                                     ? common::SanitizeUtf8(std::string(r->as_string()))
                                     : "unknown";
      reasons[reason] = (reasons.contains(reason) ? reasons[reason].as_int64() : 0) + 1;
    } else if (st == "RUNNING") {
      ++running;
    }
  }
  if (!any) return nullptr;
  return json::object{{"running", running}, {"queued", queued}, {"reasons", std::move(reasons)}};
}

json::value ForkServerJson(const VerbContext& c, int64_t study_id) {
  if (c.scheduler == nullptr) return nullptr;
  std::optional<launcher::ForkServerStatus> st = c.scheduler->fork_server_status(study_id);
  if (!st) return nullptr;
  json::array preloaded;
  for (const std::string& m : st->preloaded) preloaded.emplace_back(common::SanitizeUtf8(m));
  return json::object{{"state", st->state},
                      {"pid", st->pid},
                      {"preloaded", std::move(preloaded)},
                      {"objective_loaded", st->objective_loaded},
                      {"forks", st->forks},
                      {"forked", st->forked},
                      {"deaths_in_row", st->deaths_in_row},
                      {"reason", common::SanitizeUtf8(st->reason)}};
}

// An active study's summary from the scheduler's memory (its record and trials as this node
// last knew them), for `status` while storage cannot answer: `from_memory` (present only then)
// says why.
std::optional<json::object> MemorySummary(const VerbContext& c, const json::object& args,
                                          const common::Status& why) {
  if (c.scheduler == nullptr ||
      (why.code() != common::Code::kUnavailable && why.code() != common::Code::kIo)) {
    return std::nullopt;
  }
  const json::value* name = args.if_contains("study");
  if (name == nullptr || !name->is_string()) return std::nullopt;
  const StudyCache* study = c.scheduler->active_study(std::string(name->as_string()));
  if (study == nullptr) return std::nullopt;
  storage::TrialCounts counts;
  BestFeasible best(study->record.direction);
  for (const TrialRecord& t : study->trials) {
    switch (t.state) {
      case model::TrialState::kWaiting:
        ++counts.waiting;
        break;
      case model::TrialState::kRunning:
        ++counts.running;
        break;
      case model::TrialState::kComplete:
        ++counts.complete;
        break;
      case model::TrialState::kPruned:
        ++counts.pruned;
        break;
      case model::TrialState::kFail:
        ++counts.failed;
        break;
    }
    counts.retries += t.retry_of.has_value();
    if (model::IsFinished(t.state) && t.started_at > 0) {
      ++counts.ran;
      counts.ran_seconds += t.DurationSeconds();
    }
  }
  std::optional<TrialRecord> top;
  if (StudyDirections(study->record).size() == 1) {
    best.Add(study->trials);
    top = best.best();
  }
  json::object summary = StudySummaryJson(study->record, counts, top ? &*top : nullptr);
  summary["failure"] = nullptr;
  summary["from_memory"] = common::SanitizeUtf8(why.message());
  return summary;
}

// How the study's trials failed, when some did: {tallied, reason, summary, count}, the most
// common way (model::FailKey) among its last kFailureTally failed trials (tallied of them),
// with its reason, one line (model::FailSummary, of the latest such trial) and count; null
// when none failed. An active study's come from the scheduler's trials, a finished one's from
// storage (GetRecentFailures: the ends of the details only).
constexpr int kFailureTally = 1000;
Result<json::value> FailuresJson(const VerbContext& c, const model::StudyRecord& s) {
  std::vector<model::FailInfo> fails;
  const StudyCache* active = c.scheduler != nullptr ? c.scheduler->active_study(s.name) : nullptr;
  if (active != nullptr) {
    for (auto it = active->trials.rbegin();
         it != active->trials.rend() && static_cast<int>(fails.size()) < kFailureTally; ++it) {
      if (it->state == model::TrialState::kFail) fails.push_back(it->fail);
    }
  } else {
    TRIALD_ASSIGN_OR_RETURN(fails, c.storage->GetRecentFailures(s.id, kFailureTally));
  }
  if (fails.empty()) return json::value(nullptr);
  struct Way {
    int64_t count = 0;
    const model::FailInfo* latest = nullptr;  // fails is newest first
  };
  std::map<std::string, Way> ways;
  const Way* top = nullptr;
  for (const model::FailInfo& f : fails) {
    Way& w = ways[model::FailKey(f)];
    if (w.latest == nullptr) w.latest = &f;
    ++w.count;
  }
  for (const model::FailInfo& f : fails) {  // ties: the way of the latest failure
    const Way& w = ways[model::FailKey(f)];
    if (top == nullptr || w.count > top->count) top = &w;
  }
  return json::value(
      json::object{{"tallied", static_cast<int64_t>(fails.size())},
                   {"reason", common::SanitizeUtf8(top->latest->reason)},
                   {"summary", common::SanitizeUtf8(model::FailSummary(*top->latest))},
                   {"count", top->count}});
}

// The study's sampler: {"kind": as it runs, "configured": as the sweep says, "why": what
// kind = "auto" chose and why (null for another kind)}; null when the stored sweep no longer
// parses.
json::value SamplerJson(const model::StudyRecord& s) {
  Result<config::SweepSpec> spec = config::ParseSweep({s.spec_toml, s.spec_path, s.submit});
  if (!spec.ok()) return nullptr;
  json::object o;
  o["configured"] = spec->sampler.kind;
  if (spec->sampler.kind == "auto") {
    const sampler::AutoChoice choice = sampler::ChooseAutoSampler(*spec);
    o["kind"] = choice.kind;
    o["why"] = choice.why;
  } else {
    o["kind"] = spec->sampler.kind;
    o["why"] = nullptr;
  }
  return json::value(std::move(o));
}

// status's fields from the scheduler's memory (null ones served from storage alone).
void SetStatusMemory(const VerbContext& c, const model::StudyRecord& s, json::object* summary) {
  (*summary)["spawn"] = SpawnStatusJson(c, s.id);
  (*summary)["storage"] = StorageOutageJson(c);
  (*summary)["fork_server"] = ForkServerJson(c, s.id);
  (*summary)["slurm"] = SlurmJobsJson(c, s.name);
}

Result<json::value> StatusVerb(const VerbContext& c, const json::object& args) {
  Result<model::StudyRecord> looked_up = LookUpStudy(*c.storage, args);
  Result<json::object> from_storage =
      looked_up.ok() ? Summary(c, *looked_up) : Result<json::object>(looked_up.status());
  json::object summary;
  model::StudyRecord s;
  if (from_storage.ok()) {
    summary = std::move(from_storage).value();
    s = *looked_up;
  } else if (std::optional<json::object> memory = MemorySummary(c, args, from_storage.status())) {
    summary = std::move(*memory);
    s = c.scheduler->active_study(std::string(args.at("study").as_string()))->record;
  } else {
    return from_storage.status();
  }
  summary["sampler"] = SamplerJson(s);
  SetStatusMemory(c, s, &summary);
  TRIALD_ASSIGN_OR_RETURN(summary["failures"], FailuresJson(c, s));
  // Several objectives: no single best; the size of the Pareto front of feasible COMPLETE
  // trials instead. An active study's comes from the scheduler's trials (no storage read, so
  // `watch` polling a running sweep costs no more than with one objective); a finished one's
  // from its trials read a page at a time (FrontBuilder), once per request. null with one
  // objective.
  summary["pareto_front_size"] = nullptr;
  if (s.directions.size() > 1) {
    std::optional<int64_t> size;
    if (c.scheduler != nullptr) size = c.scheduler->pareto_front_size(s.id);
    if (!size) {
      FrontBuilder front(StudyDirections(s));
      for (int from = 0;; from += kTrialsPerPiece) {
        TRIALD_ASSIGN_OR_RETURN(
            std::vector<TrialRecord> page,
            c.storage->GetTrialPage(s.id, from, kTrialsPerPiece, storage::Curves::kCount));
        front.Add(page);
        if (static_cast<int>(page.size()) < kTrialsPerPiece) break;
      }
      size = static_cast<int64_t>(front.front().size());
    }
    summary["pareto_front_size"] = *size;
  }
  return json::value(std::move(summary));
}

// An optional count argument (offset, limit): `fallback` when missing or null, else an
// integer from 0 up (at most INT_MAX).
Result<int64_t> OptionalCount(const json::object& args, const char* key, int64_t fallback) {
  const json::value* v = args.if_contains(key);
  if (v == nullptr || v->is_null()) return fallback;
  TRIALD_ASSIGN_OR_RETURN(int64_t n, proto::GetInt(args, key));
  if (n < 0) {
    return common::InvalidArgument("argument \"" + std::string(key) + "\" must be 0 or more; got " +
                                   std::to_string(n));
  }
  // Trial numbers are ints: more is the same as all (and offset + limit cannot overflow).
  return std::min<int64_t>(n, std::numeric_limits<int>::max());
}

// The trials of a study from a number on, a page (kTrialsPerPiece) per piece, between `head`
// and `tail`, each as `to_json` makes it, separated by commas.
class TrialPages final : public ReplyStream {
 public:
  using ToJson = json::object (*)(const TrialRecord&);
  TrialPages(storage::ReadModel* storage, int64_t study_id, int64_t offset,
             std::optional<int64_t> limit, ToJson to_json, std::string head, std::string tail)
      : storage_(storage),
        study_id_(study_id),
        next_(offset),
        end_(limit ? std::optional<int64_t>(offset + *limit) : std::nullopt),
        to_json_(to_json),
        head_(std::move(head)),
        tail_(std::move(tail)) {}

  Result<std::string> Next() override {
    if (done_) return std::string();
    std::string piece = std::move(head_);
    head_.clear();
    int64_t want = kTrialsPerPiece;
    if (end_) want = std::min(want, *end_ - next_);
    bool last = want <= 0 || next_ > std::numeric_limits<int>::max();
    if (!last) {
      // Counted first: as many trials as their curves allow (kCurveValuesPerPiece), at least one.
      TRIALD_ASSIGN_OR_RETURN(
          std::vector<TrialRecord> page,
          storage_->GetTrialPage(study_id_, static_cast<int>(next_), static_cast<int>(want),
                                 storage::Curves::kCount));
      // More may follow a full page, or a page the budget cut short.
      bool more = static_cast<int64_t>(page.size()) == want;
      int64_t values = 0;
      size_t fit = 0;
      while (fit < page.size() &&
             (fit == 0 || values + page[fit].IntermediateSteps() <= kCurveValuesPerPiece)) {
        values += page[fit++].IntermediateSteps();
      }
      if (values > 0) {
        more = more || fit < page.size();
        TRIALD_ASSIGN_OR_RETURN(
            page, storage_->GetTrialPage(study_id_, static_cast<int>(next_), static_cast<int>(fit),
                                         storage::Curves::kLoad));
        more = more && page.size() == fit;  // fewer: the study went away meanwhile
      }
      for (const TrialRecord& t : page) {
        if (!first_) piece += ',';
        first_ = false;
        piece += common::SerializeJson(to_json_(t));
      }
      next_ += static_cast<int64_t>(page.size());
      last = !more;
    }
    if (last) {
      piece += tail_;
      done_ = true;
    }
    return piece;
  }

 private:
  storage::ReadModel* storage_;
  int64_t study_id_;
  int64_t next_;
  std::optional<int64_t> end_;  // one past the last number wanted
  ToJson to_json_;
  std::string head_;
  std::string tail_;
  bool first_ = true;
  bool done_ = false;
};

// A result known whole: one piece.
class WholeReply final : public ReplyStream {
 public:
  explicit WholeReply(std::string text) : text_(std::move(text)) {}
  Result<std::string> Next() override { return std::exchange(text_, std::string()); }

 private:
  std::string text_;
};

Result<std::unique_ptr<ReplyStream>> TrialsStreamer(const VerbContext& c,
                                                    const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  TRIALD_ASSIGN_OR_RETURN(int64_t offset, OptionalCount(args, "offset", 0));
  TRIALD_ASSIGN_OR_RETURN(int64_t limit, OptionalCount(args, "limit", -1));
  return std::unique_ptr<ReplyStream>(std::make_unique<TrialPages>(
      c.storage, s.id, offset, limit >= 0 ? std::optional<int64_t>(limit) : std::nullopt,
      &TrialToJson, "[", "]"));
}

json::value CancelReply(const std::string& name) {
  return json::object{{"study", name}, {"state", "CANCELLED"}};
}

Result<json::value> CancelVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_RETURN_IF_ERROR(c.scheduler->Cancel(name));
  return CancelReply(name);
}

// The control fields of a study after a change (pause, resume, extend, set).
json::value ControlReply(const model::StudyRecord& rec) {
  return json::object{
      {"study", rec.name},
      {"state", model::StudyStateName(rec.state)},
      {"paused", rec.paused},
      {"n_trials", rec.n_trials},
      {"parallelism", rec.parallelism > 0 ? json::value(rec.parallelism) : json::value(nullptr)}};
}

Result<json::value> PauseVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, c.scheduler->Pause(name, true));
  return ControlReply(rec);
}

Result<json::value> ResumeVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, c.scheduler->Pause(name, false));
  return ControlReply(rec);
}

// An integer argument within [low, INT_MAX]; the message names it and what was expected.
Result<int> IntArgument(const json::object& args, const char* key, int low) {
  TRIALD_ASSIGN_OR_RETURN(int64_t n, proto::GetInt(args, key));
  if (n < low || n > std::numeric_limits<int>::max()) {
    return common::InvalidArgument("argument \"" + std::string(key) + "\" is " + std::to_string(n) +
                                   "; expected an integer from " + std::to_string(low) + " to " +
                                   std::to_string(std::numeric_limits<int>::max()));
  }
  return static_cast<int>(n);
}

// `set`'s metric names, when given (an error when they are not an array of strings).
Result<std::optional<std::vector<std::string>>> MetricNamesArgument(const json::object& args) {
  const json::value* names = args.if_contains("metric_names");
  if (names == nullptr) return std::optional<std::vector<std::string>>();
  std::vector<std::string> list;
  if (!names->is_array()) {
    return common::InvalidArgument("argument \"metric_names\" must be an array of strings");
  }
  for (const json::value& n : names->as_array()) {
    if (!n.is_string()) {
      return common::InvalidArgument("argument \"metric_names\" must be an array of strings");
    }
    list.emplace_back(n.as_string());
  }
  return std::optional<std::vector<std::string>>(std::move(list));
}

// `set`'s parallelism (an error when there is no setting).
Result<int> ParallelismArgument(const json::object& args) {
  if (!args.contains("parallelism")) {
    return common::InvalidArgument(
        "\"set\" needs a setting; expected \"parallelism\" or \"metric_names\"");
  }
  return IntArgument(args, "parallelism", 1);
}

Result<json::value> ExtendVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_ASSIGN_OR_RETURN(int n, IntArgument(args, "n_trials", 1));
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, c.scheduler->Extend(name, n));
  return ControlReply(rec);
}

Result<json::value> SetVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> names, MetricNamesArgument(args));
  if (names) {
    TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, c.scheduler->SetMetricNames(name, *names));
    json::value reply = ControlReply(rec);
    reply.as_object()["metric_names"] = MetricNamesJson(rec);
    return reply;
  }
  TRIALD_ASSIGN_OR_RETURN(int n, ParallelismArgument(args));
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, c.scheduler->SetParallelism(name, n));
  return ControlReply(rec);
}

Result<json::value> DeleteVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(DeleteArgs d, DecodeDelete(args));
  TRIALD_ASSIGN_OR_RETURN(int64_t deleted, c.scheduler->Delete(d.study, d.purge));
  return DeletedReply(d.study, deleted, d.purge);
}

// A study's events (its own and its trials'), or without "study" the daemon's own (those of no
// study: daemon start, a deleted study), oldest first.
Result<json::value> EventsVerb(const VerbContext& c, const json::object& args) {
  std::optional<int64_t> study_id;
  if (const json::value* s = args.if_contains("study"); s != nullptr && !s->is_null()) {
    TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, LookUpStudy(*c.storage, args));
    study_id = rec.id;
  }
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::EventRecord> events, c.storage->GetEvents(study_id));
  json::array a;
  for (const model::EventRecord& e : events) {
    if (!study_id && (e.study_id || e.trial_id)) continue;
    a.push_back(
        json::object{{"at", e.at},
                     {"kind", common::SanitizeUtf8(e.kind)},
                     {"detail", common::SanitizeUtf8(e.detail)},
                     {"trial_id", e.trial_id ? json::value(*e.trial_id) : json::value(nullptr)}});
  }
  return json::value(std::move(a));
}

Result<json::value> EnqueueVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(EnqueueArgs e, DecodeEnqueue(args));
  bool skipped = false;
  TRIALD_ASSIGN_OR_RETURN(TrialRecord t,
                          c.scheduler->Enqueue(e.study, e.params, e.skip_if_exists, &skipped));
  return EnqueuedReply(e.study, t, skipped);
}

// The objective's files kept with the study at submit, with their source: for the study's
// owner only (a mutating verb's access), as the source may hold what its author keeps private.
Result<json::value> CodeVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  return json::value(
      json::object{{"study", s.name}, {"files", CodeFilesJson(s.submit.code, true)}});
}

common::Status AskHandover(const VerbContext& c, const json::object& args,
                           std::shared_ptr<common::UniqueFd> connection) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  return c.scheduler->Ask(name, std::move(connection));
}

}  // namespace

Result<json::value> TrialLogReply(const VerbContext& c, const json::object& args,
                                  const TrialLogLimits& limits) {
  storage::Storage& st = *c.storage;
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(st, args));
  TRIALD_ASSIGN_OR_RETURN(int64_t number, proto::GetInt(args, "trial"));
  TRIALD_ASSIGN_OR_RETURN(TrialRecord t, st.GetTrial(s.id, static_cast<int>(number)));
  TRIALD_ASSIGN_OR_RETURN(std::string stream, DecodeLogStream(args));
  if (!t.node.empty() && t.node != st.node() && st.shared()) {
    return common::FailedPrecondition(
        "trial " + std::to_string(t.number) + " of study \"" + s.name + "\" ran on node " + t.node +
        "; its logs are in that node's state directory (run trialctl logs against the "
        "triald there); this is node " +
        st.node());
  }
  // The daemon's own log folder; trials from before logs moved there kept theirs in the trial
  // folder, read the same careful way (ReadTrialLog: no links, no FIFOs, bounded).
  const std::string file = stream + ".log";
  std::string relative = model::TrialLogRelativeDir(s.name, t.number) + "/" + file;
  Result<TrialLogContent> content = ReadTrialLog(c.state_dir, relative, limits);
  if (!content.ok() && content.status().code() == common::Code::kNotFound) {
    const std::string legacy = model::TrialRelativeDir(s.name, t.number) + "/" + file;
    Result<TrialLogContent> old = ReadTrialLog(c.state_dir, legacy, limits);
    if (old.ok()) {
      relative = legacy;
      content = std::move(old);
    }
  }
  json::object o;
  o["path"] = c.state_dir + "/" + relative;
  o["state"] = model::TrialStateName(t.state);
  // Logs hold whatever the worker wrote; JSON needs valid UTF-8.
  o["content"] = content.ok() ? common::SanitizeUtf8(content->content) : std::string();
  o["exists"] = content.ok();
  if (content.ok()) {
    o["size"] = content->size;
    o["omitted"] = content->omitted;
  } else if (content.status().code() != common::Code::kNotFound) {
    // Present but refused (a link, a FIFO, not triald's): say why instead of "no log".
    o["refused"] = content.status().message();
  }
  return json::value(std::move(o));
}

namespace {

// A bounded tail unless the whole log is asked for ("whole": true), which is itself bounded by
// TrialLogLimits (and by the capture's own caps, launcher/capped_log.h).
Result<json::value> LogsVerb(const VerbContext& c, const json::object& args) {
  bool whole = false;
  if (const json::value* w = args.if_contains("whole"); w != nullptr && !w->is_null()) {
    if (!w->is_bool()) return common::InvalidArgument("argument \"whole\" must be a boolean");
    whole = w->get_bool();
  }
  TrialLogLimits limits;
  if (!whole) {
    limits.head_bytes = 0;
    limits.tail_bytes = kLogTailBytes;
  }
  return TrialLogReply(c, args, limits);
}

Result<std::unique_ptr<ReplyStream>> ExportStreamer(const VerbContext& c,
                                                    const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  TRIALD_ASSIGN_OR_RETURN(json::object summary, Summary(c, s));
  return std::unique_ptr<ReplyStream>(std::make_unique<TrialPages>(
      c.storage, s.id, 0, std::nullopt, &ExportTrialJson,
      "{\"study\":" + common::SerializeJson(summary) + ",\"trials\":[", "]}"));
}

// The daemons sharing this storage, with their heartbeats and running trials; on a storage of
// its own, this daemon alone.
Result<json::value> NodesVerb(const VerbContext& c, const json::object&) {
  storage::Storage& st = *c.storage;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<model::NodeRecord> nodes;
  if (st.shared()) {
    TRIALD_ASSIGN_OR_RETURN(nodes, st.GetNodes(now));
  } else {
    model::NodeRecord self;
    self.name = st.node();
    self.last_beat = now;
    nodes.push_back(self);
  }
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> running, st.GetRunningTrials());
  json::array a;
  for (const model::NodeRecord& n : nodes) {
    json::object o;
    o["name"] = n.name;
    o["self"] = n.name == st.node();
    o["alive"] = n.AliveWithin(c.node_timeout_s);
    o["silent_for"] = n.silent_for;
    o["first_beat"] = n.first_beat > 0 ? json::value(n.first_beat) : json::value(nullptr);
    o["last_beat"] = n.last_beat;
    int64_t count = 0;
    for (const TrialRecord& t : running) count += t.node == n.name || !st.shared();
    o["running"] = count;
    a.push_back(std::move(o));
  }
  return json::value(std::move(a));
}

}  // namespace

void AddStatusMemory(const VerbContext& c, const std::string& study, json::object* summary) {
  model::StudyRecord s;
  s.name = study;
  // Only an active study has a spawn back-off, a fork server or Slurm jobs in memory.
  const StudyCache* active = c.scheduler != nullptr ? c.scheduler->active_study(study) : nullptr;
  s.id = active != nullptr ? active->record.id : 0;
  SetStatusMemory(c, s, summary);
}

const std::vector<Verb>& Verbs() {
  static const std::vector<Verb> kVerbs = {
      {"ping", VerbKind::kRead, PingVerb},
      {"submit", VerbKind::kCreate, SubmitVerb},
      {"studies", VerbKind::kRead, StudiesVerb},
      {"status", VerbKind::kRead, StatusVerb},
      {"trials", VerbKind::kRead, nullptr, TrialsStreamer},
      {"best", VerbKind::kRead, nullptr, BestStreamer},
      {"cancel", VerbKind::kMutating, CancelVerb},
      {"enqueue", VerbKind::kMutating, EnqueueVerb},
      {"ask", VerbKind::kMutating, nullptr, nullptr, AskHandover},
      {"code", VerbKind::kMutating, CodeVerb, nullptr, nullptr, /*storage_only=*/true},
      {"logs", VerbKind::kRead, LogsVerb},
      {"export", VerbKind::kRead, nullptr, ExportStreamer},
      {"nodes", VerbKind::kRead, NodesVerb},
      {"pause", VerbKind::kMutating, PauseVerb},
      {"resume", VerbKind::kMutating, ResumeVerb},
      {"extend", VerbKind::kMutating, ExtendVerb},
      {"set", VerbKind::kMutating, SetVerb},
      {"delete", VerbKind::kMutating, DeleteVerb},
      {"events", VerbKind::kRead, EventsVerb},
  };
  return kVerbs;
}

const Verb* FindVerb(std::string_view name) {
  for (const Verb& v : Verbs()) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

bool IsReadVerb(std::string_view verb) {
  const Verb* v = FindVerb(verb);
  return v != nullptr && v->kind == VerbKind::kRead;
}

bool NeedsStorageOnly(std::string_view verb) {
  const Verb* v = FindVerb(verb);
  return v != nullptr && (v->kind == VerbKind::kRead || v->storage_only);
}

common::Status AuthorizeStudyVerb(storage::ReadModel& storage, const AccessPolicy& policy,
                                  const PeerCredentials& caller, const std::string& verb,
                                  const json::object& args) {
  const Verb* v = FindVerb(verb);
  if (v != nullptr && v->kind != VerbKind::kMutating) return common::Status::Ok();
  if (MayChangeStudy(policy, caller, /*submitter_uid=*/-1)) return common::Status::Ok();
  const json::value* study = args.if_contains("study");
  if (study == nullptr || !study->is_string()) {
    return common::PermissionDenied("uid " + std::to_string(caller.uid) + " may not use \"" + verb +
                                    "\" without a \"study\" argument: only root and "
                                    "triald's user (uid " +
                                    std::to_string(policy.daemon_uid) + ") may");
  }
  const std::string name(study->get_string());
  Result<model::StudyRecord> rec = storage.GetStudy(name);
  if (!rec.ok()) {
    // The verb reports a missing study itself; any other error is an error here too.
    return rec.status().code() == common::Code::kNotFound ? common::Status::Ok() : rec.status();
  }
  if (MayChangeStudy(policy, caller, rec->submitter.uid)) return common::Status::Ok();
  return StudyDenialFor(policy, caller, verb, name, rec->submitter.uid, rec->submitter.name);
}

namespace {

common::Status UnknownVerb(const std::string& verb) {
  std::string known;
  for (const Verb& v : Verbs()) known += (known.empty() ? "" : ", ") + std::string(v.name);
  return common::InvalidArgument("unknown verb \"" + verb + "\"; expected one of " + known);
}

common::Status HandoverOnly(const std::string& verb) {
  return common::InvalidArgument("\"" + verb +
                                 "\" takes over its connection: send it on the control socket");
}

}  // namespace

Result<Submission> AdmitSubmission(const VerbContext& c, const json::object& args) {
  Submission s;
  TRIALD_ASSIGN_OR_RETURN(s.source, DecodeSubmit(args));
  if (c.caller != nullptr) {
    s.submitter.uid = c.caller->uid;
    s.submitter.name = UserName(c.caller->uid);
  }
  TRIALD_ASSIGN_OR_RETURN(s.spec, c.scheduler->Admit(s.source, s.submitter));
  return s;
}

Result<json::value> SubmitAdmitted(const VerbContext& c, Submission submission) {
  // Whether the submission continues a study that exists (submit --resume, load_if_exists).
  const bool existed = !Scheduler::MakesNewStudy(submission.source, submission.spec) &&
                       c.storage->GetStudy(submission.spec.study.name).ok();
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec,
                          c.scheduler->SubmitAdmitted(submission.source, std::move(submission.spec),
                                                      submission.submitter));
  return SubmittedReply(rec, existed);
}

json::value EnqueuedReply(const std::string& study, const model::TrialRecord& trial, bool skipped) {
  json::object o;
  o["study"] = study;
  o["trial"] = trial.number;
  o["params"] = TrialToJson(trial).at("params");
  o["skipped"] = skipped;
  return json::value(std::move(o));
}

json::value DeletedReply(const std::string& study, int64_t deleted_trials, bool purged) {
  return json::value(
      json::object{{"study", study}, {"deleted_trials", deleted_trials}, {"purged", purged}});
}

json::value SubmittedReply(const model::StudyRecord& study, bool resumed) {
  json::object o;
  o["study"] = study.name;
  o["n_trials"] = study.n_trials;
  o["seed"] = std::to_string(study.seed);
  o["resumed"] = resumed;
  return json::value(std::move(o));
}

Result<json::value> HandleVerb(const VerbContext& context, const std::string& verb,
                               const json::object& args) {
  const Verb* v = FindVerb(verb);
  if (v == nullptr) return UnknownVerb(verb);
  if (v->handover != nullptr) return HandoverOnly(verb);
  if (v->handler != nullptr) return v->handler(context, args);
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<ReplyStream> stream, v->streamer(context, args));
  std::string text;
  for (;;) {
    TRIALD_ASSIGN_OR_RETURN(std::string piece, stream->Next());
    if (piece.empty()) break;
    text += piece;
  }
  Result<json::value> parsed = common::ParseJsonExact(text);
  if (!parsed.ok()) return common::Internal("\"" + verb + "\" reply: " + parsed.status().message());
  return parsed;
}

Result<std::optional<ControlChange>> ControlChangeOf(const std::string& verb,
                                                     const json::object& args) {
  using Kind = ControlChange::Kind;
  std::optional<Kind> kind;
  if (verb == "pause") kind = Kind::kPause;
  if (verb == "resume") kind = Kind::kResume;
  if (verb == "extend") kind = Kind::kExtend;
  if (verb == "set") kind = Kind::kParallelism;
  if (verb == "cancel") kind = Kind::kCancel;
  if (!kind) return std::optional<ControlChange>();
  ControlChange change;
  change.kind = *kind;
  TRIALD_ASSIGN_OR_RETURN(change.study, proto::GetString(args, "study"));
  if (*kind == Kind::kExtend) {
    TRIALD_ASSIGN_OR_RETURN(change.value, IntArgument(args, "n_trials", 1));
  }
  if (*kind == Kind::kParallelism) {
    TRIALD_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> names,
                            MetricNamesArgument(args));
    if (names) {
      change.kind = Kind::kMetricNames;
      change.names = std::move(*names);
      return std::optional<ControlChange>(std::move(change));
    }
    TRIALD_ASSIGN_OR_RETURN(change.value, ParallelismArgument(args));
  }
  return std::optional<ControlChange>(std::move(change));
}

json::value ControlStoredReply(const ControlChange& change, const ControlStored& stored) {
  if (change.kind == ControlChange::Kind::kCancel) return CancelReply(stored.rec.name);
  json::value reply = ControlReply(stored.rec);
  if (change.kind == ControlChange::Kind::kMetricNames) {
    reply.as_object()["metric_names"] = MetricNamesJson(stored.rec);
  }
  return reply;
}

Result<std::unique_ptr<ReplyStream>> StartVerb(const VerbContext& context, const std::string& verb,
                                               const json::object& args) {
  const Verb* v = FindVerb(verb);
  if (v == nullptr) return UnknownVerb(verb);
  if (v->handover != nullptr) return HandoverOnly(verb);
  if (v->streamer != nullptr) return v->streamer(context, args);
  TRIALD_ASSIGN_OR_RETURN(json::value result, v->handler(context, args));
  return std::unique_ptr<ReplyStream>(std::make_unique<WholeReply>(common::SerializeJson(result)));
}

}  // namespace triald::daemon
