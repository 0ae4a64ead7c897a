#pragma once
// StudyCache: the scheduler's copy of one study's record and trials, and the counts it derives
// from them (what is waiting, finished, retried). The scheduler decides with it (which trial
// runs next, when the study ends); a NodeCoordinator (node_coordinator.h) keeps it in step with
// what other nodes stored.
//
// It mirrors storage: a change is stored first and then applied here. On shared storage a
// change whose commit fails is taken back with Save()/Restore() and Recount().
//
// Thread-safety: a plain value; the scheduler's event-loop thread owns it.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "daemon/model/records.h"

namespace triald::daemon {

// A number no earlier call returned (thread-safe).
uint64_t NextSyncEpoch();

struct StudyCache {
  model::StudyRecord record;
  std::vector<model::TrialRecord> trials;  // index == trial number; mirrors storage
  std::deque<int> waiting;                 // numbers of claimable WAITING trials, oldest first
  int running = 0;                         // this node's running trials of the study
  int finished = 0;
  int retries_created = 0;  // trials that retry another (they are not new configurations)
  int retried = 0;          // finished trials a retry replaced (they do not count toward n_trials)
  bool exhausted = false;   // the sampler has nothing more to propose
  double synced_at = -1;    // monotonic time the trials were last read from storage
  // Changes each time the trials are read from storage and applied (NextSyncEpoch: unique in
  // the process, so a cache loaded again never takes a number an older one had): a read made
  // off the event loop (storage_reads.h) is applied only if none was applied since it began.
  uint64_t sync_epoch = NextSyncEpoch();
  bool read_in_flight = false;  // a pruning read of it is off the loop (storage_reads.h)
  bool ending = false;          // its own end (COMPLETE, FAILED) is being stored off the loop
  int pending_finishes = 0;     // shared: ends of its trials not yet stored (the database was away)
  bool held_for_delete = false;  // its deletion is being stored off the loop: nothing starts

  // Configurations created so far: what n_trials counts.
  int configurations() const { return static_cast<int>(trials.size()) - retries_created; }

  // Recomputes finished, waiting and the retry counts from `trials`. A WAITING trial is
  // claimable when unclaimed, or claimed by `node` (this node) before a restart, whose start
  // killed any process of it. Another node's claim is never taken over: that node may have
  // started the trial just before it went silent, so a dead node's claims end FAIL(lost).
  void Recount(const std::string& node);

  // What a change to trial `number` may touch: the study record, the trial, and trials appended
  // after it (a retry).
  struct Saved {
    size_t size = 0;
    model::TrialRecord trial;
    model::StudyRecord record;
  };
  Saved Save(int number) const;
  // Puts back what Save() kept (the caller recounts).
  void Restore(int number, const Saved& saved);
};

}  // namespace triald::daemon
