#pragma once
// SpawnFailures: what follows a trial that could not be started (Launcher::Launch failed, or a
// fork server's start failed later), for every active study: the study's back-off advances
// (spawn_backoff.h), the failure is logged and stored as a spawn_failed event of the trial, a
// study_held event when it puts the study on hold, and a spawn_recovered event when one of its
// trials starts again. It also says when the earliest back-off ends (the scheduler asks to be
// woken then) and what `trialctl status` shows of a study backing off. Where the trial waits
// (first in its study's line) stays the scheduler's decision.
//
// Owns nothing: the back-off is the study's (StudyRuntime::spawn). Not owned: clock, recorder.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread only.

#include <optional>
#include <string>

#include "common/clock.h"
#include "common/logging.h"
#include "daemon/launcher/launcher.h"
#include "daemon/scheduler/spawn_backoff.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"

namespace triald::daemon {

class SpawnFailures {
 public:
  struct Options {
    const common::Clock* clock = nullptr;  // not owned: monotonic seconds for the back-off
    common::Logger logger;
    StudyRecorder* recorder = nullptr;  // not owned
  };
  explicit SpawnFailures(Options options) : options_(std::move(options)) {}

  // Trial `number` of `study` could not be started; `message` is what the launcher said.
  void OnFailure(StudyRuntime& study, int number, const launcher::SpawnError& error,
                 const std::string& message);
  // Trial `number` of `study` started: the study's back-off is over.
  void OnStarted(StudyRuntime& study, int number);
  // Seconds from now until the earliest back-off of a RUNNING study ends (0 when due already);
  // nullopt when none is backing off.
  std::optional<double> WakeDelay(const ActiveStudies& studies) const;
  // The study's back-off now, when it is backing off (or held); nullopt otherwise.
  std::optional<SpawnBackoff::Snapshot> Status(const StudyRuntime& study) const;

 private:
  Options options_;
};

}  // namespace triald::daemon
