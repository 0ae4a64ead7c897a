#pragma once
// PostgresStorage: the shared Storage, PostgreSQL through libpq, for several daemons on several
// hosts working on the same studies (Storage::shared() is true; see storage.h).
//
// One connection per storage. Every call outside a batch is its own transaction; a batch is one
// transaction (READ COMMITTED) in which each call runs under a savepoint, so a failed call
// leaves the batch's earlier changes in place. LockStudy and CreateTrial lock the study's row
// (SELECT ... FOR NO KEY UPDATE) until the transaction ends: trial numbers stay dense when
// several daemons create trials of one study at once. Heartbeat and GetNodes use the server's
// clock.
//
// Round trips, not the server, bound a remote daemon's speed, so statements travel in libpq
// pipelines: a call inside a batch costs one round trip (its savepoint, and the previous call's
// release, ride along with its statements; CreateTrial inserts the trial and its parameters in
// one statement); outside a batch a read costs one and a write two (BEGIN with the statements,
// then COMMIT). Loading trials is one statement per table, all in one round trip (outside a
// batch, in one snapshot). Every statement is prepared once per connection.
//
// The schema is created on first open (serialised by an advisory lock, so daemons starting
// together do not race) and versioned in table schema_version.
//
// Bytes: columns that may hold a worker's or the operating system's bytes (stderr tail, failure
// detail, attribute keys, event details, the sweep file's path) are bytea and round-trip any
// byte, NUL included. The other text (study names, the sweep TOML, parameter names, JSON,
// node names) is TEXT and must be valid UTF-8 without NUL bytes — config and the report
// decoder only produce such text; anything else is kInvalidArgument naming the field. The
// database's encoding must be UTF8 (or SQL_ASCII). Doubles, NaN and infinities included,
// travel in binary and round-trip exactly.
//
// Connection loss: outside a transaction, a call whose connection turns out to be dead is
// retried once on a fresh connection (PQreset); a commit whose outcome is unknown is never
// retried. Inside a batch the call fails (the server has dropped the transaction), every
// later call of the batch fails, CommitBatch reports the loss, and the next BeginBatch
// reconnects. Errors reaching the server are kUnavailable and name the URL with its password
// masked.
//
// The connection's socket is close-on-exec: forked trial processes never inherit it.
//
// Thread-safety: not thread-safe (see Storage).

#include <memory>
#include <string>

#include "daemon/storage/storage.h"

namespace triald::storage {

class PostgresWatchdog;

struct PostgresOptions {
  // "postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?param=value...]" (or "postgres://"), as
  // libpq parses it. connect_timeout defaults to connect_timeout_s unless the URL sets it.
  std::string url;
  std::string node;  // this daemon's node name (Storage::node); application_name "triald:NODE"
  std::string instance = {};  // where this daemon runs (model::NodeRecord::instance)
  int connect_timeout_s = 10;
  // The server ends a session idle inside a transaction for this long, releasing its locks: a
  // daemon that hangs or loses its network mid-batch cannot block the others' LockStudy for
  // longer. A batch never waits between its statements for long (one event's handling). The
  // daemon sets it to half its node timeout, so a frozen node's locks are gone before the
  // others come to recover its trials.
  double idle_in_transaction_timeout_s = 60;
  // The longest wait for a lock another session holds (lock_timeout); then the call fails with
  // kUnavailable and the daemon tries again later.
  double lock_timeout_s = 2;
  // The longest the client waits for the server in one round trip (sending and receiving), on
  // the client's own clock: a server that stops answering (stopped, or behind a network path
  // that drops packets while the kernel still acknowledges them) fails the call with
  // kUnavailable instead of blocking the daemon's event loop. The connection is then dropped
  // (the server rolls back what it had not committed) and the next call reconnects. The daemon
  // sets it to a third of its node timeout. The session's statement_timeout is set a little
  // below it, so a slow statement is cancelled by the server first.
  double call_timeout_s = 10;
  // TCP keepalive probes on the client's socket (libpq keepalives_idle, keepalives_interval,
  // keepalives_count) and tcp_user_timeout: a peer gone from the network is noticed by the
  // kernel even while the connection is idle. Settings in the URL win over these.
  int keepalives_idle_s = 10;
  int keepalives_interval_s = 5;
  int keepalives_count = 3;
  // A watchdog thread (postgres_watchdog.h) sends SELECT 1 on a connection of its own every
  // quarter of this; once one has waited this long without an answer, calls fail at once with
  // kUnavailable (a round trip in progress within 50 ms) instead of waiting for the call
  // timeout, until the server answers again. 0: no watchdog. The daemon sets it to
  // min(1 s, call_timeout_s / 2).
  double unresponsive_after_s = 1;
  // Another connection's watchdog (PostgresWatchdogOf) to use instead of starting one: the
  // daemon's connections to one server share one (one probe connection, not one each).
  std::shared_ptr<PostgresWatchdog> watchdog;
};

// Connects, creating the schema if the database has none. Errors name the URL (password
// masked): kInvalidArgument for a malformed URL, kUnavailable when the server cannot be
// reached or refuses the connection, kFailedPrecondition for a schema newer than this triald
// or a database encoding other than UTF8.
common::Result<std::unique_ptr<Storage>> OpenPostgresStorage(const PostgresOptions& options);

// The watchdog of a storage OpenPostgresStorage opened (to share: PostgresOptions::watchdog);
// null for any other storage, or one without a watchdog.
std::shared_ptr<PostgresWatchdog> PostgresWatchdogOf(const Storage& storage);

// The URL with any password replaced by "***" (user info and the password= parameter), for
// messages and logs.
std::string MaskPostgresUrl(const std::string& url);

}  // namespace triald::storage
