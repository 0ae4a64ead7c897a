#include "daemon/model/records.h"

namespace triald::model {

// These names are what the database stores and what users see in `trialctl`, so they are part
// of the on-disk format: change them only together with a schema migration.

const char* StudyStateName(StudyState s) {
  switch (s) {
    case StudyState::kRunning:
      return "RUNNING";
    case StudyState::kComplete:
      return "COMPLETE";
    case StudyState::kCancelled:
      return "CANCELLED";
    case StudyState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

const char* TrialStateName(TrialState s) {
  switch (s) {
    case TrialState::kWaiting:
      return "WAITING";
    case TrialState::kRunning:
      return "RUNNING";
    case TrialState::kComplete:
      return "COMPLETE";
    case TrialState::kPruned:
      return "PRUNED";
    case TrialState::kFail:
      return "FAIL";
  }
  return "UNKNOWN";
}

std::optional<StudyState> ParseStudyState(const std::string& s) {
  for (StudyState state :
       {StudyState::kRunning, StudyState::kComplete, StudyState::kCancelled, StudyState::kFailed}) {
    if (s == StudyStateName(state)) return state;
  }
  return std::nullopt;
}

std::optional<TrialState> ParseTrialState(const std::string& s) {
  for (TrialState state : {TrialState::kWaiting, TrialState::kRunning, TrialState::kComplete,
                           TrialState::kPruned, TrialState::kFail}) {
    if (s == TrialStateName(state)) return state;
  }
  return std::nullopt;
}

bool Feasible(const std::vector<double>& constraints) {
  for (double c : constraints) {
    if (!(c <= 0)) return false;  // NaN counts as a violation
  }
  return true;
}

std::optional<double> MeasuredMetric(const TrialResources& r, const std::string& name) {
  auto bytes = [](const std::optional<uint64_t>& v) -> std::optional<double> {
    if (!v) return std::nullopt;
    return static_cast<double>(*v);
  };
  if (name == "peak_memory") return bytes(r.peak_memory_bytes);
  if (name == "peak_gpu_memory") return bytes(r.peak_gpu_memory_bytes);
  if (name == "cpu_time") return r.cpu_time_s;
  if (name == "wall") return r.wall_s;
  return std::nullopt;
}

const char kStudiesFolder[] = "studies";

namespace {

constexpr char kTrialsFolder[] = "trials";
constexpr char kLogsFolder[] = "logs";

std::string StudyRelativeDir(const std::string& study) {
  return std::string(kStudiesFolder) + "/" + study;
}

}  // namespace

std::string StudiesDir(const std::string& state_dir) {
  return state_dir + "/" + kStudiesFolder + "/";
}

std::string StudyDir(const std::string& state_dir, const std::string& study) {
  return state_dir + "/" + StudyRelativeDir(study);
}

std::vector<std::string> TrialDirComponents(const std::string& study, int number) {
  return {kStudiesFolder, study, kTrialsFolder, std::to_string(number)};
}

std::string TrialRelativeDir(const std::string& study, int number) {
  return StudyRelativeDir(study) + "/" + kTrialsFolder + "/" + std::to_string(number);
}

std::string TrialLogRelativeDir(const std::string& study, int number) {
  return StudyRelativeDir(study) + "/" + kLogsFolder + "/" + std::to_string(number);
}

std::string TrialDir(const std::string& state_dir, const std::string& study, int number) {
  return state_dir + "/" + TrialRelativeDir(study, number);
}

std::string TrialLogDir(const std::string& state_dir, const std::string& study, int number) {
  return state_dir + "/" + TrialLogRelativeDir(study, number);
}

std::string ForkServerLog(const std::string& state_dir, const std::string& study) {
  return StudyDir(state_dir, study) + "/fork-server.log";
}

}  // namespace triald::model
