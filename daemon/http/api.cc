#include "daemon/http/api.h"

#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/utf8.h"
#include "daemon/control/best.h"
#include "daemon/control/study_json.h"
#include "daemon/http/importance.h"
#include "daemon/http/token.h"

namespace triald::daemon::http {

extern const std::string_view kDashboardPage;  // dashboard.html, embedded at build time

namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using common::Code;
using common::Result;

namespace {

// A study snapshot not asked for this long is dropped.
constexpr auto kForgetAfter = std::chrono::seconds(60);
// Trial pages kept at once (each for snapshot_interval_s).
constexpr size_t kMaxCachedTrials = 64;

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::shared_ptr<const std::string> Text(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

ApiResponse Json(int status, const json::value& v) {
  ApiResponse r;
  r.status = status;
  r.body = Text(common::SerializeJson(v));
  return r;
}

ApiResponse Error(int status, const std::string& message) {
  return Json(status, json::object{{"ok", false}, {"error", common::SanitizeUtf8(message)}});
}

// The HTTP status of a control verb's error.
int StatusFor(const common::Status& s) {
  switch (s.code()) {
    case Code::kInvalidArgument:
      return 400;
    case Code::kNotFound:
      return 404;
    case Code::kPermissionDenied:
      return 403;
    case Code::kFailedPrecondition:
    case Code::kAlreadyExists:
      return 409;
    case Code::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

ApiResponse VerbError(const common::Status& s) { return Error(StatusFor(s), s.message()); }

ApiResponse MethodNotAllowed(std::string_view method, const char* allow) {
  ApiResponse r = Error(
      405, "method " + std::string(method) + " is not allowed here; use " + std::string(allow));
  r.allow = allow;
  return r;
}

std::vector<std::string> Segments(std::string_view path) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    out.emplace_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return out;
}

// At most `max_points` of a trial's intermediate values, evenly spaced, the last one kept.
void ThinCurve(model::TrialRecord& t, size_t max_points) {
  if (t.intermediate.size() <= max_points || max_points < 2) return;
  std::vector<std::pair<int64_t, double>> all(t.intermediate.begin(), t.intermediate.end());
  std::map<int64_t, double> kept;
  const double stride = static_cast<double>(all.size() - 1) / static_cast<double>(max_points - 1);
  for (size_t i = 0; i < max_points; ++i) {
    const auto& p = all[std::min(all.size() - 1, static_cast<size_t>(i * stride + 0.5))];
    kept.insert(p);
  }
  kept.insert(all.back());
  t.intermediate = std::move(kept);
}

bool Finished(model::TrialState s) {
  return s == model::TrialState::kComplete || s == model::TrialState::kPruned ||
         s == model::TrialState::kFail;
}

}  // namespace

bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

struct Api::StudySnapshot {
  int64_t study_id = 0;
  std::map<int, model::TrialRecord> trials;  // the newest max_snapshot_trials, by number
  std::map<int, size_t> steps;  // the intermediate values of those whose curve was thinned
  int next_number = 0;          // trials below it have been read
  Cached cached;
  Clock::time_point last_asked{};
};

Api::Api(ApiOptions options) : options_(std::move(options)) {
  context_.scheduler = options_.scheduler;
  context_.storage = options_.storage;
  context_.state_dir = options_.state_dir;
  context_.node_timeout_s = options_.node_timeout_s;
  owner_.pid = ::getpid();
  owner_.uid = ::geteuid();
  owner_.gid = ::getegid();
  context_.caller = &owner_;
}

Api::~Api() = default;

bool Api::Fresh(Clock::time_point built) const {
  return built != Clock::time_point{} &&
         Clock::now() - built < std::chrono::duration<double>(options_.snapshot_interval_s);
}

void Api::Forget() {
  const auto now = Clock::now();
  for (auto it = studies_by_name_.begin(); it != studies_by_name_.end();) {
    it = now - it->second->last_asked > kForgetAfter ? studies_by_name_.erase(it) : std::next(it);
  }
  for (auto it = trials_.begin(); it != trials_.end();) {
    it = !Fresh(it->second.built) ? trials_.erase(it) : std::next(it);
  }
}

void Api::Invalidate() {
  studies_.built = {};
  for (auto& [name, snap] : studies_by_name_) snap->cached.built = {};
  trials_.clear();
}

std::vector<Scheduler::RunningView> Api::Running(const ApiMemory* memory) const {
  if (memory != nullptr) return memory->running;
  if (options_.scheduler != nullptr) return options_.scheduler->running_trials();
  return {};
}

ApiMemory Api::GatherMemory(const ApiRequest& req) const {
  ApiMemory m;
  if (options_.scheduler == nullptr) return m;
  m.running = options_.scheduler->running_trials();
  // /api/studies/NAME[/...]: that study's status fields.
  std::string_view path = req.target.substr(0, req.target.find('?'));
  std::vector<std::string> seg = Segments(path.substr(path.empty() ? 0 : 1));
  std::string name;
  if (seg.size() >= 3 && seg[0] == "api" && seg[1] == "studies" && PercentDecode(seg[2], &name)) {
    AddStatusMemory(context_, name, &m.status[name]);
  }
  return m;
}

Api::Routed Api::Route(const ApiRequest& req) const {
  Routed r;
  std::string_view path = req.target.substr(0, req.target.find('?'));
  std::vector<std::string> raw = Segments(path.substr(path.empty() ? 0 : 1));
  for (const std::string& s : raw) {
    std::string decoded;
    if (!PercentDecode(s, &decoded)) return r.Answer(Error(400, "bad %-escape in the path"));
    r.seg.push_back(std::move(decoded));
  }
  const std::vector<std::string>& seg = r.seg;
  // HEAD is GET without the body (the server drops it): the same checks, status and headers.
  const bool get = req.method == "GET" || req.method == "HEAD";
  // The page: one document for every view; it reads the path itself.
  const bool page = path == "/" || (seg.size() == 2 && seg[0] == "studies" && !seg[1].empty()) ||
                    (seg.size() == 4 && seg[0] == "studies" && seg[2] == "trials");
  if (page) {
    if (!get) return r.Answer(MethodNotAllowed(req.method, "GET, HEAD"));
    ApiResponse page_answer;
    page_answer.content_type = "text/html; charset=utf-8";
    static const std::shared_ptr<const std::string> kPage = Text(std::string(kDashboardPage));
    page_answer.body = kPage;
    return r.Answer(std::move(page_answer));
  }
  if (seg.empty() || seg[0] != "api" || seg.size() < 2 || seg[1] != "studies") {
    return r.Answer(
        Error(404, "no such page: " + std::string(path) +
                       "; the API is under /api/studies (daemon/README.md, Dashboard)"));
  }
  for (size_t i = 2; i < seg.size(); ++i) {
    if (seg[i].empty()) return r.Answer(Error(404, "no such path: " + std::string(path)));
  }
  static const std::set<std::string, std::less<>> kActions = {"pause", "resume", "cancel", "extend",
                                                              "parallelism"};
  r.action = seg.size() == 4 && kActions.count(seg[3]) > 0;
  const bool read = seg.size() == 2 || seg.size() == 3 || (seg.size() == 5 && seg[3] == "trials");
  if (!r.action && !read) return r.Answer(Error(404, "no such path: " + std::string(path)));
  if (r.action && req.method != "POST") return r.Answer(MethodNotAllowed(req.method, "POST"));
  if (read && !get) return r.Answer(MethodNotAllowed(req.method, "GET, HEAD"));

  const std::string_view token = BearerToken(req.authorization);
  const bool authorized = TokensEqual(token, options_.token);
  if ((r.action || !options_.read_open) && !authorized) {
    return r.Answer(Error(403, std::string(token.empty() ? "no token given: " : "wrong token: ") +
                                   (r.action ? "actions need"
                                             : "reading needs (triald runs without "
                                               "--socket-read-open)") +
                                   " \"Authorization: Bearer TOKEN\", TOKEN being the content of " +
                                   options_.state_dir + "/" + kTokenFileName +
                                   " (readable by triald's user only)"));
  }
  return r;
}

ApiResponse Api::Handle(const ApiRequest& req, const ApiMemory* memory) {
  Routed r = Route(req);
  if (r.answer) return std::move(*r.answer);
  const std::vector<std::string>& seg = r.seg;
  Forget();
  if (r.action) {
    std::variant<ApiResponse, ActionCall> call = ActionArgs(seg[2], seg[3], req.body);
    if (ApiResponse* answer = std::get_if<ApiResponse>(&call)) return std::move(*answer);
    return RunAction(std::get<ActionCall>(call));
  }
  if (seg.size() == 2) return Studies();
  if (seg.size() == 3) return Study(seg[2], memory);
  return Trial(seg[2], seg[4], memory);
}

std::variant<ApiResponse, ControlChange> Api::CheckAction(const ApiRequest& req) const {
  Routed r = Route(req);
  if (r.answer) return std::move(*r.answer);
  if (!r.action) return Error(405, "not an action");  // the server sends only POSTs here
  std::variant<ApiResponse, ActionCall> call = ActionArgs(r.seg[2], r.seg[3], req.body);
  if (ApiResponse* answer = std::get_if<ApiResponse>(&call)) return std::move(*answer);
  const ActionCall& c = std::get<ActionCall>(call);
  Result<std::optional<ControlChange>> change = ControlChangeOf(c.verb, c.args);
  if (!change.ok()) return VerbError(change.status());
  if (!change->has_value()) return Error(500, "action " + c.verb + " is not a control change");
  return std::move(**change);
}

std::variant<ApiResponse, ControlStored> Api::StoreAction(const ControlChange& change) {
  Result<ControlStored> stored =
      StoreControl(*context_.storage, change, common::SystemClock().WallSeconds());
  if (!stored.ok()) return VerbError(stored.status());
  Invalidate();
  return std::move(stored).value();
}

ApiResponse Api::FollowAction(const ControlChange& change, const ControlStored& stored) {
  common::Status followed = options_.scheduler->FollowControl(stored);
  Invalidate();
  if (!followed.ok()) return VerbError(followed);
  return Json(200, json::object{{"ok", true}, {"result", ControlStoredReply(change, stored)}});
}

ApiResponse Api::Studies() {
  if (!Fresh(studies_.built)) {
    Result<json::value> all = HandleVerb(context_, "studies", {});
    if (!all.ok()) return VerbError(all.status());
    // Which nodes run each study's trials now (this one alone on a storage of its own).
    std::map<int64_t, std::set<std::string>> nodes;
    Result<std::vector<model::TrialRecord>> running = options_.storage->GetRunningTrials();
    if (running.ok()) {
      for (const model::TrialRecord& t : *running) {
        nodes[t.study_id].insert(t.node.empty() ? options_.storage->node() : t.node);
      }
    }
    std::map<std::string, int64_t> ids;
    Result<std::vector<model::StudyRecord>> records = options_.storage->ListStudies();
    if (records.ok()) {
      for (const model::StudyRecord& s : *records) ids[s.name] = s.id;
    }
    json::array studies;
    for (json::value& v : all->as_array()) {
      json::object& s = v.as_object();
      json::array on;
      auto id = ids.find(std::string(s["name"].as_string()));
      if (id != ids.end()) {
        for (const std::string& n : nodes[id->second]) on.push_back(json::string(n));
      }
      s["nodes"] = std::move(on);
      // ETA: the configurations left, at the mean run time so far, over the trials running now
      // (at least one); null when the study is not running or nothing has finished.
      json::value eta = nullptr;
      const json::value* mean = s.if_contains("mean_duration_s");
      if (s["state"] == "RUNNING" && mean != nullptr && mean->is_number() &&
          !s["paused"].as_bool()) {
        const int64_t left =
            s["n_trials"].to_number<int64_t>() - s["finished"].to_number<int64_t>();
        const int64_t running_now = std::max<int64_t>(1, s["running"].to_number<int64_t>());
        eta = std::max<int64_t>(0, left) * mean->to_number<double>() /
              static_cast<double>(running_now);
      }
      s["eta_s"] = eta;
      studies.push_back(std::move(v));
    }
    studies_.json = Text(common::SerializeJson(json::object{
        {"generated_at", WallNow()}, {"node", options_.storage->node()}, {"studies", studies}}));
    studies_.built = Clock::now();
  }
  ApiResponse r;
  r.body = studies_.json;
  return r;
}

ApiResponse Api::Study(const std::string& name, const ApiMemory* memory) {
  auto& slot = studies_by_name_[name];
  if (!slot) slot = std::make_unique<StudySnapshot>();
  StudySnapshot& snap = *slot;
  snap.last_asked = Clock::now();
  if (Fresh(snap.cached.built)) {
    ApiResponse r;
    r.body = snap.cached.json;
    return r;
  }
  Result<json::value> status = HandleVerb(context_, "status", json::object{{"study", name}});
  if (!status.ok()) {
    studies_by_name_.erase(name);
    return VerbError(status.status());
  }
  if (memory != nullptr && status->is_object()) {
    if (auto it = memory->status.find(name); it != memory->status.end()) {
      for (const auto& kv : it->second) status->as_object()[kv.key()] = kv.value();
    }
  }
  Result<model::StudyRecord> rec = options_.storage->GetStudy(name);
  if (!rec.ok()) {
    studies_by_name_.erase(name);
    return VerbError(rec.status());
  }
  storage::Storage& st = *options_.storage;
  if (snap.study_id != rec->id) {  // first view, or a study deleted and submitted again
    snap.trials.clear();
    snap.steps.clear();
    snap.study_id = rec->id;
    Result<storage::TrialCounts> counts = st.CountTrials(rec->id);
    if (!counts.ok()) return VerbError(counts.status());
    snap.next_number =
        static_cast<int>(std::max<int64_t>(0, counts->total() - options_.max_snapshot_trials));
  }
  std::vector<int> unfinished;
  for (const auto& [number, t] : snap.trials) {
    if (!Finished(t.state)) unfinished.push_back(number);
  }
  Result<std::vector<model::TrialRecord>> changed =
      st.GetTrialsSince(rec->id, snap.next_number, unfinished);
  if (!changed.ok()) return VerbError(changed.status());
  for (model::TrialRecord& t : *changed) {
    if (t.intermediate.size() > options_.max_curve_points) {
      snap.steps[t.number] = t.intermediate.size();
    } else {
      snap.steps.erase(t.number);
    }
    ThinCurve(t, options_.max_curve_points);
    t.attrs.clear();  // the trial page shows them
    snap.next_number = std::max(snap.next_number, t.number + 1);
    snap.trials[t.number] = std::move(t);
  }
  while (static_cast<int>(snap.trials.size()) > options_.max_snapshot_trials) {
    snap.steps.erase(snap.trials.begin()->first);
    snap.trials.erase(snap.trials.begin());
  }

  std::vector<model::TrialRecord> window;
  window.reserve(snap.trials.size());
  // Learning curves travel for the trials that are not finished and the newest finished ones
  // that have one (what the page draws); the others carry their number of steps alone.
  std::set<int> curves;
  size_t finished_curves = 0;
  for (auto it = snap.trials.rbegin(); it != snap.trials.rend(); ++it) {
    const model::TrialRecord& t = it->second;
    if (t.intermediate.empty()) continue;
    if (!Finished(t.state)) {
      curves.insert(t.number);
    } else if (finished_curves < options_.max_finished_curves) {
      curves.insert(t.number);
      ++finished_curves;
    }
  }
  json::array trials;
  for (const auto& [number, t] : snap.trials) {
    window.push_back(t);
    json::object o = TrialToJson(t);
    o.erase("attrs");
    o.erase("stderr_tail");
    auto steps = snap.steps.find(number);
    o["intermediate_steps"] = steps != snap.steps.end() ? steps->second : t.intermediate.size();
    if (curves.count(number) == 0) o["intermediate"] = json::array();
    trials.push_back(std::move(o));
  }
  json::array best;
  const std::vector<config::Direction> directions = StudyDirections(*rec);
  if (directions.size() > 1) {
    FrontBuilder front(directions);
    front.Add(window);
    for (const model::TrialRecord& t : front.front()) best.push_back(t.number);
  } else if (const json::value* b = status->as_object().if_contains("best");
             b != nullptr && b->is_object()) {
    best.push_back(b->as_object().at("number"));
  }
  json::array importance;
  for (const ParamImportance& p : ParameterImportance(window, 0)) {
    importance.push_back(json::object{{"param", p.name},
                                      {"eta_squared", p.eta_squared},
                                      {"importance", p.importance},
                                      {"trials", p.trials}});
  }
  json::array running;
  for (const Scheduler::RunningView& r : Running(memory)) {
    if (r.study_id != rec->id) continue;
    running.push_back(
        json::object{{"number", r.number}, {"node", st.node()}, {"gpu_slots", r.gpu_slots}});
  }
  Result<json::value> nodes = HandleVerb(context_, "nodes", {});
  const int64_t first = snap.trials.empty() ? snap.next_number : snap.trials.begin()->first;
  json::object out{
      {"generated_at", WallNow()},
      {"node", st.node()},
      {"study", std::move(*status)},
      {"trials", std::move(trials)},
      {"trials_omitted", first},
      {"best_numbers", std::move(best)},
      {"importance",
       json::object{
           {"method", "eta_squared_binned"}, {"objective", 0}, {"params", std::move(importance)}}},
      {"running", std::move(running)},
      {"nodes", nodes.ok() ? std::move(*nodes) : json::value(json::array{})},
  };
  snap.cached.json = Text(common::SerializeJson(out));
  snap.cached.built = Clock::now();
  ApiResponse r;
  r.body = snap.cached.json;
  return r;
}

ApiResponse Api::Trial(const std::string& name, const std::string& number_text,
                       const ApiMemory* memory) {
  int number = -1;
  if (number_text.empty() || number_text.size() > 9 ||
      !std::all_of(number_text.begin(), number_text.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return Error(400, "trial number \"" + number_text + "\" is not a number from 0 up");
  }
  number = std::stoi(number_text);
  const std::string key = name + "/" + std::to_string(number);
  auto hit = trials_.find(key);
  if (hit != trials_.end() && Fresh(hit->second.built)) {
    ApiResponse r;
    r.body = hit->second.json;
    return r;
  }
  storage::Storage& st = *options_.storage;
  Result<model::StudyRecord> rec = st.GetStudy(name);
  if (!rec.ok()) {
    return VerbError(rec.status().code() == Code::kNotFound
                         ? common::NotFound("no study named \"" + name + "\"")
                         : rec.status());
  }
  Result<model::TrialRecord> t = st.GetTrial(rec->id, number);
  if (!t.ok()) return VerbError(t.status());
  json::array events;
  Result<std::vector<model::EventRecord>> all = st.GetTrialEvents(t->id);
  if (all.ok()) {
    for (const model::EventRecord& e : *all) {
      events.push_back(json::object{{"at", e.at},
                                    {"kind", common::SanitizeUtf8(e.kind)},
                                    {"detail", common::SanitizeUtf8(e.detail)}});
    }
  }
  // The curve thinned as on the study page (intermediate_steps keeps the whole count).
  const int64_t steps = t->IntermediateSteps();
  ThinCurve(*t, options_.max_curve_points);
  json::object trial = TrialToJson(*t);
  trial["intermediate_steps"] = steps;
  json::object out{{"generated_at", WallNow()},
                   {"study", name},
                   {"trial", std::move(trial)},
                   {"events", std::move(events)}};
  for (const Scheduler::RunningView& r : Running(memory)) {
    if (r.study_id == rec->id && r.number == number) out["gpu_slots"] = r.gpu_slots;
  }
  TrialLogLimits limits;
  limits.head_bytes = 0;
  limits.tail_bytes = options_.log_tail_bytes;
  for (const char* stream : {"stdout", "stderr"}) {
    Result<json::value> log = TrialLogReply(
        context_, json::object{{"study", name}, {"trial", number}, {"stream", stream}}, limits);
    out[stream] =
        log.ok()
            ? std::move(*log)
            : json::value(json::object{{"exists", false}, {"refused", log.status().message()}});
  }
  if (trials_.size() >= kMaxCachedTrials) trials_.erase(trials_.begin());
  Cached& c = trials_[key];
  c.json = Text(common::SerializeJson(out));
  c.built = Clock::now();
  ApiResponse r;
  r.body = c.json;
  return r;
}

std::variant<ApiResponse, Api::ActionCall> Api::ActionArgs(const std::string& name,
                                                           const std::string& action,
                                                           std::string_view body) const {
  json::object args;
  bool blank = std::all_of(body.begin(), body.end(),
                           [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; });
  if (!blank) {
    Result<json::value> parsed = common::ParseJsonExact(body);
    if (!parsed.ok()) return Error(400, "the body is not JSON: " + parsed.status().message());
    if (!parsed->is_object()) return Error(400, "the body must be a JSON object");
    args = std::move(parsed->as_object());
  }
  const char* wanted = action == "extend"        ? "n_trials"
                       : action == "parallelism" ? "parallelism"
                                                 : "";
  for (const auto& kv : args) {
    if (kv.key() != wanted) {
      return Error(400, "unknown key \"" + std::string(kv.key()) + "\" in the body of " + action +
                            (*wanted != '\0' ? std::string("; expected {\"") + wanted + "\": N}"
                                             : std::string("; expected {} or no body")));
    }
  }
  if (*wanted != '\0' && !args.contains(wanted)) {
    return Error(400, std::string("the body of ") + action + " needs {\"" + wanted + "\": N}");
  }
  args["study"] = name;
  return ActionCall{action == "parallelism" ? "set" : action, std::move(args)};
}

ApiResponse Api::RunAction(const ActionCall& call) {
  Result<json::value> done = HandleVerb(context_, call.verb, call.args);
  if (!done.ok()) return VerbError(done.status());
  Invalidate();  // the next read shows the change
  return Json(200, json::object{{"ok", true}, {"result", std::move(*done)}});
}

}  // namespace triald::daemon::http
