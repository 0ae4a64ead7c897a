#pragma once
// ReportCaps: the per-trial caps on what a running trial reports ([study]
// max_intermediate_steps, max_attrs, max_attr_bytes; max_report_bytes is the launcher's, on the
// raw channel). The daemon keeps every intermediate value and attribute of a running study's
// trials in memory (the pruners read them), so these caps are what bounds that memory whatever
// a worker sends.
//
// Thread-safety: a plain value; the scheduler's event-loop thread owns it.

#include <cstdint>
#include <optional>
#include <string>

#include "config/sweep.h"
#include "daemon/model/records.h"
#include "proto/report.h"

namespace triald::daemon {

class ReportCaps {
 public:
  // `trial`: what the trial holds already (a resumed trial keeps its attributes).
  ReportCaps(const config::StudyConfig& study, const model::TrialRecord& trial);

  // Whether `message` fits the caps given what `trial` holds. nullopt: it fits (and is counted);
  // else the message that ends the trial FAIL(protocol), naming the cap and its value. Lines
  // other than report and attr always fit.
  std::optional<std::string> Admit(const model::TrialRecord& trial,
                                   const proto::ReportMessage& message);

 private:
  int64_t max_steps_;
  int64_t max_attrs_;
  uint64_t max_attr_bytes_;
  uint64_t attr_bytes_ = 0;  // keys and values of the trial's attributes
};

}  // namespace triald::daemon
