#pragma once
// Recovery of what a previous daemon left (Scheduler::Recover, before anything starts): the
// trials it left RUNNING end FAIL(lost), after any of their processes still alive, and any
// other process of the state directory (a start the previous daemon never got to record), are
// killed. On shared storage only this node's trials are its to end (NodeCoordinator::IsOwn),
// and a trial another node ended first is left alone. Each lost trial gets a trial_lost event.
//
// What runs again, and whether a lost trial is retried, stays the scheduler's decision: this
// returns the stored studies and, per study, the trials it ended.
//
// Thread-safety: a function; called from the scheduler's event-loop thread.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/leftover_processes.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

struct RecoveryOptions {
  storage::Storage* storage = nullptr;   // not owned
  const common::Clock* clock = nullptr;  // not owned
  common::Logger logger;
  NodeCoordinator* coordinator = nullptr;  // not owned; Join()ed already
  LeftoverProcesses* leftovers = nullptr;  // not owned
  std::string state_dir;                   // whose processes are leftovers
};

struct Recovered {
  std::vector<model::StudyRecord> studies;   // every stored study
  std::map<int64_t, std::vector<int>> lost;  // study id -> numbers of the trials ended as lost
};

// Ends the trials a previous daemon of this node left running. An error (storage refusing to
// end one) stops the daemon's start.
common::Result<Recovered> EndLostTrials(const RecoveryOptions& options);

}  // namespace triald::daemon
