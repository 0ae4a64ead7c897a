#pragma once
// Storage: the durable record of studies and trials. The scheduler talks only to this
// interface, so a second backend (PostgreSQL, for several daemons sharing a study) can slot in.
//
// Contract (checked by tests/daemon/storage_contract_test.cc against every implementation):
// - Study names are unique: CreateStudy of a taken name returns kAlreadyExists.
// - Trial numbers are dense and 0-based within a study, assigned by CreateTrial.
// - Finished trials (COMPLETE, PRUNED, FAIL) are immutable: changing one returns
//   kFailedPrecondition and leaves it as it was.
// - Unknown study or trial: kNotFound.
// - A state change (CreateStudy, SetStudyState, CreateTrial, MarkRunning, FinishTrial) is durable
//   when the call returns, or, inside a batch, when the outermost CommitBatch returns.
//   AddIntermediate and SetAttr may be made durable lazily (at the latest by the next state
//   change).
// - Batches group changes into one atomic, durable commit (one fsync for SQLite): the daemon
//   wraps each event it handles in one, so a trial's end and its successor's start cost one
//   sync each, not one per row. A failed call inside a batch leaves the batch's earlier changes
//   in place.
//
// Thread-safety: implementations are not thread-safe; the daemon calls them from its one event
// loop thread.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/storage/records.h"

namespace triald::storage {

class Storage {
 public:
  virtual ~Storage() = default;

  // Batches nest; only the outermost CommitBatch commits. Default: every call commits alone.
  virtual common::Status BeginBatch() { return common::Status::Ok(); }
  virtual common::Status CommitBatch() { return common::Status::Ok(); }

  virtual common::Result<StudyRecord> CreateStudy(const NewStudy& study, double at) = 0;
  virtual common::Result<StudyRecord> GetStudy(const std::string& name) = 0;
  virtual common::Result<std::vector<StudyRecord>> ListStudies() = 0;
  virtual common::Status SetStudyState(int64_t study_id, StudyState state, double at) = 0;

  // Creates a trial in state WAITING (queued, e.g. after a restart) or RUNNING is not allowed
  // here: a trial becomes RUNNING only through MarkRunning once its process exists.
  virtual common::Result<TrialRecord> CreateTrial(int64_t study_id, const ParamMap& params,
                                                  double at,
                                                  std::optional<int64_t> retry_of = {}) = 0;
  virtual common::Status MarkRunning(int64_t trial_id, const ProcessIdentity& process,
                                     double at) = 0;
  virtual common::Status AddIntermediate(int64_t trial_id, int64_t step, double value) = 0;
  virtual common::Status SetAttr(int64_t trial_id, const std::string& key,
                                 const std::string& json_value) = 0;
  virtual common::Status FinishTrial(int64_t trial_id, const TrialOutcome& outcome, double at) = 0;

  virtual common::Result<std::vector<TrialRecord>> GetTrials(int64_t study_id) = 0;
  virtual common::Result<TrialRecord> GetTrial(int64_t study_id, int number) = 0;
  // Every trial in state RUNNING, of any study (recovery after a crash).
  virtual common::Result<std::vector<TrialRecord>> GetRunningTrials() = 0;

  virtual common::Status AppendEvent(std::optional<int64_t> study_id,
                                     std::optional<int64_t> trial_id, const std::string& kind,
                                     const std::string& detail, double at) = 0;
  virtual common::Result<std::vector<Event>> GetEvents(std::optional<int64_t> study_id) = 0;
};

}  // namespace triald::storage
