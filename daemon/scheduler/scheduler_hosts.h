#pragma once
// The scheduler's side of the two host interfaces its parts call back through:
//   Scheduler::Host     CoordinatorHost (node_coordinator.h): what the node coordinator may ask
//                       (find an active study, stop its trials, finish a trial, record an event)
//   Scheduler::Control  ControlHost (study_control.h): what the control verbs may ask (the
//                       active study, activate a stored one, forget one, stop, finish, pump)
// Each forwards to the scheduler's own members; they are Scheduler's nested classes, so this
// header is included by daemon/scheduler.cc only.
//
// Thread-safety: as the scheduler: its event-loop thread only.

#include <memory>
#include <string>

#include "common/status.h"
#include "daemon/scheduler.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/running_trials.h"
#include "daemon/scheduler/storage_outage.h"
#include "daemon/scheduler/study_control.h"
#include "daemon/scheduler/study_fork_servers.h"
#include "daemon/scheduler/study_loader.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"

namespace triald::daemon {

// What the coordinator may ask of the scheduler (node_coordinator.h). Every StudyCache it is
// given is a StudyRuntime of this scheduler.
class Scheduler::Host final : public CoordinatorHost {
 public:
  explicit Host(Scheduler* s) : s_(s) {}
  void StopTrialsEndedElsewhere(StudyCache& study) override {
    s_->running_->StopStudy(study, true);
  }
  void StopStudyTrials(StudyCache& study) override { s_->running_->StopStudy(study, false); }
  void FenceOwnTrials(const std::string& why) override {
    for (std::unique_ptr<RunningTrial>& rt : s_->running_->TakeAll()) {
      StudyRuntime& study = *rt->study;
      const int number = rt->number;
      rt.reset();  // kills its process group now, and gives back its slots
      --study.running;
      s_->FinishTrial(study, number, Fenced(why));
    }
  }
  void RecordEvent(const StudyCache& study, const model::TrialRecord* trial,
                   const std::string& kind, const std::string& detail) override {
    s_->recorder_->Event(&study, trial, kind, detail);
  }
  bool FinishReapedOffLoop(StudyCache& study, int number, const model::TrialOutcome& outcome,
                           const EndReaped& reaped) override {
    return s_->FinishOffLoop(static_cast<StudyRuntime&>(study), number, outcome, reaped);
  }
  void FinishTrial(StudyCache& study, int number, const model::TrialOutcome& outcome,
                   bool own) override {
    s_->FinishTrial(static_cast<StudyRuntime&>(study), number, outcome, own);
  }
  StudyCache* FindStudy(int64_t study_id) override {
    auto it = s_->studies_.find(study_id);
    return it == s_->studies_.end() ? nullptr : it->second.get();
  }
  std::vector<StudyCache*> Studies() override {
    std::vector<StudyCache*> all;
    for (auto& [id, study] : s_->studies_) all.push_back(study.get());
    return all;
  }
  void FollowStored(const std::vector<model::StudyRecord>& stored) override {
    s_->FollowStored(stored);
  }

 private:
  Scheduler* s_;
};

// What the control verbs may ask of the scheduler (study_control.h).
class Scheduler::Control final : public ControlHost {
 public:
  explicit Control(Scheduler* s) : s_(s) {}
  bool shutting_down() const override { return s_->shutting_down_; }
  StudyRuntime* ActiveStudy(int64_t study_id) override {
    auto it = s_->studies_.find(study_id);
    return it == s_->studies_.end() ? nullptr : it->second.get();
  }
  common::Status Activate(const model::StudyRecord& rec,
                          std::optional<std::vector<model::TrialRecord>> trials) override {
    common::Result<std::unique_ptr<StudyRuntime>> rt =
        trials ? s_->loader_->Load(rec, std::move(*trials)) : s_->loader_->Load(rec);
    if (rt.ok()) {
      s_->studies_[rec.id] = std::move(rt).value();
      return common::Status::Ok();
    }
    return s_->coordinator_->LeaveToOthers(rec, rt.status()) ? common::Status::Ok() : rt.status();
  }
  void Forget(int64_t study_id) override {
    auto it = s_->studies_.find(study_id);
    if (it != s_->studies_.end()) {
      s_->fork_servers_->Release(*it->second);
      s_->studies_.erase(it);
    }
    if (s_->gpu_reserved_for_ == study_id) s_->gpu_reserved_for_ = 0;
  }
  void FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                   bool own) override {
    s_->FinishTrial(study, number, outcome, own);
  }
  void StopTrials(StudyRuntime& study) override { s_->running_->StopStudy(study, false); }
  void Pump() override { s_->Pump(); }
  void StorageRefused(const common::Status& status) override {
    if (StorageOutage::IsOutage(status)) s_->OnStorageRefused(status);
  }

 private:
  Scheduler* s_;
};

}  // namespace triald::daemon
