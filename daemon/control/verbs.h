#pragma once
// The control verbs: one table of (name, kind, handler). Dispatch, access control (which verbs
// a read-only client may use) and the "unknown verb" error all read it, so adding a verb is one
// row and the read-verb list cannot drift from the handlers.
//
// Verbs (arguments -> result; the wire format is in proto/control.h):
//   ping     {} -> {pid, running, queued, state_dir, node, shared, version}
//   submit   {sweep, path, name?, python?, python_version?, resume?, code?} -> {study,
//            n_trials, seed, resumed}: the caller becomes the study's submitter; name replaces
//            [study] name, python (an absolute path, with its version) the interpreter of kind =
//            "python" (trialctl sends the one it resolved in the submitter's environment);
//            resume (or [study] load_if_exists) continues the study of that name when there is
//            one (Scheduler::Submit; then resumed is true); code: the objective's files as the
//            submitter read them (config::CodeFile: path, sha256, bytes, source), kept with a
//            new study                                                      (creating)
//   studies  {} -> [StudySummaryJson]
//   status   {study} -> StudySummaryJson
//   trials   {study, offset?, limit?} -> [TrialToJson]: the trials numbered offset (default 0)
//            on, at most limit of them (default: all)                       (streamed)
//   best     {study} -> one objective: TrialToJson of the best feasible COMPLETE trial;
//            several: {study, directions, complete, feasible, best_trials: [TrialToJson]}, the
//            Pareto front of the feasible COMPLETE trials (daemon/control/best.h) (streamed)
//   cancel   {study} -> {study, state: "CANCELLED"}                        (mutating)
//   enqueue  {study, params: {name: "value text"}, skip_if_exists?} -> {study, trial, params,
//            skipped}: a trial with fixed parameters that runs next (Scheduler::Enqueue; on
//            shared storage stored off the loop, Scheduler::EnqueueOffLoop; a
//            define-by-run study also takes the names its objective suggests); a JSON number
//            or boolean value is taken as its text. skipped: a trial had them already
//            (skip_if_exists), its number is returned and nothing is queued.  (mutating)
//   logs     {study, trial, stream} -> {path, state, content, exists}
//   export   {study} -> {study: StudySummaryJson, trials: [ExportTrialJson]}: the study and
//            every trial with its parameters' internal values and distributions (trialctl
//            report / export).                                              (streamed)
//   nodes    {} -> [{name, self, alive, silent_for, first_beat, last_beat, running}]: the
//            daemons sharing the storage (this one alone on a storage of its own).
//   pause    {study} -> {study, state, paused, n_trials, parallelism}: no new trial starts
//            (Scheduler::Pause)                                             (mutating)
//   resume   {study} -> the same, paused false                             (mutating)
//   extend   {study, n_trials} -> the same: the new total (Scheduler::Extend) (mutating)
//   set      {study, parallelism} -> the same (Scheduler::SetParallelism); {study,
//            metric_names: [..]} -> the same with metric_names (Scheduler::SetMetricNames)
//                                                                           (mutating)
//   delete   {study, purge?} -> {study, deleted_trials, purged}: refused while trials run
//            (Scheduler::Delete; on shared storage stored off the loop:
//            scheduler/study_delete.h)                                      (mutating)
//   events   {study?} -> [{at, kind, detail, trial_id}]: the study's events and its trials',
//            or without a study the daemon's own (none of a study), oldest first.
//   code     {study} -> {study, files: [{path, sha256, bytes, source}]}: the objective's files
//            as trialctl read them at submit, with their source (null: not kept, over 256 KiB or
//            not UTF-8); mutating for its access only: the study's owner        (mutating)
//   ask      {study} -> {study, trial, params, n_objectives, retry_history?, trial_timeout}: a
//            trial of a study of [objective] kind = "client" starts now (Scheduler::Ask), and
//            the connection becomes its trial channel (launcher/client_launcher.h; proto/
//            README.md, "Ask and tell"); nothing may be sent after the request until its
//            reply. A handover verb: HandleVerb and StartVerb refuse it.     (mutating)
// A mutating verb acts on the study named by its "study" argument and is allowed only to that
// study's submitter, triald's own uid and root (AuthorizeStudyVerb); without a "study" argument
// only root and triald's uid may use it, so a verb added later fails closed.
// Reads come straight from Storage (the scheduler writes through), so finished and active
// studies look the same; writes go through the Scheduler. A read costs what it returns:
// `studies`, `status` and `best` use Storage's counting and best-trial queries and never load a
// study's trials (a study with constraints whose best-valued trial is infeasible, and `best` of
// a study with several objectives, scan it a page at a time, keeping one page and the best or
// the front so far: daemon/control/best.h); `trials` and `export` are streamed (ReplyStream),
// a page of kTrialsPerPiece trials at a time, so a study of any size never sits in memory whole.
//
// Thread-safety: the table is immutable and may be read from any thread; handlers run on the
// event-loop thread (they use the Scheduler and Storage), except those that need storage only
// (NeedsStorageOnly), which a context with no scheduler may run on another thread.

