#pragma once
// The control verbs: one table of (name, kind, handler). Dispatch, access control (which verbs
// a read-only client may use) and the "unknown verb" error all read it, so adding a verb is one
// row and the read-verb list cannot drift from the handlers.
//
// Verbs (arguments -> result; the wire format is in proto/control.h):
//   ping     {} -> {pid, running, queued, state_dir, node, shared}
//   submit   {sweep, path} -> {study, n_trials, seed}: the caller becomes the study's
//            submitter                                                  (creating)
//   studies  {} -> [StudySummaryJson]
//   status   {study} -> StudySummaryJson
//   trials   {study} -> [TrialToJson]
//   best     {study} -> TrialToJson of the best COMPLETE trial
//   cancel   {study} -> {study, state: "CANCELLED"}                        (mutating)
//   enqueue  {study, params: {name: "value text"}} -> {study, trial, params}: a trial with fixed
//            parameters that runs next (Scheduler::Enqueue); a JSON number or boolean value is
//            taken as its text.                                             (mutating)
//   logs     {study, trial, stream} -> {path, state, content, exists}
//   export   {study} -> StudyExportJson: the study and every trial with its parameters'
//            internal values and distributions (trialctl report / export).
//   nodes    {} -> [{name, self, alive, silent_for, first_beat, last_beat, running}]: the
//            daemons sharing the storage (this one alone on a storage of its own).
// A mutating verb acts on the study named by its "study" argument and is allowed only to that
// study's submitter, triald's own uid and root (AuthorizeStudyVerb); without a "study" argument
// only root and triald's uid may use it, so a verb added later fails closed.
// Reads come straight from Storage (the scheduler writes through), so finished and active
// studies look the same; writes go through the Scheduler.
//
// Thread-safety: the table is immutable and may be read from any thread; handlers run on the
// event-loop thread (they use the Scheduler and Storage).

#include <boost/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/control/access.h"
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

struct Verb {
  std::string_view name;
  VerbKind kind;
  VerbHandler handler;
};

// Every verb, in the order the "unknown verb" error lists them.
const std::vector<Verb>& Verbs();
// The verb called `name`, or nullptr.
const Verb* FindVerb(std::string_view name);
// True for the verbs of kind kRead. Anything else, including unknown verbs and ones added
// later without a kind, counts as mutating, so access fails closed.
bool IsReadVerb(std::string_view verb);

// Whether `caller` may use `verb` with `args` as far as study ownership goes: Ok for read and
// creating verbs and for root and `policy.daemon_uid`; for a mutating verb, Ok when the caller
// submitted the study named by args["study"] (a study that does not exist is left to the verb
// to report), permission_denied otherwise, and when that argument is missing or not a string.
common::Status AuthorizeStudyVerb(storage::Storage& storage, const AccessPolicy& policy,
                                  const PeerCredentials& caller, const std::string& verb,
                                  const boost::json::object& args);

// Runs `verb` with `args`; an unknown verb is invalid_argument listing the known ones.
common::Result<boost::json::value> HandleVerb(const VerbContext& context, const std::string& verb,
                                              const boost::json::object& args);

}  // namespace triald::daemon
