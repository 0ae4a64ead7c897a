#include "daemon/slurm/slurm_job.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/process_util.h"

namespace triald::slurm {

std::string EncodeFrame(FrameTag tag, std::string_view payload) {
  std::string out;
  out.reserve(2 + payload.size() + payload.size() / 16);
  out.push_back(static_cast<char>(tag));
  for (char c : payload) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '\n':
        out += "%0A";
        break;
      case '\r':
        out += "%0D";
        break;
      case '\0':
        out += "%00";
        break;
      default:
        out.push_back(c);
    }
  }
  out.push_back('\n');
  return out;
}

namespace {

common::Status Unescape(std::string_view in, std::string* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    const std::string_view code = in.substr(i + 1, 2);
    if (code == "25") {
      out->push_back('%');
    } else if (code == "0A") {
      out->push_back('\n');
    } else if (code == "0D") {
      out->push_back('\r');
    } else if (code == "00") {
      out->push_back('\0');
    } else {
      return common::InvalidArgument("relay stream: bad escape %" + std::string(code));
    }
    i += 2;
  }
  return common::Status::Ok();
}

}  // namespace

common::Status FrameDecoder::Feed(std::string_view bytes, std::vector<Frame>* out) {
  buf_.append(bytes);
  size_t pos = 0;
  for (size_t nl; (nl = buf_.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    std::string_view line(buf_.data() + pos, nl - pos);
    if (line.empty()) return common::InvalidArgument("relay stream: an empty line");
    const char tag = line[0];
    if (tag != 'O' && tag != 'E' && tag != 'C' && tag != 'I' && tag != 'X') {
      return common::InvalidArgument("relay stream: unknown frame tag " +
                                     std::to_string(static_cast<unsigned char>(tag)));
    }
    Frame f{static_cast<FrameTag>(tag), {}};
    TRIALD_RETURN_IF_ERROR(Unescape(line.substr(1), &f.payload));
    out->push_back(std::move(f));
  }
  buf_.erase(0, pos);
  if (buf_.size() > 3 * kMaxFramePayload + 2) {
    return common::InvalidArgument("relay stream: a line of more than " +
                                   std::to_string(buf_.size()) + " bytes");
  }
  return common::Status::Ok();
}

int64_t TimeLimitMinutes(const config::SlurmExecutorConfig& executor, double trial_timeout_s,
                         double kill_grace_s) {
  double seconds = executor.time_limit;
  if (seconds <= 0 && trial_timeout_s > 0) seconds = trial_timeout_s + kill_grace_s;
  if (seconds <= 0) return 0;
  return static_cast<int64_t>(std::ceil(seconds / 60.0));
}

config::SlurmExecutorConfig WithDefaults(config::SlurmExecutorConfig e,
                                         const config::SlurmDefaults& d) {
  for (auto [field, fallback] :
       {std::pair<std::string*, const std::string*>{&e.partition, &d.partition},
        {&e.account, &d.account},
        {&e.qos, &d.qos},
        {&e.constraint, &d.constraint}}) {
    if (field->empty()) *field = *fallback;
  }
  return e;
}

std::vector<std::string> SrunArgv(const SrunRequest& r) {
  const config::SlurmExecutorConfig& e = r.executor;
  std::vector<std::string> argv = {
      r.srun,
      "--job-name=" + r.job_name,
      "--comment=" + r.comment,
      "--ntasks=1",
      "--nodes=1",
      "--quiet",
      // The bridge's environment is the trial's (launch_spec.h): TRIALD_*, the objective's env.
      "--export=ALL",
      // One bad task ends the job; no step outlives the relay.
      "--kill-on-bad-exit=1",
  };
  if (!r.workdir.empty()) argv.push_back("--chdir=" + r.workdir);
  if (!e.partition.empty()) argv.push_back("--partition=" + e.partition);
  if (!e.account.empty()) argv.push_back("--account=" + e.account);
  if (!e.qos.empty()) argv.push_back("--qos=" + e.qos);
  if (!e.constraint.empty()) argv.push_back("--constraint=" + e.constraint);
  if (e.cpus_per_trial > 0) argv.push_back("--cpus-per-task=" + std::to_string(e.cpus_per_trial));
  if (r.gpus > 0) argv.push_back("--gres=gpu:" + std::to_string(r.gpus));
  if (r.memory_bytes > 0) {
    // Slurm counts megabytes (MiB); round up so the job never has less than the limit.
    argv.push_back("--mem=" + std::to_string((r.memory_bytes + (1 << 20) - 1) >> 20) + "M");
  }
  if (int64_t minutes = TimeLimitMinutes(e, r.trial_timeout_s, r.kill_grace_s); minutes > 0) {
    argv.push_back("--time=" + std::to_string(minutes));
  }
  for (const std::string& a : e.extra_args) argv.push_back(a);
  argv.push_back(r.relay);
  argv.push_back("run");
  argv.push_back("--");
  for (const std::string& a : r.command) argv.push_back(a);
  return argv;
}

std::string JobNamePrefix(const std::string& node) {
  std::string clean;
  for (char c : node) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    clean.push_back(ok ? c : '_');
  }
  return "triald." + clean + ".t";
}

