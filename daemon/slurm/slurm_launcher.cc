#include "daemon/slurm/slurm_launcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <utility>

#include "common/process_util.h"
#include "daemon/slurm/slurm_job.h"

namespace triald::slurm {

namespace {

// What the bridge said of the job last.
struct JobSeen {
  std::string job_id, state, reason, node, ending, peak_memory_bytes, cpu_time_s, accounting;
};

std::string Field(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace

std::string SlurmMarker(const std::string& state_dir) { return state_dir + "/slurm-jobs"; }

std::string FindSrun(const std::string& path_env) {
  common::Result<std::string> srun = common::FindExecutable("srun", path_env, "/");
  return srun.ok() ? *srun : std::string();
}

launcher::LaunchSpec SlurmLauncher::BridgeSpec(const launcher::LaunchSpec& spec) const {
  const launcher::SlurmJob& job = *spec.slurm;
  SrunRequest req;
  req.executor = WithDefaults(job.executor, options_.defaults);
  req.srun = options_.srun;
  req.job_name = job.job_name;
  req.comment = job.comment;
  req.workdir = spec.workdir;
  req.gpus = job.gpus;
  req.memory_bytes = spec.memory_limit_bytes;
  req.trial_timeout_s = spec.timeout_s;
  req.kill_grace_s = spec.kill_grace_s;
  req.relay = options_.relay;
  req.command = spec.argv;
  if (!req.command.empty()) req.command[0] = spec.executable;

  launcher::LaunchSpec bridge = spec;
  bridge.slurm.reset();
  bridge.executable = options_.relay;
  bridge.argv = {options_.relay,
                 "submit",
                 "--job-name",
                 job.job_name,
                 "--poll",
                 std::to_string(options_.queue_poll_s),
                 "--"};
  for (std::string& a : SrunArgv(req)) bridge.argv.push_back(std::move(a));
  // The job's memory and process limits are Slurm's, on the node; the bridge's own are not the
  // trial's (srun's threads would count against a memory limit meant for the worker).
  bridge.memory_limit_bytes = 0;
  bridge.pids_limit = 0;
  return bridge;
}

launcher::LaunchResult SlurmLauncher::Launch(const launcher::LaunchSpec& spec,
                                             launcher::TrialCallbacks callbacks) {
  if (!spec.slurm) return options_.local->Launch(spec, std::move(callbacks));
  if (options_.srun.empty()) {
    return launcher::LaunchResult(
        common::FailedPrecondition("[executor] kind = \"slurm\": srun is not installed on this "
                                   "host (Debian: slurm-client)"),
        launcher::SpawnError{launcher::SpawnStep::kExec, 0});
  }
  if (!options_.marker.empty() && !marked_) {
    const int fd = ::open(options_.marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      marked_ = true;
    }
  }
  auto seen = std::make_shared<JobSeen>();
  launcher::TrialCallbacks cb;
  cb.on_started = std::move(callbacks.on_started);
  cb.on_message = [seen, next = std::move(callbacks.on_message)](const proto::ReportMessage& m) {
    if (m.type == proto::ReportType::kAttr && m.key == kSlurmAttr) {
      boost::system::error_code ec;
      boost::json::value v = boost::json::parse(m.json_value, ec);
      if (!ec && v.is_object()) {
        const boost::json::object& o = v.as_object();
        seen->job_id = Field(o, "job_id");
        seen->state = Field(o, "state");
        seen->reason = Field(o, "reason");
        seen->node = Field(o, "node");
        seen->ending = Field(o, "ending");
        seen->peak_memory_bytes = Field(o, "peak_memory_bytes");
        seen->cpu_time_s = Field(o, "cpu_time_s");
        seen->accounting = Field(o, "accounting");
      }
    }
    if (next) next(m);
  };
  cb.on_exit = [seen, next = std::move(callbacks.on_exit)](const launcher::ProcessOutcome& o) {
    launcher::ProcessOutcome out = o;
    // The bridge's own memory and CPU are not the trial's: the relay's count on the node
    // (getrusage of the worker's tree) where it sent one, else nothing. Wall time is the
    // bridge's: the job's time in Slurm's queue included.
    out.resources.peak_memory_bytes.reset();
    out.resources.memory_source.clear();
    out.resources.cpu_time_s.reset();
    out.resources.cpu_source.clear();
    const model::TrialResources unmeasured = out.resources;
    // Slurm's accounting where the cluster keeps one; else the relay's count, saying why.
    const bool sacct = seen->accounting == "sacct";
    const std::string why =
        sacct || seen->accounting.empty() ? "" : "; Slurm accounting: " + seen->accounting;
    try {
      if (!seen->peak_memory_bytes.empty()) {
        out.resources.peak_memory_bytes = std::stoull(seen->peak_memory_bytes);
        out.resources.memory_source =
            sacct ? "Slurm accounting (sacct MaxRSS)"
                  : "largest process RSS on the Slurm node (getrusage)" + why;
      }
      if (!seen->cpu_time_s.empty()) {
        out.resources.cpu_time_s = std::stod(seen->cpu_time_s);
        out.resources.cpu_source =
            sacct ? "Slurm accounting (sacct TotalCPU)" : "on the Slurm node (getrusage)" + why;
      }
    } catch (const std::exception&) {
      // Not numbers: the worker's own "triald.slurm" line, not the relay's. Nothing measured.
      out.resources = unmeasured;
    }
    if (!seen->ending.empty()) {
      // Only the reasons the relay may name: anything else on the channel is the worker's word.
      for (const char* r : FailureReasons()) {
        if (seen->ending == r) out.executor_failure = r;
      }
      out.executor_detail = "Slurm ended job " + seen->job_id +
                            (seen->node.empty() ? "" : " on " + seen->node) + ": " + seen->state +
                            (seen->reason.empty() ? "" : " (" + seen->reason + ")");
    }
    if (next) next(out);
  };
  return options_.local->Launch(BridgeSpec(spec), std::move(cb));
}

}  // namespace triald::slurm
