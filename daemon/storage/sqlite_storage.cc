#include "daemon/storage/sqlite_storage.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/storage/backend_util.h"
#include "daemon/storage/distribution_cache.h"
#include "daemon/storage/schema.h"
#include "daemon/storage/sql.h"

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

// A row of a stepped statement, as the shared readers (sql.h) read it.
class StmtRow final : public sql::Row {
 public:
  explicit StmtRow(const Stmt& st) : st_(st) {}
  bool IsNull(int col) const override { return st_.ColIsNull(col); }
  int64_t Int(int col) const override { return st_.ColInt(col); }
  double Real(int col) const override { return st_.ColReal(col); }
  std::string Text(int col) const override { return st_.ColText(col); }

 private:
  const Stmt& st_;
};

Status SqliteError(sqlite3* db, int rc, const std::string& op) {
  std::string msg = op + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  // SQLite reports a failed write only as "disk I/O error" (and keeps no errno for it): an
  // unnamed file made in the database's folder tells what the system says now, e.g. a file
  // system the kernel made read-only after a disk error (ext4's errors=remount-ro).
  if ((rc & 0xff) == SQLITE_IOERR && db != nullptr) {
    const char* file = sqlite3_db_filename(db, "main");
    if (file != nullptr && *file != '\0') {
      const std::string dir = std::filesystem::path(file).parent_path().string();
      int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::close(fd);
      } else if (errno != EOPNOTSUPP && errno != EISDIR) {
        msg += " (writing in " + dir + " now fails: " + std::strerror(errno) + ")";
      }
    }
  }
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
  Status SetStudySubmit(int64_t study_id, const config::SubmitChoices& submit) override;
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
  Result<std::vector<model::FailInfo>> GetRecentFailures(int64_t study_id, int limit) override;
  Result<std::optional<model::TrialRecord>> GetBestTrial(int64_t study_id,
                                                         config::Direction direction) override;
  Result<std::vector<model::TrialRecord>> GetTrialPage(int64_t study_id, int from_number, int limit,
                                                       Curves curves) override;

  bool shared() const override { return shared_; }
  const std::string& node() const override { return node_; }
  const std::string& instance() const override { return instance_; }
  Result<model::StudyRecord> LockStudy(int64_t study_id) override;
  Status ClaimTrial(int64_t trial_id) override;
  Status ReleaseClaim(int64_t trial_id) override;
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

  using TrialFilter = sql::TrialFilter;  // each filter has its own cached statements

  explicit SqliteStorage(sqlite3* db) : db_(db) {}

  Status Init(const SqliteOptions& options);
  Status Err(int rc, const std::string& op) const { return SqliteError(db_, rc, op); }
  // A write, refused while the open batch is lost: after a disk-full or I/O error SQLite may
  // roll back the whole transaction, and a later write would then commit alone (its SAVEPOINT
  // starting a transaction of its own) while the batch's earlier writes are gone. Refusing them
  // until the outermost CommitBatch (which reports the loss) keeps a batch all or nothing.
  template <class F>
  auto Write(const char* name, F&& fn) -> decltype(fn()) {
    if (batch_depth_ > 0 && sqlite3_get_autocommit(db_)) {
      return common::IoError(std::string(name) +
                             ": refused: SQLite rolled back this batch after an earlier write "
                             "failed (disk full or I/O error); nothing of the batch is stored");
    }
    return Guarded(name, std::forward<F>(fn));
  }

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
                                                     int64_t end_number = 0,
                                                     Curves curves = Curves::kLoad);
  Result<model::StudyRecord> ReadStudyRow(const Stmt& st) const {
    return sql::ReadStudyRow(StmtRow(st), path_);
  }
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
  if (version > schema::kVersion) {
    return common::FailedPrecondition("database schema version " + std::to_string(version) +
                                      " is newer than this triald supports (" +
                                      std::to_string(schema::kVersion) + ")");
  }
  if (version < schema::kVersion) {
    // One transaction: a database is at one version or the next, never in between.
    const std::string op = version == 0 ? std::string("create schema")
                                        : "upgrade schema from version " + std::to_string(version);
    TRIALD_RETURN_IF_ERROR(Begin(op));
    TxnGuard guard(this);
    for (const std::string& statement : schema::UpgradeStatements(sql::Dialect::kSqlite, version)) {
      TRIALD_RETURN_IF_ERROR(ExecUncached(statement.c_str(), op));
    }
    const std::string set_version = "PRAGMA user_version = " + std::to_string(schema::kVersion);
    TRIALD_RETURN_IF_ERROR(ExecUncached(set_version.c_str(), op));
    TRIALD_RETURN_IF_ERROR(Commit(op));
  }
  // After the upgrade: version 8 copies the studies table (schema.cc), which foreign keys would
  // refuse.
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
  TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare(sql::kTrialStateSql, op));
  st.Int(1, trial_id);
  int rc = st.Step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Err(rc, op + ": look up trial");
  const StmtRow row(st);
  return sql::TrialNotMutable(rc == SQLITE_ROW ? &row : nullptr, trial_id, op, require_waiting,
                              node_);
}

