// End-to-end: a real triald on a temporary state directory runs sweeps whose objectives are
// small shell scripts, and every test checks the trial states, that the daemon kept serving,
// and that no zombie and no process of any trial is left behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "daemon/storage/sqlite_storage.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

// Runs `script` (sh) as the objective of an n-trial study and returns the finished trials.
struct DaemonSweep {
  TempDir dir;
  TestDaemon daemon{dir.File("state")};
  DaemonSweep() { daemon.Start(); }

  json::array Run(const std::string& study, const std::string& script, int n_trials,
                  int parallelism, double timeout_s = 0, double grace_s = 2) {
    dir.Write(study + ".sh", script, 0755);
    std::string toml = ExecSweep(study, "[\"sh\", \"" + study + ".sh\"]", n_trials, parallelism,
                                 timeout_s, grace_s);
    std::string path = dir.Write(study + ".toml", toml);
    daemon.Submit(toml, path);
    json::object status = daemon.WaitStudy(study);
    CHECK(status.at("state").as_string() == "COMPLETE");
    json::array trials = daemon.Trials(study);
    CHECK(static_cast<int>(trials.size()) == n_trials);
    CheckClean(study);
    return trials;
  }

  void CheckClean(const std::string& study) {
    CHECK(WaitNoProcessesOfStudy(study).empty());
    CHECK(ZombieChildren(daemon.pid()).empty());
    daemon.Call("ping");  // still serving
  }
};

const char kFinal[] = "echo '{\"type\":\"final\",\"value\":1.5}' >&3\n";

}  // namespace

TEST_CASE("a sweep whose trials complete records every value and parameter",
          "[daemon][integration]") {
  DaemonSweep s;
  auto trials =
      s.Run("ok",
            "python_free=1\n"
            "echo \"params: $TRIALD_PARAMS\"\n"
            "echo '{\"type\":\"report\",\"step\":0,\"value\":3}' >&3\n"
            "echo '{\"type\":\"attr\",\"key\":\"trial\",\"value\":'$TRIALD_TRIAL'}' >&3\n" +
                std::string(kFinal),
            6, 3);
  CHECK(CountState(trials, "COMPLETE") == 6);
  for (const json::value& t : trials) {
    CHECK(t.at("value").as_double() == 1.5);
    double x = t.at("params").at("x").to_number<double>();
    CHECK(x >= -1.0);
    CHECK(x <= 1.0);
    CHECK(t.at("intermediate").as_array().size() == 1);
    CHECK(t.at("attrs").at("trial").as_int64() == t.at("number").as_int64());
    CHECK(t.at("fail_reason").is_null());
    CHECK(t.at("duration_s").as_double() >= 0);
  }
  // The trial's stdout was captured in its own log.
  json::value logs = s.daemon.Call("logs", {{"study", "ok"}, {"trial", 0}, {"stream", "stdout"}});
  CHECK_THAT(std::string(logs.at("content").as_string()), Catch::StartsWith("params: {\"x\":"));
  json::value best = s.daemon.Call("best", {{"study", "ok"}});
  CHECK(best.at("state").as_string() == "COMPLETE");
}

TEST_CASE("a trial exiting non-zero is FAIL(exit) with its code and stderr tail",
          "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("exits", "echo 'something broke' >&2\nexit 3\n", 3, 2);
  CHECK(CountState(trials, "FAIL") == 3);
  for (const json::value& t : trials) {
    CHECK(t.at("fail_reason").as_string() == "exit");
    CHECK(t.at("exit_code").as_int64() == 3);
    CHECK(t.at("stderr_tail").as_string() == "something broke\n");
  }
}

TEST_CASE("a segfaulting trial is FAIL(signal) naming the signal", "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("segv", "kill -SEGV $$\n", 2, 2);
  for (const json::value& t : trials) {
    CHECK(t.at("state").as_string() == "FAIL");
    CHECK(t.at("fail_reason").as_string() == "signal");
    CHECK(t.at("signal").as_int64() == SIGSEGV);
    CHECK_THAT(std::string(t.at("fail_detail").as_string()), Catch::Contains("SIGSEGV"));
  }
}

