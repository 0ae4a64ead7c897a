#pragma once
// PingBoard: what `ping` answers, published by the event loop and read by the control socket's
// own thread (control/server.h). The loop publishes after every change of the
// scheduler's counts or of its storage hold (SchedulerOptions::on_change); the control socket's
// thread answers `ping` from the last publication, so `ping` answers within milliseconds while
// the loop waits (on a storage call that has not come back, say), and answers what the loop
// knew when it last got to run.
//
// One shape for both paths: PingVerb (the verb table, on the loop) and Answer() build the reply
// with PingJson.
//
// Thread-safety: Publish on the event loop; Answer from any thread.

#include <boost/json.hpp>
#include <chrono>
#include <mutex>
#include <string>

namespace triald::daemon {

class Scheduler;

// The storage hold (scheduler/storage_outage.h): held, the first refusal, how many, the
// seconds to the next probe, and the trials' writes (intermediate values, attributes,
// parameters) kept meanwhile, in the scheduler and in its lazy writer.
struct StorageHold {
  bool held = false;
  std::string reason;
  int failures = 0;
  double retry_in_s = 0;
  size_t writes_kept = 0;
};

// What `ping` says of the daemon now.
struct PingFacts {
  int running = 0;
  int queued = 0;
  StorageHold storage;
};

// The hold and the facts of `scheduler` now. Event loop only.
StorageHold StorageHoldOf(const Scheduler& scheduler);
PingFacts PingFactsOf(const Scheduler& scheduler);

// {held, reason, failures, retry_in_s, writes_kept}, or null when storage is not held: the
// "storage" member of `ping`, `status` and `studies`.
boost::json::value StorageHoldJson(const StorageHold& hold);

// The `ping` result: {storage, pid, running, queued, state_dir, node, shared, version}
// (daemon/control/verbs.h); "storage" is null unless held.
boost::json::value PingJson(const PingFacts& facts, const std::string& state_dir,
                            const std::string& node, bool shared);

class PingBoard {
 public:
  PingBoard(std::string state_dir, std::string node, bool shared);

  // Event loop: the scheduler's facts now.
  void Publish(const Scheduler& scheduler);
  // Any thread: the `ping` result as of the last Publish (before any: nothing running or queued,
  // storage not held), with the time to the next storage probe counted down to now.
  boost::json::value Answer() const;

 private:
  using Clock = std::chrono::steady_clock;
  const std::string state_dir_;
  const std::string node_;
  const bool shared_;
  mutable std::mutex mu_;
  PingFacts facts_;             // guarded by mu_
  Clock::time_point retry_at_;  // guarded by mu_: when the next probe is due (held)
};

}  // namespace triald::daemon
