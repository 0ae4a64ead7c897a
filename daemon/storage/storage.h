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
// - A state change (CreateStudy, SetStudyState, SetStudyControl, DeleteStudy, CreateTrial,
//   MarkRunning, FinishTrial) is durable
//   when the call returns, or, inside a batch, when the outermost CommitBatch returns.
//   AddIntermediate, SetAttr and AddTrialParam may be made durable lazily (at the latest by the
//   next state change).
// - Batches group changes into one atomic, durable commit (one fsync for SQLite): the daemon
//   wraps each event it handles in one, so a trial's end and its successor's start cost one
//   sync each, not one per row. A failed call inside a batch leaves the batch's earlier changes
//   in place.
//
// - Every trial records the node (daemon) that claimed or ran it: a storage is opened with this
//   daemon's node name; ClaimTrial and MarkRunning set it. "" while a WAITING trial is unclaimed.
//
// Shared storage (shared() true: PostgreSQL, several daemons on several hosts): other daemons
// change studies and trials between any two calls. A daemon then
// - wraps every change to a study's trials in a batch that starts with LockStudy, which holds
//   the study's lock until the batch commits, so claims, trial numbering, n_trials, retries
//   and lost-trial recovery are decided by one daemon at a time per study; a batch locks at
//   most one study, so two daemons never wait for each other in a cycle;
// - reads what others changed with GetTrialsSince (finished trials never change, so a daemon
//   re-reads only trials it has not seen finish);
// - records its liveness with Heartbeat; GetNodes tells which nodes have gone silent, measured
//   by the storage's own clock (the database server's), so hosts' clocks need not agree.
// SQLite is not shared (one daemon per state directory; SqliteOptions::shared lets tests play
// several nodes on one file, where BEGIN IMMEDIATE makes every batch exclusive): LockStudy
// needs no lock there, but every call behaves as specified, and the contract suite checks both.
//
// Thread-safety: implementations are not thread-safe; the daemon calls them from its one event
// loop thread.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::storage {

// A study's trials counted by state, and the totals a summary shows (Storage::CountTrials).
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

class Storage {
 public:
  virtual ~Storage() = default;

  // Batches nest; only the outermost CommitBatch commits. Default: every call commits alone.
  virtual common::Status BeginBatch() { return common::Status::Ok(); }
  virtual common::Status CommitBatch() { return common::Status::Ok(); }

  // Whether other daemons may change this storage (see above).
  virtual bool shared() const { return false; }
  // This daemon's node name, recorded by ClaimTrial and MarkRunning, and where it runs
  // (model::NodeRecord::instance), recorded by Heartbeat.
  virtual const std::string& node() const = 0;
  virtual const std::string& instance() const = 0;

  // Inside a batch: locks the study until the outermost CommitBatch (PostgreSQL: SELECT ... FOR
  // NO KEY UPDATE of its row) and returns it as stored now. Outside a batch:
  // kFailedPrecondition.
  virtual common::Result<model::StudyRecord> LockStudy(int64_t study_id) = 0;

  virtual common::Result<model::StudyRecord> CreateStudy(const model::NewStudy& study,
                                                         double at) = 0;
  virtual common::Result<model::StudyRecord> GetStudy(const std::string& name) = 0;
  virtual common::Result<std::vector<model::StudyRecord>> ListStudies() = 0;
  virtual common::Status SetStudyState(int64_t study_id, model::StudyState state, double at) = 0;
  // Control after submit: stores the study's paused flag, n_trials and parallelism override
  // (model::StudyRecord) together; a durable state change. n_trials must be >= 1 and
  // parallelism >= 0 (else kInvalidArgument); unknown study: kNotFound.
  virtual common::Status SetStudyControl(int64_t study_id, bool paused, int n_trials,
                                         int parallelism) = 0;
  // Removes the study with its trials and their params, intermediate values, attributes and
  // events (the study's and its trials'); a durable state change. Whether it may be removed
  // (no trial running) is the caller's decision. Unknown study: kNotFound.
  virtual common::Status DeleteStudy(int64_t study_id) = 0;

  // Creates a trial in state WAITING (queued, e.g. after a restart) or RUNNING is not allowed
  // here: a trial becomes RUNNING only through MarkRunning once its process exists.
  virtual common::Result<model::TrialRecord> CreateTrial(int64_t study_id,
                                                         const model::ParamMap& params, double at,
                                                         std::optional<int64_t> retry_of = {}) = 0;
  // Claims a WAITING trial for this node (sets its node; it stays WAITING until MarkRunning).
  // kFailedPrecondition when the trial is not WAITING. Which trials may be claimed is the
  // caller's decision, made under LockStudy (the scheduler never takes another node's claim).
  virtual common::Status ClaimTrial(int64_t trial_id) = 0;
  // Sets RUNNING with the process identity and this node. kFailedPrecondition unless WAITING
  // and unclaimed or claimed by this node (a node declared dead may have lost its claim).
  virtual common::Status MarkRunning(int64_t trial_id, const model::ProcessIdentity& process,
                                     double at) = 0;
  virtual common::Status AddIntermediate(int64_t trial_id, int64_t step, double value) = 0;
  virtual common::Status SetAttr(int64_t trial_id, const std::string& key,
                                 const std::string& json_value) = 0;
  // Adds a parameter to a WAITING or RUNNING trial: a define-by-run trial's parameters arrive
  // one suggest at a time, after CreateTrial stored those drawn up front. GetTrial, GetTrials and
  // the other reads return it among the trial's params, with its distribution. kAlreadyExists
  // when the trial has a parameter of that name already (from CreateTrial or an earlier call;
  // the stored one is kept: a parameter has one value per trial); kInvalidArgument for a NaN
  // internal value. In a batch like every write; lazily durable, as AddIntermediate.
  virtual common::Status AddTrialParam(int64_t trial_id, const std::string& name,
                                       const model::ParamValue& value) = 0;
  virtual common::Status FinishTrial(int64_t trial_id, const model::TrialOutcome& outcome,
                                     double at) = 0;

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
  // equal values), or nullopt when there is none. Unknown study: kNotFound.
  virtual common::Result<std::optional<model::TrialRecord>> GetBestTrial(
      int64_t study_id, config::Direction direction) = 0;
  // The study's trials numbered from_number to from_number + limit - 1 (numbers are dense, so
  // this is a page of at most `limit`), by number. limit must be positive (else
  // kInvalidArgument). Unknown study: kNotFound.
  virtual common::Result<std::vector<model::TrialRecord>> GetTrialPage(int64_t study_id,
                                                                       int from_number,
                                                                       int limit) = 0;

  // Records that this node is alive (creating its row on first use), with the storage's
  // instance (see model::NodeRecord), at `at` (SQLite) or at the server's time (PostgreSQL).
  virtual common::Status Heartbeat(double at) = 0;
  // Every node that ever beat, with the seconds since its last heartbeat by the same clock
  // (`now` for SQLite).
  virtual common::Result<std::vector<model::NodeRecord>> GetNodes(double now) = 0;

  virtual common::Status AppendEvent(std::optional<int64_t> study_id,
                                     std::optional<int64_t> trial_id, const std::string& kind,
                                     const std::string& detail, double at) = 0;
  virtual common::Result<std::vector<model::EventRecord>> GetEvents(
      std::optional<int64_t> study_id) = 0;
  // The events recorded against trial `trial_id` (by its id), oldest first; NotFound when no
  // trial has that id. Read through the events' trial index: one trial's page need not read the
  // whole study's events.
  virtual common::Result<std::vector<model::EventRecord>> GetTrialEvents(int64_t trial_id) = 0;
};

}  // namespace triald::storage