TEST_CASE("a trial hanging past its timeout is stopped: FAIL(timeout)", "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("hang", "sleep 1000\n", 2, 2, /*timeout_s=*/0.5);
  for (const json::value& t : trials) {
    CHECK(t.at("fail_reason").as_string() == "timeout");
    CHECK(t.at("duration_s").as_double() < 30);
  }
}

TEST_CASE("a trial ignoring SIGTERM is killed after the grace period", "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("stubborn", "trap '' TERM\nwhile :; do sleep 0.05; done\n", 2, 2,
                      /*timeout_s=*/0.3, /*grace_s=*/0.5);
  for (const json::value& t : trials) {
    CHECK(t.at("fail_reason").as_string() == "timeout");
    CHECK_THAT(std::string(t.at("fail_detail").as_string()), Catch::Contains("SIGKILL"));
  }
}

TEST_CASE("a background grandchild does not outlive its trial", "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("orphan", "sleep 1000 &\n" + std::string(kFinal), 3, 3);
  CHECK(CountState(trials, "COMPLETE") == 3);
}

TEST_CASE("garbage on the report fd is FAIL(protocol) and the daemon keeps serving",
          "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("garbage", "head -c 1000000 /dev/urandom >&3\nsleep 1000\n", 2, 2);
  for (const json::value& t : trials) {
    CHECK(t.at("fail_reason").as_string() == "protocol");
  }
  auto ok = s.Run("after-garbage", kFinal, 1, 1);
  CHECK(CountState(ok, "COMPLETE") == 1);
}

TEST_CASE("exiting 0 without a final value is FAIL(protocol)", "[daemon][integration]") {
  DaemonSweep s;
  auto trials = s.Run("nofinal", "exit 0\n", 1, 1);
  CHECK(trials[0].at("fail_reason").as_string() == "protocol");
  CHECK_THAT(std::string(trials[0].at("fail_detail").as_string()),
             Catch::Contains("without reporting a final value"));
}

TEST_CASE("the worker sees only its own descriptors when run by triald", "[daemon][integration]") {
  DaemonSweep s;
  std::string toml = ExecSweep("probe", "[\"" + BinDir() + "/triald-test-probe\"]", 2, 2);
  s.daemon.Submit(toml, s.dir.Write("probe.toml", toml));
  s.daemon.WaitStudy("probe");
  for (const json::value& t : s.daemon.Trials("probe")) {
    CHECK(t.at("state").as_string() == "COMPLETE");
    INFO(json::serialize(t.at("attrs").at("fd_links")));
    CHECK(json::serialize(t.at("attrs").at("fds")) == "[0,1,2,3]");
    CHECK(t.at("attrs").at("own_group").as_bool());
  }
  s.CheckClean("probe");
}

TEST_CASE("SIGTERM to triald stops running trials, records them and exits 0",
          "[daemon][integration]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  dir.Write("slow.sh", "sleep 1000\n", 0755);
  std::string toml = ExecSweep("slow", "[\"sh\", \"slow.sh\"]", 4, 2);
  daemon.Submit(toml, dir.Write("slow.toml", toml));
  WaitStatus(daemon, "slow", [](const json::object& s) { return s.at("running").as_int64() == 2; });
  REQUIRE(ProcessesOfStudy("slow").size() >= 2);
  int status = daemon.Stop();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(WaitNoProcessesOfStudy("slow").empty());
  // Restart and read what was recorded: the two trials were ended by the shutdown (the
  // restarted daemon then resumes the study with trials 2 and 3).
  TestDaemon again(dir.File("state"));
  again.Start();
  json::array trials = again.Trials("slow");
  REQUIRE(trials.size() >= 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(trials[i].at("state").as_string() == "FAIL");
    CHECK(trials[i].at("fail_reason").as_string() == "shutdown");
  }
  again.Call("cancel", {{"study", "slow"}});
  again.WaitStudy("slow");
  CHECK(WaitNoProcessesOfStudy("slow").empty());
}

