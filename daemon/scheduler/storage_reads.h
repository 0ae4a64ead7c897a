#pragma once
// StorageReads: reads of shared storage made off the event loop. The multi-node protocol
// (shared_coordinator.h) re-reads the database all the time: other nodes' trials before a
// pruning decision (every kPruneSyncSeconds while trials report), and at each heartbeat tick
// the node's own heartbeat, the nodes' heartbeats, the studies and every study's changed
// trials. Made on the event loop, each was a round trip that every trial channel, the control
// socket's replies and the dashboard waited for; a frozen or unreachable server made them wait
// until the storage's watchdog gave its verdict.
//
// A job runs with the reads' storage connection, off the loop, and returns what the loop does
// with its result: that runs on the event loop afterwards (never inside Submit). Jobs run in
// the order submitted, one at a time. This node's own trials' claims, starts and ends are
// stored there too, a claim and an end each in a transaction of its own
// (NodeCoordinator::ClaimOffLoop, MarkRunningOffLoop, FinishOffLoop): the connection is the
// protocol's, reads and those writes. The callers keep their jobs bounded (one heartbeat tick,
// one pruning read and one claim per study at a time, one start and one end per trial that ran
// here), so the queue is.
//
//   ThreadedStorageReads (below): a thread of its own with a storage connection of its own (the
//     daemon on PostgreSQL). Its completions are posted to the event loop; those not run yet
//     when it is destroyed never run.
//   Tests run jobs inline on the test's thread (tests/daemon/inline_storage_reads.h).
//
// Thread-safety: Submit on the event-loop thread; the completions run there too.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/logging.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class StorageReads {
 public:
  // What a job returns: run on the event loop with the job's result.
  using Done = std::function<void()>;
  using Job = std::function<Done(storage::Storage&)>;
  virtual ~StorageReads() = default;
  virtual void Submit(Job job) = 0;
};

class ThreadedStorageReads final : public StorageReads {
 public:
  struct Options {
    std::shared_ptr<storage::Storage> storage;  // the reads' own connection
    // Runs `fn` on the event loop (asio::post).
    std::function<void(std::function<void()>)> post;
    common::Logger logger;
  };
  // Starts the thread.
  explicit ThreadedStorageReads(Options options);
  // Waits for the job in progress (a storage call fails within its call timeout, at once once
  // the watchdog finds the server unresponsive); drops the rest. On the event-loop thread.
  ~ThreadedStorageReads() override;
  ThreadedStorageReads(const ThreadedStorageReads&) = delete;
  ThreadedStorageReads& operator=(const ThreadedStorageReads&) = delete;

  void Submit(Job job) override;
  // Jobs submitted and not finished (for tests): a job counts until just after its completion
  // is posted.
  size_t pending() const;

 private:
  void Run(const std::weak_ptr<bool>& alive);

  Options options_;
  // Reset by the destructor (on the event loop): completions posted before and not run yet
  // then do nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  size_t running_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace triald::daemon
