#include "daemon/storage/postgres_storage.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/utf8.h"
#include "daemon/storage/backend_util.h"
#include "daemon/storage/distribution_cache.h"
#include "daemon/storage/postgres_watchdog.h"
#include "daemon/storage/schema.h"
#include "daemon/storage/sql.h"

namespace triald::storage {
namespace {

using backend::AddStateCount;
using backend::CheckPageArguments;
// Seconds for messages: "10", "2.5".
std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

using backend::DirectionText;
using backend::Guarded;
using backend::ParseTrialStateColumn;
using backend::StudyIdLabel;
using backend::TrialIdLabel;
using common::Result;
using common::Status;

// pg_advisory_xact_lock key that serialises schema creation: "triald" in ASCII.
constexpr int64_t kSchemaLockKey = 0x747269616c64;

// Type OIDs (catalog/pg_type.h; fixed since PostgreSQL 7, and the server headers that define
// them are not part of libpq-dev).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt4Oid = 23;
constexpr Oid kTextOid = 25;
constexpr Oid kFloat8Oid = 701;
constexpr Oid kByteaArrayOid = 1001;
constexpr Oid kInt4ArrayOid = 1007;
constexpr Oid kInt8ArrayOid = 1016;
constexpr Oid kTextArrayOid = 1009;
constexpr Oid kFloat8ArrayOid = 1022;

std::string TrimRight(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Whether PostgreSQL's TEXT accepts `s`: valid UTF-8 without NUL bytes.
bool IsStorableText(const std::string& s) {
  return s.find('\0') == std::string::npos && common::IsValidUtf8(s);
}

void PutBigEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t DoubleBits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

// A one-dimensional array in PostgreSQL's binary format: header, then each element as a length
// and its bytes.
std::string BinaryArray(Oid element_type, const std::vector<std::string>& elements) {
  std::string out;
  PutBigEndian(out, elements.empty() ? 0 : 1, 4);  // dimensions
  PutBigEndian(out, 0, 4);                         // no NULL elements
  PutBigEndian(out, element_type, 4);
  if (!elements.empty()) {
    PutBigEndian(out, elements.size(), 4);  // length of the dimension
    PutBigEndian(out, 1, 4);                // lower bound
  }
  for (const auto& e : elements) {
    PutBigEndian(out, e.size(), 4);
    out += e;
  }
  return out;
}

// Statement parameters, all sent in binary: integers and doubles as their big-endian bits (so
// every double, NaN and infinities included, arrives exactly), text and bytea as raw bytes.
// A text value PostgreSQL would reject is remembered and reported by Exec, so call sites need
// not check each one.
class Params {
 public:
  Params& Int8(int64_t v) { return Add(kInt8Oid, Bits(static_cast<uint64_t>(v), 8)); }
  Params& Int4(int32_t v) { return Add(kInt4Oid, Bits(static_cast<uint32_t>(v), 4)); }
  Params& Float8(double v) { return Add(kFloat8Oid, Bits(DoubleBits(v), 8)); }
  Params& Bool(bool v) { return Add(kBoolOid, std::string(1, v ? '\1' : '\0')); }
  Params& Bytes(const std::string& v) { return Add(kByteaOid, v); }
  // `field` names the value in the error when it is not storable text.
  Params& Text(const std::string& v, const char* field) {
    if (error_.empty() && !IsStorableText(v)) {
      error_ = std::string(field) +
               " is not valid UTF-8 text or contains a NUL byte; PostgreSQL text cannot store it";
    }
    return Add(kTextOid, v);
  }
  Params& Null(Oid type) {
    types_.push_back(type);
    values_.emplace_back();
    nulls_.push_back(true);
    return *this;
  }
  Params& OptInt8(const std::optional<int64_t>& v) { return v ? Int8(*v) : Null(kInt8Oid); }
  Params& Int4Array(const std::vector<int>& v) {
    std::vector<std::string> elements;
    for (int x : v) elements.push_back(Bits(static_cast<uint32_t>(x), 4));
    return Add(kInt4ArrayOid, BinaryArray(kInt4Oid, elements));
  }
  Params& Int8Array(const std::vector<int64_t>& v) {
    std::vector<std::string> elements;
    for (int64_t x : v) elements.push_back(Bits(static_cast<uint64_t>(x), 8));
    return Add(kInt8ArrayOid, BinaryArray(kInt8Oid, elements));
  }
  Params& ByteaArray(const std::vector<std::string>& v) {
    return Add(kByteaArrayOid, BinaryArray(kByteaOid, v));
  }
  Params& Float8Array(const std::vector<double>& v) {
    std::vector<std::string> elements;
    for (double x : v) elements.push_back(Bits(DoubleBits(x), 8));
    return Add(kFloat8ArrayOid, BinaryArray(kFloat8Oid, elements));
  }
  Params& TextArray(const std::vector<std::string>& v, const char* field) {
    for (const auto& s : v) {
      if (error_.empty() && !IsStorableText(s)) {
        error_ = std::string("a ") + field +
                 " is not valid UTF-8 text or contains a NUL byte; PostgreSQL text cannot store it";
      }
    }
    return Add(kTextArrayOid, BinaryArray(kTextOid, v));
  }

  int size() const { return static_cast<int>(types_.size()); }
  const Oid* types() const { return types_.data(); }
  const std::string& error() const { return error_; }

  // Pointers, lengths and formats for PQexecPrepared; valid while this object is unchanged.
  void Views(std::vector<const char*>& values, std::vector<int>& lengths,
             std::vector<int>& formats) const {
    for (size_t i = 0; i < values_.size(); ++i) {
      values.push_back(nulls_[i] ? nullptr : values_[i].data());
      lengths.push_back(static_cast<int>(values_[i].size()));
      formats.push_back(1);
    }
  }

 private:
  static std::string Bits(uint64_t v, int bytes) {
    std::string s;
    PutBigEndian(s, v, bytes);
    return s;
  }
  Params& Add(Oid type, std::string bytes) {
    types_.push_back(type);
    values_.push_back(std::move(bytes));
    nulls_.push_back(false);
    return *this;
  }

  std::vector<Oid> types_;
  std::vector<std::string> values_;
  std::vector<bool> nulls_;
  std::string error_;
};

// A statement's result rows, in binary format. Accessors read by the column's binary size, so
// a column of an unexpected width yields 0 rather than reading out of bounds.
class Rows {
 public:
  explicit Rows(PGresult* r = nullptr) : r_(r, &PQclear) {}

  int size() const { return r_ ? PQntuples(r_.get()) : 0; }
  // Rows changed by an INSERT/UPDATE.
  int64_t affected() const { return r_ ? std::atoll(PQcmdTuples(r_.get())) : 0; }
  bool IsNull(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  int64_t Int(int row, int col) const {
    const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r_.get(), row, col));
    int len = PQgetlength(r_.get(), row, col);
    if (len != 1 && len != 2 && len != 4 && len != 8) return 0;
    uint64_t v = 0;
    for (int i = 0; i < len; ++i) v = (v << 8) | p[i];
    if (len < 8 && len > 1 && (p[0] & 0x80) != 0) v |= ~uint64_t{0} << (8 * len);  // sign
    return static_cast<int64_t>(v);
  }
  double Double(int row, int col) const {
    if (PQgetlength(r_.get(), row, col) != 8) return 0;
    uint64_t bits = static_cast<uint64_t>(Int(row, col));
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string Str(int row, int col) const {
    return std::string(PQgetvalue(r_.get(), row, col),
                       static_cast<size_t>(PQgetlength(r_.get(), row, col)));
  }

 private:
  std::unique_ptr<PGresult, decltype(&PQclear)> r_;
};

// Row `row` of `rows`, as the shared readers (sql.h) read it.
class RowOf final : public sql::Row {
 public:
  RowOf(const Rows& rows, int row) : rows_(rows), row_(row) {}
  bool IsNull(int col) const override { return rows_.IsNull(row_, col); }
  int64_t Int(int col) const override { return rows_.Int(row_, col); }
  double Real(int col) const override { return rows_.Double(row_, col); }
  std::string Text(int col) const override { return rows_.Str(row_, col); }

 private:
  const Rows& rows_;
  int row_;
};

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

class PostgresStorage final : public Storage {
 public:
  static Result<std::unique_ptr<Storage>> Open(const PostgresOptions& options);
  ~PostgresStorage() override {
    // An open batch is rolled back by the server when the connection closes.
    if (conn_ != nullptr) PQfinish(conn_);
  }

  Status BeginBatch() override;
  Status CommitBatch() override;
  bool shared() const override { return true; }
  const std::string& node() const override { return node_; }
  const WaitGauge* wait_gauge() const override { return &wait_gauge_; }
  const std::string& instance() const override { return instance_; }
  const std::shared_ptr<PostgresWatchdog>& watchdog() const { return watchdog_; }
  Result<model::StudyRecord> LockStudy(int64_t study_id) override;

  Result<model::StudyRecord> CreateStudy(const model::NewStudy& study, double at) override;
  Result<model::StudyRecord> GetStudy(const std::string& name) override;
  Result<std::vector<model::StudyRecord>> ListStudies() override;
  Status SetStudyState(int64_t study_id, model::StudyState state, double at) override;
  Status SetStudyControl(int64_t study_id, bool paused, int n_trials, int parallelism) override;
  Status SetStudySubmit(int64_t study_id, const config::SubmitChoices& submit) override;
  Status DeleteStudy(int64_t study_id) override;

  Result<model::TrialRecord> CreateTrial(int64_t study_id, const model::ParamMap& params, double at,
                                         std::optional<int64_t> retry_of) override;
  Status ClaimTrial(int64_t trial_id) override;
  Status ReleaseClaim(int64_t trial_id) override;
  Status MarkRunning(int64_t trial_id, const model::ProcessIdentity& process, double at) override;
  Status AddIntermediate(int64_t trial_id, int64_t step, double value) override;
  Status SetAttr(int64_t trial_id, const std::string& key, const std::string& json_value) override;
  Status AddLazyWrites(const std::vector<LazyWrite>& writes, std::vector<size_t>* refused) override;
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

  Status Heartbeat(double at) override;
  Result<std::vector<model::NodeRecord>> GetNodes(double now) override;

  Status AppendEvent(std::optional<int64_t> study_id, std::optional<int64_t> trial_id,
                     const std::string& kind, const std::string& detail, double at) override;
  Result<std::vector<model::EventRecord>> GetEvents(std::optional<int64_t> study_id) override;
  Result<std::vector<model::EventRecord>> GetTrialEvents(int64_t trial_id) override;

 private:
  // How a call outside a batch runs (inside one, every call runs under a savepoint):
  // kNone: reads, in one round trip (LoadTrials takes its own snapshot);
  // kWrite: one transaction, committed durably (synchronous_commit as the server sets it);
  // kLazyWrite: one transaction committed with synchronous_commit off: durable within a
  //   fraction of a second, or with the next durable commit (storage.h allows this for
  //   intermediate values, attributes and heartbeats).
  enum class Txn { kNone, kWrite, kLazyWrite };
  using TrialFilter = sql::TrialFilter;

  PostgresStorage() = default;

  Status Connect(const PostgresOptions& options);
  // Opens conn_ from the saved connection parameters (the first connect and after a dropped
  // connection); kUnavailable naming the URL when the server cannot be reached.
  Status Open(const std::string& op);
  // Per-connection setup, after the first connect and every reset.
  Status AfterConnect();
  // The client-side bound on one round trip (PostgresOptions::call_timeout_s): StartRoundTrip
  // sets the deadline; Flush sends what libpq buffered and Await waits until a result can be
  // read without blocking, both until the deadline. Past it, or when the socket fails, the
  // connection is dropped (Abandon) and they return kUnavailable.
  void StartRoundTrip();
  Status Flush(const std::string& op);
  Status Await(const std::string& op);
  // Polls the connection's socket for `events` until the deadline; false when it passed.
  bool PollUntilDeadline(short events);
  Status Abandon(const std::string& op, const std::string& why);
  // Resets a broken connection; kUnavailable naming the URL when the server cannot be reached.
  Status EnsureConnected(const std::string& op);
  bool ConnectionLost() const {
    return conn_ == nullptr || session_ended_ || PQstatus(conn_) != CONNECTION_OK;
  }
  Status InitSchema();

  // The status for a failed statement (or connection failure when `res` is null); sets
  // last_sqlstate_ and last_constraint_.
  Status Error(const PGresult* res, const std::string& op);
  // Runs text-protocol SQL without parameters (may hold several statements) on its own; only
  // where nothing is deferred (schema creation, session setup).
  Status Simple(const char* sql, const std::string& op);

  // A prepared statement of a pipeline, with its parameters.
  struct Statement {
    std::string sql;
    const Params* params;
  };
  // Sends the deferred commands, `commands` (unprepared, without parameters: BEGIN, COMMIT,
  // SAVEPOINT, ...) and `statements` (each prepared on this connection on first use) in one
  // pipeline: one round trip to the server. Returns each statement's rows, or the first error
  // (what followed it did not run). Every round trip goes through here, so deferred commands
  // always reach the server before the next statement.
  // `after` follows the statements (a COMMIT, when all of a transaction is known up front).
  Result<std::vector<Rows>> Run(const std::vector<std::string>& commands,
                                const std::vector<Statement>& statements, const std::string& op,
                                const std::vector<std::string>& after = {});
  Result<Rows> Exec(const std::string& sql, const Params& params, const std::string& op);
  Status Command(const std::string& sql, const std::string& op) {
    return Run({sql}, {}, op).status();
  }

  // Runs `body` as one call: under a savepoint inside a batch, else per `txn`, retried once on a
  // fresh connection when the connection turns out to be dead before anything was committed.
  template <typename F>
  auto Call(const std::string& op, Txn txn, F&& body) -> decltype(body());
  template <typename F>
  auto Attempt(const std::string& op, Txn txn, F& body) -> decltype(body());
  void RollbackIfOpen();
  void LoseBatch(const Status& why);

  Status TrialNotMutable(int64_t trial_id, const std::string& op, bool require_waiting);
  // The rows of a SELECT of sql::kEventColumns FROM events.
  static std::vector<model::EventRecord> EventsOf(const Rows& r);
  // kSince: number >= `number` or in `numbers`; kRange: `number` <= number < `end_number`.
  Result<std::vector<model::TrialRecord>> LoadTrials(TrialFilter filter, int64_t study_id,
                                                     int number, const std::vector<int>& numbers,
                                                     const std::string& op, int64_t end_number = 0,
                                                     Curves curves = Curves::kLoad);
  Result<model::StudyRecord> ReadStudyRow(const Rows& rows, int row) const {
    return sql::ReadStudyRow(RowOf(rows, row), masked_url_);
  }

  PGconn* conn_ = nullptr;
  // Commands that need no answer of their own (BEGIN, SAVEPOINT, RELEASE of a call's savepoint)
  // ride along with the next round trip instead of costing one each: a call inside a batch
  // costs one round trip, not three. Cleared with the connection.
  std::vector<std::string> deferred_;
  // Counts Run calls that sent deferred_: tells Call whether the commands it deferred reached
  // the server.
  uint64_t deferred_sent_ = 0;
  std::string masked_url_;
  DistributionCache distributions_;  // stored distributions, parsed once
  std::string node_;
  std::string instance_;
  double idle_in_transaction_timeout_s_ = 60;
  double lock_timeout_s_ = 2;
  double call_timeout_s_ = 10;
  // The connection parameters (keyword, value), kept for reconnecting after Abandon().
  std::vector<std::pair<std::string, std::string>> conninfo_;
  // Says at once whether the server answers (null: no watchdog; shared by the daemon's
  // connections: PostgresOptions::watchdog). Declared after conninfo_.
  std::shared_ptr<PostgresWatchdog> watchdog_;
  // The last PollUntilDeadline gave up because the watchdog found the server unresponsive: why.
  std::optional<std::string> gave_up_;
  std::chrono::steady_clock::time_point deadline_;  // of the current round trip
  // The last round trip ran out of time: the call is not retried on a new connection (the
  // server may be stopped; a retry would double the wait).
  bool timed_out_ = false;
  // SQL text -> name of the statement prepared on the current connection.
  std::unordered_map<std::string, std::string> prepared_;
  int next_statement_ = 0;
  // Open batches (BeginBatch minus CommitBatch); the outermost owns the transaction.
  int batch_depth_ = 0;
  // Set when the batch's transaction died with its connection: the batch's later calls and
  // its CommitBatch fail with this status.
  std::optional<Status> batch_lost_;
  // Whether the current attempt sent COMMIT: a connection lost after that leaves the outcome
  // unknown, so the call is not retried.
  bool commit_sent_ = false;
  std::string last_sqlstate_;
  std::string last_constraint_;
  // The server reported a FATAL error (its session ends): libpq may not have seen the socket
  // close yet, but the connection is as good as lost.
  bool session_ended_ = false;
  // Marks each wait on the server's socket (PollUntilDeadline) for the control socket's thread.
  WaitGauge wait_gauge_;
};

// ---- Connection ----

Result<std::unique_ptr<Storage>> PostgresStorage::Open(const PostgresOptions& options) {
  std::unique_ptr<PostgresStorage> s(new PostgresStorage());
  s->masked_url_ = MaskPostgresUrl(options.url);
  s->node_ = options.node;
  s->instance_ = options.instance;
  s->idle_in_transaction_timeout_s_ = options.idle_in_transaction_timeout_s;
  s->lock_timeout_s_ = options.lock_timeout_s;
  s->call_timeout_s_ = options.call_timeout_s > 0 ? options.call_timeout_s : 10;
  TRIALD_RETURN_IF_ERROR(s->Connect(options));
  Status st = s->InitSchema();
  if (!st.ok()) return st.WithContext("PostgreSQL database " + s->masked_url_);
  if (options.watchdog != nullptr) {
    s->watchdog_ = options.watchdog;
  } else if (options.unresponsive_after_s > 0) {
    PostgresWatchdog::Options w;
    w.conninfo = s->conninfo_;
    w.masked_url = s->masked_url_;
    w.unresponsive_after_s = options.unresponsive_after_s;
    w.interval_s = options.unresponsive_after_s / 4;
    w.give_up_after_s = s->call_timeout_s_;
    s->watchdog_ = std::make_shared<PostgresWatchdog>(std::move(w));
  }
  return std::unique_ptr<Storage>(std::move(s));
}

Status PostgresStorage::Connect(const PostgresOptions& options) {
  const std::string& url = options.url;
  if (url.rfind("postgresql://", 0) != 0 && url.rfind("postgres://", 0) != 0) {
    return common::InvalidArgument("\"" + masked_url_ +
                                   "\" is not a PostgreSQL URL; expected "
                                   "postgresql://USER@HOST[:PORT]/DATABASE");
  }
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string why = parse_error != nullptr ? TrimRight(parse_error) : "out of memory";
    if (parse_error != nullptr) PQfreemem(parse_error);
    return common::InvalidArgument("invalid PostgreSQL URL \"" + masked_url_ + "\": " + why);
  }
  PQconninfoFree(parsed);
  if (!IsStorableText(options.node)) {
    return common::InvalidArgument("node name is not valid UTF-8 text or contains a NUL byte");
  }

  // Keywords are applied in order: the URL (dbname, expanded) overrides the timeouts and
  // keepalives before it; application_name and client_encoding after it are always ours.
  // tcp_user_timeout bounds how long sent data may stay unacknowledged before the kernel drops
  // the connection; the keepalives find a peer gone while the connection is idle.
  const long user_timeout_ms = std::max<long>(1000, std::lround(call_timeout_s_ * 1000));
  conninfo_ = {
      {"connect_timeout", std::to_string(std::max(2, options.connect_timeout_s))},
      {"keepalives", "1"},
      {"keepalives_idle", std::to_string(std::max(1, options.keepalives_idle_s))},
      {"keepalives_interval", std::to_string(std::max(1, options.keepalives_interval_s))},
      {"keepalives_count", std::to_string(std::max(1, options.keepalives_count))},
      {"tcp_user_timeout", std::to_string(user_timeout_ms)},
      {"dbname", url},
      {"application_name", "triald:" + options.node},
      {"client_encoding", "UTF8"},
  };
  TRIALD_RETURN_IF_ERROR(Open("connect"));
  if (PQserverVersion(conn_) < 100000) {
    return common::FailedPrecondition("PostgreSQL at " + masked_url_ + " is version " +
                                      std::to_string(PQserverVersion(conn_)) +
                                      "; triald needs 10 or newer");
  }
  const char* encoding = PQparameterStatus(conn_, "server_encoding");
  std::string enc = encoding != nullptr ? encoding : "";
  if (enc != "UTF8" && enc != "SQL_ASCII") {
    return common::FailedPrecondition(
        "PostgreSQL database at " + masked_url_ + " has encoding " + enc +
        "; triald needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)");
  }
  return AfterConnect();
}

Status PostgresStorage::Open(const std::string& op) {
  if (conn_ != nullptr) PQfinish(conn_);
  std::vector<const char*> keywords, values;
  for (const auto& [k, v] : conninfo_) {
    keywords.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keywords.push_back(nullptr);
  values.push_back(nullptr);
  // Blocking, bounded by connect_timeout (libpq's own clock).
  conn_ = PQconnectdbParams(keywords.data(), values.data(), /*expand_dbname=*/1);
  if (conn_ == nullptr) return common::Internal("PQconnectdbParams: out of memory");
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string why = TrimRight(PQerrorMessage(conn_));
    PQfinish(conn_);
    conn_ = nullptr;
    return common::Unavailable(
        (op == "connect" ? std::string("cannot connect") : op + ": cannot reconnect") +
        " to PostgreSQL at " + masked_url_ + ": " + why);
  }
  if (op != "connect") return AfterConnect();
  return Status::Ok();
}

Status PostgresStorage::AfterConnect() {
  prepared_.clear();
  deferred_.clear();
  // libpq may or may not mark its socket close-on-exec; a forked trial must never inherit it
  // (it would keep the session alive, or write into it).
  int fd = PQsocket(conn_);
  if (fd >= 0) {
    int flags = fcntl(fd, F_GETFD);
    if (flags == -1 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) == -1) {
      return common::ErrnoError("set close-on-exec on the PostgreSQL connection", errno);
    }
  }
  // A daemon that dies or hangs mid-batch must not hold its study locks for long: the server
  // ends a session idle in a transaction, and probes an idle peer's TCP connection. A daemon
  // waiting for such a lock gives up after lock_timeout (its event loop goes on; the scheduler
  // tries again later) instead of stalling until the holder's session ends.
  // The client waits for at most call_timeout per round trip (Await); the server cancels a
  // statement a little before that, so a merely slow statement fails with its own error.
  if (PQsetnonblocking(conn_, 1) != 0) return Error(nullptr, "configure session: nonblocking");
  auto ms = [](double s) { return std::to_string(std::max<int64_t>(1, std::llround(s * 1000))); };
  const std::string settings =
      "SET idle_in_transaction_session_timeout = " + ms(idle_in_transaction_timeout_s_) +
      "; SET lock_timeout = " + ms(lock_timeout_s_) +
      "; SET statement_timeout = " + ms(call_timeout_s_ * 0.9) +
      "; SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; "
      "SET tcp_keepalives_count = 3";
  return Simple(settings.c_str(), "configure session");
}

Status PostgresStorage::EnsureConnected(const std::string& op) {
  if (!ConnectionLost()) return Status::Ok();
  // Connecting to a server that does not answer would wait for connect_timeout.
  if (watchdog_ != nullptr) {
    if (std::optional<std::string> why = watchdog_->Unresponsive()) {
      return common::Unavailable(op + ": PostgreSQL at " + masked_url_ + " " + *why +
                                 "; not reconnecting until it answers");
    }
  }
  session_ended_ = false;
  timed_out_ = false;
  prepared_.clear();
  deferred_.clear();
  return Open(op);
}

void PostgresStorage::StartRoundTrip() {
  timed_out_ = false;
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::microseconds(std::llround(call_timeout_s_ * 1e6));
}

bool PostgresStorage::PollUntilDeadline(short events) {
  gave_up_.reset();
  WaitGauge::Scope waiting(&wait_gauge_);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    // In slices of 50 ms while a watchdog can tell that the server stopped answering.
    const int64_t slice = watchdog_ != nullptr ? 50 : 60'000;
    pollfd pfd{PQsocket(conn_), events, 0};
    int n = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, slice)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let libpq find the socket's error
    if (watchdog_ != nullptr) {
      gave_up_ = watchdog_->Unresponsive();
      if (gave_up_) return false;
    }
  }
}

