#include "daemon/slurm/slurm_cluster.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "daemon/slurm/slurm_job.h"

namespace triald::slurm {

namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// The number of GPUs in a GRES list as sinfo prints it ("gpu:2", "gpu:a100:4(S:0-1),mps:100",
// "(null)"): the largest count of any gpu entry.
int GpusIn(const std::string& gres) {
  int best = 0;
  std::istringstream in(gres);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.rfind("gpu", 0) != 0) continue;
    item = item.substr(0, item.find('('));
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos) continue;
    try {
      best = std::max(best, std::stoi(item.substr(colon + 1)));
    } catch (const std::exception&) {
    }
  }
  return best;
}

}  // namespace

std::string SlurmCluster::Command(const std::string& name) const {
  const size_t slash = options_.srun.rfind('/');
  return slash == std::string::npos ? name : options_.srun.substr(0, slash + 1) + name;
}

common::Status CheckAgainstSinfo(const config::SweepSpec& spec, const std::string& where,
                                 const config::SlurmDefaults& defaults, const std::string& sinfo) {
  const std::string head = where + ": [executor] kind = \"slurm\": ";
  const config::SlurmExecutorConfig executor = WithDefaults(spec.executor.slurm, defaults);
  std::string wanted = executor.partition;
  struct Row {
    std::string name, avail, gres;
  };
  std::vector<Row> rows;
  for (const std::string& line : Lines(sinfo)) {
    std::istringstream in(line);
    Row r;
    std::getline(in, r.name, '|');
    std::getline(in, r.avail, '|');
    std::getline(in, r.gres);
    // %P marks the default partition with '*'.
    if (!r.name.empty() && r.name.back() == '*') {
      r.name.pop_back();
      if (executor.partition.empty()) wanted = r.name;
    }
    rows.push_back(std::move(r));
  }
  std::vector<std::string> known;
  bool found = false, up = false;
  int gpus = 0;
  for (const Row& r : rows) {
    if (std::find(known.begin(), known.end(), r.name) == known.end()) known.push_back(r.name);
    if (r.name != wanted) continue;
    found = true;
    up = up || r.avail == "up";
    gpus = std::max(gpus, GpusIn(r.gres));
  }
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  if (!found) {
    if (executor.partition.empty()) {
      return common::FailedPrecondition(head +
                                        "the cluster has no default partition; set "
                                        "[executor] partition (sinfo lists " +
                                        (list.empty() ? std::string("none") : list) + ")");
    }
    const std::string from =
        spec.executor.slurm.partition.empty() ? " (triald --config [slurm] partition)" : "";
    return common::InvalidArgument(where + ": [executor] partition = \"" + wanted + "\"" + from +
                                   ": no such partition (sinfo lists " +
                                   (list.empty() ? std::string("none") : list) + ")");
  }
  if (!up) {
    return common::FailedPrecondition(where + ": [executor] partition \"" + wanted +
                                      "\" is not up (sinfo: not available)");
  }
  const int want = spec.study.gpus_per_trial;
  if (want > gpus) {
    return common::InvalidArgument(
        where + ": [study] gpus_per_trial = " + std::to_string(want) +
        " with [executor] kind = \"slurm\": partition \"" + wanted + "\" has " +
        (gpus == 0 ? std::string("no GPUs (no gpu GRES)")
                   : "at most " + std::to_string(gpus) + " GPU(s) per node") +
        "; expected gpus_per_trial <= " + std::to_string(gpus));
  }
  return common::Status::Ok();
}

SlurmCluster::~SlurmCluster() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (prober_.joinable()) prober_.join();
}

void SlurmCluster::ProberLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    // %P partition ('*': the default), %a availability, %G GRES; a line per partition and node
    // configuration.
    common::Result<std::string> out = options_.run(
        {Command("sinfo"), "--noheader", "--format=%P|%a|%G"}, options_.probe_timeout_s);
    lock.lock();
    ++probes_;
    if (out.ok()) {
      sinfo_ = std::move(out).value();
      answered_at_ = Clock::now();
      last_error_.clear();
    } else {
      last_error_ = out.status().message();
    }
    probed_.notify_all();
    wake_.wait_for(lock, std::chrono::duration<double>(options_.refresh_s), [&] { return stop_; });
  }
}

common::Status SlurmCluster::Check(const config::SweepSpec& spec, const std::string& where) {
  if (spec.executor.kind != "slurm") return common::Status::Ok();
  const std::string head = where + ": [executor] kind = \"slurm\": ";
  if (options_.srun.empty()) {
    return common::FailedPrecondition(
        head +
        "Slurm's client (srun, sinfo) is not installed on the daemon's host (Debian: "
        "slurm-client), or not in the daemon's PATH");
  }
  if (access(options_.relay.c_str(), X_OK) != 0) {
    return common::FailedPrecondition(head + "the relay " + options_.relay +
                                      " is missing (it is built and installed with triald)");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!prober_.joinable()) prober_ = std::thread([this] { ProberLoop(); });
  // Only the first check after a start waits, for the first answer, and briefly.
  if (probes_ == 0) {
    probed_.wait_for(lock, std::chrono::duration<double>(options_.first_wait_s),
                     [&] { return probes_ > 0; });
  }
  if (!answered_at_) {
    return common::Unavailable(head + "sinfo cannot reach the cluster: " +
                               (probes_ == 0 ? "no answer yet (asked " +
                                                   std::to_string(options_.first_wait_s) +
                                                   " s ago); submit again"
                                             : last_error_));
  }
  const double age = std::chrono::duration<double>(Clock::now() - *answered_at_).count();
  if (age > options_.stale_after_s) {
    return common::Unavailable(head + "sinfo has not answered for " +
                               std::to_string(static_cast<int>(age)) + " s" +
                               (last_error_.empty() ? "" : " (" + last_error_ + ")"));
  }
  return CheckAgainstSinfo(spec, where, options_.defaults, sinfo_);
}

common::Result<std::vector<std::string>> SlurmCluster::CancelLeftovers(
    const std::string& node) const {
  std::vector<std::string> ids;
  if (options_.srun.empty()) return ids;
  TRIALD_ASSIGN_OR_RETURN(std::string out,
                          RunForOutput({Command("squeue"), "--noheader", "--all", "--format=%i|%j"},
                                       options_.command_timeout_s));
  const std::string prefix = JobNamePrefix(node);
  for (const std::string& line : Lines(out)) {
    const size_t bar = line.find('|');
    if (bar == std::string::npos) continue;
    if (line.compare(bar + 1, prefix.size(), prefix) == 0) ids.push_back(line.substr(0, bar));
  }
  if (ids.empty()) return ids;
  std::vector<std::string> argv = {Command("scancel"), "--quiet"};
  for (const std::string& id : ids) argv.push_back(id);
  TRIALD_ASSIGN_OR_RETURN(std::string ignored, RunForOutput(argv, options_.command_timeout_s));
  (void)ignored;
  return ids;
}

}  // namespace triald::slurm
