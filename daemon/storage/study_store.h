#pragma once
// StudyStore: the writes of studies, and the batches that group a daemon's writes into one
// durable commit. Part of Storage (storage.h states the contract every part shares: durability,
// batches, shared storage); the scheduler writes through it.
//
// Contract (tests/daemon/storage/study_store_test.cc, on every backend):
// - Study names are unique: CreateStudy of a taken name returns kAlreadyExists.
// - Unknown study: kNotFound.
// - CreateStudy, SetStudyState, SetStudyControl and DeleteStudy are durable state changes.
//
// Thread-safety: implementations are not thread-safe (see storage.h).

#include <optional>
#include <string>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::storage {

class StudyStore {
 public:
  virtual ~StudyStore() = default;

  // Batches nest; only the outermost CommitBatch commits. Default: every call commits alone.
  virtual common::Status BeginBatch() { return common::Status::Ok(); }
  virtual common::Status CommitBatch() { return common::Status::Ok(); }

  // Inside a batch: locks the study until the outermost CommitBatch (PostgreSQL: SELECT ... FOR
  // NO KEY UPDATE of its row) and returns it as stored now. Outside a batch:
  // kFailedPrecondition.
  virtual common::Result<model::StudyRecord> LockStudy(int64_t study_id) = 0;

  virtual common::Result<model::StudyRecord> CreateStudy(const model::NewStudy& study,
                                                         double at) = 0;
  virtual common::Status SetStudyState(int64_t study_id, model::StudyState state, double at) = 0;
  // Control after submit: stores the study's paused flag, n_trials and parallelism override
  // (model::StudyRecord) together; a durable state change. n_trials must be >= 1 and
  // parallelism >= 0 (else kInvalidArgument); unknown study: kNotFound.
  virtual common::Status SetStudyControl(int64_t study_id, bool paused, int n_trials,
                                         int parallelism) = 0;
  // Replaces the study's submit choices (model::StudyRecord::submit: the metric names, say,
  // changed after submit); a durable state change. Unknown study: kNotFound.
  virtual common::Status SetStudySubmit(int64_t study_id, const config::SubmitChoices& submit) = 0;
  // Removes the study with its trials and their params, intermediate values, attributes and
  // events (the study's and its trials'); a durable state change. Whether it may be removed
  // (no trial running) is the caller's decision. Unknown study: kNotFound.
  virtual common::Status DeleteStudy(int64_t study_id) = 0;

  // Records an event against a study, a trial of it, or neither (ReadModel::GetEvents reads
  // them back). kNotFound naming the study or trial that does not exist.
  virtual common::Status AppendEvent(std::optional<int64_t> study_id,
                                     std::optional<int64_t> trial_id, const std::string& kind,
                                     const std::string& detail, double at) = 0;
};

}  // namespace triald::storage