Status PostgresStorage::Abandon(const std::string& op, const std::string& why) {
  // Mid-round-trip, the connection's state is unknown: drop it. The server rolls back whatever
  // transaction it held; the next call connects anew.
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
  deferred_.clear();
  return common::Unavailable(op + ": PostgreSQL at " + masked_url_ + " " + why +
                             "; the connection was dropped");
}

Status PostgresStorage::Flush(const std::string& op) {
  for (;;) {
    int r = PQflush(conn_);
    if (r == 0) return Status::Ok();
    if (r < 0) return Error(nullptr, op + ": send");
    // The server may be sending while it reads (a long pipeline): read too, or both sides wait.
    if (!PollUntilDeadline(POLLOUT | POLLIN)) {
      timed_out_ = true;
      return Abandon(op, gave_up_ ? *gave_up_
                                  : "did not take the request within " +
                                        FormatSeconds(call_timeout_s_) + " s (call timeout)");
    }
    if (PQconsumeInput(conn_) != 1) return Error(nullptr, op + ": receive");
  }
}

Status PostgresStorage::Await(const std::string& op) {
  while (PQisBusy(conn_) == 1) {
    if (!PollUntilDeadline(POLLIN)) {
      timed_out_ = true;
      return Abandon(op, gave_up_ ? *gave_up_
                                  : "did not answer within " + FormatSeconds(call_timeout_s_) +
                                        " s (call timeout)");
    }
    if (PQconsumeInput(conn_) != 1) return Error(nullptr, op + ": receive");
  }
  return Status::Ok();
}

