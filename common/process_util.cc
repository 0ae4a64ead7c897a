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
#include <vector>

namespace triald::common {

namespace {

// Fields 3 to `last` of /proc/PID/stat (fields[0] is field 3).
Result<std::vector<std::string>> StatFields(pid_t pid, int last) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return NotFound("no process " + std::to_string(pid));
  // The command name (field 2) is in parentheses and may itself hold spaces and ')'; fields
  // after the last ')' are space-separated, starting with field 3.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return Internal("unparsable /proc stat for " + line);
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  std::string field;
  while (static_cast<int>(fields.size()) < last - 2 && rest >> field) fields.push_back(field);
  if (static_cast<int>(fields.size()) < last - 2) {
    return Internal("short /proc stat line: " + line);
  }
  return fields;
}

}  // namespace

Result<ProcStat> ReadProcStat(pid_t pid) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<std::string> fields, StatFields(pid, 22));
  ProcStat stat;
  stat.state = fields[0][0];
  stat.pgrp = static_cast<pid_t>(std::strtol(fields[5 - 3].c_str(), nullptr, 10));
  stat.start_time = std::strtoull(fields[22 - 3].c_str(), nullptr, 10);
  return stat;
}

Result<EnvironBlock> ReadEnvironBlock(pid_t pid) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<std::string> fields, StatFields(pid, 51));
  EnvironBlock block;
  block.start = std::strtoull(fields[50 - 3].c_str(), nullptr, 10);
  block.end = std::strtoull(fields[51 - 3].c_str(), nullptr, 10);
  if (block.start == 0 || block.end <= block.start) {
    return Internal("/proc/" + std::to_string(pid) + "/stat shows no environment block");
  }
  return block;
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
