#pragma once
// FollowStoredStudies: on shared storage (several daemons, one database), brings this node's
// active studies in line with the studies every node has stored, once per tick
// (Scheduler::SharedTick, after NodeCoordinator::OnTick read them):
//   - a study no longer stored (deleted through another node) is dropped here once none of its
//     trials runs here and no trial end waits to be stored (none of its trials ran, else the
//     delete was refused);
//   - a stored study active here adopts what other nodes changed (NodeCoordinator::Adopt);
//   - a RUNNING study not active here (submitted through another node, or extended there) is
//     joined: loaded (StudyLoader::Load) unless the coordinator left it to other nodes; one that
//     cannot be loaded here is left to them (NodeCoordinator::LeaveToOthers).
// Whether a followed study is complete stays the scheduler's decision.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread only.

#include <cstdint>
#include <vector>

#include "common/logging.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/study_loader.h"
#include "daemon/scheduler/study_runtime.h"

namespace triald::daemon {

struct FollowOptions {
  NodeCoordinator* coordinator = nullptr;  // not owned
  StudyLoader* loader = nullptr;           // not owned
  common::Logger logger;
};

// Updates `studies` from `stored` as above; returns the ids of the studies dropped.
std::vector<int64_t> FollowStoredStudies(const std::vector<model::StudyRecord>& stored,
                                         ActiveStudies* studies, const FollowOptions& options);

}  // namespace triald::daemon
