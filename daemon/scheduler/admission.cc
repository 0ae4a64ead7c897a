#include "daemon/scheduler/admission.h"

#include <algorithm>

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
  // kind = "client": the asking program runs each trial; triald starts nothing.
  if (spec.objective.kind == "client") return common::Status::Ok();
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
  ns.submit.metric_names = spec.study.metric_names;
  ns.seed = spec.sampler.seed_given ? spec.sampler.seed : (seed_source ? seed_source() : 0);
  return ns;
}

std::string StudyAdmission::ResumeMismatch(const config::SweepSpec& stored,
                                           const config::SweepSpec& now) {
  std::vector<std::string> diffs;
  auto directions = [](const config::StudyConfig& s) {
    std::string out;
    for (config::Direction d : s.directions) {
      out += (out.empty() ? "" : ", ") + std::string(config::DirectionName(d));
    }
    return "[" + out + "]";
  };
  if (directions(stored.study) != directions(now.study)) {
    diffs.push_back("directions " + directions(stored.study) + " then, " + directions(now.study) +
                    " now");
  }
  const config::ObjectiveConfig& a = stored.objective;
  const config::ObjectiveConfig& b = now.objective;
  auto differ = [&](const std::string& what, const std::string& then, const std::string& is) {
    if (then != is)
      diffs.push_back("[objective] " + what + " \"" + then + "\" then, \"" + is + "\" now");
  };
  differ("kind", a.kind, b.kind);
  if (a.kind == b.kind && a.kind == "exec") {
    std::string ca, cb;
    for (const std::string& w : a.command) ca += (ca.empty() ? "" : " ") + w;
    for (const std::string& w : b.command) cb += (cb.empty() ? "" : " ") + w;
    differ("command", ca, cb);
  }
  if (a.kind == b.kind && a.kind == "python") {
    differ("function",
           (a.function_file.empty() ? a.function_module : a.function_file) + ":" + a.function_name,
           (b.function_file.empty() ? b.function_module : b.function_file) + ":" + b.function_name);
    differ("constraints",
           (a.constraints_file.empty() ? a.constraints_module : a.constraints_file) + ":" +
               a.constraints_name,
           (b.constraints_file.empty() ? b.constraints_module : b.constraints_file) + ":" +
               b.constraints_name);
    differ("python", a.python, b.python);
  }
  if (a.kind == b.kind && a.kind == "lm")
    differ("lm", config::LmObjectiveToJson(a.lm), config::LmObjectiveToJson(b.lm));
  for (const config::ParamSpec& p : stored.space) {
    auto it = std::find_if(now.space.begin(), now.space.end(),
                           [&](const config::ParamSpec& q) { return q.name == p.name; });
    if (it == now.space.end()) {
      diffs.push_back("[space." + p.name + "] is gone");
    } else if (!(it->dist == p.dist)) {
      diffs.push_back("[space." + p.name + "] " + config::DistributionText(p.dist) + " then, " +
                      config::DistributionText(it->dist) + " now");
    }
  }
  for (const config::ParamSpec& q : now.space) {
    auto it = std::find_if(stored.space.begin(), stored.space.end(),
                           [&](const config::ParamSpec& p) { return p.name == q.name; });
    if (it == stored.space.end()) diffs.push_back("[space." + q.name + "] is new");
  }
  std::string out;
  for (const std::string& d : diffs) out += (out.empty() ? "" : "; ") + d;
  return out;
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
