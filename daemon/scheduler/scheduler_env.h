#pragma once
// SchedulerEnv: every call the scheduler and its parts make to the operating system, behind one
// small interface (as LevelDB's Env): the file-system checks of a sweep at submit, the passwd
// lookup and folder checks of a retry's resume folder, the removal of a deleted study's folder,
// and giving freed memory back. Launching, reaping, the clock and the recovery-time kill of
// leftover processes have seams of their own (Launcher, Clock, LeftoverProcesses).
//
// SystemSchedulerEnv() is the real one; tests give a fake and so decide what exists.
//
// Thread-safety: the real one keeps no state and may be called from any thread (AsSubmitter too:
// its child is left to the daemon's Reaper); the scheduler calls it from its event-loop thread,
// but for a submission's checks (Scheduler::Admit), which the control server makes on a thread
// of its own.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/launcher/run_as.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/resume_dir.h"

namespace triald::daemon {

// How long a submit waits for its file checks as the submitter (SchedulerEnv::AsSubmitter).
inline constexpr double kSubmitCheckSeconds = 10;

class SchedulerEnv {
 public:
  virtual ~SchedulerEnv() = default;

  // Submit: [objective] workdir names an existing folder the daemon can enter
  // (daemon/objective/objective_command.h CheckWorkdir); errors name `where` and the key.
  virtual common::Status CheckWorkdir(const config::ObjectiveConfig& objective,
                                      const std::string& where) = 0;
  // Submit and every reload of a stored study: fills spec.objective.command for kind = "lm"
  // and "python" and checks the files it names (daemon/objective/objective_command.h
  // PrepareObjective).
  virtual common::Status PrepareObjective(config::SweepSpec& spec, const std::string& trial_worker,
                                          const std::string& where,
                                          const std::vector<std::string>& base_env) = 0;
  // The executable `name` resolves to, as execvp would, searching `path` from `workdir`
  // (common::FindExecutable); the error names what was searched.
  virtual common::Result<std::string> FindExecutable(const std::string& name,
                                                     const std::string& path,
                                                     const std::string& workdir) = 0;
  // Runs the submit-time file checks `check` with the submitter's rights, so a daemon with more
  // rights than the submitter (root) reveals nothing about files the submitter could not read:
  // a root daemon runs it as the submitter's passwd entry in a child process
  // (launcher::CallAsUser, at most kSubmitCheckSeconds) and returns its Status. nullopt when
  // the daemon's rights are the submitter's own for this purpose (a daemon that is not root, a
  // submitter that is root or unknown): the caller checks directly.
  virtual std::optional<common::Status> AsSubmitter(
      const model::Submitter& submitter, const std::function<common::Status()>& check) = 0;
  // The uid a study's trials run as: its submitter's passwd entry when `as_submitter` (a root
  // daemon; launcher/run_as.h), else the daemon's own effective uid. An error names the user
  // that has no entry.
  virtual common::Result<uid_t> TrialUid(const model::Submitter& submitter, bool as_submitter) = 0;
  // The folder a retry may resume from (resume_dir.h FindResumeFolder).
  virtual ResumeFolder FindResumeFolder(const std::string& state_dir, const std::string& study,
                                        int number, uid_t uid) = 0;
  // Removes `path` and everything below it (links themselves, never what they point to). A path
  // that does not exist is no error.
  virtual common::Status RemoveTree(const std::string& path) = 0;
  // Gives the heap's freed blocks back to the system (common::ReturnFreedMemory), after a large
  // study left the active set.
  virtual void ReturnFreedMemory() = 0;
};

// The real environment (file system, NSS, malloc). Defined in system_scheduler_env.cc, part of
// the daemon's library, since PrepareObjective and CheckWorkdir are. `reaping`: who reaps
// AsSubmitter's child (launcher::CallAsUser): the daemon's Reaper (the default: a scheduler
// runs in the daemon, whose Reaper waits for every child, and AsSubmitter may then run on any
// thread), or the calling thread, in a process with no reaper.
std::unique_ptr<SchedulerEnv> SystemSchedulerEnv(
    launcher::ChildReaping reaping = launcher::ChildReaping::kByProcessReaper);

}  // namespace triald::daemon