#include <boost/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "daemon/control/access.h"
#include "daemon/control/trial_log.h"
#include "daemon/scheduler.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

// What a verb does to the daemon: read verbs are open to read-only clients
// (AccessPolicy::read_open); creating (submit) and mutating verbs need full access, and a
// mutating verb also ownership of its study (AuthorizeStudyVerb).
enum class VerbKind { kRead, kCreate, kMutating };

// What the handlers work on; the pointers are not owned and outlive every call.
struct VerbContext {
  Scheduler* scheduler = nullptr;
  storage::Storage* storage = nullptr;
  std::string state_dir;       // trial folders (and their logs) live under it
  double node_timeout_s = 30;  // shared storage: `nodes` calls a node silent longer dead
  // Who sent the request (submit records it as the study's submitter); null: unknown.
  const PeerCredentials* caller = nullptr;
};

using VerbHandler = common::Result<boost::json::value> (*)(const VerbContext& context,
                                                           const boost::json::object& args);

// The trials a streamed reply reads from Storage and writes at a time.
inline constexpr int kTrialsPerPiece = 256;
// ... and, for a reply with learning curves (`trials`, `export`), the intermediate values: a piece
// holds fewer trials when theirs add up to more (at least one trial: one trial's curve is bounded
// by the daemon's max_intermediate_steps). A client reading a study costs the daemon one such
// piece at a time, whatever the study's size.
inline constexpr int64_t kCurveValuesPerPiece = 64 * 1024;
// What `logs` sends of a log unless asked for the whole: its last 256 KiB.
inline constexpr size_t kLogTailBytes = 256 * 1024;

// A reply produced in pieces: the JSON text of the result, cut anywhere. The control server
// asks for the next piece only once the previous one is written, so a large reply costs the
// daemon one piece of memory at a time and the event loop one page of reads at a time.
// Not thread-safe; the context it was made from must outlive it.
class ReplyStream {
 public:
  virtual ~ReplyStream() = default;
  // The next piece of the result, or "" once the result is complete. An error before any piece
  // is the reply; an error after one ends the reply unfinished (the client sees a reply cut
  // short, never a wrong one).
  virtual common::Result<std::string> Next() = 0;
};

// Starts a streamed reply; an error (bad arguments, unknown study) is the reply.
using VerbStreamer = common::Result<std::unique_ptr<ReplyStream>> (*)(
    const VerbContext& context, const boost::json::object& args);

// A verb that takes its connection over (ask: the connection becomes a trial's channel). Ok:
// the callee owns `connection` now (the daemon's duplicate of the client's socket) and has
// written the reply on it; the control server closes its own descriptor without a word. An
// error is replied as any verb's, the connection staying a control connection.
using VerbHandover = common::Status (*)(const VerbContext& context, const boost::json::object& args,
                                        std::shared_ptr<common::UniqueFd> connection);

// One verb: a handler that returns its whole result, a streamer, or a handover (exactly one is
// set).
struct Verb {
  std::string_view name;
  VerbKind kind;
  VerbHandler handler;
  VerbStreamer streamer = nullptr;
  VerbHandover handover = nullptr;
  // A mutating verb whose handler only reads storage (`code`): on shared storage it runs on the
  // servers' reads thread, its study's ownership checked there, as the read verbs do.
  bool storage_only = false;
};

