#include "daemon/storage/sqlite_storage.h"

#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/storage/backend_util.h"
#include "daemon/storage/distribution_cache.h"

namespace triald::storage {
namespace {

using backend::AddStateCount;
using backend::CheckPageArguments;
using backend::DirectionText;
using backend::Guarded;
using backend::ParseTrialStateColumn;
using backend::StudyIdLabel;
using backend::TrialIdLabel;
using common::Result;
using common::Status;

constexpr int kSchemaVersion = 7;

// The schema as version 1 created it (PRAGMA user_version); kSchemaV2 brings it to version 2.
// Encodings that the column types do not make obvious:
// - studies.seed and trials.pid_start_time hold uint64 values bit-cast to SQLite's signed 64-bit
//   INTEGER: a seed >= 2^63 reads as a negative number in the sqlite3 shell, and reads back
//   exactly through this class.
// - SQLite turns a NaN REAL into NULL, so trials.value is NULL both for "no value" and for NaN;
//   trials.value_is_nan tells the two apart. Infinities are stored as REAL unchanged.
// - trial_intermediate.value is NULL for a reported NaN (a row exists only for a reported step).
// - State and direction columns hold the upper-case names trialctl shows (records.cc).
// Rows are deleted only with their study (DeleteStudy, children first), so the foreign keys
// mostly guard inserts and need no child indexes beyond the primary keys.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE IF NOT EXISTS studies (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE,
  direction   TEXT NOT NULL CHECK (direction IN ('MINIMIZE', 'MAXIMIZE')),
  n_trials    INTEGER NOT NULL,
  state       TEXT NOT NULL CHECK (state IN ('RUNNING', 'COMPLETE', 'CANCELLED')),
  spec_toml   TEXT NOT NULL,
  spec_path   TEXT NOT NULL,
  seed        INTEGER NOT NULL,
  created_at  REAL NOT NULL,
  finished_at REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS trials (
  id               INTEGER PRIMARY KEY,
  study_id         INTEGER NOT NULL REFERENCES studies(id),
  number           INTEGER NOT NULL,
  state            TEXT NOT NULL
                   CHECK (state IN ('WAITING', 'RUNNING', 'COMPLETE', 'PRUNED', 'FAIL')),
  value            REAL,
  value_is_nan     INTEGER NOT NULL DEFAULT 0,
  fail_reason      TEXT NOT NULL DEFAULT '',
  fail_exit_code   INTEGER NOT NULL DEFAULT -1,
  fail_signal      INTEGER NOT NULL DEFAULT 0,
  fail_core_dumped INTEGER NOT NULL DEFAULT 0,
  fail_detail      TEXT NOT NULL DEFAULT '',
  stderr_tail      TEXT NOT NULL DEFAULT '',
  pid              INTEGER NOT NULL DEFAULT 0,
  pgid             INTEGER NOT NULL DEFAULT 0,
  pid_start_time   INTEGER NOT NULL DEFAULT 0,
  created_at       REAL NOT NULL,
  started_at       REAL NOT NULL DEFAULT 0,
  finished_at      REAL NOT NULL DEFAULT 0,
  retry_of         INTEGER REFERENCES trials(id),
  UNIQUE (study_id, number)
);
CREATE INDEX IF NOT EXISTS trials_by_state ON trials(state);
CREATE TABLE IF NOT EXISTS trial_params (
  trial_id          INTEGER NOT NULL REFERENCES trials(id),
  name              TEXT NOT NULL,
  internal_value    REAL NOT NULL,
  distribution_json TEXT NOT NULL,
  PRIMARY KEY (trial_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trial_intermediate (
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  step     INTEGER NOT NULL,
  value    REAL,
  PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trial_attrs (
  trial_id   INTEGER NOT NULL REFERENCES trials(id),
  key        TEXT NOT NULL,
  value_json TEXT NOT NULL,
  PRIMARY KEY (trial_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
  id       INTEGER PRIMARY KEY,
  at       REAL NOT NULL,
  study_id INTEGER REFERENCES studies(id),
  trial_id INTEGER REFERENCES trials(id),
  kind     TEXT NOT NULL,
  detail   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_study ON events(study_id);
CREATE INDEX IF NOT EXISTS events_by_trial ON events(trial_id);
)sql";

// Version 2: the node (daemon) that claimed or ran each trial, and the nodes' heartbeats.
// Trials stored by version 1 get node "" (shown as unknown).
constexpr const char* kSchemaV2 = R"sql(
ALTER TABLE trials ADD COLUMN node TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS nodes (
  name       TEXT PRIMARY KEY,
  instance   TEXT NOT NULL,
  first_beat REAL NOT NULL,
  last_beat  REAL NOT NULL
) WITHOUT ROWID;
PRAGMA user_version = 2;
)sql";

// Version 3: who submitted each study (model::Submitter). Studies stored by version 2 get uid -1
// and name "": submitter unknown, so only root and triald's own uid may change them.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE studies ADD COLUMN submitter_uid INTEGER NOT NULL DEFAULT -1;
ALTER TABLE studies ADD COLUMN submitter_name TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 3;
)sql";

// Version 4: studies with several objectives and constraints. studies.directions holds every
// direction when there are two or more (backend::DirectionsText; "" for one, which `direction`
// holds); trials.values_json a multi-objective trial's values and trials.constraints_json the
// constraints a trial reported (backend::DoublesText; "" for none). A single-objective trial's
// values are its `value`, so studies and trials stored by version 3 read as they did.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE studies ADD COLUMN directions TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN values_json TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN constraints_json TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 4;
)sql";

// Version 5: what each trial consumed, measured by the daemon (backend::ResourcesText; "" for
// none: trials stored before, and trials that never ran).
constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE trials ADD COLUMN resources_json TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 5;
)sql";

// Version 6: control after submit (model::StudyRecord): studies.paused (0 or 1) and
// studies.parallelism (0: the sweep's [study] parallelism). Studies stored by version 5 read as
// not paused, with their sweep's parallelism. Rows are deleted from here on (DeleteStudy).
constexpr const char* kSchemaV6 = R"sql(
ALTER TABLE studies ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE studies ADD COLUMN parallelism INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 6;
)sql";

// Version 7: a study can end FAILED (its sampler or storage failed; the reason is its
// study_failed event). SQLite cannot change a CHECK constraint in place, so the studies table
// is copied into one that allows it (foreign keys are enabled after the upgrade; the copy keeps
// every id, so the trials and events that name studies still find theirs).
constexpr const char* kSchemaV7 = R"sql(
CREATE TABLE studies_v7 (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE,
  direction   TEXT NOT NULL CHECK (direction IN ('MINIMIZE', 'MAXIMIZE')),
  n_trials    INTEGER NOT NULL,
  state       TEXT NOT NULL CHECK (state IN ('RUNNING', 'COMPLETE', 'CANCELLED', 'FAILED')),
  spec_toml   TEXT NOT NULL,
  spec_path   TEXT NOT NULL,
  seed        INTEGER NOT NULL,
  created_at  REAL NOT NULL,
  finished_at REAL NOT NULL DEFAULT 0,
  submitter_uid INTEGER NOT NULL DEFAULT -1,
  submitter_name TEXT NOT NULL DEFAULT '',
  directions TEXT NOT NULL DEFAULT '',
  paused INTEGER NOT NULL DEFAULT 0,
  parallelism INTEGER NOT NULL DEFAULT 0
);
INSERT INTO studies_v7 (id, name, direction, n_trials, state, spec_toml, spec_path, seed,
                        created_at, finished_at, submitter_uid, submitter_name, directions,
                        paused, parallelism)
  SELECT id, name, direction, n_trials, state, spec_toml, spec_path, seed, created_at,
         finished_at, submitter_uid, submitter_name, directions, paused, parallelism
  FROM studies;
DROP TABLE studies;
ALTER TABLE studies_v7 RENAME TO studies;
PRAGMA user_version = 7;
)sql";