Status PostgresStorage::InitSchema() {
  // One transaction under an advisory lock: daemons starting together create the schema once,
  // and a database is at one version or the next, never in between.
  TRIALD_RETURN_IF_ERROR(Simple("BEGIN", "create schema"));
  Status st = [&]() -> Status {
    TRIALD_RETURN_IF_ERROR(
        Exec("SELECT pg_advisory_xact_lock($1)", Params().Int8(kSchemaLockKey), "lock schema")
            .status());
    TRIALD_ASSIGN_OR_RETURN(
        Rows exists, Exec("SELECT (to_regclass('schema_version') IS NOT NULL)::int4", Params(),
                          "read schema version"));
    int version = 0;
    if (exists.Int(0, 0) != 0) {
      TRIALD_ASSIGN_OR_RETURN(Rows v, Exec("SELECT COALESCE(max(version), 0) FROM schema_version",
                                           Params(), "read schema version"));
      version = schema::LegacyPostgresVersion(static_cast<int>(v.Int(0, 0)));
    }
    if (version > schema::kVersion) {
      return common::FailedPrecondition("database schema version " + std::to_string(version) +
                                        " is newer than this triald supports (" +
                                        std::to_string(schema::kVersion) + ")");
    }
    if (version == schema::kVersion) return Simple("COMMIT", "create schema");
    const std::string op = version == 0 ? std::string("create schema")
                                        : "upgrade schema from version " + std::to_string(version);
    std::string script =
        version == 0 ? "CREATE TABLE schema_version (version integer NOT NULL);\n" : "";
    for (const std::string& statement :
         schema::UpgradeStatements(sql::Dialect::kPostgres, version)) {
      script += statement + ";\n";
    }
    script += (version == 0 ? "INSERT INTO schema_version (version) VALUES ("
                            : "UPDATE schema_version SET version = (") +
              std::to_string(schema::kVersion) + ");\n";
    TRIALD_RETURN_IF_ERROR(Simple(script.c_str(), op));
    return Simple("COMMIT", "create schema");
  }();
  if (!st.ok()) RollbackIfOpen();
  return st;
}

// ---- Statements ----

Status PostgresStorage::Error(const PGresult* res, const std::string& op) {
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const char* constraint =
      res != nullptr ? PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME) : nullptr;
  const char* severity =
      res != nullptr ? PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED) : nullptr;
  last_sqlstate_ = state != nullptr ? state : "";
  last_constraint_ = constraint != nullptr ? constraint : "";
  if (severity != nullptr &&
      (std::strcmp(severity, "FATAL") == 0 || std::strcmp(severity, "PANIC") == 0)) {
    session_ended_ = true;
  }
  std::string msg = TrimRight(res != nullptr ? PQresultErrorMessage(res) : "");
  if (msg.empty() && conn_ != nullptr) msg = TrimRight(PQerrorMessage(conn_));
  if (msg.empty()) msg = "no connection";
  if (ConnectionLost()) {
    return common::Unavailable(op + ": connection to PostgreSQL at " + masked_url_ +
                               " lost: " + msg);
  }
  msg = op + ": " + msg + (last_sqlstate_.empty() ? "" : " (SQLSTATE " + last_sqlstate_ + ")");
  const std::string cls = last_sqlstate_.substr(0, 2);
  if (last_sqlstate_ == "23505") return common::AlreadyExists(msg);
  if (last_sqlstate_ == "23503") return common::NotFound(msg);
  if (cls == "08" || cls == "40" || cls == "57" || last_sqlstate_ == "55P03" ||
      last_sqlstate_ == "53300") {
    // Connection trouble, serialization failure or deadlock, cancelled or shut down, lock or
    // connection-slot exhaustion: the server, not the request, is the problem.
    return common::Unavailable(msg);
  }
  // Disk full, I/O error; a server that refuses writes (read-only transaction: a standby, or
  // default_transaction_read_only) is an outage like a full disk (scheduler/storage_outage.h).
  if (cls == "53" || cls == "58" || last_sqlstate_ == "25006") return common::IoError(msg);
  if (cls == "22") return common::InvalidArgument(msg);
  if (cls == "42" && last_sqlstate_ == "42501") return common::PermissionDenied(msg);
  return common::Internal(msg);
}

