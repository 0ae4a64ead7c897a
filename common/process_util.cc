#include "common/process_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

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

uint64_t BootTimeNs() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t StartTimeBetween(uint64_t boot_ns_before, uint64_t boot_ns_after) {
  // USER_HZ: the ticks /proc/PID/stat counts in (the kernel divides the ns by 10^9 / USER_HZ).
  static const long ticks_per_s = ::sysconf(_SC_CLK_TCK);
  if (ticks_per_s <= 0 || 1'000'000'000 % ticks_per_s != 0 || boot_ns_after < boot_ns_before) {
    return 0;
  }
  const uint64_t ns_per_tick = 1'000'000'000ull / static_cast<uint64_t>(ticks_per_s);
  const uint64_t tick = boot_ns_before / ns_per_tick;
  return tick == boot_ns_after / ns_per_tick ? tick : 0;
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

Result<CapturedRun> RunCaptured(const CapturedRequest& request) {
  if (request.argv.empty()) return InvalidArgument("no command");
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe", errno);
  if (request.capture_stderr && pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out[0]);
    close(out[1]);
    return ErrnoError("pipe", e);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  if (request.capture_stderr) {
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  } else if (request.quiet) {
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  }
  if (!request.workdir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, request.workdir.c_str());
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : request.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (const std::string& kv : request.env) env.push_back(const_cast<char*>(kv.c_str()));
  env.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(),
                              request.inherit_env ? environ : env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  if (err[1] >= 0) close(err[1]);
  if (rc != 0) {
    close(out[0]);
    if (err[0] >= 0) close(err[0]);
    return ErrnoError("cannot run " + request.argv[0], rc);
  }
  CapturedRun run;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(request.timeout_s * 1000));
  int fds[2] = {out[0], err[0]};
  char buf[8192];
  while (fds[0] >= 0 || fds[1] >= 0) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now())
                             .count();
    if (left <= 0) {
      run.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    const int r = poll(p, 2, static_cast<int>(left));
    if (r <= 0) continue;  // EINTR, or the deadline (checked above)
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      const ssize_t n = read(fds[i], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i]);
        fds[i] = -1;
        continue;
      }
      std::string& text = i == 0 ? run.out : run.err;
      if (i == 0) {
        if (text.size() < request.max_bytes) {
          text.append(buf, std::min(static_cast<size_t>(n), request.max_bytes - text.size()));
        }
      } else {
        text.append(buf, static_cast<size_t>(n));
        if (text.size() > 2 * request.max_bytes) text.erase(0, text.size() - request.max_bytes);
      }
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  if (run.err.size() > request.max_bytes) run.err.erase(0, run.err.size() - request.max_bytes);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  run.status = ExitStatus::FromWaitStatus(wstatus);
  return run;
}

}  // namespace triald::common
