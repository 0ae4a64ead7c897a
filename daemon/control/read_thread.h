#pragma once
// ReadThread: a thread and a storage connection of their own for the read requests of the
// daemon's servers (control/server.h: the read verbs but `ping`; http/server.h: the dashboard's
// GETs), on shared storage. Made on the event loop, each such read was a round trip every trial
// channel waited for, and during a frozen server's first second (until the watchdog's verdict)
// a `status` poll held the channels for that second. Here the reads wait alone; what needs the
// scheduler's memory (a study's spawn and fork-server state, its Slurm jobs, the running
// trials' processes) is added on the loop afterwards, without storage.
//
// Tasks run one at a time in the order posted. A task keeps its server's io_context alive
// until the connection it carries has gone (as ServerThread's tasks to the loop do), so one
// still queued when the thread stops is destroyed safely, before the storage.
//
// Thread-safety: Post and Drain from any thread but the ReadThread's own; storage() only from
// the tasks.

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "daemon/control/kept_answers.h"
#include "daemon/control/server_thread.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class ReadThread {
 public:
  // Starts the thread.
  explicit ReadThread(std::unique_ptr<storage::Storage> storage)
      : storage_(std::move(storage)), io_(std::make_shared<boost::asio::io_context>(1)) {
    work_.emplace(io_->get_executor());
    thread_ = std::thread([io = io_] { io->run(); });
  }
  // Waits for the task in progress (a storage call fails within its call timeout, at once once
  // the watchdog finds the server unresponsive); the tasks not run are destroyed, then the
  // storage.
  ~ReadThread() {
    work_.reset();
    io_->stop();
    thread_.join();
    io_.reset();
  }
  ReadThread(const ReadThread&) = delete;
  ReadThread& operator=(const ReadThread&) = delete;

  storage::Storage& storage() { return *storage_; }

  // Returns once every task posted before has run: a server that posts no more (its own thread
  // stopped) calls it before it goes, so no task of its runs on after it.
  void Drain() {
    std::promise<void> done;
    std::future<void> ran = done.get_future();
    boost::asio::post(*io_, [&done] { done.set_value(); });
    ran.wait();
  }

  // Runs `fn(*self)` on the thread, keeping `keep` (the io_context `self` lives on) alive until
  // `self` has gone.
  template <typename T, typename Fn>
  void Post(std::shared_ptr<boost::asio::io_context> keep, std::shared_ptr<T> self, Fn fn) {
    boost::asio::post(*io_, ConnectionTask<T, Fn>{std::move(keep), std::move(self), std::move(fn)});
  }

 private:
  std::unique_ptr<storage::Storage> storage_;  // declared first: destroyed after the tasks
  std::shared_ptr<boost::asio::io_context> io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
};

// The storage waits a request holds on: the loop's storage's (`loop`, null when never known),
// and with `off_loop` the ReadThread's too (`reads` then set).
inline StorageWaits RequestWaits(const storage::WaitGauge* loop,
                                 const std::shared_ptr<ReadThread>& reads, bool off_loop) {
  return StorageWaits{loop, off_loop ? reads->storage().wait_gauge() : nullptr};
}

}  // namespace triald::daemon