Status PostgresStorage::Simple(const char* sql, const std::string& op) {
  // PQexec would block without a bound: send, then read every result (one per statement)
  // within the round trip's deadline. The first error wins.
  StartRoundTrip();
  if (PQsendQuery(conn_, sql) != 1) return Error(nullptr, op);
  TRIALD_RETURN_IF_ERROR(Flush(op));
  Status first;
  bool any = false;
  for (;;) {
    TRIALD_RETURN_IF_ERROR(Await(op));
    std::unique_ptr<PGresult, decltype(&PQclear)> res(PQgetResult(conn_), &PQclear);
    if (res == nullptr) break;
    any = true;
    ExecStatusType st = PQresultStatus(res.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && first.ok()) first = Error(res.get(), op);
  }
  if (!any && first.ok()) first = Error(nullptr, op);  // the connection went away
  return first;
}

Result<std::vector<Rows>> PostgresStorage::Run(const std::vector<std::string>& commands,
                                               const std::vector<Statement>& statements,
                                               const std::string& op,
                                               const std::vector<std::string>& after) {
  for (const auto& st : statements) {
    if (!st.params->error().empty()) return common::InvalidArgument(op + ": " + st.params->error());
  }
  if (conn_ == nullptr) return Error(nullptr, op);
  StartRoundTrip();
  if (PQenterPipelineMode(conn_) != 1) return Error(nullptr, op + ": enter pipeline mode");
  std::vector<std::string> controls = std::move(deferred_);
  deferred_.clear();
  if (!controls.empty()) ++deferred_sent_;
  controls.insert(controls.end(), commands.begin(), commands.end());
  const size_t before_statements = controls.size();
  controls.insert(controls.end(), after.begin(), after.end());

  // What was sent, in order: each has one result (then a null) to collect.
  enum class Kind { kCommand, kPrepare, kStatement };
  struct Sent {
    Kind kind;
    size_t index;  // into controls or statements
  };
  std::vector<Sent> sent;
  bool sending = true;
  auto send_command = [&](size_t i) {
    sending = PQsendQueryParams(conn_, controls[i].c_str(), 0, nullptr, nullptr, nullptr, nullptr,
                                0) == 1;
    if (sending) sent.push_back({Kind::kCommand, i});
  };
  for (size_t i = 0; i < before_statements && sending; ++i) send_command(i);
  for (size_t i = 0; i < statements.size() && sending; ++i) {
    const Statement& st = statements[i];
    auto it = prepared_.find(st.sql);
    if (it == prepared_.end()) {
      std::string name = "triald_" + std::to_string(next_statement_++);
      sending = PQsendPrepare(conn_, name.c_str(), st.sql.c_str(), st.params->size(),
                              st.params->types()) == 1;
      if (!sending) break;
      sent.push_back({Kind::kPrepare, i});
      it = prepared_.emplace(st.sql, std::move(name)).first;
    }
    std::vector<const char*> values;
    std::vector<int> lengths;
    std::vector<int> formats;
    st.params->Views(values, lengths, formats);
    sending = PQsendQueryPrepared(conn_, it->second.c_str(), st.params->size(), values.data(),
                                  lengths.data(), formats.data(), /*resultFormat=*/1) == 1;
    if (sending) sent.push_back({Kind::kStatement, i});
  }
  for (size_t i = before_statements; i < controls.size() && sending; ++i) send_command(i);
  if (sending) sending = PQpipelineSync(conn_) == 1;
  if (sending) TRIALD_RETURN_IF_ERROR(Flush(op));

  std::vector<Rows> rows(statements.size());
  Status first;
  auto note = [&](const PGresult* res, const std::string& what) {
    if (first.ok()) first = Error(res, what);
  };
  if (!sending) note(nullptr, op + ": send");
  for (const Sent& item : sent) {
    TRIALD_RETURN_IF_ERROR(Await(op));
    PGresult* res = PQgetResult(conn_);
    Rows keep(res);
    // Each command's results end with a null; a lost connection ends them early.
    if (res != nullptr) {
      for (;;) {
        TRIALD_RETURN_IF_ERROR(Await(op));
        PGresult* extra = PQgetResult(conn_);
        if (extra == nullptr) break;
        PQclear(extra);
      }
    }
    ExecStatusType st = PQresultStatus(res);
    bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
    // A statement whose Parse failed or was skipped is not prepared on the server.
    if (item.kind == Kind::kPrepare && !ok) prepared_.erase(statements[item.index].sql);
    if (st == PGRES_PIPELINE_ABORTED) continue;  // skipped after an earlier error
    switch (item.kind) {
      case Kind::kCommand:
        if (!ok) note(res, op + ": " + controls[item.index]);
        break;
      case Kind::kPrepare:
        if (!ok) note(res, op + ": prepare");
        break;
      case Kind::kStatement:
        if (ok) {
          rows[item.index] = std::move(keep);
        } else {
          note(res, op);
        }
        break;
    }
  }
  if (sending) {
    // The pipeline's end (PGRES_PIPELINE_SYNC), unless the connection is gone.
    for (;;) {
      TRIALD_RETURN_IF_ERROR(Await(op));
      PGresult* res = PQgetResult(conn_);
      if (res == nullptr) break;
      bool sync = PQresultStatus(res) == PGRES_PIPELINE_SYNC;
      PQclear(res);
      if (sync) break;
    }
  }
  if (PQexitPipelineMode(conn_) != 1 && first.ok()) note(nullptr, op + ": leave pipeline mode");
  if (!first.ok()) return first;
  return rows;
}

Result<Rows> PostgresStorage::Exec(const std::string& sql, const Params& params,
                                   const std::string& op) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<Rows> rows, Run({}, {{sql, &params}}, op));
  return std::move(rows.front());
}

template <typename F>
auto PostgresStorage::Call(const std::string& op, Txn txn, F&& body) -> decltype(body()) {
  using R = decltype(body());
  if (batch_depth_ > 0) {
    if (batch_lost_) return batch_lost_->WithContext(op);
    // The savepoint goes out with the call's first statement.
    const size_t mark = deferred_.size();
    const uint64_t sent_before = deferred_sent_;
    deferred_.push_back("SAVEPOINT triald_op");
    R r = body();
    bool savepoint_sent = deferred_sent_ != sent_before;
    if (!savepoint_sent) deferred_.resize(mark);  // the call sent nothing
    if (StatusOf(r).ok()) {
      // Released with the next round trip (the next call's, or the batch's COMMIT).
      if (savepoint_sent) deferred_.push_back("RELEASE SAVEPOINT triald_op");
      return r;
    }
    if (ConnectionLost()) {
      LoseBatch(StatusOf(r));
      return r;
    }
    if (!savepoint_sent) return r;
    // Undo only this call; the batch's earlier changes stay.
    Status back = Run({"ROLLBACK TO SAVEPOINT triald_op", "RELEASE SAVEPOINT triald_op"}, {},
                      op + ": roll back to savepoint")
                      .status();
    if (!back.ok()) LoseBatch(back);
    return r;
  }
  for (int attempt = 0;; ++attempt) {
    TRIALD_RETURN_IF_ERROR(EnsureConnected(op));
    R r = Attempt(op, txn, body);
    if (StatusOf(r).ok()) return r;
    bool lost = ConnectionLost();
    // The server rolls back a transaction whose connection died, so a call that lost its
    // connection before COMMIT changed nothing and may run again (once) on a new connection.
    if (lost && attempt == 0 && !commit_sent_ && !timed_out_) continue;
    if (!lost) RollbackIfOpen();
    return r;
  }
}

template <typename F>
auto PostgresStorage::Attempt(const std::string& op, Txn txn, F& body) -> decltype(body()) {
  using R = decltype(body());
  commit_sent_ = false;
  deferred_.clear();  // nothing is deferred outside a batch
  if (txn == Txn::kNone) return body();
  // BEGIN goes out with the body's first statements; COMMIT is a round trip of its own.
  const uint64_t sent_before = deferred_sent_;
  deferred_.push_back("BEGIN");
  if (txn == Txn::kLazyWrite) deferred_.push_back("SET LOCAL synchronous_commit = off");
  R r = body();
  bool begun = deferred_sent_ != sent_before;
  deferred_.clear();
  if (!StatusOf(r).ok() || !begun) return r;
  commit_sent_ = true;
  Status commit = Command("COMMIT", op + ": commit");
  if (!commit.ok()) {
    if (ConnectionLost()) {
      return common::Unavailable(commit.message() + "; whether it was committed is unknown");
    }
    return commit;
  }
  return r;
}

void PostgresStorage::RollbackIfOpen() {
  deferred_.clear();
  PGTransactionStatusType ts = PQtransactionStatus(conn_);
  if (ts != PQTRANS_INTRANS && ts != PQTRANS_INERROR) return;
  // Nothing more can be done when ROLLBACK fails; the caller already returns the first error.
  (void)Command("ROLLBACK", "rollback");
}

void PostgresStorage::LoseBatch(const Status& why) {
  deferred_.clear();
  batch_lost_ = Status(ConnectionLost() ? common::Code::kUnavailable : why.code(),
                       "the batch was rolled back (" + why.message() + ")");
}

// ---- Batches ----

Status PostgresStorage::BeginBatch() {
  return Guarded("BeginBatch", [&]() -> Status {
    if (batch_depth_ > 0) {
      ++batch_depth_;
      return Status::Ok();
    }
    for (int attempt = 0;; ++attempt) {
      // A connection lost with the previous batch (or since the last call) is renewed here: a
      // round trip of its own, so that a dead connection is found before the batch has begun.
      TRIALD_RETURN_IF_ERROR(EnsureConnected("begin batch"));
      deferred_.clear();
      Status st = Command("BEGIN", "begin batch");
      if (st.ok()) {
        batch_depth_ = 1;
        batch_lost_.reset();
        return st;
      }
      if (attempt == 0 && ConnectionLost() && !timed_out_) continue;
      return st;
    }
  });
}

