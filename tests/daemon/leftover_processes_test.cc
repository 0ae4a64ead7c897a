// The recovery-time kill on the real /proc (daemon/scheduler/leftover_processes.h): what a
// previous daemon on a state directory left behind is killed, and nothing else. Children are
// started with posix_spawn; each test kills and reaps whatever of them is left.

#include "daemon/scheduler/leftover_processes.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/process_util.h"
#include "tests/support/temp_dir.h"

namespace triald::daemon {
namespace {

// A `sleep 60` child in its own process group, with `env` as its whole environment.
pid_t SpawnSleeper(const std::vector<std::string>& env) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> envp;
  for (const std::string& kv : env) envp.push_back(const_cast<char*>(kv.c_str()));
  envp.push_back(nullptr);
  char arg0[] = "sleep";
  char arg1[] = "60";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sleep", nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  REQUIRE(rc == 0);
  // Its environment is the one given once it has exec'ed: wait for that.
  for (int i = 0; i < 500; ++i) {
    std::string comm;
    if (FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/comm").c_str(), "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof buf, f)) comm = buf;
      std::fclose(f);
    }
    if (comm == "sleep\n") break;
    ::usleep(2000);
  }
  return pid;
}

// How the child ended once reaped: the signal that killed it (0: it was still running and is
// now stopped here).
int Reap(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return 0;
  }
  return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
}

TEST_CASE("a process of a trial under the state directory is a leftover", "[leftovers]") {
  triald::testing::TempDir state;
  triald::testing::TempDir other;
  const pid_t ours =
      SpawnSleeper({"TRIALD_TRIAL_DIR=" + state.path() + "/studies/s/trials/3", "PATH=/bin"});
  const pid_t theirs =
      SpawnSleeper({"TRIALD_TRIAL_DIR=" + other.path() + "/studies/s/trials/3", "PATH=/bin"});
  const pid_t plain = SpawnSleeper({"PATH=/bin"});

  ProcLeftoverProcesses leftovers;
  CHECK(leftovers.Kill(state.path(), {}) == 1);
  CHECK(Reap(ours) == SIGKILL);
  CHECK(Reap(theirs) == 0);  // another state directory's trial
  CHECK(Reap(plain) == 0);
}

TEST_CASE("a lost trial's group is killed only while its leader has the recorded start time",
          "[leftovers]") {
  triald::testing::TempDir state;
  const pid_t leader = SpawnSleeper({"PATH=/bin"});
  common::Result<common::ProcStat> stat = common::ReadProcStat(leader);
  REQUIRE(stat.ok());
  REQUIRE(stat->pgrp == leader);
  ProcLeftoverProcesses leftovers;

  SECTION("another start time: the pid was reused, the group is not the trial's") {
    model::ProcessIdentity reused{leader, leader, stat->start_time + 1};
    CHECK(leftovers.Kill(state.path(), {reused}) == 0);
    CHECK(Reap(leader) == 0);
  }
  SECTION("the recorded identity: the group goes") {
    model::ProcessIdentity lost{leader, leader, stat->start_time};
    CHECK(leftovers.Kill(state.path(), {lost}) == 1);
    CHECK(Reap(leader) == SIGKILL);
  }
}

}  // namespace
}  // namespace triald::daemon
