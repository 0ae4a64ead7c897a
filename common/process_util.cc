#include "common/process_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace triald::common {

Result<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return NotFound("no process " + std::to_string(pid));
  // The command name (field 2) is in parentheses and may itself hold spaces and ')'; fields
  // after the last ')' are space-separated, starting with field 3.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return Internal("unparsable /proc stat for " + line);
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  ProcStat stat;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return Internal("short /proc stat line: " + line);
    if (i == 3) stat.state = field[0];
    if (i == 5) stat.pgrp = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
  }
  stat.start_time = std::strtoull(field.c_str(), nullptr, 10);
  return stat;
}

Result<uint64_t> ProcessStartTime(pid_t pid) {
  TRIALD_ASSIGN_OR_RETURN(ProcStat stat, ReadProcStat(pid));
  return stat.start_time;
}

bool ProcessGroupExists(pid_t pgid) {
  if (pgid <= 1) return false;
  return ::kill(-pgid, 0) == 0 || errno == EPERM;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "SIG" + std::to_string(sig);
}

ExitStatus ExitStatus::FromWaitStatus(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.signal = WTERMSIG(status);
    s.core_dumped = WCOREDUMP(status);
  } else if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

std::string ExitStatus::Describe() const {
  if (signaled) {
    return "killed by " + SignalName(signal) + (core_dumped ? " (core dumped)" : "");
  }
  return "exited with code " + std::to_string(code);
}

namespace {
bool IsExecutableFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}
}  // namespace

Result<std::string> FindExecutable(const std::string& name, const std::string& path_env,
                                   const std::string& cwd) {
  namespace fs = std::filesystem;
  if (name.empty()) return InvalidArgument("empty command");
  if (name.find('/') != std::string::npos) {
    fs::path p(name);
    if (p.is_relative()) p = fs::path(cwd) / p;
    std::string s = p.lexically_normal().string();
    if (!IsExecutableFile(s)) {
      return NotFound("command \"" + name + "\" is not an executable file (looked at " + s + ")");
    }
    return s;
  }
  std::string search = path_env.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_env;
  std::istringstream dirs(search);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) dir = ".";
    fs::path p = fs::path(dir) / name;
    if (p.is_relative()) p = fs::path(cwd) / p;
    if (IsExecutableFile(p.string())) return p.lexically_normal().string();
  }
  return NotFound("command \"" + name + "\" not found in PATH (" + search + ")");
}

}  // namespace triald::common
