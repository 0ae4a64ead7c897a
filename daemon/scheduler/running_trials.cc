#include "daemon/scheduler/running_trials.h"

#include <algorithm>
#include <utility>

namespace triald::daemon {
using launcher::StopReason;

RunningTrial* RunningTrials::Find(int64_t trial_id) {
  auto it = trials_.find(trial_id);
  return it == trials_.end() ? nullptr : it->second.get();
}

void RunningTrials::Add(int64_t trial_id, std::unique_ptr<RunningTrial> trial) {
  trials_[trial_id] = std::move(trial);
}

std::unique_ptr<RunningTrial> RunningTrials::Take(int64_t trial_id) {
  auto it = trials_.find(trial_id);
  if (it == trials_.end()) return nullptr;
  std::unique_ptr<RunningTrial> trial = std::move(it->second);
  trials_.erase(it);
  return trial;
}

void RunningTrials::StopStudy(const StudyCache& study, bool ended_elsewhere) {
  for (auto& [tid, rt] : trials_) {
    if (rt->study != &study) continue;
    if (ended_elsewhere) {
      const model::TrialRecord& stored = study.trials[rt->number];
      if (rt->channel->taken_over() || !model::IsFinished(stored.state)) continue;
      rt->channel->MarkTakenOver();
      logger_->warn(
          "study {} trial {}: already ended by another node as {}({}) (this node was silent); "
          "stopping it",
          study.record.name, rt->number, model::TrialStateName(stored.state), stored.fail.reason);
    }
    rt->process->Stop(StopReason::kCancel);
  }
}

void RunningTrials::StopAll() {
  for (auto& [tid, rt] : trials_) rt->process->Stop(StopReason::kShutdown);
}

std::vector<std::unique_ptr<RunningTrial>> RunningTrials::TakeAll() {
  std::vector<std::unique_ptr<RunningTrial>> out;
  for (auto& [tid, rt] : trials_) out.push_back(std::move(rt));
  trials_.clear();
  return out;
}

bool RunningTrials::HoldGpus() const {
  return std::any_of(trials_.begin(), trials_.end(),
                     [](const auto& r) { return !r.second->gpus.empty(); });
}

void RunningTrials::SampleGpus() {
  for (auto& [tid, rt] : trials_) {
    if (!rt->starting) rt->gpus.Sample(rt->process->identity().pgid);
  }
}

std::vector<RunningTrialView> RunningTrials::Views() const {
  std::vector<RunningTrialView> out;
  out.reserve(trials_.size());
  for (const auto& [id, rt] : trials_) {
    out.push_back({rt->study->record.id, rt->number, devices::GpuPool::SlotList(rt->gpus.slots())});
  }
  return out;
}

}  // namespace triald::daemon