std::string JobName(const std::string& node, int64_t trial_id) {
  return JobNamePrefix(node) + std::to_string(trial_id);
}

std::map<std::string, std::string> ParseScontrolJob(std::string_view line) {
  std::map<std::string, std::string> fields;
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\n')) ++pos;
    size_t end = line.find_first_of(" \n", pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view item = line.substr(pos, end - pos);
    if (size_t eq = item.find('='); eq != std::string_view::npos && eq > 0) {
      fields.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    }
    pos = end;
  }
  return fields;
}

bool JobStateIsActive(const std::string& state) {
  for (const char* s : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
                        "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}) {
    if (state == s) return true;
  }
  return false;
}

std::optional<std::string> FailureReason(const std::string& state, bool cancelled_by_triald) {
  if (state == "PREEMPTED") return "preempted";
  if (state == "NODE_FAIL" || state == "BOOT_FAIL") return "node_failure";
  if (state == "TIMEOUT" || state == "DEADLINE") return "slurm_time_limit";
  if (state == "OUT_OF_MEMORY") return "slurm_oom";
  if (state == "CANCELLED" && !cancelled_by_triald) return "slurm_cancelled";
  return std::nullopt;
}

const std::vector<const char*>& FailureReasons() {
  static const std::vector<const char*> kReasons = {"preempted", "node_failure", "slurm_time_limit",
                                                    "slurm_oom", "slurm_cancelled"};
  return kReasons;
}

std::optional<double> ParseSlurmDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double days = 0;
  if (size_t dash = text.find('-'); dash != std::string_view::npos) {
    days = std::atof(std::string(text.substr(0, dash)).c_str());
    text = text.substr(dash + 1);
  }
  std::vector<double> parts;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t colon = text.find(':', pos);
    std::string part(
        text.substr(pos, colon == std::string_view::npos ? std::string_view::npos : colon - pos));
    if (part.empty() || part.find_first_not_of("0123456789.") != std::string::npos) {
      return std::nullopt;
    }
    parts.push_back(std::atof(part.c_str()));
    if (colon == std::string_view::npos) break;
    pos = colon + 1;
  }
  if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
  double seconds = 0;
  for (double p : parts) seconds = seconds * 60 + p;
  return days * 86400 + seconds;
}

common::Result<JobAccounting> ParseSacct(std::string_view text) {
  JobAccounting out;
  bool any = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.empty()) continue;
    std::vector<std::string> f;
    size_t from = 0;
    for (size_t bar; (bar = line.find('|', from)) != std::string_view::npos; from = bar + 1) {
      f.emplace_back(line.substr(from, bar - from));
    }
    f.emplace_back(line.substr(from));
    if (f.size() != 4) {
      return common::InvalidArgument("sacct: expected JobID|MaxRSS|TotalCPU|Elapsed, got \"" +
                                     std::string(line) + "\"");
    }
    any = true;
    // MaxRSS: a number of KiB with a unit letter (K, M, G, T), per step.
    if (!f[1].empty() && (std::isdigit(static_cast<unsigned char>(f[1][0])) != 0)) {
      double v = std::atof(f[1].c_str());
      switch (f[1].back()) {
        case 'T':
          v *= 1024;
          [[fallthrough]];
        case 'G':
          v *= 1024;
          [[fallthrough]];
        case 'M':
          v *= 1024;
          [[fallthrough]];
        case 'K':
          v *= 1024;
          break;
        default:
          break;  // bytes
      }
      const uint64_t bytes = static_cast<uint64_t>(v);
      if (!out.max_rss_bytes || bytes > *out.max_rss_bytes) out.max_rss_bytes = bytes;
    }
    // The job's own line (no '.' in its id) holds the totals.
    if (f[0].find('.') == std::string::npos) {
      out.total_cpu_s = ParseSlurmDuration(f[2]);
      out.elapsed_s = ParseSlurmDuration(f[3]);
    }
  }
  if (!any) return common::NotFound("sacct: no record of the job");
  return out;
}

common::Result<std::string> RunForOutput(const std::vector<std::string>& argv, double timeout_s,
                                         bool quiet) {
  common::CapturedRequest request;
  request.argv = argv;
  request.timeout_s = timeout_s;
  request.quiet = quiet;
  TRIALD_ASSIGN_OR_RETURN(common::CapturedRun run, common::RunCaptured(request));
  if (run.timed_out) {
    return common::Unavailable(argv[0] + " did not answer within " +
                               std::to_string(static_cast<int>(timeout_s)) + " s");
  }
  if (!run.ok()) {
    return common::Unavailable(
        argv[0] + (!run.status.signaled
                       ? " exited with code " + std::to_string(run.status.code)
                       : " was killed by signal " + std::to_string(run.status.signal)));
  }
  return std::move(run.out);
}

}  // namespace triald::slurm
