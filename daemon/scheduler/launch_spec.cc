#include "daemon/scheduler/launch_spec.h"

#include <boost/json.hpp>
#include <map>

#include "common/json.h"
#include "common/process_util.h"
#include "daemon/slurm/slurm_job.h"

namespace triald::daemon {

std::string CommandPath(const std::vector<std::string>& base_env,
                        const config::ObjectiveConfig& objective) {
  std::string path_env;
  for (const std::string& kv : base_env) {
    if (kv.rfind("PATH=", 0) == 0) path_env = kv.substr(5);
  }
  if (auto it = objective.env.find("PATH"); it != objective.env.end()) path_env = it->second;
  return path_env;
}

int LocalGpusPerTrial(const config::SweepSpec& spec) {
  return spec.executor.kind == "local" ? spec.study.gpus_per_trial : 0;
}

launcher::LaunchSpec MakeLaunchSpec(const LaunchSettings& settings, const std::string& study_name,
                                    const config::SweepSpec& spec, const model::TrialRecord& trial,
                                    const std::vector<devices::GpuSlot>& gpu_slots,
                                    const std::string& resume_dir,
                                    const std::vector<int>& retry_history) {
  launcher::LaunchSpec ls;
  const config::ObjectiveConfig& obj = spec.objective;
  ls.argv = obj.command;
  ls.workdir = obj.workdir;
  ls.trial_dir = model::TrialDir(settings.state_dir, study_name, trial.number);
  ls.log_dir = model::TrialLogDir(settings.state_dir, study_name, trial.number);
  ls.log_head_bytes = settings.log_head_bytes;
  ls.log_tail_bytes = settings.log_tail_bytes;
  ls.timeout_s = spec.study.trial_timeout;
  ls.kill_grace_s = spec.study.kill_grace;
  ls.stall_timeout_s = spec.study.stall_timeout;
  ls.memory_limit_bytes = spec.study.memory_limit;
  ls.pids_limit = spec.study.pids_limit;
  ls.max_report_bytes = spec.study.max_report_bytes;

  std::map<std::string, std::string> env;
  for (const std::string& kv : settings.base_env) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  env.emplace("PYTHONUNBUFFERED", "1");  // Python workers' output reaches the logs live
  // OpenBLAS's idle threads sleep after 2^20 cycles, not 2^28 (kBlasThreadTimeout). A fork
  // server has it from the environment below too: OpenBLAS reads it as it loads, in the server.
  env.emplace("OPENBLAS_THREAD_TIMEOUT", kBlasThreadTimeout);
  for (const auto& [k, v] : obj.env) env[k] = v;
  std::string path_env = env.count("PATH") ? env["PATH"] : "";
  if (obj.fork_server && !obj.fork_server_command.empty()) {
    // The study's fork server: the trial's environment without anything of one trial's (no
    // TRIALD_*, no GPU assignment); each fork request carries the trial's complete one.
    launcher::ForkServerSpec fs;
    fs.key = study_name;
    fs.argv = obj.fork_server_command;
    std::map<std::string, std::string> server_env = env;
    if (obj.kind == "lm") {
      // trial-worker's OpenBLAS starts its threads as it loads, before main(), and a server
      // must have none: with one, it neither executes itself again to drop them (LibTorch
      // loaded twice) nor, where the study's environment asks for more, answers unsafe and
      // leaves the study to exec. Each forked trial sizes OpenBLAS from its own environment,
      // which its fork request carries whole (worker/fork_server.h).
      server_env["OPENBLAS_NUM_THREADS"] = "1";
    }
    for (const auto& [k, v] : server_env) fs.env.push_back(k + "=" + v);
    fs.workdir = obj.workdir;
    fs.log_path = model::ForkServerLog(settings.state_dir, study_name);
    fs.request_argv = obj.fork_request_argv;
    common::Result<std::string> exe = common::FindExecutable(fs.argv[0], path_env, obj.workdir);
    fs.executable = exe.ok() ? *exe : fs.argv[0];
    ls.fork_server = std::move(fs);
  }
  boost::json::object params;
  for (const config::ParamSpec& p : spec.space) {
    auto it = trial.params.find(p.name);
    if (it == trial.params.end()) continue;
    // Exact parsing: boost::json::parse may be one ulp off (common/json.h), and the worker must
    // get the stored value, bit for bit. ExternalJson always gives valid JSON.
    common::Result<boost::json::value> v =
        common::ParseJsonExact(config::ExternalJson(it->second.dist, it->second.internal));
    params[p.name] = v.ok() ? std::move(*v) : boost::json::value(nullptr);
  }
  env["TRIALD_PARAMS"] = boost::json::serialize(params);
  env["TRIALD_STUDY"] = study_name;
  env["TRIALD_TRIAL"] = std::to_string(trial.number);
  env["TRIALD_TRIAL_DIR"] = ls.trial_dir;
  env["TRIALD_REPORT_FD"] = "3";
  env["TRIALD_NODE"] = settings.node;
  // The values the worker sends: [study] objectives' measured metrics are the daemon's.
  env["TRIALD_N_OBJECTIVES"] = std::to_string(spec.study.worker_objectives());
  // Only the daemon's checked folder: a variable of that name from elsewhere never reaches a
  // worker that is not a retry.
  env.erase("TRIALD_RESUME_DIR");
  if (!resume_dir.empty()) env["TRIALD_RESUME_DIR"] = resume_dir;
  env.erase("TRIALD_RETRY_HISTORY");
  if (!retry_history.empty()) {
    std::string numbers;
    for (int n : retry_history) numbers += (numbers.empty() ? "" : ",") + std::to_string(n);
    env["TRIALD_RETRY_HISTORY"] = numbers;
  }
  // The trial's GPUs by NVML index; NVML counts in PCI bus order, so CUDA must too. Empty on a
  // CPU slot: the trial sees no GPU.
  env["CUDA_VISIBLE_DEVICES"] = devices::GpuPool::CudaVisibleDevices(gpu_slots);
  if (!gpu_slots.empty()) {
    env.emplace("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    env["TRIALD_GPU_SLOTS"] = devices::GpuPool::SlotList(gpu_slots);
  }
  for (const auto& [k, v] : env) ls.env.push_back(k + "=" + v);

  if (!obj.command.empty()) {  // kind = "client" has none: the asking program runs the trial
    common::Result<std::string> exe = common::FindExecutable(obj.command[0], path_env, obj.workdir);
    ls.executable = exe.ok() ? *exe : obj.command[0];
  }
  if (spec.executor.kind == "slurm") {
    launcher::SlurmJob job;
    job.executor = spec.executor.slurm;
    job.gpus = spec.study.gpus_per_trial;
    job.job_name = slurm::JobName(settings.node, trial.id);
    job.comment = "triald study " + study_name + " trial " + std::to_string(trial.number);
    ls.slurm = std::move(job);
  }
  return ls;
}

}  // namespace triald::daemon
