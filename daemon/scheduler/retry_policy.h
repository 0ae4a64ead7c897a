#pragma once
// The retry policy ([study] retries, retry_on, requeue_on_shutdown): what a finished trial's end
// asks for. Policy only: the scheduler stores what it decides, on the event loop with the end
// (Scheduler::MaybeRetry) or off it in the end's transaction (NodeCoordinator::FinishOffLoop).
//
// Thread-safety: a pure function of its arguments.

#include <optional>
#include <string>

#include "daemon/model/records.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/study_runtime.h"

namespace triald::daemon {

struct RetryDecision {
  std::optional<std::string> exhausted;  // a retries_exhausted event's detail
  std::optional<EndWrite::Retry> retry;  // a retry (or a requeue) to create
};

// What the study's policy says of its trial `ended` (as it ends: its state and failure): nothing
// (it did not fail, the study is not RUNNING, its reason is not retried), the retries_exhausted
// event, or a retry with its parameters and event. A trial stopped by a stop of triald is put
// back whatever `retries` says when requeue_on_shutdown is set.
RetryDecision DecideRetry(const StudyRuntime& study, const model::TrialRecord& ended);

}  // namespace triald::daemon