Status PostgresStorage::CommitBatch() {
  return Guarded("CommitBatch", [&]() -> Status {
    if (batch_depth_ == 0) return common::FailedPrecondition("CommitBatch without BeginBatch");
    if (--batch_depth_ > 0) return Status::Ok();
    if (batch_lost_) {
      Status st = batch_lost_->WithContext("commit batch");
      batch_lost_.reset();
      if (!ConnectionLost()) RollbackIfOpen();
      return st;
    }
    if (PQtransactionStatus(conn_) == PQTRANS_INERROR) {
      // COMMIT of a failed transaction would quietly roll back; say so instead.
      RollbackIfOpen();
      return common::Internal("commit batch: the batch's transaction had failed; rolled back");
    }
    Status st = Command("COMMIT", "commit batch");  // with the last call's RELEASE
    if (!st.ok()) {
      if (ConnectionLost()) {
        return common::Unavailable(st.message() + "; whether the batch was committed is unknown");
      }
      RollbackIfOpen();
    }
    return st;
  });
}

// ---- Rows ----

Status PostgresStorage::TrialNotMutable(int64_t trial_id, const std::string& op,
                                        bool require_waiting) {
  TRIALD_ASSIGN_OR_RETURN(Rows r, Exec(sql::For(sql::Dialect::kPostgres, sql::kTrialStateSql),
                                       Params().Int8(trial_id), op + ": look up trial"));
  const RowOf row(r, 0);
  return sql::TrialNotMutable(r.size() > 0 ? &row : nullptr, trial_id, op, require_waiting, node_);
}

// ---- Studies ----

Result<model::StudyRecord> PostgresStorage::LockStudy(int64_t study_id) {
  return Guarded("LockStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "LockStudy(" + StudyIdLabel(study_id) + ")";
    if (batch_depth_ == 0) {
      return common::FailedPrecondition(op +
                                        ": called outside a batch; the lock lasts until "
                                        "the batch commits");
    }
    return Call(op, Txn::kNone, [&]() -> Result<model::StudyRecord> {
      // NO KEY UPDATE: excludes other lockers (and CreateTrial), but not the key-share locks
      // that inserting a row referencing the study takes (an event, say), so a daemon holding
      // one study's lock never waits for another's because of a foreign key.
      TRIALD_ASSIGN_OR_RETURN(Rows r, Exec(std::string("SELECT ") + sql::kStudyColumns +
                                               " FROM studies WHERE id = $1 FOR NO KEY UPDATE",
                                           Params().Int8(study_id), op));
      if (r.size() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      return ReadStudyRow(r, 0);
    });
  });
}

Result<model::StudyRecord> PostgresStorage::CreateStudy(const model::NewStudy& study, double at) {
  return Guarded("CreateStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "CreateStudy(\"" + study.name + "\")";
    TRIALD_ASSIGN_OR_RETURN(const std::vector<config::Direction> directions,
                            backend::NewStudyDirections(study, op));
    return Call(op, Txn::kWrite, [&]() -> Result<model::StudyRecord> {
      auto inserted = Exec(
          "INSERT INTO studies (name, direction, n_trials, state, spec_toml, spec_path, "
          "seed, created_at, finished_at, submitter_uid, submitter_name, directions, "
          "submit_json) "
          "VALUES ($1, $2, $3, 'RUNNING', $4, $5, $6, $7, 0, $8, $9, $10, $11) RETURNING id",
          Params()
              .Text(study.name, "study name")
              .Text(DirectionText(study.direction), "direction")
              .Int4(study.n_trials)
              .Text(study.spec_toml, "sweep file")
              .Bytes(study.spec_path)
              .Int8(static_cast<int64_t>(study.seed))
              .Float8(at)
              .Int8(study.submitter.uid)
              .Bytes(study.submitter.name)
              .Text(backend::DirectionsText(directions), "directions")
              .Text(backend::SubmitChoicesText(study.submit), "submit choices"),
          op + ": insert");
      if (!inserted.ok()) {
        if (last_sqlstate_ == "23505") {
          return common::AlreadyExists("study \"" + study.name + "\" already exists");
        }
        return inserted.status();
      }
      return backend::NewStudyRecord(study, directions, inserted->Int(0, 0), at);
    });
  });
}

Result<model::StudyRecord> PostgresStorage::GetStudy(const std::string& name) {
  return Guarded("GetStudy", [&]() -> Result<model::StudyRecord> {
    const std::string op = "GetStudy(\"" + name + "\")";
    return Call(op, Txn::kNone, [&]() -> Result<model::StudyRecord> {
      TRIALD_ASSIGN_OR_RETURN(Rows r, Exec(std::string("SELECT ") + sql::kStudyColumns +
                                               " FROM studies WHERE name = $1",
                                           Params().Text(name, "study name"), op));
      if (r.size() == 0) return common::NotFound("study \"" + name + "\" not found");
      return ReadStudyRow(r, 0);
    });
  });
}

Result<std::vector<model::StudyRecord>> PostgresStorage::ListStudies() {
  return Guarded("ListStudies", [&]() -> Result<std::vector<model::StudyRecord>> {
    const std::string op = "ListStudies";
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::StudyRecord>> {
      TRIALD_ASSIGN_OR_RETURN(
          Rows r, Exec(std::string("SELECT ") + sql::kStudyColumns + " FROM studies ORDER BY id",
                       Params(), op));
      std::vector<model::StudyRecord> out;
      for (int i = 0; i < r.size(); ++i) {
        TRIALD_ASSIGN_OR_RETURN(model::StudyRecord s, ReadStudyRow(r, i));
        out.push_back(std::move(s));
      }
      return out;
    });
  });
}

Status PostgresStorage::SetStudyState(int64_t study_id, model::StudyState state, double at) {
  return Guarded("SetStudyState", [&]() -> Status {
    const std::string op = "SetStudyState(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      // A study set back to RUNNING (resumed) is no longer finished.
      TRIALD_ASSIGN_OR_RETURN(Rows r,
                              Exec("UPDATE studies SET state = $2, finished_at = $3 WHERE id = $1",
                                   Params()
                                       .Int8(study_id)
                                       .Text(model::StudyStateName(state), "state")
                                       .Float8(state == model::StudyState::kRunning ? 0 : at),
                                   op));
      if (r.affected() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      return Status::Ok();
    });
  });
}

Status PostgresStorage::SetStudyControl(int64_t study_id, bool paused, int n_trials,
                                        int parallelism) {
  return Guarded("SetStudyControl", [&]() -> Status {
    const std::string op = "SetStudyControl(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(backend::CheckStudyControl(n_trials, parallelism, op));
    return Call(op, Txn::kWrite, [&]() -> Status {
      TRIALD_ASSIGN_OR_RETURN(
          Rows r,
          Exec("UPDATE studies SET paused = $2, n_trials = $3, parallelism = $4 WHERE id = $1",
               Params().Int8(study_id).Int4(paused ? 1 : 0).Int4(n_trials).Int4(parallelism), op));
      if (r.affected() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      return Status::Ok();
    });
  });
}

Status PostgresStorage::SetStudySubmit(int64_t study_id, const config::SubmitChoices& submit) {
  return Guarded("SetStudySubmit", [&]() -> Status {
    const std::string op = "SetStudySubmit(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      TRIALD_ASSIGN_OR_RETURN(
          Rows r,
          Exec("UPDATE studies SET submit_json = $2 WHERE id = $1",
               Params().Int8(study_id).Text(backend::SubmitChoicesText(submit), "submit choices"),
               op));
      if (r.affected() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      return Status::Ok();
    });
  });
}

Status PostgresStorage::DeleteStudy(int64_t study_id) {
  return Guarded("DeleteStudy", [&]() -> Status {
    const std::string op = "DeleteStudy(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      // The study's row locked first, as LockStudy does: no node claims a trial meanwhile.
      TRIALD_ASSIGN_OR_RETURN(Rows found, Exec("SELECT id FROM studies WHERE id = $1 FOR UPDATE",
                                               Params().Int8(study_id), op));
      if (found.size() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      for (const std::string& text : sql::DeleteStudyStatements(sql::Dialect::kPostgres)) {
        TRIALD_RETURN_IF_ERROR(Exec(text, Params().Int8(study_id), op).status());
      }
      return Status::Ok();
    });
  });
}

// ---- Trials: mutations ----

