#pragma once
// FakeSchedulerEnv: a SchedulerEnv (daemon/scheduler/scheduler_env.h) over no file system. Every
// folder exists, every command resolves to /usr/bin/<name>, and a test says what is missing;
// it records what the scheduler asked to remove.
//
// Thread-safety: none; used from one thread.

#include <set>
#include <string>
#include <vector>

#include "daemon/scheduler/scheduler_env.h"

namespace triald::testing {

class FakeSchedulerEnv final : public daemon::SchedulerEnv {
 public:
  std::set<std::string> missing_workdirs;     // CheckWorkdir fails for these
  std::set<std::string> missing_executables;  // FindExecutable fails for these names
  std::vector<std::string> removed;           // RemoveTree paths, in order
  int prepared = 0;                           // PrepareObjective calls
  int memory_returned = 0;                    // ReturnFreedMemory calls

  common::Status CheckWorkdir(const config::ObjectiveConfig& objective,
                              const std::string& where) override {
    if (missing_workdirs.count(objective.workdir) == 0) return common::Status::Ok();
    return common::InvalidArgument(where + ": [objective] workdir = \"" + objective.workdir +
                                   "\": no such folder");
  }
  common::Status PrepareObjective(config::SweepSpec&, const std::string&, const std::string&,
                                  const std::vector<std::string>&) override {
    ++prepared;
    return common::Status::Ok();
  }
  common::Result<std::string> FindExecutable(const std::string& name, const std::string&,
                                             const std::string&) override {
    if (missing_executables.count(name) > 0) return common::NotFound(name + " not found");
    return name.rfind('/', 0) == 0 ? name : "/usr/bin/" + name;
  }
  // AsSubmitter runs the check (recording the submitter's uid in checked_as) when `as_root`, as a
  // root daemon would in a child; otherwise the daemon's rights are the submitter's.
  bool as_root = false;
  std::vector<uid_t> checked_as;
  std::optional<common::Status> AsSubmitter(const model::Submitter& submitter,
                                            const std::function<common::Status()>& check) override {
    if (!as_root || !submitter.known() || submitter.uid == 0) return std::nullopt;
    checked_as.push_back(submitter.uid);
    return check();
  }
  common::Result<uid_t> TrialUid(const model::Submitter&, bool) override { return 1000; }
  daemon::ResumeFolder FindResumeFolder(const std::string&, const std::string&, int number,
                                        uid_t) override {
    return {"", "trial " + std::to_string(number) + "'s folder does not exist (fake)"};
  }
  common::Status RemoveTree(const std::string& path) override {
    removed.push_back(path);
    return common::Status::Ok();
  }
  void ReturnFreedMemory() override { ++memory_returned; }
};

}  // namespace triald::testing