// Every verb, in the order the "unknown verb" error lists them.
const std::vector<Verb>& Verbs();
// The verb called `name`, or nullptr.
const Verb* FindVerb(std::string_view name);
// True for the verbs of kind kRead. Anything else, including unknown verbs and ones added
// later without a kind, counts as mutating, so access fails closed.
bool IsReadVerb(std::string_view verb);
// True for the verbs that need storage only, not the scheduler: the read verbs and those marked
// storage_only. On shared storage the control server runs them on its reads thread.
bool NeedsStorageOnly(std::string_view verb);

// Whether `caller` may use `verb` with `args` as far as study ownership goes: Ok for read and
// creating verbs and for root and `policy.daemon_uid`; for a mutating verb, Ok when the caller
// submitted the study named by args["study"] (a study that does not exist is left to the verb
// to report), permission_denied otherwise, and when that argument is missing or not a string.
common::Status AuthorizeStudyVerb(storage::ReadModel& storage, const AccessPolicy& policy,
                                  const PeerCredentials& caller, const std::string& verb,
                                  const boost::json::object& args);

// The `logs` reply for {study, trial, stream}, reading at most `limits` of the log (the verb
// reads TrialLogLimits{}; the dashboard's trial page a short tail).
common::Result<boost::json::value> TrialLogReply(const VerbContext& context,
                                                 const boost::json::object& args,
                                                 const TrialLogLimits& limits);

// `submit` in two halves, so that a server can run its checks off the event loop (a root
// daemon's as the submitter take up to kSubmitCheckSeconds; a Slurm study's first check waits
// for sinfo): AdmitSubmission decodes the arguments and admits the sweep
// (Scheduler::Admit: nothing is stored, nothing in the scheduler changes; any thread, with
// `context.caller` the submitter); SubmitAdmitted (the event loop) does the rest, as the verb
// would. The two together are the verb.
struct Submission {
  config::SweepSource source;
  model::Submitter submitter;
  config::SweepSpec spec;  // as admitted
};
common::Result<Submission> AdmitSubmission(const VerbContext& context,
                                           const boost::json::object& args);
common::Result<boost::json::value> SubmitAdmitted(const VerbContext& context,
                                                  Submission submission);
// The verb's result for `study`, submitted (`resumed`: continued).
boost::json::value SubmittedReply(const model::StudyRecord& study, bool resumed);
// `enqueue`'s result: the trial queued, or (skipped) the one that had the values.
boost::json::value EnqueuedReply(const std::string& study, const model::TrialRecord& trial,
                                 bool skipped);
// `delete`'s result: the study deleted with its trials' count, and whether its folder went too.
boost::json::value DeletedReply(const std::string& study, int64_t deleted_trials, bool purged);

// Runs `verb` with `args`; an unknown verb is invalid_argument listing the known ones. A
// streamed verb's pieces are put together and parsed (for tests and in-process callers; the
// control server writes them as they come, StartVerb).
common::Result<boost::json::value> HandleVerb(const VerbContext& context, const std::string& verb,
                                              const boost::json::object& args);

// The fields of a `status` reply that come from the scheduler's memory ("spawn", "storage",
// "fork_server", "slurm"), set on `summary` for `study`: a summary read from storage alone
// (VerbContext::scheduler null: off the event loop, control/read_thread.h) is completed on the
// loop with `context`, the loop's, without storage.
void AddStatusMemory(const VerbContext& context, const std::string& study,
                     boost::json::object* summary);

// The change `verb` with `args` makes when it is one that a server stores off the event loop on
// shared storage (pause, resume, extend, set of the parallelism or the metric names, cancel:
// ControlStored, then Scheduler::FollowControl on the loop); nullopt for any other verb. Errors:
// the verb's own for bad arguments.
common::Result<std::optional<ControlChange>> ControlChangeOf(const std::string& verb,
                                                             const boost::json::object& args);
// The verb's reply to a change so stored: as the verb's own reply on the loop.
boost::json::value ControlStoredReply(const ControlChange& change, const ControlStored& stored);

// Runs `verb` with `args` as a stream: a streamed verb's own, or one piece holding a handled
// verb's whole result. Errors as HandleVerb.
common::Result<std::unique_ptr<ReplyStream>> StartVerb(const VerbContext& context,
                                                       const std::string& verb,
                                                       const boost::json::object& args);

}  // namespace triald::daemon
