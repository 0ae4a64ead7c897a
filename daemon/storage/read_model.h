#pragma once
// ReadModel: the reads of studies, trials and events, which the views (trialctl's read verbs,
// the dashboard) and the scheduler make. Part of Storage (storage.h states the contract every
// part shares).
//
// Contract (tests/daemon/storage/read_model_test.cc, on every backend):
// - Trials come back with their params (and distributions), intermediate values, attributes
//   and outcome as written, in number order.
// - Unknown study or trial: kNotFound.
// - CountTrials and GetBestTrial answer without loading any trial.
//
// Thread-safety: implementations are not thread-safe (see storage.h).

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::storage {

// A study's trials counted by state, and the totals a summary shows (ReadModel::CountTrials).
struct TrialCounts {
  int64_t waiting = 0;
  int64_t running = 0;
  int64_t complete = 0;
  int64_t pruned = 0;
  int64_t failed = 0;
  int64_t retries = 0;     // trials that retry an earlier one (retry_of set), any state
  int64_t ran = 0;         // finished trials that started (started_at > 0)
  double ran_seconds = 0;  // their run time in total (model::TrialRecord::DurationSeconds)
  int64_t total() const { return waiting + running + complete + pruned + failed; }
  // Configurations finished: a failed trial that a retry replaced does not count (n_trials
  // counts configurations).
  int64_t finished() const { return complete + pruned + failed - retries; }
};

// Whether a read of trials loads their intermediate values, or only counts them
// (TrialRecord::intermediate_not_loaded): a view that shows no curve costs the same whatever the
// trials reported.
enum class Curves { kLoad, kCount };

class ReadModel {
 public:
  virtual ~ReadModel() = default;

  virtual common::Result<model::StudyRecord> GetStudy(const std::string& name) = 0;
  virtual common::Result<std::vector<model::StudyRecord>> ListStudies() = 0;

  virtual common::Result<std::vector<model::TrialRecord>> GetTrials(int64_t study_id) = 0;
  virtual common::Result<model::TrialRecord> GetTrial(int64_t study_id, int number) = 0;
  // The study's trials whose number is >= from_number or listed in `numbers`, by number:
  // what may have changed since a caller saw trials 0..from_number-1, `numbers` being those it
  // saw unfinished. Unknown study: kNotFound.
  virtual common::Result<std::vector<model::TrialRecord>> GetTrialsSince(
      int64_t study_id, int from_number, const std::vector<int>& numbers) = 0;
  // Every trial in state RUNNING, of any study and node (recovery after a crash).
  virtual common::Result<std::vector<model::TrialRecord>> GetRunningTrials() = 0;

  // What a study summary needs, counted by the storage without loading any trial (read verbs
  // such as `studies` and `status` cost the same for ten trials as for a million). Unknown
  // study: kNotFound.
  virtual common::Result<TrialCounts> CountTrials(int64_t study_id) = 0;
  // The best COMPLETE trial whose value is not NaN for `direction` (the lowest number among
  // equal values), or nullopt when there is none; its intermediate values are counted, not
  // loaded (Curves::kCount). Unknown study: kNotFound.
  virtual common::Result<std::optional<model::TrialRecord>> GetBestTrial(
      int64_t study_id, config::Direction direction) = 0;
  // The study's trials numbered from_number to from_number + limit - 1 (numbers are dense, so
  // this is a page of at most `limit`), by number, with their intermediate values loaded or
  // counted (`curves`). limit must be positive (else kInvalidArgument). Unknown study: kNotFound.
  virtual common::Result<std::vector<model::TrialRecord>> GetTrialPage(int64_t study_id,
                                                                       int from_number, int limit,
                                                                       Curves curves) = 0;

  // How the study's last `limit` FAIL trials failed (by number, newest first), for tallies
  // (model::FailSummary, FailKey): reason, exit_code, signal and only the last
  // kRecentFailureDetailBytes of each detail (where a traceback's last line is), never the
  // stderr tail, so the read stays small however long the tracebacks. limit must be positive
  // (else kInvalidArgument). Unknown study: kNotFound.
  static constexpr int kRecentFailureDetailBytes = 512;
  virtual common::Result<std::vector<model::FailInfo>> GetRecentFailures(int64_t study_id,
                                                                         int limit) = 0;

  // The events of a study (with those of its trials), or every event; oldest first.
  virtual common::Result<std::vector<model::EventRecord>> GetEvents(
      std::optional<int64_t> study_id) = 0;
  // The events recorded against trial `trial_id` (by its id), oldest first; NotFound when no
  // trial has that id. Read through the events' trial index: one trial's page need not read the
  // whole study's events.
  virtual common::Result<std::vector<model::EventRecord>> GetTrialEvents(int64_t trial_id) = 0;
};

}  // namespace triald::storage
