#pragma once
// LazyWriter: the lazily durable writes of running trials (intermediate values, attributes,
// define-by-run parameters: trial_store.h) made by a thread of their own, on a storage
// connection of their own, so that the event loop never waits for the database to take a
// trial's report. Where storage is a server (PostgreSQL), every such write is a round trip: on
// the loop, each report made every trial channel wait for it (a slow network, a busy or frozen
// server), and under a steady stream of reports the round trips alone could fill the loop.
//
// Order: writes are made in the order they came, in batches (one transaction, each write under
// a savepoint: postgres_storage.h) of at most Options::batch. A trial's end is stored by the
// scheduler on its own connection, after its writes: TakeTrial hands back those not yet written
// (waiting for the batch in flight when it holds one of them), and the scheduler writes them in
// the end's own batch. A trial ends once its process is over, so none of its writes comes after.
//
// Failures: a write refused for itself (kFailedPrecondition: the trial ended elsewhere, another
// node took it over; kAlreadyExists: a parameter stored already) is dropped, and on_refused says
// so on the event loop. An outage (kUnavailable, kIo: the server away, unresponsive, the disk
// full) keeps the batch, in order, at the front; the writer tries again after a back-off
// (kFirstRetry doubling to kMaxRetry, or at once on Resume()), and on_outage tells the event
// loop, once per outage, so that the scheduler holds as it does for its own refused writes.
//
// Bounded: at most Options::max_writes wait, the batch in flight included; past that the oldest
// is dropped, counted and logged once per outage (the queue is a PendingWrites).
//
// Thread-safety: Write, WriteFirst, Resume and the destructor on the event-loop thread; the
// callbacks are posted there. TakeTrial on the event-loop thread or on the reads' thread (a trial's
// end stored off the loop: NodeCoordinator::FinishOffLoop), never while the caller's connection
// holds a transaction. queued() from any thread.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/scheduler/pending_writes.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class LazyWriter {
 public:
  static constexpr double kFirstRetry = 0.1;  // seconds
  static constexpr double kMaxRetry = 5;      // seconds

  struct Options {
    std::shared_ptr<storage::Storage> storage;  // the writer's own connection
    // Runs `fn` on the event loop (asio::post); the callbacks below arrive through it.
    std::function<void(std::function<void()>)> post;
    // Writes of trial `trial_id` refused for themselves (logged already; one call per trial and
    // batch).
    std::function<void(int64_t trial_id, const common::Status&)> on_refused;
    // Storage refuses the writer's writes (the first refusal of an outage).
    std::function<void(const common::Status&)> on_outage;
    common::Logger logger;
    size_t batch = 256;  // writes per transaction, at most
    size_t max_writes = PendingWrites::kMaxWrites;
  };
  // Starts the thread.
  explicit LazyWriter(Options options);
  // Writes what is left (one try; what storage refuses then is lost and logged) and stops.
  ~LazyWriter();
  LazyWriter(const LazyWriter&) = delete;
  LazyWriter& operator=(const LazyWriter&) = delete;

  // Queues `w`; never waits for storage.
  void Write(PendingWrites::Write w);
  // Queues `writes` (oldest first) in front of those waiting: writes older than any queued, kept
  // elsewhere while storage refused them (the scheduler's, once its probe succeeds); never waits
  // for storage. A trial with writes queued must have none kept elsewhere that are newer.
  void WriteFirst(std::vector<PendingWrites::Write> writes);
  // Trial `trial_id`'s writes not written yet, oldest first, taken out of the queue; waits for
  // the batch in flight when it holds any of them (then written, or handed back if storage
  // refused them). The caller writes them before the trial's end. Precondition: no transaction
  // of the caller's holds a lock on a row the batch in flight needs (another open trial of this
  // node ended in the same open batch): the batch would wait for the caller, the caller for the
  // batch, until the server's lock_timeout failed the batch. The scheduler ends each of its own
  // running trials in a commit of its own.
  std::vector<PendingWrites::Write> TakeTrial(int64_t trial_id);
  // Storage takes writes again: the next try is now, not at the end of the back-off.
  void Resume();
  // Writes waiting (in flight included).
  size_t queued() const;
  uint64_t dropped() const;

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  // One batch on the writer's storage: OK, or the outage that stopped it (the writes from the
  // one it refused on are in `left`, in order). Refusals of single writes go to `refused`.
  common::Status WriteBatch(std::vector<PendingWrites::Write>& batch,
                            std::vector<PendingWrites::Write>* left,
                            std::vector<std::pair<int64_t, common::Status>>* refused);

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;        // the writer: work, Resume() or stop
  std::condition_variable batch_done_;  // TakeTrial: the batch in flight is over
  PendingWrites queue_;                 // waiting, in order (bounded: Options::max_writes)
  size_t in_flight_ = 0;                // the writes of the batch being written
  std::unordered_set<int64_t> in_flight_trials_;  // and their trials
  bool outage_reported_ = false;
  double retry_s_ = 0;            // the back-off now; 0 while storage takes writes
  Clock::time_point retry_at_{};  // no try before this
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace triald::daemon
