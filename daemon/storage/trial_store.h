#pragma once
// TrialStore: the writes of trials, from creation through claim and run to their outcome. Part
// of Storage (storage.h states the contract every part shares); the scheduler writes through it.
//
// Contract (tests/daemon/storage/trial_store_test.cc, on every backend):
// - Trial numbers are dense and 0-based within a study, assigned by CreateTrial.
// - Finished trials (COMPLETE, PRUNED, FAIL) are immutable: changing one returns
//   kFailedPrecondition and leaves it as it was.
// - Unknown study or trial: kNotFound.
// - CreateTrial, ClaimTrial, ReleaseClaim, MarkRunning and FinishTrial are durable state changes;
//   AddIntermediate, SetAttr and AddTrialParam may be made durable lazily (at the latest by the
//   next state change).
// - ClaimTrial and MarkRunning record the storage's node (NodeRegistry::node); "" while a
//   WAITING trial is unclaimed.
//
// Thread-safety: implementations are not thread-safe (see storage.h).

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/model/records.h"

namespace triald::storage {

class TrialStore {
 public:
  virtual ~TrialStore() = default;

  // Creates a trial in state WAITING (queued, e.g. after a restart) or RUNNING is not allowed
  // here: a trial becomes RUNNING only through MarkRunning once its process exists.
  virtual common::Result<model::TrialRecord> CreateTrial(int64_t study_id,
                                                         const model::ParamMap& params, double at,
                                                         std::optional<int64_t> retry_of = {}) = 0;
  // Claims a WAITING trial for this node (sets its node; it stays WAITING until MarkRunning).
  // kFailedPrecondition when the trial is not WAITING. Which trials may be claimed is the
  // caller's decision, made under LockStudy (the scheduler never takes another node's claim).
  virtual common::Status ClaimTrial(int64_t trial_id) = 0;
  // Gives back this node's claim of a WAITING trial (its node "" again), so that any node may
  // claim it: a trial claimed and then not started (its study paused, or this daemon stopping,
  // meanwhile). Ok for a WAITING trial unclaimed already; kFailedPrecondition for one claimed by
  // another node or not WAITING.
  virtual common::Status ReleaseClaim(int64_t trial_id) = 0;
  // Sets RUNNING with the process identity and this node. kFailedPrecondition unless WAITING
  // and unclaimed or claimed by this node (a node declared dead may have lost its claim).
  virtual common::Status MarkRunning(int64_t trial_id, const model::ProcessIdentity& process,
                                     double at) = 0;
  virtual common::Status AddIntermediate(int64_t trial_id, int64_t step, double value) = 0;
  virtual common::Status SetAttr(int64_t trial_id, const std::string& key,
                                 const std::string& json_value) = 0;
  // Adds a parameter to a WAITING or RUNNING trial: a define-by-run trial's parameters arrive
  // one suggest at a time, after CreateTrial stored those drawn up front. GetTrial, GetTrials and
  // the other reads return it among the trial's params, with its distribution. kAlreadyExists
  // when the trial has a parameter of that name already (from CreateTrial or an earlier call;
  // the stored one is kept: a parameter has one value per trial); kInvalidArgument for a NaN
  // internal value. In a batch like every write; lazily durable, as AddIntermediate.
  virtual common::Status AddTrialParam(int64_t trial_id, const std::string& name,
                                       const model::ParamValue& value) = 0;
  virtual common::Status FinishTrial(int64_t trial_id, const model::TrialOutcome& outcome,
                                     double at) = 0;

  // One intermediate value or attribute, for AddLazyWrites.
  struct LazyWrite {
    int64_t trial_id = 0;
    bool attr = false;  // false: AddIntermediate(step, value); true: SetAttr(key, json)
    int64_t step = 0;
    double value = 0;
    std::string key;
    std::string json;
  };
  // Makes `writes` as AddIntermediate and SetAttr would one by one, in this order (the last value
  // of a step or key wins), in as few round trips as the backend can: PostgreSQL sends one
  // statement per kind (the lazy writer's batches, daemon/scheduler/lazy_writer.h); this default
  // makes them one by one. A write whose trial is not open (finished, or unknown) is not made:
  // its index goes to `refused`, in increasing order, and the others are made. Any other failure
  // is returned, and then each write may or may not have been made (making one twice changes
  // nothing). Lazily durable, as the single writes.
  virtual common::Status AddLazyWrites(const std::vector<LazyWrite>& writes,
                                       std::vector<size_t>* refused) {
    for (size_t i = 0; i < writes.size(); ++i) {
      const LazyWrite& w = writes[i];
      common::Status st = w.attr ? SetAttr(w.trial_id, w.key, w.json)
                                 : AddIntermediate(w.trial_id, w.step, w.value);
      if (st.code() == common::Code::kFailedPrecondition || st.code() == common::Code::kNotFound) {
        refused->push_back(i);
      } else if (!st.ok()) {
        return st;
      }
    }
    return common::Status::Ok();
  }
};

}  // namespace triald::storage