constexpr const char* kStudyColumns =
    "id, name, direction, n_trials, state, spec_toml, spec_path, seed, created_at, finished_at, "
    "submitter_uid, submitter_name, directions, paused, parallelism";

// Column list of every trial query; ReadTrialRow reads them by these positions.
#define TRIALD_TRIAL_COLUMNS                                                                   \
  "t.id, t.study_id, t.number, t.state, t.value, t.value_is_nan, t.fail_reason, "              \
  "t.fail_exit_code, t.fail_signal, t.fail_core_dumped, t.fail_detail, t.stderr_tail, t.pid, " \
  "t.pgid, t.pid_start_time, t.created_at, t.started_at, t.finished_at, t.retry_of, "          \
  "(SELECT r.number FROM trials r WHERE r.id = t.retry_of), t.node, t.values_json, "           \
  "t.constraints_json, t.resources_json"

// A cached statement checked out for one use. Resetting on scope exit matters: a SELECT left
// mid-step keeps its read transaction open (blocking WAL checkpoints), and stale bindings
// would leak into the next use.
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(Stmt&& o) noexcept : s_(std::exchange(o.s_, nullptr)), bind_rc_(o.bind_rc_) {}
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() { Reset(); }

  // Binding failures (only out-of-memory or too-big in practice) are remembered and reported
  // by the next Step(), so call sites need not check every bind.
  Stmt& Int(int i, int64_t v) { return Note(sqlite3_bind_int64(s_, i, v)); }
  Stmt& Real(int i, double v) { return Note(sqlite3_bind_double(s_, i, v)); }
  Stmt& Null(int i) { return Note(sqlite3_bind_null(s_, i)); }
  // Binds with an explicit length so that NUL bytes and non-UTF-8 bytes (a worker's stderr)
  // survive; SQLite stores TEXT bytes as given.
  Stmt& Text(int i, const std::string& v) {
    return Note(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& OptInt(int i, const std::optional<int64_t>& v) { return v ? Int(i, *v) : Null(i); }

  int Step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(s_); }
  void Reset() {
    if (s_ == nullptr) return;
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    bind_rc_ = SQLITE_OK;
  }

  int64_t ColInt(int c) const { return sqlite3_column_int64(s_, c); }
  double ColReal(int c) const { return sqlite3_column_double(s_, c); }
  bool ColIsNull(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::string ColText(int c) const {
    const unsigned char* p = sqlite3_column_text(s_, c);  // before column_bytes, as documented
    int n = sqlite3_column_bytes(s_, c);
    return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p), n);
  }

 private:
  Stmt& Note(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }
  sqlite3_stmt* s_;
  int bind_rc_ = SQLITE_OK;
};

Status SqliteError(sqlite3* db, int rc, const std::string& op) {
  std::string msg = op + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return common::Unavailable(msg);
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return common::IoError(msg);
    default:
      return common::Internal(msg);
  }
}

class SqliteStorage final : public Storage {
 public:
  static Result<std::unique_ptr<Storage>> Open(const SqliteOptions& options);
  ~SqliteStorage() override;

  Status BeginBatch() override;
  Status CommitBatch() override;

  Result<model::StudyRecord> CreateStudy(const model::NewStudy& study, double at) override;
  Result<model::StudyRecord> GetStudy(const std::string& name) override;
  Result<std::vector<model::StudyRecord>> ListStudies() override;
  Status SetStudyState(int64_t study_id, model::StudyState state, double at) override;
  Status SetStudyControl(int64_t study_id, bool paused, int n_trials, int parallelism) override;
  Status DeleteStudy(int64_t study_id) override;

  Result<model::TrialRecord> CreateTrial(int64_t study_id, const model::ParamMap& params, double at,
                                         std::optional<int64_t> retry_of) override;
  Status MarkRunning(int64_t trial_id, const model::ProcessIdentity& process, double at) override;
  Status AddIntermediate(int64_t trial_id, int64_t step, double value) override;
  Status SetAttr(int64_t trial_id, const std::string& key, const std::string& json_value) override;
  Status AddTrialParam(int64_t trial_id, const std::string& name,
                       const model::ParamValue& value) override;
  Status FinishTrial(int64_t trial_id, const model::TrialOutcome& outcome, double at) override;

  Result<std::vector<model::TrialRecord>> GetTrials(int64_t study_id) override;
  Result<model::TrialRecord> GetTrial(int64_t study_id, int number) override;
  Result<std::vector<model::TrialRecord>> GetTrialsSince(int64_t study_id, int from_number,
                                                         const std::vector<int>& numbers) override;
  Result<std::vector<model::TrialRecord>> GetRunningTrials() override;
  Result<TrialCounts> CountTrials(int64_t study_id) override;
  Result<std::optional<model::TrialRecord>> GetBestTrial(int64_t study_id,
                                                         config::Direction direction) override;
  Result<std::vector<model::TrialRecord>> GetTrialPage(int64_t study_id, int from_number,
                                                       int limit) override;

  bool shared() const override { return shared_; }
  const std::string& node() const override { return node_; }
  const std::string& instance() const override { return instance_; }
  Result<model::StudyRecord> LockStudy(int64_t study_id) override;
  Status ClaimTrial(int64_t trial_id) override;
  Status Heartbeat(double at) override;
  Result<std::vector<model::NodeRecord>> GetNodes(double now) override;

  Status AppendEvent(std::optional<int64_t> study_id, std::optional<int64_t> trial_id,
                     const std::string& kind, const std::string& detail, double at) override;
  Result<std::vector<model::EventRecord>> GetEvents(std::optional<int64_t> study_id) override;
  Result<std::vector<model::EventRecord>> GetTrialEvents(int64_t trial_id) override;

 private:
  // synchronous=FULL fsyncs the WAL on every commit; NORMAL leaves it to the next FULL commit
  // or checkpoint. kUnknown forces the next SetSync to issue the PRAGMA.
  enum class Sync { kUnknown, kNormal, kFull };

  // Which trials a load covers; each has its own cached statements.
  enum class TrialFilter { kStudy, kStudyNumber, kRunning, kSince, kRange };

  explicit SqliteStorage(sqlite3* db) : db_(db) {}

  Status Init(const SqliteOptions& options);
  Status Err(int rc, const std::string& op) const { return SqliteError(db_, rc, op); }

  // Returns the cached prepared statement for `sql`, preparing it on first use.
  Result<Stmt> Prepare(const std::string& sql, const std::string& op);
  // Runs SQL through sqlite3_exec, uncached. Setting PRAGMAs act while being prepared, and
  // that a cached one acts again when re-stepped is an implementation detail (SQLite 3.40
  // re-prepares it); a fresh prepare costs ~2 us, nothing next to a commit.
  Status ExecUncached(const char* sql, const std::string& op);
  Result<std::string> QueryTextUncached(const char* sql, const std::string& op);
  // Steps a statement that returns no rows (or whose rows are not needed) to completion.
  Status Run(Stmt& st, const std::string& op);

  Status SetSync(Sync mode);
  // BEGIN IMMEDIATE takes the write lock up front: the read-then-write in CreateTrial (next
  // number) then cannot race another writer, and a busy database fails at BEGIN, not midway.
  Status Begin(const std::string& op);
  Status Commit(const std::string& op);
  void RollbackIfActive();

  // Rolls back on scope exit unless Commit() succeeded (also during exception unwinding).
  class TxnGuard {
   public:
    explicit TxnGuard(SqliteStorage* s) : s_(s) {}
    TxnGuard(const TxnGuard&) = delete;
    TxnGuard& operator=(const TxnGuard&) = delete;
    ~TxnGuard() { s_->RollbackIfActive(); }