Result<model::TrialRecord> PostgresStorage::CreateTrial(int64_t study_id,
                                                        const model::ParamMap& params, double at,
                                                        std::optional<int64_t> retry_of) {
  return Guarded("CreateTrial", [&]() -> Result<model::TrialRecord> {
    const std::string op = "CreateTrial(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(backend::CheckNewParams(params, op));
    std::vector<std::string> names;
    std::vector<double> internal;
    std::vector<std::string> dist_json;
    for (const auto& [name, p] : params) {
      names.push_back(name);
      internal.push_back(p.internal);
      dist_json.push_back(p.dist.ToJson());
    }

    return Call(op, Txn::kWrite, [&]() -> Result<model::TrialRecord> {
      // One round trip. The study's row lock orders concurrent creators: the insert, a later
      // statement with a snapshot taken once the lock was granted, sees every trial committed
      // before it (a caller holding LockStudy holds this lock already). The insert adds nothing
      // for an unknown study or an invalid retry (the lookups below say which), so no statement
      // fails and the call's errors are this class's own. The trial and its parameters are one
      // statement: however many parameters, no extra round trip.
      Params lock_params;
      lock_params.Int8(study_id);
      Params retry_params;
      retry_params.Int8(retry_of.value_or(0));
      Params insert_params;
      insert_params.Int8(study_id)
          .Float8(at)
          .OptInt8(retry_of)
          .TextArray(names, "parameter name")
          .Float8Array(internal)
          .TextArray(dist_json, "distribution");
      std::vector<Statement> statements = {
          {"SELECT 1 FROM studies WHERE id = $1 FOR NO KEY UPDATE", &lock_params},
          {"SELECT study_id, number FROM trials WHERE id = $1", &retry_params},
          {"WITH t AS (INSERT INTO trials (study_id, number, state, created_at, retry_of) "
           "SELECT s.id, (SELECT COALESCE(max(number) + 1, 0) FROM trials WHERE study_id = $1), "
           "'WAITING', $2, $3 FROM studies s WHERE s.id = $1 AND ($3::int8 IS NULL OR EXISTS "
           "(SELECT 1 FROM trials r WHERE r.id = $3 AND r.study_id = $1)) RETURNING id, number), "
           "p AS (INSERT INTO trial_params (trial_id, name, internal_value, distribution_json) "
           "SELECT t.id, u.name, u.value, u.dist FROM t, unnest($4::text[], $5::float8[], "
           "$6::text[]) AS u(name, value, dist)) "
           "SELECT id, number FROM t",
           &insert_params}};
      TRIALD_ASSIGN_OR_RETURN(std::vector<Rows> rows, Run({}, statements, op));
      if (rows[0].size() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      std::optional<int> retry_of_number;
      if (retry_of) {
        const Rows& r = rows[1];
        if (r.size() == 0) {
          return common::NotFound(op + ": retried " + TrialIdLabel(*retry_of) + " not found");
        }
        if (r.Int(0, 0) != study_id) {
          return common::InvalidArgument(op + ": retried " + TrialIdLabel(*retry_of) +
                                         " belongs to " + StudyIdLabel(r.Int(0, 0)) +
                                         "; a retry must be in the same study");
        }
        retry_of_number = static_cast<int>(r.Int(0, 1));
      }
      if (rows[2].size() != 1) return common::Internal(op + ": the trial was not inserted");
      model::TrialRecord t;
      t.id = rows[2].Int(0, 0);
      t.number = static_cast<int>(rows[2].Int(0, 1));
      t.study_id = study_id;
      t.state = model::TrialState::kWaiting;
      t.params = params;
      t.created_at = at;
      t.retry_of = retry_of;
      t.retry_of_number = retry_of_number;
      return t;
    });
  });
}

Status PostgresStorage::ClaimTrial(int64_t trial_id) {
  return Guarded("ClaimTrial", [&]() -> Status {
    const std::string op = "ClaimTrial(" + TrialIdLabel(trial_id) + ")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      // The state guard makes check-and-set atomic: under READ COMMITTED an UPDATE that waited
      // for another transaction's row lock re-checks its WHERE clause on the new row.
      TRIALD_ASSIGN_OR_RETURN(
          Rows r, Exec("UPDATE trials SET node = $2 WHERE id = $1 AND state = 'WAITING'",
                       Params().Int8(trial_id).Text(node_, "node name"), op));
      if (r.affected() == 0) return TrialNotMutable(trial_id, op, /*require_waiting=*/true);
      return Status::Ok();
    });
  });
}

Status PostgresStorage::ReleaseClaim(int64_t trial_id) {
  return Guarded("ReleaseClaim", [&]() -> Status {
    const std::string op = "ReleaseClaim(" + TrialIdLabel(trial_id) + ")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      TRIALD_ASSIGN_OR_RETURN(Rows r, Exec("UPDATE trials SET node = '' WHERE id = $1 AND "
                                           "state = 'WAITING' AND node IN ('', $2)",
                                           Params().Int8(trial_id).Text(node_, "node name"), op));
      if (r.affected() == 0) return TrialNotMutable(trial_id, op, /*require_waiting=*/true);
      return Status::Ok();
    });
  });
}

Status PostgresStorage::MarkRunning(int64_t trial_id, const model::ProcessIdentity& process,
                                    double at) {
  return Guarded("MarkRunning", [&]() -> Status {
    const std::string op = "MarkRunning(" + TrialIdLabel(trial_id) + ")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      TRIALD_ASSIGN_OR_RETURN(Rows r,
                              Exec("UPDATE trials SET state = 'RUNNING', pid = $2, pgid = $3, "
                                   "pid_start_time = $4, started_at = $5, node = $6 "
                                   "WHERE id = $1 AND state = 'WAITING' AND node IN ('', $6)",
                                   Params()
                                       .Int8(trial_id)
                                       .Int4(process.pid)
                                       .Int4(process.pgid)
                                       .Int8(static_cast<int64_t>(process.start_time))
                                       .Float8(at)
                                       .Text(node_, "node name"),
                                   op));
      if (r.affected() == 0) return TrialNotMutable(trial_id, op, /*require_waiting=*/true);
      return Status::Ok();
    });
  });
}

Status PostgresStorage::AddIntermediate(int64_t trial_id, int64_t step, double value) {
  return Guarded("AddIntermediate", [&]() -> Status {
    const std::string op =
        "AddIntermediate(" + TrialIdLabel(trial_id) + ", step " + std::to_string(step) + ")";
    return Call(op, Txn::kLazyWrite, [&]() -> Status {
      // FOR SHARE holds the trial's row against a concurrent FinishTrial (another daemon
      // recovering it): either this insert sees the trial finished, or the finish waits.
      TRIALD_ASSIGN_OR_RETURN(
          Rows r, Exec("INSERT INTO trial_intermediate (trial_id, step, value) "
                       "SELECT id, $2, $3 FROM trials "
                       "WHERE id = $1 AND state IN ('WAITING', 'RUNNING') FOR SHARE "
                       "ON CONFLICT (trial_id, step) DO UPDATE SET value = excluded.value",
                       Params().Int8(trial_id).Int8(step).Float8(value), op));
      if (r.affected() == 0) return TrialNotMutable(trial_id, op, false);
      return Status::Ok();
    });
  });
}

Status PostgresStorage::AddLazyWrites(const std::vector<LazyWrite>& writes,
                                      std::vector<size_t>* refused) {
  return Guarded("AddLazyWrites", [&]() -> Status {
    // One row per step and per key, its last write: a statement cannot change a row twice. In
    // the order of the trials' ids, so that two transactions lock trials in the same order.
    std::map<std::pair<int64_t, int64_t>, size_t> steps;
    std::map<std::pair<int64_t, std::string>, size_t> keys;
    for (size_t i = 0; i < writes.size(); ++i) {
      const LazyWrite& w = writes[i];
      if (w.attr) {
        keys[{w.trial_id, w.key}] = i;
      } else {
        steps[{w.trial_id, w.step}] = i;
      }
    }
    const std::string op = "AddLazyWrites(" + std::to_string(writes.size()) + " writes)";
    std::set<std::pair<int64_t, int64_t>> stored_steps;
    std::set<std::pair<int64_t, std::string>> stored_keys;
    TRIALD_RETURN_IF_ERROR(Call(op, Txn::kLazyWrite, [&]() -> Status {
      stored_steps.clear();
      stored_keys.clear();
      if (!steps.empty()) {
        std::vector<int64_t> ids, numbers;
        std::vector<double> values;
        for (const auto& [k, i] : steps) {
          ids.push_back(k.first);
          numbers.push_back(k.second);
          values.push_back(writes[i].value);
        }
        // FOR SHARE holds each trial's row against a concurrent FinishTrial, as AddIntermediate.
        TRIALD_ASSIGN_OR_RETURN(
            Rows r,
            Exec("INSERT INTO trial_intermediate (trial_id, step, value) "
                 "SELECT t.id, u.step, u.value "
                 "FROM unnest($1::int8[], $2::int8[], $3::float8[]) AS u(trial_id, step, value) "
                 "JOIN trials t ON t.id = u.trial_id "
                 "WHERE t.state IN ('WAITING', 'RUNNING') ORDER BY t.id FOR SHARE OF t "
                 "ON CONFLICT (trial_id, step) DO UPDATE SET value = excluded.value "
                 "RETURNING trial_id, step",
                 Params().Int8Array(ids).Int8Array(numbers).Float8Array(values), op));
        for (int row = 0; row < r.size(); ++row)
          stored_steps.insert({r.Int(row, 0), r.Int(row, 1)});
      }
      if (!keys.empty()) {
        std::vector<int64_t> ids;
        std::vector<std::string> names, values;
        for (const auto& [k, i] : keys) {
          ids.push_back(k.first);
          names.push_back(k.second);
          values.push_back(writes[i].json);
        }
        TRIALD_ASSIGN_OR_RETURN(
            Rows r,
            Exec("INSERT INTO trial_attrs (trial_id, key, value_json) "
                 "SELECT t.id, u.key, u.value "
                 "FROM unnest($1::int8[], $2::bytea[], $3::text[]) AS u(trial_id, key, value) "
                 "JOIN trials t ON t.id = u.trial_id "
                 "WHERE t.state IN ('WAITING', 'RUNNING') ORDER BY t.id FOR SHARE OF t "
                 "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json "
                 "RETURNING trial_id, key",
                 Params().Int8Array(ids).ByteaArray(names).TextArray(values, "attribute value"),
                 op));
        for (int row = 0; row < r.size(); ++row) stored_keys.insert({r.Int(row, 0), r.Str(row, 1)});
      }
      return Status::Ok();
    }));
    // A write not stored is refused, and so is every earlier one of its step or key.
    for (size_t i = 0; i < writes.size(); ++i) {
      const LazyWrite& w = writes[i];
      const bool stored = w.attr ? stored_keys.count({w.trial_id, w.key}) > 0
                                 : stored_steps.count({w.trial_id, w.step}) > 0;
      if (!stored) refused->push_back(i);
    }
    return Status::Ok();
  });
}

Status PostgresStorage::SetAttr(int64_t trial_id, const std::string& key,
                                const std::string& json_value) {
  return Guarded("SetAttr", [&]() -> Status {
    const std::string op = "SetAttr(" + TrialIdLabel(trial_id) + ", \"" + key + "\")";
    return Call(op, Txn::kLazyWrite, [&]() -> Status {
      TRIALD_ASSIGN_OR_RETURN(
          Rows r, Exec("INSERT INTO trial_attrs (trial_id, key, value_json) "
                       "SELECT id, $2, $3 FROM trials "
                       "WHERE id = $1 AND state IN ('WAITING', 'RUNNING') FOR SHARE "
                       "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = "
                       "excluded.value_json",
                       Params().Int8(trial_id).Bytes(key).Text(json_value, "attribute value"), op));
      if (r.affected() == 0) return TrialNotMutable(trial_id, op, false);
      return Status::Ok();
    });
  });
}

