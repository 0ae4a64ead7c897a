#pragma once
// StorageBatch: groups the storage changes made while handling one event into one commit (one
// fsync for SQLite). Batches nest (storage.h); only the outermost commit is real. On shared
// storage a batch is also the transaction that holds a study's lock (Storage::LockStudy).
//
// Thread-safety: not thread-safe; used on the scheduler's thread.

#include "common/logging.h"
#include "common/status.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class StorageBatch {
 public:
  // Begins the batch; a failure is logged, and the changes then commit one by one.
  StorageBatch(storage::Storage* storage, common::Logger logger);
  // Commits unless Commit() was called; a failure is logged as critical.
  ~StorageBatch();
  bool began() const { return began_; }
  // Commits now (the destructor then does nothing); the caller acts on the result.
  common::Status Commit();

  StorageBatch(const StorageBatch&) = delete;
  StorageBatch& operator=(const StorageBatch&) = delete;

 private:
  storage::Storage* storage_;
  common::Logger logger_;
  bool began_ = false;
};

// BatchEnd: ends a batch begun on `storage` (BeginBatch succeeded) on every path: what was
// written commits, and a failed transaction stores nothing (storage.h). For the transactions a
// thread off the event loop makes on a connection of its own (StoreControl, StoreDelete), which
// must fail when the batch cannot begin, where StorageBatch goes on without it.
class BatchEnd {
 public:
  explicit BatchEnd(storage::Storage& storage) : storage_(storage) {}
  ~BatchEnd() {
    if (open_) (void)storage_.CommitBatch();
  }
  BatchEnd(const BatchEnd&) = delete;
  BatchEnd& operator=(const BatchEnd&) = delete;
  // Commits now (the destructor then does nothing).
  common::Status Commit() {
    open_ = false;
    return storage_.CommitBatch();
  }

 private:
  storage::Storage& storage_;
  bool open_ = true;
};

}  // namespace triald::daemon
