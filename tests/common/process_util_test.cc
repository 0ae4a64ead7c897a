// Process helpers: start times, process-group liveness, signal names, wait statuses and PATH
// lookup, checked against real child processes where the answer comes from the kernel.

#include "common/process_util.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/temp_dir.h"

namespace triald::common {
namespace {

namespace fs = std::filesystem;

using triald::testing::TempDir;

void WriteFile(const std::string& path, mode_t mode) {
  {
    std::ofstream out(path);
    out << "#!/bin/sh\nexit 0\n";
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

// A child that waits to be killed, in a process group of its own.
pid_t ForkSleeperInOwnGroup() {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    for (;;) ::pause();
  }
  // Set it from the parent too, so the group exists before fork's caller looks at it.
  ::setpgid(pid, pid);
  return pid;
}

// Forks a child that exits with `code` and returns its raw wait status.
int WaitStatusOfExit(int code) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(code);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

TEST_CASE("ReadProcStat reads this process's state, group and start time", "[common]") {
  Result<ProcStat> stat = ReadProcStat(::getpid());
  REQUIRE(stat.ok());
  CHECK(stat->state == 'R');  // it is running: it is reading its own stat
  CHECK(stat->pgrp == ::getpgrp());
  Result<uint64_t> start = ProcessStartTime(::getpid());
  REQUIRE(start.ok());
  CHECK(stat->start_time == *start);
}

TEST_CASE("StartTimeBetween: the tick of a start bracketed within one, else 0", "[common]") {
  const long hz = ::sysconf(_SC_CLK_TCK);
  REQUIRE(hz > 0);
  const uint64_t ns_per_tick = 1'000'000'000ull / static_cast<uint64_t>(hz);
  CHECK(StartTimeBetween(123 * ns_per_tick + 5, 123 * ns_per_tick + 9) == 123);
  CHECK(StartTimeBetween(123 * ns_per_tick, 124 * ns_per_tick - 1) == 123);
  CHECK(StartTimeBetween(123 * ns_per_tick + 5, 124 * ns_per_tick) == 0);  // across a tick
  CHECK(StartTimeBetween(124 * ns_per_tick, 123 * ns_per_tick) == 0);      // backwards
  // Real forks: whenever the boot clock brackets one within a tick, /proc agrees.
  int bracketed = 0;
  for (int i = 0; i < 50; ++i) {
    int go[2];
    REQUIRE(::pipe(go) == 0);
    const uint64_t before = BootTimeNs();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      char c;
      (void)!::read(go[0], &c, 1);  // alive until the parent has read its stat
      ::_exit(0);
    }
    const uint64_t after = BootTimeNs();
    REQUIRE(pid > 0);
    const uint64_t between = StartTimeBetween(before, after);
    Result<uint64_t> shown = ProcessStartTime(pid);
    ::close(go[1]);
    ::close(go[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(shown.ok());
    if (between != 0) {
      ++bracketed;
      CHECK(between == *shown);
    }
  }
  CHECK(bracketed > 0);  // a fork takes well under a tick: nearly all of them
}

TEST_CASE("ReadEnvironBlock locates the bytes /proc/PID/environ shows", "[common]") {
  Result<EnvironBlock> block = ReadEnvironBlock(::getpid());
  REQUIRE(block.ok());
  REQUIRE(block->end > block->start);
  std::ifstream in("/proc/self/environ", std::ios::binary);
  const std::string shown((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(std::string(reinterpret_cast<const char*>(block->start), block->end - block->start) ==
        shown);
  CHECK(ReadEnvironBlock(0).status().code() == Code::kNotFound);
}

TEST_CASE("ReadProcStat of another group's member, and of a zombie", "[common]") {
  pid_t pid = ForkSleeperInOwnGroup();
  Result<ProcStat> live = ReadProcStat(pid);
  ::kill(pid, SIGKILL);
  REQUIRE(live.ok());
  CHECK(live->pgrp == pid);
  CHECK(live->pgrp != ::getpgrp());
  Result<ProcStat> zombie = ReadProcStat(pid);
  for (int i = 0; i < 500 && zombie.ok() && zombie->state != 'Z'; ++i) {
    ::usleep(2000);
    zombie = ReadProcStat(pid);
  }
  REQUIRE(zombie.ok());
  CHECK(zombie->state == 'Z');  // killed, not yet reaped
  ::waitpid(pid, nullptr, 0);
  CHECK(ReadProcStat(pid).status().code() == Code::kNotFound);
}

TEST_CASE("ProcessStartTime of this process is stable across calls", "[common]") {
  Result<uint64_t> a = ProcessStartTime(::getpid());
  Result<uint64_t> b = ProcessStartTime(::getpid());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
}

TEST_CASE("ProcessStartTime is a time since boot, not some other /proc field", "[common]") {
  Result<uint64_t> start = ProcessStartTime(::getpid());
  REQUIRE(start.ok());
  double uptime_s = 0;
  {
    std::ifstream in("/proc/uptime");
    REQUIRE(in >> uptime_s);
  }
  const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // This process started after boot and before now.
  CHECK(*start > 0);
  CHECK(static_cast<double>(*start) / ticks_per_s <= uptime_s + 1);
}

TEST_CASE("ProcessStartTime of a child is no earlier than its parent's", "[common]") {
  Result<uint64_t> parent = ProcessStartTime(::getpid());
  REQUIRE(parent.ok());
  pid_t pid = ForkSleeperInOwnGroup();
  Result<uint64_t> child = ProcessStartTime(pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  REQUIRE(child.ok());
  CHECK(*child >= *parent);
}

TEST_CASE("ProcessStartTime of a reaped child is not found", "[common]") {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  REQUIRE(::waitpid(pid, nullptr, 0) == pid);
  Result<uint64_t> r = ProcessStartTime(pid);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK_THAT(r.status().message(), Catch::Contains(std::to_string(pid)));
}

TEST_CASE("ProcessGroupExists follows a child's group until it is reaped", "[common]") {
  pid_t pid = ForkSleeperInOwnGroup();
  CHECK(ProcessGroupExists(pid));

  REQUIRE(::kill(pid, SIGKILL) == 0);
  // Wait for death without reaping: the zombie still holds the group.
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) == 0);
  CHECK(ProcessGroupExists(pid));

  REQUIRE(::waitpid(pid, nullptr, 0) == pid);
  CHECK_FALSE(ProcessGroupExists(pid));
}

// A trial's main process can exit while processes it started (data loaders) live on in its
// group; the group, not the leader, decides whether the trial still holds resources.
TEST_CASE("ProcessGroupExists stays true after the leader exits while a member lives", "[common]") {
  // Become the subreaper so the orphaned member is ours to reap at the end.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int pid_pipe[2];
  REQUIRE(::pipe(pid_pipe) == 0);
  pid_t leader = ::fork();
  REQUIRE(leader >= 0);
  if (leader == 0) {
    ::setpgid(0, 0);
    pid_t member = ::fork();
    if (member == 0) {
      for (;;) ::pause();
    }
    ssize_t n = ::write(pid_pipe[1], &member, sizeof member);
    ::_exit(n == sizeof member ? 0 : 1);
  }
  ::setpgid(leader, leader);
  ::close(pid_pipe[1]);
  pid_t member = -1;
  REQUIRE(::read(pid_pipe[0], &member, sizeof member) == sizeof member);
  ::close(pid_pipe[0]);
  int status = 0;
  REQUIRE(::waitpid(leader, &status, 0) == leader);
  REQUIRE(WIFEXITED(status));
  REQUIRE(member > 0);

  CHECK(ProcessGroupExists(leader));  // the leader is gone, its group is not

  REQUIRE(::kill(-leader, SIGKILL) == 0);
  REQUIRE(::waitpid(member, nullptr, 0) == member);
  CHECK_FALSE(ProcessGroupExists(leader));
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 0) == 0);
}

TEST_CASE("ProcessGroupExists is false for group ids that do not name one group", "[common]") {
  // kill(0) and kill(-1) would signal our own group or every process; neither is a trial.
  CHECK_FALSE(ProcessGroupExists(0));
  CHECK_FALSE(ProcessGroupExists(1));
  CHECK_FALSE(ProcessGroupExists(-5));
}

TEST_CASE("SignalName gives the conventional names", "[common]") {
  CHECK(SignalName(SIGSEGV) == "SIGSEGV");
  CHECK(SignalName(SIGKILL) == "SIGKILL");
  CHECK(SignalName(SIGTERM) == "SIGTERM");
  CHECK(SignalName(SIGABRT) == "SIGABRT");
  CHECK(SignalName(200) == "SIG200");
}

TEST_CASE("ExitStatus of a child that exits 3", "[common]") {
  ExitStatus s = ExitStatus::FromWaitStatus(WaitStatusOfExit(3));
  CHECK_FALSE(s.signaled);
  CHECK(s.code == 3);
  CHECK(s.Describe() == "exited with code 3");
}

TEST_CASE("ExitStatus of a child that exits 0", "[common]") {
  ExitStatus s = ExitStatus::FromWaitStatus(WaitStatusOfExit(0));
  CHECK_FALSE(s.signaled);
  CHECK(s.code == 0);
  CHECK(s.Describe() == "exited with code 0");
}

TEST_CASE("ExitStatus of a child killed by SIGKILL", "[common]") {
  pid_t pid = ForkSleeperInOwnGroup();
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  ExitStatus s = ExitStatus::FromWaitStatus(status);
  CHECK(s.signaled);
  CHECK(s.signal == SIGKILL);
  CHECK_FALSE(s.core_dumped);
  CHECK(s.Describe() == "killed by SIGKILL");
}

TEST_CASE("ExitStatus describes a core dump", "[common]") {
  ExitStatus s;
  s.signaled = true;
  s.signal = SIGSEGV;
  s.core_dumped = true;
  CHECK(s.Describe() == "killed by SIGSEGV (core dumped)");
}

TEST_CASE("FindExecutable finds sh on a PATH", "[common]") {
  Result<std::string> r = FindExecutable("sh", "/usr/bin:/bin", "/");
  REQUIRE(r.ok());
  CHECK((*r == "/usr/bin/sh" || *r == "/bin/sh"));
  CHECK(::access(r->c_str(), X_OK) == 0);
}

TEST_CASE("FindExecutable takes the first executable match in PATH order", "[common]") {
  TempDir a, b;
  WriteFile(a.path() + "/train", 0644);  // not executable: skipped
  WriteFile(b.path() + "/train", 0755);
  fs::create_directory(a.path() + "/eval");  // a directory is not a command
  WriteFile(b.path() + "/eval", 0755);

  std::string path_env = a.path() + ":" + b.path();
  Result<std::string> train = FindExecutable("train", path_env, "/");
  REQUIRE(train.ok());
  CHECK(*train == b.path() + "/train");
  Result<std::string> eval = FindExecutable("eval", path_env, "/");
  REQUIRE(eval.ok());
  CHECK(*eval == b.path() + "/eval");

  WriteFile(a.path() + "/train2", 0755);
  WriteFile(b.path() + "/train2", 0755);
  Result<std::string> first = FindExecutable("train2", path_env, "/");
  REQUIRE(first.ok());
  CHECK(*first == a.path() + "/train2");
}

TEST_CASE("FindExecutable resolves a relative ./name against cwd", "[common]") {
  TempDir dir;
  WriteFile(dir.path() + "/x", 0755);
  fs::create_directory(dir.path() + "/sub");

  Result<std::string> r = FindExecutable("./x", "/usr/bin:/bin", dir.path());
  REQUIRE(r.ok());
  CHECK(*r == dir.path() + "/x");

  Result<std::string> up = FindExecutable("sub/../x", "", dir.path());
  REQUIRE(up.ok());
  CHECK(*up == dir.path() + "/x");

  // An absolute name ignores cwd.
  Result<std::string> abs = FindExecutable(dir.path() + "/x", "", "/nonexistent");
  REQUIRE(abs.ok());
  CHECK(*abs == dir.path() + "/x");
}

TEST_CASE("FindExecutable resolves a relative PATH entry against cwd", "[common]") {
  TempDir dir;
  fs::create_directory(dir.path() + "/bin");
  WriteFile(dir.path() + "/bin/tool", 0755);
  Result<std::string> r = FindExecutable("tool", "bin", dir.path());
  REQUIRE(r.ok());
  CHECK(*r == dir.path() + "/bin/tool");
}

TEST_CASE("FindExecutable rejects a non-executable file and names it", "[common]") {
  TempDir dir;
  WriteFile(dir.path() + "/y", 0644);
  Result<std::string> r = FindExecutable("./y", "/usr/bin:/bin", dir.path());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("./y"));
  CHECK_THAT(r.status().message(), Catch::Contains(dir.path() + "/y"));
}

TEST_CASE("FindExecutable of a missing command names the PATH searched", "[common]") {
  TempDir dir;
  std::string path_env = dir.path() + ":/usr/bin:/bin";
  Result<std::string> r = FindExecutable("no-such-trainer", path_env, "/");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK_THAT(r.status().message(), Catch::Contains("no-such-trainer"));
  CHECK_THAT(r.status().message(), Catch::Contains(path_env));
}

TEST_CASE("FindExecutable with an empty PATH searches and names the default", "[common]") {
  Result<std::string> found = FindExecutable("sh", "", "/");
  REQUIRE(found.ok());
  CHECK(::access(found->c_str(), X_OK) == 0);

  Result<std::string> r = FindExecutable("no-such-trainer", "", "/");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("/usr/bin"));
}

TEST_CASE("FindExecutable of an empty name is invalid", "[common]") {
  Result<std::string> r = FindExecutable("", "/usr/bin:/bin", "/");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace triald::common
