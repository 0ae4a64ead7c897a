#pragma once
// TrialStarter: launches one trial the scheduler has claimed, and makes it a RunningTrial. It
// gives the launcher the trial's LaunchSpec (launch_spec.h: command, limits, environment, the
// study's submitter), with, for a retry, the folder of the attempt it retries as
// TRIALD_RESUME_DIR when that folder is fit to hand out (resume_dir.h); once launched, a
// resume_folder event says which folder, or why there is none. The RunningTrial holds the
// trial's process, its channel (trial_channel.h) and the GPU slots it was launched on.
//
// The policy stays the caller's: which trial starts and on which slots, the callbacks that
// route the process's start, lines and exit, and what a failure to start means (spawn_backoff.h).
//
// Not owned: launcher, storage, recorder, coordinator, env.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread only.

#include <functional>
#include <memory>
#include <string>

#include "common/logging.h"
#include "daemon/launcher/launcher.h"
#include "daemon/scheduler/launch_spec.h"
#include "daemon/scheduler/lazy_writer.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/pending_writes.h"
#include "daemon/scheduler/running_trials.h"
#include "daemon/scheduler/scheduler_env.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/scheduler/trial_gpus.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class TrialStarter {
 public:
  struct Options {
    launcher::Launcher* launcher = nullptr;
    storage::Storage* storage = nullptr;  // the trial's channel stores its reports
    common::Logger logger;
    StudyRecorder* recorder = nullptr;       // the resume_folder event
    NodeCoordinator* coordinator = nullptr;  // refreshes a study before its pruner is asked
    SchedulerEnv* env = nullptr;             // looks up the user and checks a resume folder
    // What every trial's spec gets from the daemon; its node is always the storage's.
    LaunchSettings settings;
    // Trials run as their studies' submitters (launcher/run_as.h): a resume folder must then
    // be the submitter's.
    bool trials_as_submitters = false;
    // The channels' writes that storage refused during an outage (pending_writes.h), and the
    // scheduler's outage: whether it holds, and what to call when a channel's write is refused.
    PendingWrites* pending_writes = nullptr;
    // The channels' writes made on a thread (lazy_writer.h); null: on the event loop.
    LazyWriter* lazy_writer = nullptr;
    std::function<bool()> storage_held;
    std::function<void(const common::Status&)> on_storage_refused;
  };
  explicit TrialStarter(Options options) : options_(std::move(options)) {}

  // Why a trial could not be launched: the launcher's step and errno, and its message.
  struct Failure {
    launcher::SpawnError error;
    std::string message;
  };
  // Launches trial `number` of `study` on `gpus` with `callbacks`. Returns the launched trial
  // (still `starting` when a fork server starts it later; the caller records it RUNNING once it
  // has started), or nullptr with `*failure` filled: then no process of it runs, and `gpus` have
  // gone back to the pool.
  std::unique_ptr<RunningTrial> Launch(StudyRuntime& study, int number, TrialGpus gpus,
                                       launcher::TrialCallbacks callbacks, Failure* failure);

 private:
  // For a retry about to start: the folder of the attempt it retries, or why there is none.
  ResumeFolder ResumeFolderOf(const StudyRuntime& study, const model::TrialRecord& retry) const;

  Options options_;
};

}  // namespace triald::daemon