   private:
    SqliteStorage* s_;
  };

  Status RequireStudy(int64_t study_id, const std::string& op);
  // Explains why a mutation guarded by the trial's state touched no row.
  Status TrialNotMutable(int64_t trial_id, const std::string& op, bool require_waiting);

  // kSince: number >= `number`, or listed in `numbers_json` (a JSON array). kRange: `number`
  // <= number < `end_number`.
  Result<std::vector<model::TrialRecord>> LoadTrials(TrialFilter filter, int64_t study_id,
                                                     int number, const std::string& op,
                                                     const std::string& numbers_json = "[]",
                                                     int64_t end_number = 0);
  Result<model::StudyRecord> ReadStudyRow(const Stmt& st) const;
  Result<model::TrialRecord> ReadTrialRow(const Stmt& st) const;
  // The rows of a SELECT id, at, study_id, trial_id, kind, detail FROM events.
  Result<std::vector<model::EventRecord>> ReadEvents(Stmt& st, const std::string& op);

  DistributionCache distributions_;  // stored distributions, parsed once
  sqlite3* db_;
  std::string path_;
  std::string node_;
  std::string instance_;
  bool shared_ = false;
  // Open batches (BeginBatch minus CommitBatch). Inside a batch, an operation's own
  // transaction becomes a savepoint and the batch's COMMIT is the only (FULL) sync.
  int batch_depth_ = 0;
  bool savepoint_open_ = false;
  Sync sync_ = Sync::kUnknown;
  std::unordered_map<std::string, sqlite3_stmt*> stmts_;
};

Result<std::unique_ptr<Storage>> SqliteStorage::Open(const SqliteOptions& options) {
  if (options.path.empty()) {
    return common::InvalidArgument(
        "SQLite database path is empty; expected a file path or \":memory:\"");
  }
  const std::string where = "open SQLite database \"" + options.path + "\"";
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      options.path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
      nullptr);
  if (rc != SQLITE_OK) {
    Status st = SqliteError(db, rc, where);
    sqlite3_close_v2(db);  // a handle is allocated even when opening fails
    return st;
  }
  std::unique_ptr<SqliteStorage> storage(new SqliteStorage(db));
  storage->path_ = options.path;
  storage->node_ = options.node;
  storage->shared_ = options.shared;
  storage->instance_ = options.instance;
  Status st = storage->Init(options);
  if (!st.ok()) return st.WithContext(where);
  return std::unique_ptr<Storage>(std::move(storage));
}

SqliteStorage::~SqliteStorage() {
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
  // Closing the last connection checkpoints the WAL into the database file and removes it.
  sqlite3_close_v2(db_);
}

Status SqliteStorage::Init(const SqliteOptions& options) {
  // File descriptors: SQLite's unix VFS opens the database, -wal and -shm with O_CLOEXEC (see
  // the fd test), so forked workers never inherit them.
  int rc = sqlite3_busy_timeout(db_, options.busy_timeout_ms);
  if (rc != SQLITE_OK) return Err(rc, "set busy_timeout");
  const char* file = sqlite3_db_filename(db_, "main");
  bool in_memory = file == nullptr || file[0] == '\0';
  if (!in_memory) {
    // Reads never block the writer and a commit appends to one file: the daemon's fsync per
    // state change stays one sequential write.
    TRIALD_ASSIGN_OR_RETURN(std::string mode,
                            QueryTextUncached("PRAGMA journal_mode = WAL", "set journal_mode"));
    if (mode != "wal") {
      return common::FailedPrecondition("could not switch to WAL journal mode (journal_mode is \"" +
                                        mode +
                                        "\"); the file system may not support shared memory");
    }
  }
  TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));

  TRIALD_ASSIGN_OR_RETURN(std::string version_text,
                          QueryTextUncached("PRAGMA user_version", "read schema version"));
  int version = std::atoi(version_text.c_str());
  if (version > kSchemaVersion) {
    return common::FailedPrecondition("database schema version " + std::to_string(version) +
                                      " is newer than this triald supports (" +
                                      std::to_string(kSchemaVersion) + ")");
  }
  if (version < kSchemaVersion) {
    // One transaction: a database is at one version or the next, never in between.
    TRIALD_RETURN_IF_ERROR(Begin("create schema"));
    TxnGuard guard(this);
    if (version < 1) TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaSql, "create schema"));
    if (version < 2) {
      TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaV2, "upgrade schema to version 2"));
    }
    if (version < 3) {
      TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaV3, "upgrade schema to version 3"));
    }
    if (version < 4) {
      TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaV4, "upgrade schema to version 4"));
    }
    if (version < 5) {
      TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaV5, "upgrade schema to version 5"));
    }
    if (version < 6) {
      TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaV6, "upgrade schema to version 6"));
    }
    TRIALD_RETURN_IF_ERROR(ExecUncached(kSchemaV7, "upgrade schema to version 7"));
    TRIALD_RETURN_IF_ERROR(Commit("create schema"));
  }
  // After the upgrade: version 7 copies the studies table, which foreign keys would refuse.
  return ExecUncached("PRAGMA foreign_keys = ON", "enable foreign keys");
}

Result<Stmt> SqliteStorage::Prepare(const std::string& sql, const std::string& op) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return Stmt(it->second);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Err(rc, op + ": prepare");
  }
  stmts_.emplace(sql, stmt);
  return Stmt(stmt);
}

Status SqliteStorage::ExecUncached(const char* sql, const std::string& op) {
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status::Ok() : Err(rc, op);
}

Result<std::string> SqliteStorage::QueryTextUncached(const char* sql, const std::string& op) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(raw);
    return Err(rc, op);
  }
  std::string text;
  rc = sqlite3_step(raw);
  if (rc == SQLITE_ROW) {
    const unsigned char* p = sqlite3_column_text(raw, 0);
    if (p != nullptr) text = reinterpret_cast<const char*>(p);
    rc = sqlite3_step(raw);
  }
  Status st = rc == SQLITE_DONE ? Status::Ok() : Err(rc, op);
  sqlite3_finalize(raw);
  if (!st.ok()) return st;
  return text;
}

Status SqliteStorage::Run(Stmt& st, const std::string& op) {
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
  }
  return rc == SQLITE_DONE ? Status::Ok() : Err(rc, op);
}

Status SqliteStorage::SetSync(Sync mode) {
  if (batch_depth_ > 0) return Status::Ok();  // the batch commits with FULL
  if (sync_ == mode) return Status::Ok();
  sync_ = Sync::kUnknown;
  TRIALD_RETURN_IF_ERROR(ExecUncached(
      mode == Sync::kFull ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
      "set synchronous"));
  sync_ = mode;
  return Status::Ok();
}

Status SqliteStorage::Begin(const std::string& op) {
  if (batch_depth_ > 0) {
    TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("SAVEPOINT triald_op", op));
    TRIALD_RETURN_IF_ERROR(Run(st, op + ": savepoint"));
    savepoint_open_ = true;
    return Status::Ok();
  }
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("BEGIN IMMEDIATE", op));
  return Run(st, op + ": begin transaction");
}

Status SqliteStorage::Commit(const std::string& op) {
  if (batch_depth_ > 0) {
    TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("RELEASE triald_op", op));
    TRIALD_RETURN_IF_ERROR(Run(st, op + ": release savepoint"));
    savepoint_open_ = false;
    return Status::Ok();
  }
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("COMMIT", op));
  return Run(st, op + ": commit");
}

Status SqliteStorage::BeginBatch() {
  if (batch_depth_ > 0) {
    ++batch_depth_;
    return Status::Ok();
  }
  TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("BEGIN IMMEDIATE", "begin batch"));
  TRIALD_RETURN_IF_ERROR(Run(st, "begin batch"));
  batch_depth_ = 1;
  return Status::Ok();
}

