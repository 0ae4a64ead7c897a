#include "daemon/scheduler/report_caps.h"

namespace triald::daemon {

ReportCaps::ReportCaps(const config::StudyConfig& study, const model::TrialRecord& trial)
    : max_steps_(study.max_intermediate_steps),
      max_attrs_(study.max_attrs),
      max_attr_bytes_(study.max_attr_bytes) {
  for (const auto& [key, value] : trial.attrs) attr_bytes_ += key.size() + value.size();
}

std::optional<std::string> ReportCaps::Admit(const model::TrialRecord& trial,
                                             const proto::ReportMessage& m) {
  switch (m.type) {
    case proto::ReportType::kReport:
      // A value at a step already reported replaces it and costs nothing more.
      if (trial.intermediate.count(m.step) == 0 &&
          static_cast<int64_t>(trial.intermediate.size()) >= max_steps_) {
        return "more than " + std::to_string(max_steps_) +
               " distinct steps with an intermediate value (step " + std::to_string(m.step) +
               "; [study] max_intermediate_steps = " + std::to_string(max_steps_) + ")";
      }
      return std::nullopt;
    case proto::ReportType::kAttr: {
      auto it = trial.attrs.find(m.key);
      const bool known = it != trial.attrs.end();
      if (!known && static_cast<int64_t>(trial.attrs.size()) >= max_attrs_) {
        return "more than " + std::to_string(max_attrs_) + " attributes (key \"" +
               m.key.substr(0, 64) + "\"; [study] max_attrs = " + std::to_string(max_attrs_) + ")";
      }
      const uint64_t old_bytes = known ? it->first.size() + it->second.size() : 0;
      const uint64_t bytes = attr_bytes_ - old_bytes + m.key.size() + m.json_value.size();
      if (bytes > max_attr_bytes_) {
        return "more than " + std::to_string(max_attr_bytes_) + " bytes of attributes (key \"" +
               m.key.substr(0, 64) + "\" brings them to " + std::to_string(bytes) +
               "; [study] max_attr_bytes = " + std::to_string(max_attr_bytes_) + ")";
      }
      attr_bytes_ = bytes;
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace triald::daemon