TEST_CASE("the state directory's lock ends with the daemon, whoever else holds its file",
          "[daemon][integration][fault]") {
  // A child the daemon forked or vforked (a trial between its vfork and its exec) shares the
  // lock file's open file description; when the daemon is SIGKILLed at that moment, the next
  // daemon must not be refused for as long as the child lives. This process takes that child's
  // place: it duplicates the daemon's descriptor of triald.lock (pidfd_getfd) and keeps it.
  TempDir dir;
  TestDaemon first(dir.File("state"));
  first.Start();
  const std::string lock_path = std::filesystem::canonical(dir.File("state")) / "triald.lock";
  int lock_fd = -1;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(first.pid()) + "/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec) == lock_path) {
      lock_fd = std::stoi(entry.path().filename().string());
    }
  }
  REQUIRE(lock_fd >= 0);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, first.pid(), 0));
  REQUIRE(pidfd >= 0);
  const int held = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, lock_fd, 0));
  INFO("pidfd_getfd: " << std::strerror(errno));
  REQUIRE(held >= 0);
  ::close(pidfd);
  {
    // While the daemon lives, a second one is refused.
    const std::string command = BinDir() + "/triald --state-dir '" + dir.File("state") +
                                "' --socket '" + dir.File("twin.sock") + "' 2>&1";
    FILE* twin = ::popen(command.c_str(), "r");
    REQUIRE(twin != nullptr);
    std::string said;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, twin)) > 0;) said.append(buf, n);
    const int status = ::pclose(twin);
    INFO(said);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    CHECK_THAT(said, Catch::Contains("is in use by another triald"));
  }
  first.Kill();
  TestDaemon next(dir.File("state"));
  next.Start();  // not refused: the held descriptor is not the daemon's lock
  CHECK(next.Call("ping", {}).as_object().contains("pid"));
  ::close(held);
}

TEST_CASE("triald killed with SIGKILL mid-sweep recovers: exactly n_trials finished, none lost",
          "[daemon][integration][fault]") {
  TempDir dir;
  const int kTrials = 24;
  // Each trial runs long enough that some are always in flight when the daemon dies; a
  // grandchild makes sure recovery also finds processes that PDEATHSIG does not reach.
  dir.Write("work.sh",
            "sleep 30 &\nsleep 0.$(( (TRIALD_TRIAL * 7) % 5 + 1 ))\n"
            "echo '{\"type\":\"final\",\"value\":'$TRIALD_TRIAL'}' >&3\n",
            0755);
  std::string toml = ExecSweep("crashy", "[\"sh\", \"work.sh\"]", kTrials, 4);
  std::string path = dir.Write("crashy.toml", toml);
  std::mt19937 rng(12345);
  int kills = 0;
  {
    TestDaemon first(dir.File("state"));
    first.Start();
    first.Submit(toml, path);
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 300));
    first.Kill();
    ++kills;
  }
  for (int round = 0; round < 2; ++round) {
    TestDaemon d(dir.File("state"));
    d.Start();
    std::this_thread::sleep_for(std::chrono::milliseconds(400 + rng() % 400));
    d.Kill();
    ++kills;
  }
  TestDaemon last(dir.File("state"));
  last.Start();
  json::object status = last.WaitStudy("crashy", 120);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = last.Trials("crashy");
  REQUIRE(static_cast<int>(trials.size()) == kTrials);
  int lost = 0;
  for (int i = 0; i < kTrials; ++i) {
    const json::object& t = trials[i].as_object();
    CHECK(t.at("number").as_int64() == i);
    std::string state(t.at("state").as_string());
    CHECK((state == "COMPLETE" || state == "FAIL"));
    if (state == "FAIL") {
      CHECK(t.at("fail_reason").as_string() == "lost");
      ++lost;
    }
  }
  CHECK(lost >= 1);          // the kills hit running trials
  CHECK(lost <= 4 * kills);  // at most the trials in flight at each kill
  CHECK(WaitNoProcessesOfStudy("crashy").empty());
  CHECK(ZombieChildren(last.pid()).empty());
  last.Stop();
  auto integrity = storage::SqliteIntegrityCheck(dir.File("state") + "/triald.db");
  REQUIRE(integrity.ok());
  CHECK(*integrity == "ok");
}

TEST_CASE("a second triald on the same state directory is refused", "[daemon][integration]") {
  TempDir dir;
  TestDaemon first(dir.File("state"));
  first.Start();
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open("/dev/null", O_WRONLY);
    ::dup2(fd, 2);
    std::string exe = BinDir() + "/triald";
    std::string state = dir.File("state");
    ::execl(exe.c_str(), exe.c_str(), "--state-dir", state.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  first.Call("ping");
}

}  // namespace triald::testing
