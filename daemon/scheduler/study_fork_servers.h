#pragma once
// StudyForkServers: the scheduler's side of the launcher's fork servers (a study whose sweep has
// [objective] fork_server; launcher.h). One server per active study, keyed by the study's name.
// It turns the launcher's fork server events into events of that study (fork_server_started,
// fork_server_exited, fork_server_off) with a log line, tells a study's server state for
// `trialctl status`, and stops a study's server when the study leaves (the scheduler decides
// when: it ended and none of its trials is starting or running, it was deleted, or shutdown).
//
// Owns: the launcher's fork server listener, set by the constructor and cleared by the
// destructor. Not owned: the launcher and the recorder.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread only (the launcher calls
// the listener from that thread too).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/logging.h"
#include "daemon/launcher/launcher.h"
#include "daemon/scheduler/study_cache.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"

namespace triald::daemon {

class StudyForkServers {
 public:
  struct Options {
    launcher::Launcher* launcher = nullptr;  // not owned; nullptr: no events are listened to
    common::Logger logger;
    StudyRecorder* recorder = nullptr;  // not owned
    // The active study of that name, nullptr when none (its events are then dropped).
    std::function<const StudyCache*(const std::string& name)> find_study;
  };
  explicit StudyForkServers(Options options);
  ~StudyForkServers();
  StudyForkServers(const StudyForkServers&) = delete;
  StudyForkServers& operator=(const StudyForkServers&) = delete;

  // The state of the study's server as the launcher tells it ("not started" before the study's
  // first launch); nullopt when the study's sweep has no fork server.
  std::optional<launcher::ForkServerStatus> Status(const StudyRuntime& study) const;
  // Stops the study's server, if its sweep has one.
  void Release(const StudyRuntime& study);
  // Stops every server (no trial starts any more; a start still pending ends never started).
  void ReleaseAll();

 private:
  void OnEvent(const launcher::ForkServerEvent& event);

  Options options_;
};

}  // namespace triald::daemon
