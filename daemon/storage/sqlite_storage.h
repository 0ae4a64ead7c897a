#pragma once
// SqliteStorage: the embedded default Storage, SQLite through its C API.
//
// WAL journal, one connection, one writer. State changes commit with synchronous=FULL (an fsync
// of the WAL per commit); intermediate values and attributes commit with synchronous=NORMAL
// and become durable with the next FULL commit. Opening an existing file migrates nothing
// destructively: the schema is created if absent and its version checked.
//
// Thread-safety: not thread-safe (see Storage).

#include <memory>
#include <string>

#include "daemon/storage/storage.h"

namespace triald::storage {

struct SqliteOptions {
  std::string path;  // a file path, or ":memory:"
  int busy_timeout_ms = 5000;
  std::string node = {};      // this daemon's node name (Storage::node)
  std::string instance = {};  // where this daemon runs (model::NodeRecord::instance)
  // Report shared() true: several schedulers in one process, each with its own connection to
  // one file, then act as the nodes of a shared storage (tests/daemon/scheduler_shared_test.cc
  // drives multi-node logic this way, without PostgreSQL). BEGIN IMMEDIATE makes every batch
  // exclusive, which is what LockStudy promises.
  bool shared = false;
};

// Opens (creating if needed) the database. Errors name the path and SQLite's message.
common::Result<std::unique_ptr<Storage>> OpenSqliteStorage(const SqliteOptions& options);

// Runs PRAGMA integrity_check on an open-or-closed database file; "ok" when healthy.
common::Result<std::string> SqliteIntegrityCheck(const std::string& path);

}  // namespace triald::storage
