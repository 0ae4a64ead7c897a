#include "daemon/control/verbs.h"

#include <unistd.h>

#include <chrono>

#include "common/fd.h"
#include "common/utf8.h"
#include "daemon/control/requests.h"
#include "daemon/control/study_json.h"
#include "proto/control.h"

namespace triald::daemon {
namespace json = boost::json;
using common::Result;
using model::TrialRecord;

namespace {

Result<json::value> PingVerb(const VerbContext& c, const json::object&) {
  json::object o;
  o["pid"] = ::getpid();
  o["running"] = c.scheduler->running_count();
  o["queued"] = c.scheduler->queued_count();
  o["state_dir"] = c.state_dir;
  o["node"] = c.storage->node();
  o["shared"] = c.storage->shared();
  return json::value(std::move(o));
}

Result<json::value> SubmitVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSource source, DecodeSubmit(args));
  model::Submitter submitter;
  if (c.caller != nullptr) {
    submitter.uid = c.caller->uid;
    submitter.name = UserName(c.caller->uid);
  }
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, c.scheduler->Submit(source, submitter));
  json::object o;
  o["study"] = rec.name;
  o["n_trials"] = rec.n_trials;
  o["seed"] = std::to_string(rec.seed);
  return json::value(std::move(o));
}

Result<json::value> StudiesVerb(const VerbContext& c, const json::object&) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::StudyRecord> all, c.storage->ListStudies());
  json::array a;
  for (const auto& s : all) {
    TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, c.storage->GetTrials(s.id));
    a.push_back(StudySummaryJson(s, trials));
  }
  return json::value(std::move(a));
}

Result<json::value> StatusVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, c.storage->GetTrials(s.id));
  return json::value(StudySummaryJson(s, trials));
}

Result<json::value> TrialsVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, c.storage->GetTrials(s.id));
  json::array a;
  for (const TrialRecord& t : trials) a.push_back(TrialToJson(t));
  return json::value(std::move(a));
}

Result<json::value> BestVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, c.storage->GetTrials(s.id));
  const TrialRecord* best = BestTrial(s, trials);
  if (best == nullptr) {
    return common::NotFound("study \"" + s.name + "\" has no COMPLETE trial yet");
  }
  return json::value(TrialToJson(*best));
}

Result<json::value> CancelVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_RETURN_IF_ERROR(c.scheduler->Cancel(name));
  return json::value(json::object{{"study", name}, {"state", "CANCELLED"}});
}

Result<json::value> EnqueueVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
  TRIALD_ASSIGN_OR_RETURN(auto params, DecodeEnqueueParams(args));
  TRIALD_ASSIGN_OR_RETURN(TrialRecord t, c.scheduler->Enqueue(name, params));
  json::object o;
  o["study"] = name;
  o["trial"] = t.number;
  o["params"] = TrialToJson(t).at("params");
  return json::value(std::move(o));
}

Result<json::value> LogsVerb(const VerbContext& c, const json::object& args) {
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
  std::string path = model::TrialDir(c.state_dir, s.name, t.number) + "/" + stream + ".log";
  Result<std::string> content = common::ReadFile(path);
  json::object o;
  o["path"] = path;
  o["state"] = model::TrialStateName(t.state);
  // Logs hold whatever the worker wrote; JSON needs valid UTF-8.
  o["content"] = content.ok() ? common::SanitizeUtf8(*content) : std::string();
  o["exists"] = content.ok();
  return json::value(std::move(o));
}

Result<json::value> ExportVerb(const VerbContext& c, const json::object& args) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, LookUpStudy(*c.storage, args));
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, c.storage->GetTrials(s.id));
  return json::value(StudyExportJson(s, trials));
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

const std::vector<Verb>& Verbs() {
  static const std::vector<Verb> kVerbs = {
      {"ping", VerbKind::kRead, PingVerb},         {"submit", VerbKind::kCreate, SubmitVerb},
      {"studies", VerbKind::kRead, StudiesVerb},   {"status", VerbKind::kRead, StatusVerb},
      {"trials", VerbKind::kRead, TrialsVerb},     {"best", VerbKind::kRead, BestVerb},
      {"cancel", VerbKind::kMutating, CancelVerb}, {"enqueue", VerbKind::kMutating, EnqueueVerb},
      {"logs", VerbKind::kRead, LogsVerb},         {"export", VerbKind::kRead, ExportVerb},
      {"nodes", VerbKind::kRead, NodesVerb},
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

common::Status AuthorizeStudyVerb(storage::Storage& storage, const AccessPolicy& policy,
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

Result<json::value> HandleVerb(const VerbContext& context, const std::string& verb,
                               const json::object& args) {
  if (const Verb* v = FindVerb(verb)) return v->handler(context, args);
  std::string known;
  for (const Verb& v : Verbs()) known += (known.empty() ? "" : ", ") + std::string(v.name);
  return common::InvalidArgument("unknown verb \"" + verb + "\"; expected one of " + known);
}

}  // namespace triald::daemon
