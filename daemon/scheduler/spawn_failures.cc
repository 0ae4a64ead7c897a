#include "daemon/scheduler/spawn_failures.h"

#include <algorithm>

namespace triald::daemon {

void SpawnFailures::OnFailure(StudyRuntime& study, int number, const launcher::SpawnError& error,
                              const std::string& message) {
  const bool was_held = study.spawn.held();
  SpawnBackoff::Failure f =
      study.spawn.OnFailure(error, message, options_.clock->MonotonicSeconds());
  const std::string what = DescribeSpawnFailure(f, number, message);
  if (was_held) {
    options_.logger->debug("study {}: {}", study.record.name, what);
  } else {
    options_.logger->warn("study {}: {}", study.record.name, what);
  }
  options_.recorder->Event(&study, &study.trials[number], "spawn_failed", what);
  if (f.held_now) {
    options_.logger->error(
        "study {}: held: trials cannot start: {} (retried every {} s at most until they do)",
        study.record.name, message, SpawnBackoff::kMaxDelay);
    options_.recorder->Event(&study, nullptr, "study_held",
                             "trials cannot start: " + message + " (" + std::to_string(f.failures) +
                                 " failures in a row; retried with back-off until one starts)");
  }
}

void SpawnFailures::OnStarted(StudyRuntime& study, int number) {
  if (!study.spawn.OnStart()) return;
  options_.logger->info("study {}: trials start again", study.record.name);
  options_.recorder->Event(&study, &study.trials[number], "spawn_recovered",
                           "trial " + std::to_string(number) + " started");
}

std::optional<double> SpawnFailures::WakeDelay(const ActiveStudies& studies) const {
  std::optional<double> earliest;
  for (const auto& [id, study] : studies) {
    if (!study->spawn.backing_off() || study->record.state != model::StudyState::kRunning) {
      continue;
    }
    if (!earliest || study->spawn.retry_at() < *earliest) earliest = study->spawn.retry_at();
  }
  if (!earliest) return std::nullopt;
  return std::max(0.0, *earliest - options_.clock->MonotonicSeconds());
}

std::optional<SpawnBackoff::Snapshot> SpawnFailures::Status(const StudyRuntime& study) const {
  if (!study.spawn.backing_off()) return std::nullopt;
  return study.spawn.Take(options_.clock->MonotonicSeconds());
}

}  // namespace triald::daemon
