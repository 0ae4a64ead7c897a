#pragma once
// Storage: the durable record of studies and trials, the union of the interfaces its callers
// use: StudyStore (writes of studies, batches), TrialStore (writes of trials), ReadModel (the
// reads of the views and the scheduler) and NodeRegistry (the daemons and their heartbeats).
// The scheduler uses the whole; a view takes the part it reads. A second backend (PostgreSQL,
// for several daemons sharing a study) implements the whole.
//
// Contract shared by the parts (each part's own on its class; tests/daemon/storage/ runs each
// part's suite against every implementation):
// - A state change (CreateStudy, SetStudyState, SetStudyControl, DeleteStudy, CreateTrial,
//   ClaimTrial, ReleaseClaim, MarkRunning, FinishTrial) is durable when the call returns, or,
//   inside a batch, when the outermost CommitBatch returns. AddIntermediate, SetAttr and
//   AddTrialParam may be made durable lazily (at the latest by the next state change).
// - Batches group changes into one atomic, durable commit (one fsync for SQLite): the daemon
//   wraps each event it handles in one, so a trial's end and its successor's start cost one
//   sync each, not one per row. A failed call inside a batch leaves the batch's earlier changes
//   in place.
// - Every trial records the node (daemon) that claimed or ran it: a storage is opened with this
//   daemon's node name; ClaimTrial and MarkRunning set it. "" while a WAITING trial is unclaimed.
//
// Shared storage (shared() true: PostgreSQL, several daemons on several hosts): other daemons
// change studies and trials between any two calls. A daemon then
// - wraps every change to a study's trials in a batch that starts with LockStudy, which holds
//   the study's lock until the batch commits, so claims, trial numbering, n_trials, retries
//   and lost-trial recovery are decided by one daemon at a time per study; a batch locks at
//   most one study, so two daemons never wait for each other in a cycle;
// - reads what others changed with GetTrialsSince (finished trials never change, so a daemon
//   re-reads only trials it has not seen finish);
// - records its liveness with Heartbeat; GetNodes tells which nodes have gone silent, measured
//   by the storage's own clock (the database server's), so hosts' clocks need not agree.
// SQLite is not shared (one daemon per state directory; SqliteOptions::shared lets tests play
// several nodes on one file, where BEGIN IMMEDIATE makes every batch exclusive): LockStudy
// needs no lock there, but every call behaves as specified, and the contract suite checks both.
//
// Thread-safety: implementations are not thread-safe; the daemon calls them from its one event
// loop thread.

#include "daemon/storage/node_registry.h"
#include "daemon/storage/read_model.h"
#include "daemon/storage/study_store.h"
#include "daemon/storage/trial_store.h"
#include "daemon/storage/wait_gauge.h"

namespace triald::storage {

class Storage : public StudyStore, public TrialStore, public ReadModel, public NodeRegistry {
 public:
  ~Storage() override = default;

  // Since when a call of this storage has been waiting for its server (wait_gauge.h), readable
  // from any thread; null when the backend does not say (SQLite: a write that waits on the disk
  // cannot be told from one that works).
  virtual const WaitGauge* wait_gauge() const { return nullptr; }
};

}  // namespace triald::storage
