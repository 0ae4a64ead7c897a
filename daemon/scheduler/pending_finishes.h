#pragma once
// PendingFinishes: trial ends that storage could not take for now (the database away, a full
// disk), kept in memory in the order they came and handed back to the scheduler to be stored
// again, with their retries and the study's completion, once storage answers. While one is kept
// its trial stays unfinished in the StudyCache (study.pending_finishes counts them), so the
// study can neither complete without it nor be dropped from memory. Both coordinators keep them
// (node_coordinator.h).
//
// Thread-safety: not thread-safe; the scheduler's thread owns it.

#include <cstdint>
#include <string>
#include <vector>

#include "common/logging.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/study_cache.h"

namespace triald::daemon {

class CoordinatorHost;

class PendingFinishes {
 public:
  // Keeps the end of trial `number` (`own`: this node's), logging `why` it could not be stored.
  void Keep(StudyCache& study, int number, const model::TrialOutcome& outcome, bool own,
            const std::string& why, const common::Logger& logger);
  // Hands every kept end back to host->FinishTrial, oldest first (which may keep it again);
  // ends of studies no longer active are dropped.
  void Retry(CoordinatorHost& host);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    int64_t study_id = 0;
    int number = 0;
    model::TrialOutcome outcome;
    bool own = true;
  };
  std::vector<Entry> entries_;
};

}  // namespace triald::daemon