Status PostgresStorage::AddTrialParam(int64_t trial_id, const std::string& name,
                                      const model::ParamValue& value) {
  return Guarded("AddTrialParam", [&]() -> Status {
    const std::string op = "AddTrialParam(" + TrialIdLabel(trial_id) + ", \"" + name + "\")";
    if (std::isnan(value.internal)) {
      return common::InvalidArgument(op + ": internal value NaN; expected a number");
    }
    std::string dist_json = value.dist.ToJson();
    return Call(op, Txn::kLazyWrite, [&]() -> Status {
      // As in AddIntermediate, FOR SHARE holds the trial against a concurrent FinishTrial; a
      // name the trial has already is left as it is (DO NOTHING) and told apart below, which
      // costs a round trip only when the call fails.
      TRIALD_ASSIGN_OR_RETURN(Rows r,
                              Exec("INSERT INTO trial_params (trial_id, name, internal_value, "
                                   "distribution_json) SELECT id, $2, $3, $4 FROM trials "
                                   "WHERE id = $1 AND state IN ('WAITING', 'RUNNING') FOR SHARE "
                                   "ON CONFLICT (trial_id, name) DO NOTHING",
                                   Params()
                                       .Int8(trial_id)
                                       .Text(name, "parameter name")
                                       .Float8(value.internal)
                                       .Text(dist_json, "distribution"),
                                   op));
      if (r.affected() > 0) return Status::Ok();
      TRIALD_ASSIGN_OR_RETURN(
          Rows present,
          Exec("SELECT 1 FROM trial_params p JOIN trials t ON t.id = p.trial_id "
               "WHERE p.trial_id = $1 AND p.name = $2 AND t.state IN ('WAITING', 'RUNNING')",
               Params().Int8(trial_id).Text(name, "parameter name"), op + ": look up parameter"));
      if (present.size() > 0) {
        return common::AlreadyExists(op + ": the trial has a parameter \"" + name +
                                     "\" already; a parameter has one value per trial");
      }
      return TrialNotMutable(trial_id, op, false);
    });
  });
}

Status PostgresStorage::FinishTrial(int64_t trial_id, const model::TrialOutcome& outcome,
                                    double at) {
  return Guarded("FinishTrial", [&]() -> Status {
    const std::string op = "FinishTrial(" + TrialIdLabel(trial_id) + ")";
    TRIALD_RETURN_IF_ERROR(backend::CheckFinishedOutcome(outcome, op));
    return Call(op, Txn::kWrite, [&]() -> Status {
      Params p;
      p.Int8(trial_id).Text(model::TrialStateName(outcome.state), "state");
      if (outcome.value) {
        p.Float8(*outcome.value);
      } else {
        p.Null(kFloat8Oid);
      }
      // model::FailInfo is stored as given (normally only filled for FAIL): nothing the caller
      // recorded is dropped.
      p.Text(outcome.fail.reason, "failure reason")
          .Int4(outcome.fail.exit_code)
          .Int4(outcome.fail.signal)
          .Bool(outcome.fail.core_dumped)
          .Bytes(outcome.fail.detail)
          .Bytes(outcome.fail.stderr_tail)
          .Float8(at)
          .Text(backend::StoredValuesText(outcome), "values")
          .Text(backend::DoublesText(outcome.constraints), "constraints")
          .Text(backend::ResourcesText(outcome.resources), "resources");
      TRIALD_ASSIGN_OR_RETURN(
          Rows r, Exec("UPDATE trials SET state = $2, value = $3, fail_reason = $4, "
                       "fail_exit_code = $5, fail_signal = $6, fail_core_dumped = $7, "
                       "fail_detail = $8, stderr_tail = $9, finished_at = $10, "
                       "values_json = $11, constraints_json = $12, resources_json = $13 "
                       "WHERE id = $1 AND state IN ('WAITING', 'RUNNING')",
                       p, op));
      if (r.affected() == 0) return TrialNotMutable(trial_id, op, false);
      return Status::Ok();
    });
  });
}

// ---- Trials: reads ----

Result<std::vector<model::TrialRecord>> PostgresStorage::LoadTrials(
    TrialFilter filter, int64_t study_id, int number, const std::vector<int>& numbers,
    const std::string& op, int64_t end_number, Curves curves) {
  Params params;
  switch (filter) {
    case TrialFilter::kStudy:
      params.Int8(study_id);
      break;
    case TrialFilter::kStudyNumber:
      params.Int8(study_id).Int4(number);
      break;
    case TrialFilter::kRunning:
      break;
    case TrialFilter::kSince:
      params.Int8(study_id).Int4(number).Int4Array(numbers);
      break;
    case TrialFilter::kRange:
      params.Int8(study_id).Int4(number).Int8(end_number);
      break;
  }

  // All in one round trip: the trials, then their parameters, intermediate values and
  // attributes, then the study's existence (for the kNotFound of a study-filtered load).
  const sql::TrialQueries queries = sql::LoadTrialsSql(sql::Dialect::kPostgres, filter);
  Params study_params;
  study_params.Int8(study_id);
  const bool by_study = filter != TrialFilter::kRunning;
  std::vector<Statement> statements = {
      {queries.trials, &params},
      {queries.params, &params},
      {curves == Curves::kLoad ? queries.intermediate : queries.intermediate_counts, &params},
      {queries.attrs, &params}};
  if (by_study) statements.push_back({"SELECT 1 FROM studies WHERE id = $1", &study_params});
  // Outside a batch, one snapshot for all: a consistent view even while other daemons write.
  // Inside one (READ COMMITTED), rows added between the statements belong to trials the first
  // did not return, and are skipped.
  std::vector<std::string> begin;
  std::vector<std::string> commit;
  if (batch_depth_ == 0) {
    begin.push_back("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    commit.push_back("COMMIT");
  }
  TRIALD_ASSIGN_OR_RETURN(std::vector<Rows> rows, Run(begin, statements, op, commit));
  if (by_study && rows[4].size() == 0)
    return common::NotFound(StudyIdLabel(study_id) + " not found");

  sql::TrialAssembly assembly(&distributions_, op, masked_url_);
  for (int i = 0; i < rows[0].size(); ++i)
    TRIALD_RETURN_IF_ERROR(assembly.AddTrial(RowOf(rows[0], i)));
  for (int i = 0; i < rows[1].size(); ++i)
    TRIALD_RETURN_IF_ERROR(assembly.AddParam(RowOf(rows[1], i)));
  for (int i = 0; i < rows[2].size(); ++i) {
    if (curves == Curves::kLoad) {
      assembly.AddIntermediate(RowOf(rows[2], i));
    } else {
      assembly.AddIntermediateCount(RowOf(rows[2], i));
    }
  }
  for (int i = 0; i < rows[3].size(); ++i) assembly.AddAttr(RowOf(rows[3], i));
  return assembly.Take();
}

Result<std::vector<model::TrialRecord>> PostgresStorage::GetTrials(int64_t study_id) {
  return Guarded("GetTrials", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrials(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::TrialRecord>> {
      return LoadTrials(TrialFilter::kStudy, study_id, 0, {}, op);
    });
  });
}

Result<model::TrialRecord> PostgresStorage::GetTrial(int64_t study_id, int number) {
  return Guarded("GetTrial", [&]() -> Result<model::TrialRecord> {
    const std::string op =
        "GetTrial(" + StudyIdLabel(study_id) + ", number " + std::to_string(number) + ")";
    return Call(op, Txn::kNone, [&]() -> Result<model::TrialRecord> {
      TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> trials,
                              LoadTrials(TrialFilter::kStudyNumber, study_id, number, {}, op));
      if (trials.empty()) {
        return common::NotFound("trial " + std::to_string(number) + " of " +
                                StudyIdLabel(study_id) + " not found");
      }
      return std::move(trials.front());
    });
  });
}

Result<std::vector<model::TrialRecord>> PostgresStorage::GetTrialsSince(
    int64_t study_id, int from_number, const std::vector<int>& numbers) {
  return Guarded("GetTrialsSince", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrialsSince(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::TrialRecord>> {
      return LoadTrials(TrialFilter::kSince, study_id, from_number, numbers, op);
    });
  });
}

Result<std::vector<model::TrialRecord>> PostgresStorage::GetRunningTrials() {
  return Guarded("GetRunningTrials", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetRunningTrials";
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::TrialRecord>> {
      return LoadTrials(TrialFilter::kRunning, 0, 0, {}, op);
    });
  });
}

Result<TrialCounts> PostgresStorage::CountTrials(int64_t study_id) {
  return Guarded("CountTrials", [&]() -> Result<TrialCounts> {
    const std::string op = "CountTrials(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kNone, [&]() -> Result<TrialCounts> {
      Params params;
      params.Int8(study_id);
      // One round trip: the counts per state (no trial is read) and the study's existence.
      TRIALD_ASSIGN_OR_RETURN(
          std::vector<Rows> rows,
          Run({},
              {{"SELECT state, COUNT(*), COUNT(retry_of), COUNT(*) FILTER (WHERE started_at > 0), "
                "COALESCE(SUM(finished_at - started_at) FILTER (WHERE started_at > 0 AND "
                "finished_at > 0), 0)::double precision FROM trials WHERE study_id = $1 "
                "GROUP BY state",
                &params},
               {"SELECT 1 FROM studies WHERE id = $1", &params}},
              op));
      if (rows[1].size() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      TrialCounts c;
      const Rows& r = rows[0];
      for (int i = 0; i < r.size(); ++i) {
        TRIALD_ASSIGN_OR_RETURN(model::TrialState state, ParseTrialStateColumn(r.Str(i, 0), op));
        AddStateCount(&c, state, r.Int(i, 1), r.Int(i, 2), r.Int(i, 3), r.Double(i, 4));
      }
      return c;
    });
  });
}

Result<std::vector<model::FailInfo>> PostgresStorage::GetRecentFailures(int64_t study_id,
                                                                        int limit) {
  return Guarded("GetRecentFailures", [&]() -> Result<std::vector<model::FailInfo>> {
    const std::string op = "GetRecentFailures(" + StudyIdLabel(study_id) + ")";
    if (limit <= 0) {
      return common::InvalidArgument(op + ": limit " + std::to_string(limit) +
                                     "; expected 1 or more");
    }
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::FailInfo>> {
      Params params;
      params.Int8(study_id).Int8(limit);
      Params exists;
      exists.Int8(study_id);
      TRIALD_ASSIGN_OR_RETURN(std::vector<Rows> rows,
                              Run({},
                                  {{sql::RecentFailuresSql(sql::Dialect::kPostgres), &params},
                                   {"SELECT 1 FROM studies WHERE id = $1", &exists}},
                                  op));
      if (rows[1].size() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      std::vector<model::FailInfo> out;
      for (int i = 0; i < rows[0].size(); ++i)
        out.push_back(sql::ReadFailureRow(RowOf(rows[0], i)));
      return out;
    });
  });
}

