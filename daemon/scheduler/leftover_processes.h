#pragma once
// LeftoverProcesses: at recovery, ends the trial processes a previous daemon on the same state
// directory left behind (it crashed, or was SIGKILLed, while trials ran). The scheduler calls it
// once, from Recover(), before any trial of its own starts; tests inject a fake through
// SchedulerOptions::leftovers so that recovery is tested without /proc and without signalling
// real processes.
//
// ProcLeftoverProcesses, the real one, scans /proc. A process is a leftover when
//   - its environment places it under STATE_DIR/studies/ (TRIALD_TRIAL_DIR), or
//   - it is in a lost trial's recorded process group while that group's leader still has the
//     recorded start time (a pid is reused, a start time is not; common::ReadProcStat).
// Each is sent SIGKILL, then waited for (bounded, about 5 s) until it is gone or a zombie: they
// are no longer the daemon's children, so others reap them.
//
// Thread-safety: ProcLeftoverProcesses is stateless and thread-safe; fakes state their own.

#include <string>
#include <vector>

#include "daemon/model/records.h"

namespace triald::daemon {

class LeftoverProcesses {
 public:
  virtual ~LeftoverProcesses() = default;
  // Kills what the previous daemon on `state_dir` left: the processes of `lost` (the recorded
  // identities of the trials it left RUNNING) and any process of a trial under state_dir.
  // Returns how many processes were found.
  virtual int Kill(const std::string& state_dir,
                   const std::vector<model::ProcessIdentity>& lost) = 0;
};

class ProcLeftoverProcesses final : public LeftoverProcesses {
 public:
  int Kill(const std::string& state_dir, const std::vector<model::ProcessIdentity>& lost) override;
};

}  // namespace triald::daemon
