#pragma once
// The dashboard's JSON API and pages, apart from the HTTP transport (server.h): a request
// (method, path, Authorization, body) in, a response (status, type, body) out. The page itself
// uses the API, so scripts see what it shows. Routes (daemon/README.md, "Dashboard"):
//   GET  /  /studies/NAME  /studies/NAME/trials/N      the page (embedded; no data in it)
//   GET  /api/studies                                   {generated_at, node, studies: [...]}
//   GET  /api/studies/NAME                              the study snapshot (below)
//   GET  /api/studies/NAME/trials/N                     {trial, events, stdout, stderr}
//   POST /api/studies/NAME/{pause,resume,cancel,extend,parallelism}
//        body {} or none; extend {"n_trials": N}; parallelism {"parallelism": N}
//        -> the control verb's reply (pause, resume, cancel, extend, set)
// Errors are {"ok": false, "error": MESSAGE} with 400 (a bad value or body: the control verbs'
// own messages), 403 (no or a wrong token), 404 (no such study, trial or path), 405 (another
// method; Allow says which), 409 (the study's state does not allow it), 503 (shutting down).
//
// Access: every POST needs "Authorization: Bearer TOKEN" (token.h) and acts as triald's own
// user would on the control socket (the verbs' ownership check then passes, as for trialctl run
// by that user). Reads need the token too unless the control socket's read verbs are open to
// everyone (--socket-read-open): anyone who can reach the port could read otherwise, and TCP
// tells the daemon nothing of who they are. The page is served to anyone: it holds no data.
//
// Cost: studies are read from Storage into snapshots shared by every viewer, each rebuilt at
// most once per snapshot_interval_s and only when asked: the study list with the `studies` verb
// (counting queries), a study incrementally (Storage::GetTrialsSince: only trials that are new or
// were unfinished), keeping its newest max_snapshot_trials trials; a trial page's answer is kept
// as long. A study not asked for within kForgetAfter is dropped. So viewers cost the daemon
// copies of a shared string, not database reads.
//
// Thread-safety: event-loop thread only (it uses the Scheduler and Storage).

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/control/verbs.h"
#include "daemon/scheduler.h"
#include "daemon/storage/storage.h"

namespace triald::daemon::http {

struct ApiOptions {
  Scheduler* scheduler = nullptr;
  storage::Storage* storage = nullptr;
  std::string state_dir;
  double node_timeout_s = 30;
  bool read_open = false;  // the control socket's --socket-read-open
  std::string token;       // actions (and reads unless read_open) need it
  double snapshot_interval_s = 1;
  int max_snapshot_trials = 5000;    // a study snapshot keeps its newest trials, this many
  size_t max_curve_points = 200;     // intermediate values per trial in a study snapshot
  size_t max_finished_curves = 50;   // finished trials whose curves a study snapshot carries
  size_t log_tail_bytes = 32 << 10;  // stdout/stderr shown on a trial page
};

struct ApiRequest {
  std::string_view method;
  std::string_view target;         // path and query
  std::string_view authorization;  // the Authorization header, "" when none
  std::string_view body;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::shared_ptr<const std::string> body;
  std::string allow;  // 405: the methods the path takes
};

// What an answer read off the event loop (an Api whose options have no scheduler, on the
// servers' ReadThread: control/read_thread.h) takes from the scheduler's memory, gathered on
// the loop first without storage (Api::GatherMemory).
struct ApiMemory {
  // A study's `status` fields from memory (control/verbs.h AddStatusMemory), by study name.
  std::map<std::string, boost::json::object> status;
  std::vector<Scheduler::RunningView> running;  // this node's running trials
};

class Api {
 public:
  explicit Api(ApiOptions options);
  ~Api();
  // `memory`: what the scheduler's memory holds for the request (GatherMemory), for an Api
  // that has no scheduler; null: asked of options.scheduler.
  ApiResponse Handle(const ApiRequest& request, const ApiMemory* memory = nullptr);
  // On the event loop, with this Api's scheduler: what `request` (a GET) needs of its memory.
  ApiMemory GatherMemory(const ApiRequest& request) const;
  // The next answers are built afresh (a change was made through another Api).
  void Invalidate();

  // An action stored off the event loop (shared storage, control/read_thread.h), in three steps
  // on two Apis; Handle runs all of it on the loop instead:
  //   CheckAction (any Api, no storage): the path, method, token and body of a POST; the answer
  //     when they are wrong, else the change it asks for (scheduler/control_change.h);
  //   StoreAction (the ReadThread's Api, with its storage): the change stored (StoreControl);
  //     the answer when it is refused or cannot be stored;
  //   FollowAction (the loop's Api, with the scheduler): the scheduler's memory follows what
  //     was stored (Scheduler::FollowControl); the answer, as Handle's.
  std::variant<ApiResponse, ControlChange> CheckAction(const ApiRequest& request) const;
  std::variant<ApiResponse, ControlStored> StoreAction(const ControlChange& change);
  ApiResponse FollowAction(const ControlChange& change, const ControlStored& stored);

 private:
  struct StudySnapshot;
  struct Cached {
    std::chrono::steady_clock::time_point built{};
    std::shared_ptr<const std::string> json;
  };
  ApiResponse Studies();
  ApiResponse Study(const std::string& name, const ApiMemory* memory);
  ApiResponse Trial(const std::string& name, const std::string& number, const ApiMemory* memory);
  // This node's running trials: from `memory`, else the scheduler (none without either).
  std::vector<Scheduler::RunningView> Running(const ApiMemory* memory) const;
  // A request's path decoded and checked (method, token): `answer` when it ends there.
  struct Routed {
    std::optional<ApiResponse> answer;
    std::vector<std::string> seg;  // the decoded path segments
    bool action = false;           // POST /api/studies/NAME/ACTION
    Routed& Answer(ApiResponse a) {
      answer = std::move(a);
      return *this;
    }
  };
  Routed Route(const ApiRequest& request) const;
  // An action's verb and arguments, from the study's name, the action and the body; the answer
  // when the body is wrong.
  struct ActionCall {
    std::string verb;
    boost::json::object args;
  };
  std::variant<ApiResponse, ActionCall> ActionArgs(const std::string& name,
                                                   const std::string& action,
                                                   std::string_view body) const;
  ApiResponse RunAction(const ActionCall& call);
  bool Fresh(std::chrono::steady_clock::time_point built) const;
  void Forget();

  ApiOptions options_;
  VerbContext context_;
  PeerCredentials owner_;  // the daemon's own uid: what a token holder acts as
  Cached studies_;
  std::map<std::string, std::unique_ptr<StudySnapshot>> studies_by_name_;
  std::map<std::string, Cached> trials_;  // "study/number"
};

// "%41b" -> "Ab"; nullopt-like empty with ok=false on a bad escape.
bool PercentDecode(std::string_view in, std::string* out);

}  // namespace triald::daemon::http