Result<std::optional<model::TrialRecord>> PostgresStorage::GetBestTrial(
    int64_t study_id, config::Direction direction) {
  return Guarded("GetBestTrial", [&]() -> Result<std::optional<model::TrialRecord>> {
    const std::string op = "GetBestTrial(" + StudyIdLabel(study_id) + ")";
    return Call(op, Txn::kNone, [&]() -> Result<std::optional<model::TrialRecord>> {
      Params params;
      params.Int8(study_id);
      // NaN is a value in PostgreSQL (above every number): left out, as BestTrial does.
      const bool max = direction == config::Direction::kMaximize;
      TRIALD_ASSIGN_OR_RETURN(
          std::vector<Rows> rows,
          Run({},
              {{std::string("SELECT number FROM trials WHERE study_id = $1 AND state = "
                            "'COMPLETE' AND value IS NOT NULL AND value <> 'NaN'::float8 "
                            "ORDER BY value ") +
                    (max ? "DESC" : "ASC") + ", number ASC LIMIT 1",
                &params},
               {"SELECT 1 FROM studies WHERE id = $1", &params}},
              op));
      if (rows[1].size() == 0) return common::NotFound(StudyIdLabel(study_id) + " not found");
      if (rows[0].size() == 0) return std::optional<model::TrialRecord>();
      const int number = static_cast<int>(rows[0].Int(0, 0));
      TRIALD_ASSIGN_OR_RETURN(
          std::vector<model::TrialRecord> trials,
          LoadTrials(TrialFilter::kStudyNumber, study_id, number, {}, op, 0, Curves::kCount));
      if (trials.empty()) return std::optional<model::TrialRecord>();
      return std::optional<model::TrialRecord>(std::move(trials.front()));
    });
  });
}

Result<std::vector<model::TrialRecord>> PostgresStorage::GetTrialPage(int64_t study_id,
                                                                      int from_number, int limit,
                                                                      Curves curves) {
  return Guarded("GetTrialPage", [&]() -> Result<std::vector<model::TrialRecord>> {
    const std::string op = "GetTrialPage(" + StudyIdLabel(study_id) + ")";
    TRIALD_RETURN_IF_ERROR(CheckPageArguments(from_number, limit, op));
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::TrialRecord>> {
      return LoadTrials(TrialFilter::kRange, study_id, from_number, {}, op,
                        int64_t{from_number} + limit, curves);
    });
  });
}

// ---- Nodes ----

Status PostgresStorage::Heartbeat(double /*at: the server's clock is used*/) {
  return Guarded("Heartbeat", [&]() -> Status {
    const std::string op = "Heartbeat(\"" + node_ + "\")";
    return Call(op, Txn::kLazyWrite, [&]() -> Status {
      // clock_timestamp(), not now(): the time of this statement, not of the transaction's
      // start (a batch may be older).
      return Exec(
                 "INSERT INTO nodes (name, instance, first_beat, last_beat) "
                 "SELECT $1, $2, c.now, c.now FROM (SELECT extract(epoch FROM clock_timestamp())"
                 "::float8 AS now) c "
                 "ON CONFLICT (name) DO UPDATE SET last_beat = excluded.last_beat, "
                 "instance = excluded.instance, first_beat = CASE WHEN nodes.instance = "
                 "excluded.instance THEN nodes.first_beat ELSE excluded.first_beat END",
                 Params().Text(node_, "node name").Text(instance_, "node instance"), op)
          .status();
    });
  });
}

Result<std::vector<model::NodeRecord>> PostgresStorage::GetNodes(
    double /*now: the server's clock*/) {
  return Guarded("GetNodes", [&]() -> Result<std::vector<model::NodeRecord>> {
    const std::string op = "GetNodes";
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::NodeRecord>> {
      TRIALD_ASSIGN_OR_RETURN(
          Rows r, Exec("SELECT name, first_beat, last_beat, GREATEST(0, extract(epoch FROM "
                       "clock_timestamp())::float8 - last_beat), instance FROM nodes ORDER BY name",
                       Params(), op));
      std::vector<model::NodeRecord> out;
      for (int i = 0; i < r.size(); ++i) {
        model::NodeRecord n;
        n.name = r.Str(i, 0);
        n.first_beat = r.Double(i, 1);
        n.last_beat = r.Double(i, 2);
        n.silent_for = r.Double(i, 3);
        n.instance = r.Str(i, 4);
        out.push_back(std::move(n));
      }
      return out;
    });
  });
}

// ---- Events ----

Status PostgresStorage::AppendEvent(std::optional<int64_t> study_id,
                                    std::optional<int64_t> trial_id, const std::string& kind,
                                    const std::string& detail, double at) {
  return Guarded("AppendEvent", [&]() -> Status {
    const std::string op = "AppendEvent(\"" + kind + "\")";
    return Call(op, Txn::kWrite, [&]() -> Status {
      auto r = Exec(
          "INSERT INTO events (at, study_id, trial_id, kind, detail) "
          "VALUES ($1, $2, $3, $4, $5)",
          Params()
              .Float8(at)
              .OptInt8(study_id)
              .OptInt8(trial_id)
              .Text(kind, "event kind")
              .Bytes(detail),
          op);
      if (r.ok()) return Status::Ok();
      // Name which of the two references is dangling.
      if (last_sqlstate_ == "23503" && last_constraint_ == "events_study_id_fkey" && study_id) {
        return common::NotFound(op + ": " + StudyIdLabel(*study_id) + " not found");
      }
      if (last_sqlstate_ == "23503" && last_constraint_ == "events_trial_id_fkey" && trial_id) {
        return common::NotFound(op + ": " + TrialIdLabel(*trial_id) + " not found");
      }
      return r.status();
    });
  });
}

Result<std::vector<model::EventRecord>> PostgresStorage::GetEvents(
    std::optional<int64_t> study_id) {
  return Guarded("GetEvents", [&]() -> Result<std::vector<model::EventRecord>> {
    const std::string op =
        study_id ? "GetEvents(" + StudyIdLabel(*study_id) + ")" : std::string("GetEvents");
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::EventRecord>> {
      // A study's events include those recorded against one of its trials only; the study's
      // existence is checked in the same round trip.
      Params params;
      if (study_id) params.Int8(*study_id);
      std::vector<Statement> statements = {
          {study_id ? "SELECT id, at, study_id, trial_id, kind, detail FROM events "
                      "WHERE study_id = $1 OR trial_id IN "
                      "(SELECT id FROM trials WHERE study_id = $1) ORDER BY id"
                    : "SELECT id, at, study_id, trial_id, kind, detail FROM events ORDER BY id",
           &params}};
      if (study_id) statements.push_back({"SELECT 1 FROM studies WHERE id = $1", &params});
      TRIALD_ASSIGN_OR_RETURN(std::vector<Rows> rows, Run({}, statements, op));
      if (study_id && rows[1].size() == 0) {
        return common::NotFound(StudyIdLabel(*study_id) + " not found");
      }
      return EventsOf(rows[0]);
    });
  });
}

Result<std::vector<model::EventRecord>> PostgresStorage::GetTrialEvents(int64_t trial_id) {
  return Guarded("GetTrialEvents", [&]() -> Result<std::vector<model::EventRecord>> {
    const std::string op = "GetTrialEvents(" + TrialIdLabel(trial_id) + ")";
    return Call(op, Txn::kNone, [&]() -> Result<std::vector<model::EventRecord>> {
      // The trial's existence is checked in the same round trip.
      Params params;
      params.Int8(trial_id);
      std::vector<Statement> statements = {
          {"SELECT id, at, study_id, trial_id, kind, detail FROM events WHERE trial_id = $1 "
           "ORDER BY id",
           &params},
          {"SELECT 1 FROM trials WHERE id = $1", &params}};
      TRIALD_ASSIGN_OR_RETURN(std::vector<Rows> rows, Run({}, statements, op));
      if (rows[1].size() == 0) return common::NotFound(TrialIdLabel(trial_id) + " not found");
      return EventsOf(rows[0]);
    });
  });
}

std::vector<model::EventRecord> PostgresStorage::EventsOf(const Rows& r) {
  std::vector<model::EventRecord> out;
  for (int i = 0; i < r.size(); ++i) out.push_back(sql::ReadEventRow(RowOf(r, i)));
  return out;
}

}  // namespace

std::string MaskPostgresUrl(const std::string& url) {
  std::string out = url;
  // User info: scheme://user:PASSWORD@host... The last '@' before the path or query ends it
  // (a password should percent-encode '@', but one that does not is still hidden).
  size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    size_t start = scheme + 3;
    size_t end = out.find('?', start);
    if (end == std::string::npos) end = out.size();
    size_t at = out.rfind('@', end == 0 ? 0 : end - 1);
    if (at != std::string::npos && at >= start) {
      size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // password=... as a query parameter (or a conninfo keyword).
  for (size_t pos = out.find("password="); pos != std::string::npos;
       pos = out.find("password=", pos + 1)) {
    if (pos > 0 && out[pos - 1] != '?' && out[pos - 1] != '&' && out[pos - 1] != ' ') continue;
    size_t value = pos + 9;
    size_t end = out.find_first_of("& ", value);
    if (end == std::string::npos) end = out.size();
    out.replace(value, end - value, "***");
  }
  return out;
}

std::shared_ptr<PostgresWatchdog> PostgresWatchdogOf(const Storage& storage) {
  const auto* postgres = dynamic_cast<const PostgresStorage*>(&storage);
  return postgres != nullptr ? postgres->watchdog() : nullptr;
}

common::Result<std::unique_ptr<Storage>> OpenPostgresStorage(const PostgresOptions& options) {
  return Guarded("OpenPostgresStorage", [&]() -> Result<std::unique_ptr<Storage>> {
    return PostgresStorage::Open(options);
  });
}

}  // namespace triald::storage
