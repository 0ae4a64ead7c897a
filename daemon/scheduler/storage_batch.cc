#include "daemon/scheduler/storage_batch.h"

namespace triald::daemon {

StorageBatch::StorageBatch(storage::Storage* storage, common::Logger logger)
    : storage_(storage), logger_(std::move(logger)) {
  common::Status st = storage_->BeginBatch();
  began_ = st.ok();
  if (!began_) logger_->error("storage: {}", st.message());
}

StorageBatch::~StorageBatch() {
  if (!began_) return;
  common::Status st = storage_->CommitBatch();
  if (!st.ok()) logger_->critical("storage: changes not committed: {}", st.message());
}

common::Status StorageBatch::Commit() {
  if (!began_) return common::Unavailable("the storage batch did not begin");
  began_ = false;
  return storage_->CommitBatch();
}

}  // namespace triald::daemon
