#pragma once
// The SQL layer under both Storage backends (sqlite_storage.cc, postgres_storage.cc): the
// statements they share, written once with SQLite's numbered placeholders (?1, ?2, ...) and
// translated for PostgreSQL ($1, $2, ...); the readers that turn a result row into a record
// whichever library produced it; the explanation of a guarded write that changed nothing; and
// the assembly of trials from the four queries that load them. Not part of the Storage
// interface.
//
// A backend adapts its own result type to sql::Row (column accessors by position) and runs the
// statements; everything that depends only on the schema lives here.
//
// Thread-safety: the functions are pure; a TrialAssembly is used by one thread.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/storage/distribution_cache.h"

namespace triald::storage::sql {

enum class Dialect { kSqlite, kPostgres };

// One row of a result, read by column position (0-based). Text returns the column's bytes as
// stored (TEXT or bytea alike); Int reads any integer or boolean column.
class Row {
 public:
  virtual ~Row() = default;
  virtual bool IsNull(int col) const = 0;
  virtual int64_t Int(int col) const = 0;
  virtual double Real(int col) const = 0;
  virtual std::string Text(int col) const = 0;
};

// `sql` for `dialect`: SQLite's as written; PostgreSQL's with each placeholder ?N written $N.
// The shared statements hold no '?' other than placeholders.
std::string For(Dialect dialect, const std::string& sql);

// ---- Studies ----

// The columns ReadStudyRow reads, in its order (a SELECT's list, from table studies).
extern const char kStudyColumns[];
// A study row of kStudyColumns. `location` (the database's path or masked URL) is named in the
// kInternal error of a row whose direction, state or directions are unknown.
common::Result<model::StudyRecord> ReadStudyRow(const Row& row, const std::string& location);

// ---- Trials ----

// The columns ReadTrialRow reads, in its order (a SELECT's list, from "trials t"). SQLite
// stores a NaN value as NULL with value_is_nan set; PostgreSQL stores NaN itself.
std::string TrialColumns(Dialect dialect);
common::Result<model::TrialRecord> ReadTrialRow(const Row& row, const std::string& location);

// Which trials a load covers, and the parameters each filter's statements take:
// kStudy ?1 study id; kStudyNumber ?1 study id, ?2 number; kRunning none (every study's RUNNING
// trials); kSince ?1 study id, ?2 first number, ?3 the other numbers (SQLite: a JSON array of
// them; PostgreSQL: an int4 array); kRange ?1 study id, ?2 first number, ?3 end (excluded).
enum class TrialFilter { kStudy, kStudyNumber, kRunning, kSince, kRange };

// The four statements that load a selection of trials, in `dialect`: one per table for the
// whole selection, joined through trials with the same filter, instead of one per trial (a
// study of thousands of trials loads in four statements). Their rows feed TrialAssembly's
// AddTrial, AddParam, AddIntermediate and AddAttr.
struct TrialQueries {
  std::string trials;
  std::string params;
  std::string intermediate;
  std::string attrs;
  // Instead of `intermediate` (Curves::kCount): trial_id, the number of its values.
  std::string intermediate_counts;
};
TrialQueries LoadTrialsSql(Dialect dialect, TrialFilter filter);

// Builds the trials of a load from the rows of LoadTrialsSql's statements: trials first, then
// the rows of the other three in any order (a row whose trial the first statement did not
// return, added by a concurrent writer in between, is skipped).
class TrialAssembly {
 public:
  // `distributions` (not owned, outlives this) parses each stored distribution once; `op`
  // prefixes errors; `location` as for ReadTrialRow.
  TrialAssembly(DistributionCache* distributions, std::string op, std::string location);

  common::Status AddTrial(const Row& row);
  // trial_id, name, internal_value, distribution_json. kInternal for a distribution that does
  // not parse.
  common::Status AddParam(const Row& row);
  // trial_id, step, value (NULL: a NaN SQLite stored).
  void AddIntermediate(const Row& row);
  // trial_id, count: a row of intermediate_counts.
  void AddIntermediateCount(const Row& row);
  // trial_id, key, value_json.
  void AddAttr(const Row& row);

  bool empty() const { return trials_.empty(); }
  std::vector<model::TrialRecord> Take() { return std::move(trials_); }

 private:
  model::TrialRecord* Find(int64_t trial_id);

  DistributionCache* distributions_;
  std::string op_;
  std::string location_;
  std::vector<model::TrialRecord> trials_;
  std::unordered_map<int64_t, size_t> index_;  // trial id -> position in trials_
};

// ReadModel::GetRecentFailures: ?1 study id, ?2 limit; its rows are read by ReadFailureRow
// (reason, exit code, signal, the detail's last kRecentFailureDetailBytes).
std::string RecentFailuresSql(Dialect dialect);
model::FailInfo ReadFailureRow(const Row& row);

// ---- Guarded writes ----

// The statement that looks up what TrialNotMutable explains, ?1 the trial's id.
extern const char kTrialStateSql[];
// Why a write guarded by the trial's state (WHERE state IN ('WAITING', 'RUNNING'), or
// 'WAITING' and claimable when `require_waiting`) changed no row. `row` is kTrialStateSql's row,
// or null when the trial does not exist (kNotFound); `node` this storage's node. A finished
// trial, or one not WAITING or claimed by another node when `require_waiting`, is
// kFailedPrecondition; a trial that would have been changed is kInternal (the guard saw a
// state the trial no longer has: impossible while finished trials never change).
common::Status TrialNotMutable(const Row* row, int64_t trial_id, const std::string& op,
                               bool require_waiting, const std::string& node);

// ---- Events ----

// The columns ReadEventRow reads (from table events).
extern const char kEventColumns[];
model::EventRecord ReadEventRow(const Row& row);

// ---- Studies: deletion ----

// The statements that delete a study (DeleteStudy), children first, each with the study's id
// as ?1 (`dialect`'s placeholder): the params, intermediate values and attributes of its
// trials, its events and its trials' events, its trials, then the study.
std::vector<std::string> DeleteStudyStatements(Dialect dialect);

}  // namespace triald::storage::sql
