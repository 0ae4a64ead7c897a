// The real SchedulerEnv (scheduler_env.h).

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "common/memory.h"
#include "common/process_util.h"
#include "daemon/launcher/run_as.h"
#include "daemon/objective/objective_command.h"
#include "daemon/scheduler/scheduler_env.h"

namespace triald::daemon {
namespace {

class SystemEnv final : public SchedulerEnv {
 public:
  explicit SystemEnv(launcher::ChildReaping reaping) : reaping_(reaping) {}

  common::Status CheckWorkdir(const config::ObjectiveConfig& objective,
                              const std::string& where) override {
    return daemon::CheckWorkdir(objective, where);
  }
  common::Status PrepareObjective(config::SweepSpec& spec, const std::string& trial_worker,
                                  const std::string& where,
                                  const std::vector<std::string>& base_env) override {
    return daemon::PrepareObjective(spec, trial_worker, where, base_env);
  }
  common::Result<std::string> FindExecutable(const std::string& name, const std::string& path,
                                             const std::string& workdir) override {
    return common::FindExecutable(name, path, workdir);
  }
  std::optional<common::Status> AsSubmitter(const model::Submitter& submitter,
                                            const std::function<common::Status()>& check) override {
    if (::geteuid() != 0 || !submitter.known() || submitter.uid == 0) return std::nullopt;
    common::Result<launcher::RunAs> user = launcher::LookUpRunAs(submitter);
    if (!user.ok()) return user.status();
    return launcher::CallAsUser(*user, check, kSubmitCheckSeconds, reaping_);
  }
  common::Result<uid_t> TrialUid(const model::Submitter& submitter, bool as_submitter) override {
    if (!as_submitter || !submitter.known()) return ::geteuid();
    TRIALD_ASSIGN_OR_RETURN(launcher::RunAs user, launcher::LookUpRunAs(submitter));
    return user.uid;
  }
  ResumeFolder FindResumeFolder(const std::string& state_dir, const std::string& study, int number,
                                uid_t uid) override {
    return daemon::FindResumeFolder(state_dir, study, number, uid);
  }
  common::Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return common::IoError("removing " + path + ": " + ec.message());
    return common::Status::Ok();
  }
  void ReturnFreedMemory() override { common::ReturnFreedMemory(); }

 private:
  launcher::ChildReaping reaping_;
};

}  // namespace

std::unique_ptr<SchedulerEnv> SystemSchedulerEnv(launcher::ChildReaping reaping) {
  return std::make_unique<SystemEnv>(reaping);
}

}  // namespace triald::daemon
