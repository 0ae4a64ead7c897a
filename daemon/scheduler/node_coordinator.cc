#include "daemon/scheduler/node_coordinator.h"

#include <algorithm>

#include "daemon/scheduler/shared_coordinator.h"

namespace triald::daemon {

std::optional<int> LocalCoordinator::ClaimNext(StudyCache& study,
                                               const std::function<std::optional<int>()>& pick) {
  std::optional<int> number = pick();
  if (number) {
    study.waiting.erase(std::remove(study.waiting.begin(), study.waiting.end(), *number),
                        study.waiting.end());
  }
  return number;
}

std::unique_ptr<NodeCoordinator> MakeNodeCoordinator(CoordinatorOptions options) {
  if (!options.logger) options.logger = common::MakeNullLogger();
  if (options.storage->shared()) return std::make_unique<SharedCoordinator>(std::move(options));
  storage::Storage* storage = options.storage;
  return std::make_unique<LocalCoordinator>(storage, std::move(options.logger));
}

}  // namespace triald::daemon
