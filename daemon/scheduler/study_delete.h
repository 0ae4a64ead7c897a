#pragma once
// A study's deletion (trialctl delete), decided and stored in one place for its two ways:
// StudyControl::Delete on the event loop (a storage of its own, or no servers' reads thread),
// and on shared storage the daemon's servers' reads thread (control/read_thread.h) with its own
// connection, in three steps so that the loop makes no storage call of it:
//   Scheduler::HoldForDelete  the loop: what this node's memory says against deleting now (its
//                             trials running or starting here, ends not yet stored, a claim in
//                             flight: DeleteHold), and no trial of the study starts here until
//                             the deletion is followed or released;
//   StoreDelete               the reads thread: the study read by name and locked, DecideDelete
//                             against storage's counts and the hold, the study removed and its
//                             study_deleted event stored, in one transaction;
//   Scheduler::FollowDelete   the loop: the study forgotten, its folder purged (purge), the
//                             freed slots used (or ReleaseDelete when the deletion was refused).
// Both ways refuse with the same messages (DecideDelete).
//
// Thread-safety: pure functions; StoreDelete uses only the storage it is given.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

// What this node's memory holds against deleting study `study` now.
struct DeleteHold {
  std::string study;                // its name, as the verb gave it
  std::optional<int64_t> study_id;  // held on this node (active here); nullopt: not active
  int64_t running_here = 0;         // its trials running or starting on this node
  bool ends_pending = false;        // ends of its trials not yet stored (the database was away)
  bool claim_in_flight = false;     // a trial of it being claimed off the loop
};

// Why study `name` may not be deleted, with storage's `counts` of its trials and this node's
// `hold`; Ok when it may.
common::Status DecideDelete(const std::string& name, const storage::TrialCounts& counts,
                            const DeleteHold& hold);

// The study_deleted event's detail: "study NAME (STATE, N trials)[, its folder purged]".
std::string DeletedDetail(const std::string& name, model::StudyState state, int64_t trials,
                          bool purge);

// A deletion StoreDelete stored: the study as it was, its trials' count, and what could not be
// stored beside it (the event), for the log.
struct DeleteStored {
  model::StudyRecord rec;
  int64_t deleted_trials = 0;
  std::vector<std::string> errors;
};

// Deletes the study `hold.study` with `storage` in one transaction of its own (the study read by
// name and locked, so no node claims a trial of it meanwhile; DecideDelete; DeleteStudy; the
// study_deleted event at `now`). Errors: NoStudyNamed, DecideDelete's, storage's.
common::Result<DeleteStored> StoreDelete(storage::Storage& storage, const DeleteHold& hold,
                                         bool purge, double now);

}  // namespace triald::daemon