Status SqliteStorage::CommitBatch() {
  if (batch_depth_ == 0) return common::FailedPrecondition("CommitBatch without BeginBatch");
  if (--batch_depth_ > 0) return Status::Ok();
  if (sqlite3_get_autocommit(db_)) {
    return common::IoError("batch was rolled back by SQLite before its commit");
  }
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("COMMIT", "commit batch"));
  Status s = Run(st, "commit batch");
  if (!s.ok()) RollbackIfActive();
  return s;
}

void SqliteStorage::RollbackIfActive() {
  if (batch_depth_ > 0) {
    // Undo only the failed operation; the batch's earlier changes stay.
    if (!savepoint_open_ || sqlite3_get_autocommit(db_)) return;
    savepoint_open_ = false;
    auto st = Prepare("ROLLBACK TO triald_op", "rollback to savepoint");
    if (st.ok()) st->Step();
    auto rel = Prepare("RELEASE triald_op", "release savepoint");
    if (rel.ok()) rel->Step();
    return;
  }
  // After some errors (I/O, full disk) SQLite has already rolled back by itself.
  if (sqlite3_get_autocommit(db_)) return;
  auto st = Prepare("ROLLBACK", "rollback");
  if (st.ok()) st->Step();
  // Nothing more can be done when ROLLBACK fails; the caller already returns the first error.
}

Status SqliteStorage::RequireStudy(int64_t study_id, const std::string& op) {
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("SELECT 1 FROM studies WHERE id = ?1", op));
  st.Int(1, study_id);
  int rc = st.Step();
  if (rc == SQLITE_ROW) return Status::Ok();
  if (rc == SQLITE_DONE) return common::NotFound(StudyIdLabel(study_id) + " not found");
  return Err(rc, op + ": look up study");
}

Status SqliteStorage::TrialNotMutable(int64_t trial_id, const std::string& op,
                                      bool require_waiting) {
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("SELECT t.number, s.name, t.state, t.node FROM trials t "
                                           "JOIN studies s ON s.id = t.study_id WHERE t.id = ?1",
                                           op));
  st.Int(1, trial_id);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return common::NotFound(TrialIdLabel(trial_id) + " not found");
  if (rc != SQLITE_ROW) return Err(rc, op + ": look up trial");
  std::string who = "trial " + std::to_string(st.ColInt(0)) + " of study \"" + st.ColText(1) +
                    "\" (" + TrialIdLabel(trial_id) + ")";
  std::string state = st.ColText(2);
  auto parsed = model::ParseTrialState(state);
  if (parsed && model::IsFinished(*parsed)) {
    return common::FailedPrecondition(op + ": " + who + " is " + state +
                                      "; finished trials cannot be changed");
  }
  if (require_waiting && state == "WAITING") {
    return common::FailedPrecondition(op + ": " + who + " is claimed by node \"" + st.ColText(3) +
                                      "\"; this is node \"" + node_ + "\"");
  }
  if (require_waiting) {
    return common::FailedPrecondition(op + ": " + who + " is " + state + "; expected WAITING");
  }
  // The guarded statement saw a finished trial that is not finished now: impossible with one
  // writer, but say so rather than report success.
  return common::Internal(op + ": " + who + " was not updated (state " + state + ")");
}

Result<model::StudyRecord> SqliteStorage::ReadStudyRow(const Stmt& st) const {
  model::StudyRecord s;
  s.id = st.ColInt(0);
  s.name = st.ColText(1);
  std::string direction = st.ColText(2);
  if (direction == "MAXIMIZE") {
    s.direction = config::Direction::kMaximize;
  } else if (direction == "MINIMIZE") {
    s.direction = config::Direction::kMinimize;
  } else {
    return common::Internal("study \"" + s.name + "\" has unknown direction \"" + direction +
                            "\" in " + path_);
  }
  s.n_trials = static_cast<int>(st.ColInt(3));
  std::string state = st.ColText(4);
  auto parsed = model::ParseStudyState(state);
  if (!parsed) {
    return common::Internal("study \"" + s.name + "\" has unknown state \"" + state + "\" in " +
                            path_);
  }
  s.state = *parsed;
  s.spec_toml = st.ColText(5);
  s.spec_path = st.ColText(6);
  s.seed = static_cast<uint64_t>(st.ColInt(7));
  s.created_at = st.ColReal(8);
  s.finished_at = st.ColReal(9);
  s.submitter.uid = st.ColInt(10);
  s.submitter.name = st.ColText(11);
  TRIALD_ASSIGN_OR_RETURN(s.directions,
                          backend::ParseDirectionsText(st.ColText(12), s.direction,
                                                       "study \"" + s.name + "\" in " + path_));
  s.paused = st.ColInt(13) != 0;
  s.parallelism = static_cast<int>(st.ColInt(14));
  return s;
}

Result<model::TrialRecord> SqliteStorage::ReadTrialRow(const Stmt& st) const {
  model::TrialRecord t;
  t.id = st.ColInt(0);
  t.study_id = st.ColInt(1);
  t.number = static_cast<int>(st.ColInt(2));
  std::string state = st.ColText(3);
  auto parsed = model::ParseTrialState(state);
  if (!parsed) {
    return common::Internal(TrialIdLabel(t.id) + " has unknown state \"" + state + "\" in " +
                            path_);
  }
  t.state = *parsed;
  if (st.ColInt(5) != 0) {
    t.value = std::nan("");
  } else if (!st.ColIsNull(4)) {
    t.value = st.ColReal(4);
  }
  t.fail.reason = st.ColText(6);
  t.fail.exit_code = static_cast<int>(st.ColInt(7));
  t.fail.signal = static_cast<int>(st.ColInt(8));
  t.fail.core_dumped = st.ColInt(9) != 0;
  t.fail.detail = st.ColText(10);
  t.fail.stderr_tail = st.ColText(11);
  t.process.pid = static_cast<pid_t>(st.ColInt(12));
  t.process.pgid = static_cast<pid_t>(st.ColInt(13));
  t.process.start_time = static_cast<uint64_t>(st.ColInt(14));
  t.created_at = st.ColReal(15);
  t.started_at = st.ColReal(16);
  t.finished_at = st.ColReal(17);
  if (!st.ColIsNull(18)) t.retry_of = st.ColInt(18);
  if (!st.ColIsNull(19)) t.retry_of_number = static_cast<int>(st.ColInt(19));
  t.node = st.ColText(20);
  const std::string where = TrialIdLabel(t.id) + " in " + path_;
  TRIALD_ASSIGN_OR_RETURN(std::vector<double> values,
                          backend::ParseDoublesText(st.ColText(21), where));
  t.values = backend::TrialValues(t, std::move(values));
  TRIALD_ASSIGN_OR_RETURN(t.constraints, backend::ParseDoublesText(st.ColText(22), where));
  TRIALD_ASSIGN_OR_RETURN(t.resources, backend::ParseResourcesText(st.ColText(23), where));
  return t;
}

// ---- Studies ----

Result<model::StudyRecord> SqliteStorage::CreateStudy(const model::NewStudy& study, double at) {
  return Guarded("CreateStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "CreateStudy(\"" + study.name + "\")";
    TRIALD_ASSIGN_OR_RETURN(const std::vector<config::Direction> directions,
                            backend::NewStudyDirections(study, op));
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare("INSERT INTO studies (name, direction, n_trials, state, spec_toml, "
                         "spec_path, seed, created_at, finished_at, submitter_uid, "
                         "submitter_name, directions) "
                         "VALUES (?1, ?2, ?3, 'RUNNING', ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10)",
                         op));
    st.Text(1, study.name)
        .Text(2, DirectionText(study.direction))
        .Int(3, study.n_trials)
        .Text(4, study.spec_toml)
        .Text(5, study.spec_path)
        .Int(6, static_cast<int64_t>(study.seed))
        .Real(7, at)
        .Int(8, study.submitter.uid)
        .Text(9, study.submitter.name)
        .Text(10, backend::DirectionsText(directions));
    int rc = st.Step();
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return common::AlreadyExists("study \"" + study.name + "\" already exists");
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": insert");
    model::StudyRecord r;
    r.id = sqlite3_last_insert_rowid(db_);
    r.name = study.name;
    r.direction = study.direction;
    r.directions = directions;
    r.n_trials = study.n_trials;
    r.state = model::StudyState::kRunning;
    r.spec_toml = study.spec_toml;
    r.spec_path = study.spec_path;
    r.seed = study.seed;
    r.created_at = at;
    r.submitter = study.submitter;
    return r;
  });
}

