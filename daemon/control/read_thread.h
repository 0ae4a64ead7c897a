#pragma once
// ReadThread: a thread and a storage connection of their own for the read requests of the
// daemon's servers (control/server.h: the read verbs but `ping`; http/server.h: the dashboard's
// GETs), on shared storage. Made on the event loop, each such read was a round trip every trial
// channel waited for, and during a frozen server's first second (until the watchdog's verdict)
// a `status` poll held the channels for that second. Here the reads wait alone; what needs the
// scheduler's memory (a study's spawn and fork-server state, its Slurm jobs, the running
// trials' processes) is added on the loop afterwards, without storage.
//
// Tasks run one at a time in the order posted, on a TaskThread (task_thread.h); its storage is
// destroyed after them, so one still queued when the thread stops never outlives it.
//
// Thread-safety: Post and Drain from any thread but the ReadThread's own; storage() only from
// the tasks.

#include <memory>

#include "daemon/control/kept_answers.h"
#include "daemon/control/task_thread.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class ReadThread {
 public:
  // Starts the thread.
  explicit ReadThread(std::unique_ptr<storage::Storage> storage)
      : storage_(std::move(storage)), tasks_(std::make_unique<TaskThread>()) {}
  // Waits for the task in progress (a storage call fails within its call timeout, at once once
  // the watchdog finds the server unresponsive); the tasks not run are destroyed, then the
  // storage.
  ~ReadThread() { tasks_.reset(); }
  ReadThread(const ReadThread&) = delete;
  ReadThread& operator=(const ReadThread&) = delete;

  storage::Storage& storage() { return *storage_; }

  // TaskThread::Drain.
  void Drain() { tasks_->Drain(); }

  // Runs `fn(*self)` on the thread, keeping `keep` (the io_context `self` lives on) alive until
  // `self` has gone.
  template <typename T, typename Fn>
  void Post(std::shared_ptr<boost::asio::io_context> keep, std::shared_ptr<T> self, Fn fn) {
    tasks_->Post(std::move(keep), std::move(self), std::move(fn));
  }

 private:
  std::unique_ptr<storage::Storage> storage_;  // declared first: destroyed after the tasks
  std::unique_ptr<TaskThread> tasks_;
};

// The storage waits a request holds on: the loop's storage's (`loop`, null when never known),
// and with `off_loop` the ReadThread's too (`reads` then set).
inline StorageWaits RequestWaits(const storage::WaitGauge* loop,
                                 const std::shared_ptr<ReadThread>& reads, bool off_loop) {
  return StorageWaits{loop, off_loop ? reads->storage().wait_gauge() : nullptr};
}

}  // namespace triald::daemon
