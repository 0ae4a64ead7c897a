#include "daemon/slurm/slurm_cluster.h"

#include <unistd.h>

#include <algorithm>
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

common::Status SlurmCluster::Check(const config::SweepSpec& spec, const std::string& where) const {
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
  // %R partition, %a availability, %G GRES; one line per partition and node configuration.
  common::Result<std::string> out = RunForOutput(
      {Command("sinfo"), "--noheader", "--format=%R|%a|%G"}, options_.command_timeout_s);
  if (!out.ok()) {
    return common::Unavailable(head + "sinfo cannot reach the cluster: " + out.status().message());
  }
  const config::SlurmExecutorConfig executor = WithDefaults(spec.executor.slurm, options_.defaults);
  std::string wanted = executor.partition;
  if (wanted.empty()) {
    // %P marks the default partition with '*'.
    common::Result<std::string> parts =
        RunForOutput({Command("sinfo"), "--noheader", "--format=%P"}, options_.command_timeout_s);
    if (parts.ok()) {
      for (const std::string& p : Lines(*parts)) {
        if (!p.empty() && p.back() == '*') wanted = p.substr(0, p.size() - 1);
      }
    }
  }
  std::vector<std::string> known;
  bool found = false, up = false;
  int gpus = 0;
  for (const std::string& line : Lines(*out)) {
    std::istringstream in(line);
    std::string name, avail, gres;
    std::getline(in, name, '|');
    std::getline(in, avail, '|');
    std::getline(in, gres);
    if (std::find(known.begin(), known.end(), name) == known.end()) known.push_back(name);
    if (name != wanted) continue;
    found = true;
    up = up || avail == "up";
    gpus = std::max(gpus, GpusIn(gres));
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