Result<model::StudyRecord> SqliteStorage::GetStudy(const std::string& name) {
  return Guarded("GetStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "GetStudy(\"" + name + "\")";
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st,
        Prepare(std::string("SELECT ") + kStudyColumns + " FROM studies WHERE name = ?1", op));
    st.Text(1, name);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return common::NotFound("study \"" + name + "\" not found");
    if (rc != SQLITE_ROW) return Err(rc, op);
    return ReadStudyRow(st);
  });
}

Result<std::vector<model::StudyRecord>> SqliteStorage::ListStudies() {
  return Guarded("ListStudies", [&]() -> Result<std::vector<model::StudyRecord>> {
    const std::string op = "ListStudies";
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare(std::string("SELECT ") + kStudyColumns + " FROM studies ORDER BY id", op));
    std::vector<model::StudyRecord> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, ReadStudyRow(st));
      out.push_back(std::move(s));
    }
    if (rc != SQLITE_DONE) return Err(rc, op);
    return out;
  });
}

Status SqliteStorage::SetStudyState(int64_t study_id, model::StudyState state, double at) {
  return Guarded("SetStudyState", [&]() -> Status {
    const std::string op = "SetStudyState(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare("UPDATE studies SET state = ?2, finished_at = ?3 WHERE id = ?1", op));
    // A study set back to RUNNING (resumed) is no longer finished.
    st.Int(1, study_id)
        .Text(2, model::StudyStateName(state))
        .Real(3, state == model::StudyState::kRunning ? 0 : at);
    TRIALD_RETURN_IF_ERROR(Run(st, op));
    if (sqlite3_changes(db_) == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
    return Status::Ok();
  });
}

Status SqliteStorage::SetStudyControl(int64_t study_id, bool paused, int n_trials,
                                      int parallelism) {
  return Guarded("SetStudyControl", [&]() -> Status {
    const std::string op = "SetStudyControl(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(backend::CheckStudyControl(n_trials, parallelism, op));
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st,
        Prepare("UPDATE studies SET paused = ?2, n_trials = ?3, parallelism = ?4 WHERE id = ?1",
                op));
    st.Int(1, study_id).Int(2, paused ? 1 : 0).Int(3, n_trials).Int(4, parallelism);
    TRIALD_RETURN_IF_ERROR(Run(st, op));
    if (sqlite3_changes(db_) == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
    return Status::Ok();
  });
}

Status SqliteStorage::DeleteStudy(int64_t study_id) {
  return Guarded("DeleteStudy", [&]() -> Status {
    const std::string op = "DeleteStudy(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_RETURN_IF_ERROR(Begin(op));
    TxnGuard guard(this);
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    // Children first: the foreign keys are enforced.
    for (const std::string& sql : backend::DeleteStudyStatements("?1")) {
      TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare(sql, op));
      st.Int(1, study_id);
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    return Commit(op);
  });
}

// ---- Trials: mutations ----

Result<model::TrialRecord> SqliteStorage::CreateTrial(int64_t study_id,
                                                      const model::ParamMap& params, double at,
                                                      std::optional<int64_t> retry_of) {
  return Guarded("CreateTrial", [&]() -> Result<model::TrialRecord> {
    const std::string op = "CreateTrial(" + StudyIdLabel(study_id) + ")";
    for (const auto& [name, p] : params) {
      if (std::isnan(p.internal)) {
        return common::InvalidArgument(op + ": parameter \"" + name +
                                       "\" has internal value NaN; expected a number");
      }
    }
    // Serialised before the write lock is taken, to keep the transaction short.
    std::vector<std::string> dist_json;
    dist_json.reserve(params.size());
    for (const auto& [name, p] : params) dist_json.push_back(p.dist.ToJson());

    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_RETURN_IF_ERROR(Begin(op));
    TxnGuard guard(this);
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    std::optional<int> retry_of_number;
    if (retry_of) {
      TRIALD_ASSIGN_OR_RETURN(Stmt st,
                              Prepare("SELECT study_id, number FROM trials WHERE id = ?1", op));
      st.Int(1, *retry_of);
      int rc = st.Step();
      if (rc == SQLITE_DONE) {
        return common::NotFound(op + ": retried " + TrialIdLabel(*retry_of) + " not found");
      }
      if (rc != SQLITE_ROW) return Err(rc, op + ": look up retried trial");
      if (st.ColInt(0) != study_id) {
        return common::InvalidArgument(op + ": retried " + TrialIdLabel(*retry_of) +
                                       " belongs to " + StudyIdLabel(st.ColInt(0)) +
                                       "; a retry must be in the same study");
      }
      retry_of_number = static_cast<int>(st.ColInt(1));
    }

    model::TrialRecord r;
    {
      TRIALD_ASSIGN_OR_RETURN(
          Stmt st, Prepare("INSERT INTO trials (study_id, number, state, created_at, retry_of) "
                           "VALUES (?1, COALESCE((SELECT number + 1 FROM trials "
                           "WHERE study_id = ?1 ORDER BY number DESC LIMIT 1), 0), "
                           "'WAITING', ?2, ?3) RETURNING id, number",
                           op));
      st.Int(1, study_id).Real(2, at).OptInt(3, retry_of);
      int rc = st.Step();
      if (rc != SQLITE_ROW) return Err(rc, op + ": insert trial");
      r.id = st.ColInt(0);
      r.number = static_cast<int>(st.ColInt(1));
      TRIALD_RETURN_IF_ERROR(Run(st, op + ": insert trial"));
    }
    if (!params.empty()) {
      TRIALD_ASSIGN_OR_RETURN(Stmt st,
                              Prepare("INSERT INTO trial_params (trial_id, name, internal_value, "
                                      "distribution_json) VALUES (?1, ?2, ?3, ?4)",
                                      op));
      size_t i = 0;
      for (const auto& [name, p] : params) {
        st.Reset();
        st.Int(1, r.id).Text(2, name).Real(3, p.internal).Text(4, dist_json[i++]);
        TRIALD_RETURN_IF_ERROR(Run(st, op + ": insert parameter \"" + name + "\""));
      }
    }
    TRIALD_RETURN_IF_ERROR(Commit(op));

    r.study_id = study_id;
    r.state = model::TrialState::kWaiting;
    r.params = params;
    r.created_at = at;
    r.retry_of = retry_of;
    r.retry_of_number = retry_of_number;
    return r;
  });
}

Status SqliteStorage::MarkRunning(int64_t trial_id, const model::ProcessIdentity& process,
                                  double at) {
  return Guarded("MarkRunning", [&]() -> Status {
    const std::string op = "MarkRunning(" + TrialIdLabel(trial_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    {
      // The state guard in the WHERE clause makes check-and-set one atomic statement.
      TRIALD_ASSIGN_OR_RETURN(Stmt st,
                              Prepare("UPDATE trials SET state = 'RUNNING', pid = ?2, pgid = ?3, "
                                      "pid_start_time = ?4, started_at = ?5, node = ?6 "
                                      "WHERE id = ?1 AND state = 'WAITING' AND node IN ('', ?6)",
                                      op));
      st.Int(1, trial_id)
          .Int(2, process.pid)
          .Int(3, process.pgid)
          .Int(4, static_cast<int64_t>(process.start_time))
          .Real(5, at)
          .Text(6, node_);
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) == 0) return TrialNotMutable(trial_id, op, /*require_waiting=*/true);
    return Status::Ok();
  });
}

Status SqliteStorage::AddIntermediate(int64_t trial_id, int64_t step, double value) {
  return Guarded("AddIntermediate", [&]() -> Status {
    const std::string op =
        "AddIntermediate(" + TrialIdLabel(trial_id) + ", step " + std::to_string(step) + ")";
    // Lazily durable (see storage.h): the next FULL commit fsyncs the WAL including this.
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kNormal));
    {
      // Inserting from a SELECT on the trial makes the finished-check and the write one atomic
      // statement; the WHERE clause also resolves the SELECT/ON CONFLICT parsing ambiguity.
      TRIALD_ASSIGN_OR_RETURN(
          Stmt st, Prepare("INSERT INTO trial_intermediate (trial_id, step, value) "
                           "SELECT id, ?2, ?3 FROM trials "
                           "WHERE id = ?1 AND state IN ('WAITING', 'RUNNING') "
                           "ON CONFLICT (trial_id, step) DO UPDATE SET value = excluded.value",
                           op));
      st.Int(1, trial_id).Int(2, step);
      if (std::isnan(value)) {
        st.Null(3);
      } else {
        st.Real(3, value);
      }
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) == 0) return TrialNotMutable(trial_id, op, false);
    return Status::Ok();
  });
}

