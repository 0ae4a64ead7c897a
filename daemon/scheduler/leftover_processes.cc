#include "daemon/scheduler/leftover_processes.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "common/process_util.h"

namespace triald::daemon {
namespace {

// The value of TRIALD_TRIAL_DIR in a process's environment ("" when absent or unreadable).
std::string TrialDirOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return "";
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "TRIALD_TRIAL_DIR=";
  for (size_t pos = 0; pos < env.size();) {
    size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    if (env.compare(pos, key.size(), key) == 0) {
      return env.substr(pos + key.size(), end - pos - key.size());
    }
    pos = end + 1;
  }
  return "";
}

// A member of a lost trial's group, while that group's leader is provably the trial's.
bool InLostGroup(const common::ProcStat& stat, const std::vector<model::ProcessIdentity>& lost) {
  for (const model::ProcessIdentity& id : lost) {
    if (id.pgid <= 1 || stat.pgrp != id.pgid || stat.start_time < id.start_time) continue;
    common::Result<common::ProcStat> leader = common::ReadProcStat(id.pid);
    if (leader.ok() && leader->start_time == id.start_time) return true;
  }
  return false;
}

}  // namespace

int ProcLeftoverProcesses::Kill(const std::string& state_dir,
                                const std::vector<model::ProcessIdentity>& lost) {
  const std::string prefix = model::StudiesDir(state_dir);
  std::vector<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return 0;
  while (dirent* ent = ::readdir(dir)) {
    char* end;
    long pid = std::strtol(ent->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == ::getpid()) continue;
    common::Result<common::ProcStat> stat = common::ReadProcStat(static_cast<pid_t>(pid));
    if (!stat.ok()) continue;
    if (TrialDirOf(static_cast<pid_t>(pid)).rfind(prefix, 0) == 0 || InLostGroup(*stat, lost)) {
      found.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(dir);
  for (pid_t pid : found) ::kill(pid, SIGKILL);
  // Wait (bounded) until they are gone, so the restarted study does not overlap them.
  for (int i = 0; i < 250; ++i) {
    bool any = false;
    for (pid_t pid : found) {
      // A zombie waiting for its new parent to reap it holds nothing any more.
      common::Result<common::ProcStat> stat = common::ReadProcStat(pid);
      any = any || (::kill(pid, 0) == 0 && stat.ok() && stat->state != 'Z');
    }
    if (!any) break;
    ::usleep(20 * 1000);
  }
  return static_cast<int>(found.size());
}

}  // namespace triald::daemon
