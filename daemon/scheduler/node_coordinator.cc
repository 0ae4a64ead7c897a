#include "daemon/scheduler/node_coordinator.h"

#include <algorithm>

#include "daemon/scheduler/shared_coordinator.h"
#include "daemon/scheduler/storage_outage.h"

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

bool LocalCoordinator::KeepFailedFinish(StudyCache& study, int number,
                                        const model::TrialOutcome& outcome, bool own,
                                        const common::Status& st) {
  if (!StorageOutage::IsOutage(st)) return false;
  pending_.Keep(study, number, outcome, own, st.message(), logger_);
  return true;
}

void LocalCoordinator::CommitFinish(StudyCache& study, int number,
                                    const model::TrialOutcome& outcome, bool own,
                                    StorageBatch& batch, const StudyCache::Saved& before) {
  common::Status st = batch.Commit();
  if (st.ok() || !StorageOutage::IsOutage(st)) {
    if (!st.ok()) logger_->critical("study {}: {}", study.record.name, st.message());
    return;
  }
  study.Restore(number, before);
  study.Recount(storage_->node());
  pending_.Keep(study, number, outcome, own, st.message(), logger_);
}

std::unique_ptr<NodeCoordinator> MakeNodeCoordinator(CoordinatorOptions options) {
  if (!options.logger) options.logger = common::MakeNullLogger();
  if (options.storage->shared()) return std::make_unique<SharedCoordinator>(std::move(options));
  storage::Storage* storage = options.storage;
  return std::make_unique<LocalCoordinator>(storage, std::move(options.logger), options.host);
}

}  // namespace triald::daemon