Status SqliteStorage::SetAttr(int64_t trial_id, const std::string& key,
                              const std::string& json_value) {
  return Guarded("SetAttr", [&]() -> Status {
    const std::string op = "SetAttr(" + TrialIdLabel(trial_id) + ", \"" + key + "\")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kNormal));
    {
      TRIALD_ASSIGN_OR_RETURN(Stmt st,
                              Prepare("INSERT INTO trial_attrs (trial_id, key, value_json) "
                                      "SELECT id, ?2, ?3 FROM trials "
                                      "WHERE id = ?1 AND state IN ('WAITING', 'RUNNING') "
                                      "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = "
                                      "excluded.value_json",
                                      op));
      st.Int(1, trial_id).Text(2, key).Text(3, json_value);
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) == 0) return TrialNotMutable(trial_id, op, false);
    return Status::Ok();
  });
}

Status SqliteStorage::AddTrialParam(int64_t trial_id, const std::string& name,
                                    const model::ParamValue& value) {
  return Guarded("AddTrialParam", [&]() -> Status {
    const std::string op = "AddTrialParam(" + TrialIdLabel(trial_id) + ", \"" + name + "\")";
    if (std::isnan(value.internal)) {
      return common::InvalidArgument(op + ": internal value NaN; expected a number");
    }
    std::string dist_json = value.dist.ToJson();
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kNormal));
    {
      // As in AddIntermediate: the finished-check and the write are one statement; a name the
      // trial has already is left as it is (DO NOTHING) and told apart below.
      TRIALD_ASSIGN_OR_RETURN(Stmt st,
                              Prepare("INSERT INTO trial_params (trial_id, name, internal_value, "
                                      "distribution_json) SELECT id, ?2, ?3, ?4 FROM trials "
                                      "WHERE id = ?1 AND state IN ('WAITING', 'RUNNING') "
                                      "ON CONFLICT (trial_id, name) DO NOTHING",
                                      op));
      st.Int(1, trial_id).Text(2, name).Real(3, value.internal).Text(4, dist_json);
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) > 0) return Status::Ok();
    bool present = false;
    {
      TRIALD_ASSIGN_OR_RETURN(
          Stmt st,
          Prepare("SELECT 1 FROM trial_params p JOIN trials t ON t.id = p.trial_id "
                  "WHERE p.trial_id = ?1 AND p.name = ?2 AND t.state IN ('WAITING', 'RUNNING')",
                  op));
      st.Int(1, trial_id).Text(2, name);
      int rc = st.Step();
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Err(rc, op + ": look up parameter");
      present = rc == SQLITE_ROW;
    }
    if (present) {
      return common::AlreadyExists(op + ": the trial has a parameter \"" + name +
                                   "\" already; a parameter has one value per trial");
    }
    return TrialNotMutable(trial_id, op, false);
  });
}

Status SqliteStorage::FinishTrial(int64_t trial_id, const model::TrialOutcome& outcome, double at) {
  return Guarded("FinishTrial", [&]() -> Status {
    const std::string op = "FinishTrial(" + TrialIdLabel(trial_id) + ")";
    if (!model::IsFinished(outcome.state)) {
      return common::InvalidArgument(op + ": outcome state " +
                                     model::TrialStateName(outcome.state) +
                                     " is not a finished state; expected COMPLETE, PRUNED or "
                                     "FAIL");
    }
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    {
      TRIALD_ASSIGN_OR_RETURN(
          Stmt st,
          Prepare("UPDATE trials SET state = ?2, value = ?3, value_is_nan = ?4, "
                  "fail_reason = ?5, fail_exit_code = ?6, fail_signal = ?7, "
                  "fail_core_dumped = ?8, fail_detail = ?9, stderr_tail = ?10, finished_at = ?11, "
                  "values_json = ?12, constraints_json = ?13, resources_json = ?14 "
                  "WHERE id = ?1 AND state IN ('WAITING', 'RUNNING')",
                  op));
      st.Int(1, trial_id).Text(2, model::TrialStateName(outcome.state));
      bool nan = outcome.value && std::isnan(*outcome.value);
      if (outcome.value && !nan) {
        st.Real(3, *outcome.value);
      } else {
        st.Null(3);
      }
      // model::FailInfo is stored as given (normally only filled for FAIL): nothing the caller
      // recorded is dropped.
      st.Int(4, nan ? 1 : 0)
          .Text(5, outcome.fail.reason)
          .Int(6, outcome.fail.exit_code)
          .Int(7, outcome.fail.signal)
          .Int(8, outcome.fail.core_dumped ? 1 : 0)
          .Text(9, outcome.fail.detail)
          .Text(10, outcome.fail.stderr_tail)
          .Real(11, at)
          .Text(12, backend::StoredValuesText(outcome))
          .Text(13, backend::DoublesText(outcome.constraints))
          .Text(14, backend::ResourcesText(outcome.resources));
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) == 0) return TrialNotMutable(trial_id, op, false);
    return Status::Ok();
  });
}

// ---- Trials: reads ----

