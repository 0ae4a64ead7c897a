#include "daemon/model/records.h"

#include <cctype>

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

std::string FailSummary(const FailInfo& fail) {
  const std::string& d = fail.detail;
  std::string line;
  if (d.find('\n') != std::string::npos) {
    // A traceback (or its tail): its last line that is not blank.
    size_t end = d.find_last_not_of(" \t\r\n");
    if (end != std::string::npos) {
      size_t start = d.rfind('\n', end);
      start = start == std::string::npos ? 0 : start + 1;
      line = d.substr(start, end + 1 - start);
    }
  } else {
    line = d;
    static const std::string kSaid = "; worker said: ";
    if (size_t at = line.find(kSaid); at != std::string::npos)
      line = line.substr(at + kSaid.size());
  }
  size_t first = line.find_first_not_of(" \t");
  line = first == std::string::npos ? std::string() : line.substr(first);
  if (line.empty()) line = fail.reason.empty() ? "failed" : fail.reason;
  if (line.size() > kFailSummaryChars) {
    size_t cut = kFailSummaryChars - 3;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    line = line.substr(0, cut) + "...";
  }
  return line;
}

std::string FailKey(const FailInfo& fail) {
  const std::string summary = FailSummary(fail);
  std::string key = fail.reason + "|";
  auto digit = [&](size_t i) {
    return i < summary.size() && summary[i] >= '0' && summary[i] <= '9';
  };
  bool in_number = false;
  for (size_t i = 0; i < summary.size(); ++i) {
    const char c = summary[i];
    // A sign before a digit belongs to the number ("-0.3" and "0.7" are one way).
    const bool sign = (c == '-' || c == '+') && digit(i + 1) &&
                      (i == 0 || !std::isalnum(static_cast<unsigned char>(summary[i - 1])));
    const bool exponent_sign = in_number && (c == '-' || c == '+') && digit(i + 1) &&
                               (summary[i - 1] == 'e' || summary[i - 1] == 'E');
    if (digit(i) || sign || exponent_sign ||
        (in_number && (c == '.' || c == 'e' || c == 'E') &&
         (digit(i + 1) || summary[i + 1] == '-' || summary[i + 1] == '+'))) {
      if (!in_number) key += '#';
      in_number = true;
      continue;
    }
    in_number = false;
    key += c;
  }
  return key;
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
