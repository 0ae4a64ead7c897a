#include "daemon/scheduler/admission.h"

#include "daemon/scheduler/launch_spec.h"

namespace triald::daemon {

common::Result<config::SweepSpec> StudyAdmission::Admit(const config::SweepSource& source,
                                                        const model::Submitter& submitter) const {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, config::ParseSweep(source));
  const std::string where = source.path.empty() ? "<sweep>" : source.path;
  // With the submitter's rights first (a root daemon), on a copy: a file the submitter cannot
  // read is refused as the submitter would be, saying nothing more. Then as the daemon, which
  // fills in the commands from the same files.
  config::SweepSpec as_submitter = spec;
  std::optional<common::Status> theirs =
      options_.env->AsSubmitter(submitter, [&] { return CheckFiles(as_submitter, where); });
  if (theirs) TRIALD_RETURN_IF_ERROR(*theirs);
  TRIALD_RETURN_IF_ERROR(CheckFiles(spec, where));
  TRIALD_RETURN_IF_ERROR(CheckGpus(spec, where));
  return spec;
}

common::Status StudyAdmission::CheckFiles(config::SweepSpec& spec, const std::string& where) const {
  SchedulerEnv& env = *options_.env;
  TRIALD_RETURN_IF_ERROR(env.CheckWorkdir(spec.objective, where));
  TRIALD_RETURN_IF_ERROR(
      env.PrepareObjective(spec, options_.trial_worker, where, options_.base_env));
  common::Result<std::string> exe =
      env.FindExecutable(spec.objective.command[0], CommandPath(options_.base_env, spec.objective),
                         spec.objective.workdir);
  if (!exe.ok() && spec.objective.kind == "python") {
    return common::InvalidArgument(where + ": [objective] python = \"" + spec.objective.python +
                                   "\": " + exe.status().message() +
                                   "; expected a Python 3 interpreter");
  }
  if (!exe.ok()) {
    return common::InvalidArgument(where + ": [objective] command[0] = \"" +
                                   spec.objective.command[0] + "\": " + exe.status().message() +
                                   "; expected an executable");
  }
  return common::Status::Ok();
}

model::NewStudy StudyAdmission::NewStudyOf(const config::SweepSpec& spec,
                                           const config::SweepSource& source,
                                           const model::Submitter& submitter,
                                           const std::function<uint64_t()>& seed_source) {
  model::NewStudy ns;
  ns.name = spec.study.name;
  ns.direction = spec.study.direction;
  ns.directions = spec.study.directions;
  ns.n_trials = spec.study.n_trials;
  ns.spec_toml = source.text;
  ns.spec_path = source.path;
  ns.submitter = submitter;
  ns.submit = source.submit;
  ns.seed = spec.sampler.seed_given ? spec.sampler.seed : (seed_source ? seed_source() : 0);
  return ns;
}

common::Result<config::SweepSpec> StudyAdmission::Readmit(const model::StudyRecord& rec) const {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec,
                          config::ParseSweep({rec.spec_toml, rec.spec_path, rec.submit}));
  TRIALD_RETURN_IF_ERROR(options_.env->PrepareObjective(spec, options_.trial_worker, rec.spec_path,
                                                        options_.base_env));
  TRIALD_RETURN_IF_ERROR(CheckGpus(spec, rec.spec_path));
  return spec;
}

common::Status StudyAdmission::CheckGpus(const config::SweepSpec& spec,
                                         const std::string& where) const {
  if (spec.executor.kind != "local") {
    if (!options_.check_executor) {
      return common::FailedPrecondition(where + ": [executor] kind = \"" + spec.executor.kind +
                                        "\": this daemon runs trials on its own host only");
    }
    return options_.check_executor(spec, where);
  }
  const int want = spec.study.gpus_per_trial;
  const int have = options_.gpus != nullptr ? options_.gpus->gpu_count() : 0;
  if (want <= have) return CheckGpuMetrics(spec, where);
  return common::InvalidArgument(
      where + ": [study] gpus_per_trial = " + std::to_string(want) + ": triald has " +
      (have == 0 ? std::string("no GPUs (see triald --gpus, or [devices] gpus in its config)")
                 : std::to_string(have) + " GPU(s)") +
      "; expected at most " + std::to_string(have));
}

common::Status StudyAdmission::CheckGpuMetrics(const config::SweepSpec& spec,
                                               const std::string& where) const {
  if (options_.gpus != nullptr && options_.gpus->measures_memory()) return common::Status::Ok();
  std::string uses;
  for (const config::ResourceConstraint& c : spec.study.resource_constraints) {
    if (c.metric == "peak_gpu_memory") {
      uses = "resource_constraints entry \"" + c.text + "\"";
      break;
    }
  }
  for (const std::string& o : spec.study.objectives) {
    if (uses.empty() && o == "peak_gpu_memory") uses = "objectives entry \"peak_gpu_memory\"";
  }
  if (uses.empty()) return common::Status::Ok();
  return common::InvalidArgument(
      where + ": [study] " + uses +
      ": triald cannot measure GPU memory (no NVML to report each process's memory; GPUs "
      "given by hand are not watched); expected a daemon with NVML, or no peak_gpu_memory");
}

}  // namespace triald::daemon