Result<std::vector<model::TrialRecord>> SqliteStorage::LoadTrials(TrialFilter filter,
                                                                  int64_t study_id, int number,
                                                                  const std::string& op,
                                                                  const std::string& numbers_json,
                                                                  int64_t end_number) {
  // One query per table for the whole selection, joined through trials with the same filter,
  // instead of one query per trial: a study of thousands of trials loads in four statements.
  const char* where = "";
  switch (filter) {
    case TrialFilter::kStudy:
      where = " WHERE t.study_id = ?1";
      break;
    case TrialFilter::kStudyNumber:
      where = " WHERE t.study_id = ?1 AND t.number = ?2";
      break;
    case TrialFilter::kRunning:
      where = " WHERE t.state = 'RUNNING'";
      break;
    case TrialFilter::kSince:
      where =
          " WHERE t.study_id = ?1 AND (t.number >= ?2 OR t.number IN "
          "(SELECT value FROM json_each(?3)))";
      break;
    case TrialFilter::kRange:
      where = " WHERE t.study_id = ?1 AND t.number >= ?2 AND t.number < ?3";
      break;
  }
  auto bind = [&](Stmt& st) {
    if (filter != TrialFilter::kRunning) st.Int(1, study_id);
    if (filter == TrialFilter::kStudyNumber || filter == TrialFilter::kSince ||
        filter == TrialFilter::kRange) {
      st.Int(2, number);
    }
    if (filter == TrialFilter::kSince) st.Text(3, numbers_json);
    if (filter == TrialFilter::kRange) st.Int(3, end_number);
  };

  std::vector<model::TrialRecord> trials;
  std::unordered_map<int64_t, size_t> index;  // trial id -> position in `trials`
  {
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare(std::string("SELECT " TRIALD_TRIAL_COLUMNS " FROM trials t") + where +
                             " ORDER BY t.study_id, t.number",
                         op));
    bind(st);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      TRIALD_ASSIGN_OR_RETURN(model::TrialRecord t, ReadTrialRow(st));
      index.emplace(t.id, trials.size());
      trials.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": read trials");
  }
  if (trials.empty()) return trials;

  {
    TRIALD_ASSIGN_OR_RETURN(Stmt st,
                            Prepare(std::string("SELECT p.trial_id, p.name, p.internal_value, "
                                                "p.distribution_json FROM trial_params p "
                                                "JOIN trials t ON t.id = p.trial_id") +
                                        where,
                                    op));
    bind(st);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      int64_t trial_id = st.ColInt(0);
      std::string name = st.ColText(1);
      std::string json = st.ColText(3);
      // Every trial of a study carries the same few distributions: each text is parsed once
      // per daemon, not per read (distribution_cache.h).
      auto dist = distributions_.Parse(json);
      if (!dist.ok()) {
        return common::Internal(op + ": " + TrialIdLabel(trial_id) + " parameter \"" + name +
                                "\": stored distribution " + json +
                                " does not parse: " + dist.status().message());
      }
      auto pos = index.find(trial_id);
      if (pos == index.end()) continue;  // cannot happen: same filter as the trial query
      trials[pos->second].params[name] = model::ParamValue{st.ColReal(2), **dist};
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": read parameters");
  }
  {
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare(std::string("SELECT i.trial_id, i.step, i.value FROM trial_intermediate "
                                     "i JOIN trials t ON t.id = i.trial_id") +
                             where,
                         op));
    bind(st);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      auto pos = index.find(st.ColInt(0));
      if (pos == index.end()) continue;
      trials[pos->second].intermediate[st.ColInt(1)] =
          st.ColIsNull(2) ? std::nan("") : st.ColReal(2);
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": read intermediate values");
  }
  {
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare(std::string("SELECT a.trial_id, a.key, a.value_json FROM trial_attrs a "
                                     "JOIN trials t ON t.id = a.trial_id") +
                             where,
                         op));
    bind(st);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      auto pos = index.find(st.ColInt(0));
      if (pos == index.end()) continue;
      trials[pos->second].attrs[st.ColText(1)] = st.ColText(2);
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": read attributes");
  }
  return trials;
}

Result<std::vector<model::TrialRecord>> SqliteStorage::GetTrials(int64_t study_id) {
  return Guarded("GetTrials", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrials(" + StudyIdLabel(study_id) + ")";
    TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> trials,
                            LoadTrials(TrialFilter::kStudy, study_id, 0, op));
    // An empty result is either a study without trials or an unknown study.
    if (trials.empty()) TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    return trials;
  });
}

Result<model::TrialRecord> SqliteStorage::GetTrial(int64_t study_id, int number) {
  return Guarded("GetTrial", [&]() -> Result<model::TrialRecord> {
    const std::string op =
        "GetTrial(" + StudyIdLabel(study_id) + ", number " + std::to_string(number) + ")";
    TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> trials,
                            LoadTrials(TrialFilter::kStudyNumber, study_id, number, op));
    if (trials.empty()) {
      TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
      return common::NotFound("trial " + std::to_string(number) + " of " + StudyIdLabel(study_id) +
                              " not found");
    }
    return std::move(trials.front());
  });
}

Result<std::vector<model::TrialRecord>> SqliteStorage::GetRunningTrials() {
  return Guarded("GetRunningTrials", [&]() -> Result<std::vector<model::TrialRecord>> {
    return LoadTrials(TrialFilter::kRunning, 0, 0, "GetRunningTrials");
  });
}

Result<std::vector<model::TrialRecord>> SqliteStorage::GetTrialsSince(
    int64_t study_id, int from_number, const std::vector<int>& numbers) {
  return Guarded("GetTrialsSince", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrialsSince(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    std::string list = "[";
    for (size_t i = 0; i < numbers.size(); ++i) {
      list += (i > 0 ? "," : "") + std::to_string(numbers[i]);
    }
    list += "]";
    return LoadTrials(TrialFilter::kSince, study_id, from_number, op, list);
  });
}

Result<TrialCounts> SqliteStorage::CountTrials(int64_t study_id) {
  return Guarded("CountTrials", [&]() -> Result<TrialCounts> {
    const std::string op = "CountTrials(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    // One pass over the study's rows (through its (study_id, number) index); no trial is read.
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare("SELECT state, COUNT(*), SUM(retry_of IS NOT NULL), SUM(started_at > 0), "
                         "TOTAL(CASE WHEN started_at > 0 AND finished_at > 0 "
                         "THEN finished_at - started_at ELSE 0 END) "
                         "FROM trials WHERE study_id = ?1 GROUP BY state",
                         op));
    st.Int(1, study_id);
    TrialCounts c;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      TRIALD_ASSIGN_OR_RETURN(model::TrialState state, ParseTrialStateColumn(st.ColText(0), op));
      AddStateCount(&c, state, st.ColInt(1), st.ColInt(2), st.ColInt(3), st.ColReal(4));
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": count trials");
    return c;
  });
}

Result<std::optional<model::TrialRecord>> SqliteStorage::GetBestTrial(int64_t study_id,
                                                                      config::Direction direction) {
  return Guarded("GetBestTrial", [&]() -> Result<std::optional<model::TrialRecord>> {
    const std::string op = "GetBestTrial(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    // NaN is stored as NULL (value_is_nan set); infinities order as numbers. "+state" keeps
    // SQLite from using trials_by_state, which would visit every study's COMPLETE trials.
    const bool max = direction == config::Direction::kMaximize;
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare(std::string("SELECT number FROM trials WHERE study_id = ?1 AND +state = "
                                     "'COMPLETE' AND value IS NOT NULL AND value_is_nan = 0 "
                                     "ORDER BY value ") +
                             (max ? "DESC" : "ASC") + ", number ASC LIMIT 1",
                         op));
    st.Int(1, study_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return std::optional<model::TrialRecord>();
    if (rc != SQLITE_ROW) return Err(rc, op + ": find the best trial");
    const int number = static_cast<int>(st.ColInt(0));
    st.Reset();
    TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> trials,
                            LoadTrials(TrialFilter::kStudyNumber, study_id, number, op));
    if (trials.empty()) return std::optional<model::TrialRecord>();
    return std::optional<model::TrialRecord>(std::move(trials.front()));
  });
}

Result<std::vector<model::TrialRecord>> SqliteStorage::GetTrialPage(int64_t study_id,
                                                                    int from_number, int limit) {
  return Guarded("GetTrialPage", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrialPage(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(CheckPageArguments(from_number, limit, op));
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    return LoadTrials(TrialFilter::kRange, study_id, from_number, op, "[]",
                      int64_t{from_number} + limit);
  });
}

// ---- Shared-storage operations (one daemon per SQLite file: no lock is needed) ----

