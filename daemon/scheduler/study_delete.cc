#include "daemon/scheduler/study_delete.h"

#include <algorithm>

#include "daemon/scheduler/control_change.h"
#include "daemon/scheduler/storage_batch.h"

namespace triald::daemon {

using common::Result;
using common::Status;

Status DecideDelete(const std::string& name, const storage::TrialCounts& counts,
                    const DeleteHold& hold) {
  const int64_t running = std::max(counts.running, hold.running_here);
  if (running > 0) {
    return common::FailedPrecondition(
        "cannot delete study \"" + name + "\": " + std::to_string(running) + " of its trials " +
        (running == 1 ? "is" : "are") +
        " running; expected none (wait for them, or `trialctl cancel` it first)");
  }
  if (hold.ends_pending) {
    return common::FailedPrecondition("cannot delete study \"" + name +
                                      "\": its last trials' ends are still being stored; "
                                      "try again in a moment");
  }
  if (hold.claim_in_flight) {
    return common::FailedPrecondition("cannot delete study \"" + name +
                                      "\": a trial of it is being claimed on this node; try "
                                      "again in a moment, or `trialctl pause` it first");
  }
  return Status::Ok();
}

std::string DeletedDetail(const std::string& name, model::StudyState state, int64_t trials,
                          bool purge) {
  return "study " + name + " (" + model::StudyStateName(state) + ", " + std::to_string(trials) +
         " trials)" + (purge ? ", its folder purged" : "");
}

Result<DeleteStored> StoreDelete(storage::Storage& storage, const DeleteHold& hold, bool purge,
                                 double now) {
  TRIALD_RETURN_IF_ERROR(storage.BeginBatch());
  BatchEnd ender(storage);
  Result<model::StudyRecord> named = storage.GetStudy(hold.study);
  if (!named.ok()) {
    return named.status().code() == common::Code::kNotFound ? NoStudyNamed(hold.study)
                                                            : named.status();
  }
  DeleteStored stored;
  TRIALD_ASSIGN_OR_RETURN(stored.rec, storage.LockStudy(named->id));
  TRIALD_ASSIGN_OR_RETURN(storage::TrialCounts counts, storage.CountTrials(stored.rec.id));
  TRIALD_RETURN_IF_ERROR(DecideDelete(hold.study, counts, hold));
  stored.deleted_trials = counts.total();
  TRIALD_RETURN_IF_ERROR(storage.DeleteStudy(stored.rec.id));
  // Stored without a study (it is gone), naming it.
  if (Status st = storage.AppendEvent(
          std::nullopt, std::nullopt, "study_deleted",
          DeletedDetail(hold.study, stored.rec.state, stored.deleted_trials, purge), now);
      !st.ok()) {
    stored.errors.push_back("storing event study_deleted: " + st.message());
  }
  Status committed = ender.Commit();
  if (!committed.ok()) return committed.WithContext("storing the deletion");
  return stored;
}

}  // namespace triald::daemon
