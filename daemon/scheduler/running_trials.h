#pragma once
// RunningTrials: this node's launched trials, by trial id, from Launch() until their exit or a
// start that never happened. Each RunningTrial holds what the trial owns here: its process, its
// channel and its GPU slots, and whether it is still starting (a fork server's fork pending:
// launcher.h). The scheduler decides when a trial is added and taken out (and keeps its study's
// `running` count); this answers what is asked of all of them at once: stop a study's trials or
// every trial, sample their GPU memory, and the dashboard's view of them.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread only.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/logging.h"
#include "daemon/launcher/launcher.h"
#include "daemon/scheduler/study_cache.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/scheduler/trial_channel.h"
#include "daemon/scheduler/trial_gpus.h"

namespace triald::daemon {

// One launched trial. Members are destroyed in reverse: the channel before the process it
// answers, the process (its group killed if still alive) before its slots go back.
struct RunningTrial {
  StudyRuntime* study = nullptr;  // not owned
  int number = 0;
  TrialGpus gpus;  // given back if it never ran, else drained at exit
  std::unique_ptr<launcher::TrialProcess> process;
  std::unique_ptr<TrialChannel> channel;
  // Launched, not started yet: it holds its slot, but storage still has it WAITING, with no
  // process (the scheduler records it RUNNING once it starts).
  bool starting = false;
};

// What the dashboard shows of a running trial.
struct RunningTrialView {
  int64_t study_id = 0;
  int number = 0;
  std::string gpu_slots;  // devices::GpuPool::SlotList form; "" for a CPU trial
};

class RunningTrials {
 public:
  explicit RunningTrials(common::Logger logger) : logger_(std::move(logger)) {}

  int size() const { return static_cast<int>(trials_.size()); }
  bool empty() const { return trials_.empty(); }
  // The trial, or nullptr when it is not (or no longer) running here.
  RunningTrial* Find(int64_t trial_id);
  void Add(int64_t trial_id, std::unique_ptr<RunningTrial> trial);
  // Takes the trial out (nullptr when it is not here); the caller destroys it when it is done.
  std::unique_ptr<RunningTrial> Take(int64_t trial_id);

  // Stops (kCancel) the trials of `study`: every one, or with `ended_elsewhere` only those whose
  // stored trial another node has ended (shared storage: this node was silent), each marked
  // taken over, and warned about, once.
  void StopStudy(const StudyCache& study, bool ended_elsewhere);
  // Stops every trial (kShutdown).
  void StopAll();
  // Takes every trial out (the caller destroys them, which kills their process groups at once).
  std::vector<std::unique_ptr<RunningTrial>> TakeAll();
  // Whether any trial holds GPU slots.
  bool HoldGpus() const;
  // One GPU memory sample of every started trial's processes (TrialGpus::Sample).
  void SampleGpus();
  std::vector<RunningTrialView> Views() const;

 private:
  common::Logger logger_;
  std::map<int64_t, std::unique_ptr<RunningTrial>> trials_;  // by trial id
};

}  // namespace triald::daemon