Result<model::StudyRecord> SqliteStorage::LockStudy(int64_t study_id) {
  return Guarded("LockStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "LockStudy(" + StudyIdLabel(study_id) + ")";
    if (batch_depth_ == 0) {
      return common::FailedPrecondition(op +
                                        ": called outside a batch; the lock lasts until "
                                        "the batch commits");
    }
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st,
        Prepare(std::string("SELECT ") + kStudyColumns + " FROM studies WHERE id = ?1", op));
    st.Int(1, study_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return common::NotFound(StudyIdLabel(study_id) + " not found");
    if (rc != SQLITE_ROW) return Err(rc, op);
    return ReadStudyRow(st);
  });
}

Status SqliteStorage::ClaimTrial(int64_t trial_id) {
  return Guarded("ClaimTrial", [&]() -> Status {
    const std::string op = "ClaimTrial(" + TrialIdLabel(trial_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    {
      TRIALD_ASSIGN_OR_RETURN(
          Stmt st, Prepare("UPDATE trials SET node = ?2 WHERE id = ?1 AND state = 'WAITING'", op));
      st.Int(1, trial_id).Text(2, node_);
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) == 0) return TrialNotMutable(trial_id, op, /*require_waiting=*/true);
    return Status::Ok();
  });
}

Status SqliteStorage::Heartbeat(double at) {
  return Guarded("Heartbeat", [&]() -> Status {
    const std::string op = "Heartbeat(\"" + node_ + "\")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kNormal));
    TRIALD_ASSIGN_OR_RETURN(Stmt st,
                            Prepare("INSERT INTO nodes (name, instance, first_beat, last_beat) "
                                    "VALUES (?1, ?3, ?2, ?2) ON CONFLICT (name) DO UPDATE SET "
                                    "last_beat = excluded.last_beat, instance = excluded.instance, "
                                    "first_beat = CASE WHEN nodes.instance = excluded.instance "
                                    "THEN nodes.first_beat ELSE excluded.first_beat END",
                                    op));
    st.Text(1, node_).Real(2, at).Text(3, instance_);
    return Run(st, op);
  });
}

Result<std::vector<model::NodeRecord>> SqliteStorage::GetNodes(double now) {
  return Guarded("GetNodes", [&]() -> Result<std::vector<model::NodeRecord>> {
    const std::string op = "GetNodes";
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st,
        Prepare("SELECT name, first_beat, last_beat, instance FROM nodes ORDER BY name", op));
    std::vector<model::NodeRecord> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      model::NodeRecord n;
      n.name = st.ColText(0);
      n.first_beat = st.ColReal(1);
      n.last_beat = st.ColReal(2);
      n.silent_for = now - n.last_beat;
      n.instance = st.ColText(3);
      out.push_back(std::move(n));
    }
    if (rc != SQLITE_DONE) return Err(rc, op);
    return out;
  });
}

// ---- Events ----

Status SqliteStorage::AppendEvent(std::optional<int64_t> study_id, std::optional<int64_t> trial_id,
                                  const std::string& kind, const std::string& detail, double at) {
  return Guarded("AppendEvent", [&]() -> Status {
    const std::string op = "AppendEvent(\"" + kind + "\")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    int rc;
    {
      TRIALD_ASSIGN_OR_RETURN(Stmt st,
                              Prepare("INSERT INTO events (at, study_id, trial_id, kind, detail) "
                                      "VALUES (?1, ?2, ?3, ?4, ?5)",
                                      op));
      st.Real(1, at).OptInt(2, study_id).OptInt(3, trial_id).Text(4, kind).Text(5, detail);
      rc = st.Step();
    }
    if (rc == SQLITE_DONE) return Status::Ok();
    if (rc != SQLITE_CONSTRAINT_FOREIGNKEY) return Err(rc, op);
    // Name which of the two references is dangling.
    if (study_id) TRIALD_RETURN_IF_ERROR(RequireStudy(*study_id, op));
    return common::NotFound(op + ": " + TrialIdLabel(trial_id.value_or(0)) + " not found");
  });
}

Result<std::vector<model::EventRecord>> SqliteStorage::GetEvents(std::optional<int64_t> study_id) {
  return Guarded("GetEvents", [&]() -> Result<std::vector<model::EventRecord>> {
    const std::string op =
        study_id ? "GetEvents(" + StudyIdLabel(*study_id) + ")" : std::string("GetEvents");
    if (study_id) TRIALD_RETURN_IF_ERROR(RequireStudy(*study_id, op));
    // A study's events include those recorded against one of its trials only.
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare(study_id ? "SELECT id, at, study_id, trial_id, kind, detail FROM events "
                                    "WHERE study_id = ?1 OR trial_id IN "
                                    "(SELECT id FROM trials WHERE study_id = ?1) ORDER BY id"
                                  : "SELECT id, at, study_id, trial_id, kind, detail FROM events "
                                    "ORDER BY id",
                         op));
    if (study_id) st.Int(1, *study_id);
    return ReadEvents(st, op);
  });
}

Result<std::vector<model::EventRecord>> SqliteStorage::GetTrialEvents(int64_t trial_id) {
  return Guarded("GetTrialEvents", [&]() -> Result<std::vector<model::EventRecord>> {
    const std::string op = "GetTrialEvents(" + TrialIdLabel(trial_id) + ")";
    TRIALD_ASSIGN_OR_RETURN(Stmt exists, Prepare("SELECT 1 FROM trials WHERE id = ?1", op));
    exists.Int(1, trial_id);
    const int rc = exists.Step();
    if (rc == SQLITE_DONE) return common::NotFound(TrialIdLabel(trial_id) + " not found");
    if (rc != SQLITE_ROW) return Err(rc, op + ": look up trial");
    TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("SELECT id, at, study_id, trial_id, kind, detail "
                                             "FROM events WHERE trial_id = ?1 ORDER BY id",
                                             op));
    st.Int(1, trial_id);
    return ReadEvents(st, op);
  });
}

Result<std::vector<model::EventRecord>> SqliteStorage::ReadEvents(Stmt& st, const std::string& op) {
  std::vector<model::EventRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    model::EventRecord e;
    e.id = st.ColInt(0);
    e.at = st.ColReal(1);
    if (!st.ColIsNull(2)) e.study_id = st.ColInt(2);
    if (!st.ColIsNull(3)) e.trial_id = st.ColInt(3);
    e.kind = st.ColText(4);
    e.detail = st.ColText(5);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) return Err(rc, op);
  return out;
}

#undef TRIALD_TRIAL_COLUMNS

}  // namespace

common::Result<std::unique_ptr<Storage>> OpenSqliteStorage(const SqliteOptions& options) {
  return Guarded("OpenSqliteStorage", [&]() -> Result<std::unique_ptr<Storage>> {
    return SqliteStorage::Open(options);
  });
}

common::Result<std::string> SqliteIntegrityCheck(const std::string& path) {
  return Guarded("SqliteIntegrityCheck", [&]() -> Result<std::string> {
    const std::string where = "integrity check of SQLite database \"" + path + "\"";
    sqlite3* db = nullptr;
    // Read-only, and without CREATE: checking must never create or change the file.
    int rc = sqlite3_open_v2(path.c_str(), &db,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
                             nullptr);
    if (rc != SQLITE_OK) {
      Status st = SqliteError(db, rc, where + ": open");
      sqlite3_close_v2(db);
      return st;
    }
    sqlite3_stmt* stmt = nullptr;
    rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr);
    std::string text;
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
      rc = sqlite3_step(stmt);
      if (rc != SQLITE_ROW) break;
      const unsigned char* p = sqlite3_column_text(stmt, 0);
      if (!text.empty()) text += '\n';
      if (p != nullptr) text += reinterpret_cast<const char*>(p);
    }
    Status st = rc == SQLITE_DONE ? Status::Ok() : SqliteError(db, rc, where);
    sqlite3_finalize(stmt);
    sqlite3_close_v2(db);
    if (!st.ok()) return st;
    return text;
  });
}

}  // namespace triald::storage