// ---- Studies ----

Result<model::StudyRecord> SqliteStorage::CreateStudy(const model::NewStudy& study, double at) {
  return Write("CreateStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "CreateStudy(\"" + study.name + "\")";
    TRIALD_ASSIGN_OR_RETURN(const std::vector<config::Direction> directions,
                            backend::NewStudyDirections(study, op));
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st, Prepare("INSERT INTO studies (name, direction, n_trials, state, spec_toml, "
                         "spec_path, seed, created_at, finished_at, submitter_uid, "
                         "submitter_name, directions, submit_json) "
                         "VALUES (?1, ?2, ?3, 'RUNNING', ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11)",
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
        .Text(10, backend::DirectionsText(directions))
        .Text(11, backend::SubmitChoicesText(study.submit));
    int rc = st.Step();
    if (rc == SQLITE_CONSTRAINT_UNIQUE) {
      return common::AlreadyExists("study \"" + study.name + "\" already exists");
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": insert");
    return backend::NewStudyRecord(study, directions, sqlite3_last_insert_rowid(db_), at);
  });
}

Result<model::StudyRecord> SqliteStorage::GetStudy(const std::string& name) {
  return Guarded("GetStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "GetStudy(\"" + name + "\")";
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st,
        Prepare(std::string("SELECT ") + sql::kStudyColumns + " FROM studies WHERE name = ?1", op));
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
        Stmt st,
        Prepare(std::string("SELECT ") + sql::kStudyColumns + " FROM studies ORDER BY id", op));
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
  return Write("SetStudyState", [&]() -> Status {
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
  return Write("SetStudyControl", [&]() -> Status {
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

Status SqliteStorage::SetStudySubmit(int64_t study_id, const config::SubmitChoices& submit) {
  return Write("SetStudySubmit", [&]() -> Status {
    const std::string op = "SetStudySubmit(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_ASSIGN_OR_RETURN(Stmt st,
                            Prepare("UPDATE studies SET submit_json = ?2 WHERE id = ?1", op));
    st.Int(1, study_id).Text(2, backend::SubmitChoicesText(submit));
    TRIALD_RETURN_IF_ERROR(Run(st, op));
    if (sqlite3_changes(db_) == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
    return Status::Ok();
  });
}

Status SqliteStorage::DeleteStudy(int64_t study_id) {
  return Write("DeleteStudy", [&]() -> Status {
    const std::string op = "DeleteStudy(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    TRIALD_RETURN_IF_ERROR(Begin(op));
    TxnGuard guard(this);
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    // Children first: the foreign keys are enforced.
    for (const std::string& text : sql::DeleteStudyStatements(sql::Dialect::kSqlite)) {
      TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare(text, op));
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
  return Write("CreateTrial", [&]() -> Result<model::TrialRecord> {
    const std::string op = "CreateTrial(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(backend::CheckNewParams(params, op));
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
  return Write("MarkRunning", [&]() -> Status {
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
  return Write("AddIntermediate", [&]() -> Status {
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
  return Write("SetAttr", [&]() -> Status {
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
  return Write("AddTrialParam", [&]() -> Status {
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
  return Write("FinishTrial", [&]() -> Status {
    const std::string op = "FinishTrial(" + TrialIdLabel(trial_id) + ")";
    TRIALD_RETURN_IF_ERROR(backend::CheckFinishedOutcome(outcome, op));
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

Result<std::vector<model::TrialRecord>> SqliteStorage::LoadTrials(
    TrialFilter filter, int64_t study_id, int number, const std::string& op,
    const std::string& numbers_json, int64_t end_number, Curves curves) {
  const sql::TrialQueries queries = sql::LoadTrialsSql(sql::Dialect::kSqlite, filter);
  auto bind = [&](Stmt& st) {
    if (filter != TrialFilter::kRunning) st.Int(1, study_id);
    if (filter == TrialFilter::kStudyNumber || filter == TrialFilter::kSince ||
        filter == TrialFilter::kRange) {
      st.Int(2, number);
    }
    if (filter == TrialFilter::kSince) st.Text(3, numbers_json);
    if (filter == TrialFilter::kRange) st.Int(3, end_number);
  };
  sql::TrialAssembly assembly(&distributions_, op, path_);
  // Steps `text` bound for the filter, handing each row to `add`.
  auto each = [&](const std::string& text, const char* what, auto add) -> Status {
    TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare(text, op));
    bind(st);
    const StmtRow row(st);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      TRIALD_RETURN_IF_ERROR(add(row));
    }
    if (rc != SQLITE_DONE) return Err(rc, op + ": read " + what);
    return Status::Ok();
  };
  TRIALD_RETURN_IF_ERROR(
      each(queries.trials, "trials", [&](const sql::Row& r) { return assembly.AddTrial(r); }));
  if (assembly.empty()) return assembly.Take();
  TRIALD_RETURN_IF_ERROR(
      each(queries.params, "parameters", [&](const sql::Row& r) { return assembly.AddParam(r); }));
  if (curves == Curves::kLoad) {
    TRIALD_RETURN_IF_ERROR(
        each(queries.intermediate, "intermediate values", [&](const sql::Row& r) {
          assembly.AddIntermediate(r);
          return Status::Ok();
        }));
  } else {
    TRIALD_RETURN_IF_ERROR(
        each(queries.intermediate_counts, "intermediate values", [&](const sql::Row& r) {
          assembly.AddIntermediateCount(r);
          return Status::Ok();
        }));
  }
  TRIALD_RETURN_IF_ERROR(each(queries.attrs, "attributes", [&](const sql::Row& r) {
    assembly.AddAttr(r);
    return Status::Ok();
  }));
  return assembly.Take();
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

Result<std::vector<model::FailInfo>> SqliteStorage::GetRecentFailures(int64_t study_id, int limit) {
  return Guarded("GetRecentFailures", [&]() -> Result<std::vector<model::FailInfo>> {
    const std::string op = "GetRecentFailures(" + StudyIdLabel(study_id) + ")";
    if (limit <= 0) {
      return common::InvalidArgument(op + ": limit " + std::to_string(limit) +
                                     "; expected 1 or more");
    }
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare(sql::RecentFailuresSql(sql::Dialect::kSqlite), op));
    st.Int(1, study_id).Int(2, limit);
    std::vector<model::FailInfo> out;
    const StmtRow row(st);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) out.push_back(sql::ReadFailureRow(row));
    if (rc != SQLITE_DONE) return Err(rc, op);
    return out;
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
    TRIALD_ASSIGN_OR_RETURN(
        std::vector<model::TrialRecord> trials,
        LoadTrials(TrialFilter::kStudyNumber, study_id, number, op, "[]", 0, Curves::kCount));
    if (trials.empty()) return std::optional<model::TrialRecord>();
    return std::optional<model::TrialRecord>(std::move(trials.front()));
  });
}

Result<std::vector<model::TrialRecord>> SqliteStorage::GetTrialPage(int64_t study_id,
                                                                    int from_number, int limit,
                                                                    Curves curves) {
  return Guarded("GetTrialPage", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrialPage(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(CheckPageArguments(from_number, limit, op));
    TRIALD_RETURN_IF_ERROR(RequireStudy(study_id, op));
    return LoadTrials(TrialFilter::kRange, study_id, from_number, op, "[]",
                      int64_t{from_number} + limit, curves);
  });
}

// ---- Shared-storage operations (one daemon per SQLite file: no lock is needed) ----

Result<model::StudyRecord> SqliteStorage::LockStudy(int64_t study_id) {
  return Write("LockStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "LockStudy(" + StudyIdLabel(study_id) + ")";
    if (batch_depth_ == 0) {
      return common::FailedPrecondition(op +
                                        ": called outside a batch; the lock lasts until "
                                        "the batch commits");
    }
    TRIALD_ASSIGN_OR_RETURN(
        Stmt st,
        Prepare(std::string("SELECT ") + sql::kStudyColumns + " FROM studies WHERE id = ?1", op));
    st.Int(1, study_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return common::NotFound(StudyIdLabel(study_id) + " not found");
    if (rc != SQLITE_ROW) return Err(rc, op);
    return ReadStudyRow(st);
  });
}

Status SqliteStorage::ClaimTrial(int64_t trial_id) {
  return Write("ClaimTrial", [&]() -> Status {
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

Status SqliteStorage::ReleaseClaim(int64_t trial_id) {
  return Write("ReleaseClaim", [&]() -> Status {
    const std::string op = "ReleaseClaim(" + TrialIdLabel(trial_id) + ")";
    TRIALD_RETURN_IF_ERROR(SetSync(Sync::kFull));
    {
      TRIALD_ASSIGN_OR_RETURN(Stmt st, Prepare("UPDATE trials SET node = '' WHERE id = ?1 AND "
                                               "state = 'WAITING' AND node IN ('', ?2)",
                                               op));
      st.Int(1, trial_id).Text(2, node_);
      TRIALD_RETURN_IF_ERROR(Run(st, op));
    }
    if (sqlite3_changes(db_) == 0) return TrialNotMutable(trial_id, op, /*require_waiting=*/true);
    return Status::Ok();
  });
}

Status SqliteStorage::Heartbeat(double at) {
  return Write("Heartbeat", [&]() -> Status {
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
  return Write("AppendEvent", [&]() -> Status {
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
  const StmtRow row(st);
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back(sql::ReadEventRow(row));
  if (rc != SQLITE_DONE) return Err(rc, op);
  return out;
}

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
