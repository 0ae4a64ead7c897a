#include "daemon/scheduler/client_asks.h"

namespace triald::daemon {

bool IsClientStudy(const StudyRuntime& study) { return study.spec.objective.kind == "client"; }

common::Status AskRefused(const StudyRuntime& study, bool shutting_down, bool storage_held,
                          const std::string& storage_reason) {
  const std::string s = "study \"" + study.record.name + "\"";
  if (shutting_down) return common::Unavailable("triald is shutting down");
  if (storage_held) {
    return common::Unavailable("storage refuses writes (" + storage_reason +
                               "): no trial starts until it takes them again");
  }
  if (study.record.state != model::StudyState::kRunning) {
    return common::FailedPrecondition(s + " is " + model::StudyStateName(study.record.state) +
                                      (study.failure.empty() ? "" : ": " + study.failure));
  }
  if (study.record.paused) {
    return common::FailedPrecondition(s + " is paused (`trialctl resume " + study.record.name +
                                      "` starts it again)");
  }
  if (study.running >= study.parallelism()) {
    return common::FailedPrecondition(
        s + " has " + std::to_string(study.running) +
        " trial(s) asked and not yet told, its [study] parallelism = " +
        std::to_string(study.parallelism()) + "; tell one first, or raise it (`trialctl set " +
        study.record.name + " parallelism=N`)");
  }
  if (study.waiting.empty() && study.configurations() >= study.record.n_trials) {
    return common::FailedPrecondition(
        s + " has all its n_trials = " + std::to_string(study.record.n_trials) +
        " trials (finished or asked); `trialctl extend " + study.record.name +
        " --n-trials N` allows more");
  }
  if (study.exhausted) {
    return common::FailedPrecondition(s + ": its sampler has no more configurations to try");
  }
  return common::Unavailable(s + ": no trial could be started now (see `trialctl events " +
                             study.record.name + "`); ask again");
}

common::Status AskOnInactive(const std::string& name, const model::StudyRecord* record) {
  if (record == nullptr) {
    return common::NotFound("no study named \"" + name + "\" (see `trialctl studies`)");
  }
  std::string why = "study \"" + name + "\" is " + model::StudyStateName(record->state);
  if (record->state == model::StudyState::kComplete) {
    why += "; `trialctl extend " + name + " --n-trials N` allows more trials";
  }
  return common::FailedPrecondition(why);
}

common::Status AskOnNonClient(const StudyRuntime& study) {
  return common::FailedPrecondition(
      "study \"" + study.record.name + "\" has [objective] kind = \"" + study.spec.objective.kind +
      "\": triald starts its trials itself; ask is for a study of [objective] kind = \"client\"");
}

}  // namespace triald::daemon
