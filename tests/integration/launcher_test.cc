// ProcessLauncher and Reaper in-process: real vfork+exec, no daemon around them.
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "common/process_util.h"
#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace {

using launcher::LaunchSpec;
using launcher::ProcessOutcome;
using launcher::StopReason;

struct Run {
  ProcessOutcome outcome;
  std::vector<proto::ReportMessage> messages;
  model::ProcessIdentity identity;
  bool exited = false;
  std::chrono::duration<double> elapsed{};
};

class LauncherFixture {
 public:
  LauncherFixture()
      : reaper_(io_, common::MakeNullLogger()),
        launcher_({&io_, &reaper_, common::MakeNullLogger()}) {
    REQUIRE(reaper_.Start().ok());
  }

  LaunchSpec Spec(std::vector<std::string> argv) {
    LaunchSpec s;
    s.executable = argv[0];
    s.argv = std::move(argv);
    s.env = {"PATH=/usr/bin:/bin", "TRIALD_REPORT_FD=3", "TRIALD_STUDY=launcher-test"};
    s.workdir = dir_.path();
    s.log_dir = dir_.path() + "/logs";
    s.kill_grace_s = 1;
    return s;
  }

  // Launches and runs the event loop until the trial is over (bounded); `during` may act on
  // the running process once it has started.
  Run Go(const LaunchSpec& spec, std::function<void(launcher::TrialProcess&)> during = nullptr,
         double limit_s = 30) {
    Run run;
    launcher::TrialProcess* process = nullptr;
    launcher::TrialCallbacks cb;
    cb.on_message = [&](const proto::ReportMessage& m) {
      run.messages.push_back(m);
      if (answer && process != nullptr) answer(*process, m);
    };
    cb.on_exit = [&](const ProcessOutcome& o) {
      run.outcome = o;
      run.exited = true;
      io_.stop();
    };
    auto start = std::chrono::steady_clock::now();
    auto proc = launcher_.Launch(spec, cb);
    INFO(proc.status().message());
    REQUIRE(proc.ok());
    run.identity = (*proc)->identity();
    process = proc->get();
    if (during) during(**proc);
    io_.restart();
    io_.run_for(std::chrono::milliseconds(static_cast<int>(limit_s * 1000)));
    run.elapsed = std::chrono::steady_clock::now() - start;
    REQUIRE(run.exited);
    return run;
  }

  std::string Log(const std::string& stream) {
    std::ifstream in(dir_.path() + "/logs/" + stream + ".log");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // Called with each message the worker sends, to answer it (unset: nothing is answered).
  std::function<void(launcher::TrialProcess&, const proto::ReportMessage&)> answer;

  TempDir dir_;
  boost::asio::io_context io_;
  launcher::Reaper reaper_;
  launcher::ProcessLauncher launcher_;
};

std::vector<std::string> Sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// A process of the test's own, alone in a new process group whose id is `pgid`: placed there
// with /proc/sys/kernel/ns_last_pid (root), as the kernel would when it reuses a number. It is
// born with SIGTERM blocked, so a SIGTERM sent to it stays pending (SigTermPending) instead of
// racing with the check. Returns -1 when another process took the pid first every time.
pid_t ForkAtPid(pid_t pgid) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  for (int attempt = 0; attempt < 200; ++attempt) {
    int f = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
    if (f < 0) return -1;
    std::string last = std::to_string(pgid - 1);
    bool wrote = ::write(f, last.data(), last.size()) == static_cast<ssize_t>(last.size());
    ::close(f);
    if (!wrote) return -1;
    ::pthread_sigmask(SIG_BLOCK, &term, &old);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      for (;;) ::pause();
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid == pgid) {
      ::setpgid(pid, pid);
      return pid;
    }
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  return -1;
}

// Whether a SIGTERM waits for process `pid` (which blocks it), from the pending masks of
// /proc/PID/status (SigPnd: the thread's, ShdPnd: the process's). kill() marks a signal pending
// before it returns, so this sees every SIGTERM sent so far.
bool SigTermPending(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  REQUIRE(in);
  bool pending = false;
  int masks = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigPnd:", 0) != 0 && line.rfind("ShdPnd:", 0) != 0) continue;
    ++masks;
    const unsigned long long mask = std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
    pending = pending || (mask & (1ULL << (SIGTERM - 1))) != 0;
  }
  REQUIRE(masks == 2);
  return pending;
}

}  // namespace

TEST_CASE("a worker sees only 0, 1, 2 and the report pipe, in its own process group",
          "[launcher][integration]") {
  LauncherFixture f;
  // Descriptors the test process holds without O_CLOEXEC must not leak either: the daemon
  // marks inherited ones close-on-exec at start-up, and here every fd we open is CLOEXEC.
  auto run = f.Go(f.Spec({BinDir() + "/triald-test-probe"}));
  CHECK(run.outcome.exit.code == 0);
  std::map<std::string, std::string> attrs;
  for (const auto& m : run.messages) {
    if (m.type == proto::ReportType::kAttr) attrs[m.key] = m.json_value;
  }
  INFO(attrs["fd_links"]);
  CHECK(attrs["fds"] == "[0,1,2,3]");
  CHECK(attrs["own_group"] == "true");
  CHECK(attrs["sigblk"] == "\"0000000000000000\"");
  CHECK(attrs["sigign"] == "\"0000000000000000\"");
  CHECK(attrs["cwd"] == "\"" + f.dir_.path() + "\"");
  CHECK(run.identity.pgid == run.identity.pid);
  CHECK(run.identity.start_time > 0);
  CHECK(f.Log("stdout") == "probe done\n");
}

TEST_CASE("a worker's identity has the start time /proc shows for it", "[launcher][integration]") {
  // Nearly always taken from the boot clock around the spawn (common::StartTimeBetween), else
  // from /proc: either way it must be what /proc/PID/stat says, or a later pid check would take
  // the trial for another process.
  LauncherFixture f;
  for (int i = 0; i < 10; ++i) {
    INFO("launch " << i);
    uint64_t shown = 0;
    auto run = f.Go(f.Spec(Sh("sleep 0.05")), [&](launcher::TrialProcess& p) {
      common::Result<uint64_t> start = common::ProcessStartTime(p.identity().pid);
      REQUIRE(start.ok());
      shown = *start;
    });
    CHECK(run.outcome.exit.code == 0);
    CHECK(run.identity.start_time == shown);
  }
}

TEST_CASE("the daemon's blocked and ignored signals do not reach a worker",
          "[launcher][integration]") {
  LauncherFixture f;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  sigprocmask(SIG_BLOCK, &block, &old);
  auto prev = ::signal(SIGUSR2, SIG_IGN);
  sigset_t before;
  sigprocmask(SIG_SETMASK, nullptr, &before);
  auto run = f.Go(f.Spec({BinDir() + "/triald-test-probe"}));
  // Every signal is blocked around the vfork (vfork_spawn.h); the daemon's mask is back after.
  sigset_t after;
  sigprocmask(SIG_SETMASK, nullptr, &after);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    INFO("signal " << sig);
    CHECK(sigismember(&after, sig) == sigismember(&before, sig));
  }
  CHECK(sigismember(&after, SIGUSR1) == 1);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  ::signal(SIGUSR2, prev);
  std::map<std::string, std::string> attrs;
  for (const auto& m : run.messages) attrs[m.key] = m.json_value;
  CHECK(attrs["sigblk"] == "\"0000000000000000\"");
  CHECK(attrs["sigign"] == "\"0000000000000000\"");
}

TEST_CASE("exit codes, signals and core dumps are reported", "[launcher][integration]") {
  LauncherFixture f;
  SECTION("exit code") {
    auto run = f.Go(f.Spec(Sh("echo oops >&2; exit 7")));
    CHECK_FALSE(run.outcome.exit.signaled);
    CHECK(run.outcome.exit.code == 7);
    CHECK(run.outcome.stderr_tail == "oops\n");
  }
  SECTION("segfault") {
    auto run = f.Go(f.Spec(Sh("kill -SEGV $$")));
    CHECK(run.outcome.exit.signaled);
    CHECK(run.outcome.exit.signal == SIGSEGV);
  }
  SECTION("final line written just before exit is not lost") {
    auto run = f.Go(f.Spec(Sh("echo '{\"type\":\"final\",\"value\":2.5}' >&3; exit 0")));
    REQUIRE(run.messages.size() == 1);
    CHECK(run.messages[0].type == proto::ReportType::kFinal);
    CHECK(run.messages[0].value == 2.5);
  }
}

TEST_CASE("a command that cannot be executed is a spawn error, not a trial",
          "[launcher][integration]") {
  LauncherFixture f;
  LaunchSpec spec = f.Spec({"/nonexistent/worker"});
  auto proc = f.launcher_.Launch(spec, {});
  REQUIRE_FALSE(proc.ok());
  CHECK_THAT(proc.status().message(), Catch::Contains("/nonexistent/worker"));
  LaunchSpec bad_dir = f.Spec({"/bin/true"});
  bad_dir.workdir = "/nonexistent/dir";
  auto proc2 = f.launcher_.Launch(bad_dir, {});
  REQUIRE_FALSE(proc2.ok());
  CHECK_THAT(proc2.status().message(), Catch::Contains("No such file or directory"));
  // Each failure names its step and errno, for the scheduler's policy (spawn_backoff.h).
  CHECK(proc.spawn_error().step == launcher::SpawnStep::kExec);
  CHECK(proc.spawn_error().error_number == ENOENT);
  CHECK(proc2.spawn_error().step == launcher::SpawnStep::kWorkdir);
  CHECK(proc2.spawn_error().error_number == ENOENT);
  CHECK(proc2.status().message() == "workdir /nonexistent/dir: No such file or directory");
  // Not executable: EACCES at exec. A file that is no program: ENOEXEC.
  const std::string plain = f.dir_.Write("plain.txt", "not a program\n", 0644);
  auto proc3 = f.launcher_.Launch(f.Spec({plain}), {});
  REQUIRE_FALSE(proc3.ok());
  CHECK(proc3.spawn_error().step == launcher::SpawnStep::kExec);
  CHECK(proc3.spawn_error().error_number == EACCES);
  const std::string garbage = f.dir_.Write("garbage",
                                           std::string("\x7f"
                                                       "ELF garbage"),
                                           0755);
  auto proc4 = f.launcher_.Launch(f.Spec({garbage}), {});
  REQUIRE_FALSE(proc4.ok());
  CHECK(proc4.spawn_error().step == launcher::SpawnStep::kExec);
  CHECK(proc4.spawn_error().error_number == ENOEXEC);
  // A log folder that cannot be created: the daemon's side, with its errno.
  LaunchSpec no_logs = f.Spec({"/bin/true"});
  no_logs.log_dir = plain + "/logs";
  auto proc5 = f.launcher_.Launch(no_logs, {});
  REQUIRE_FALSE(proc5.ok());
  CHECK(proc5.spawn_error().step == launcher::SpawnStep::kPrepare);
  CHECK(proc5.spawn_error().error_number == ENOTDIR);
  // A child that failed before or at exec is reaped by the spawn itself, before Launch
  // returns: no zombie, without the event loop running the reaper.
  CHECK(ZombieChildren(::getpid()).empty());
}

TEST_CASE("stall_timeout stops a worker that sends no line, each line restarts the count",
          "[launcher][integration]") {
  LauncherFixture f;
  SECTION("silent after one report") {
    LaunchSpec s =
        f.Spec(Sh("echo '{\"type\":\"report\",\"step\":0,\"value\":1}' >&3; "
                  "echo 'loading shard 7' >&2; exec sleep 1000"));
    s.stall_timeout_s = 0.5;
    auto run = f.Go(s);
    CHECK(run.outcome.stop_reason == StopReason::kStall);
    CHECK(run.outcome.exit.signal == SIGTERM);
    CHECK(run.messages.size() == 1);
    CHECK_THAT(run.outcome.stderr_tail, Catch::Contains("loading shard 7"));
    CHECK(run.elapsed.count() >= 0.5);
    CHECK(run.elapsed.count() < 5);
  }
  SECTION("heartbeats every 0.1 s for 1.5 s outlive a 0.5 s stall_timeout") {
    LaunchSpec s =
        f.Spec(Sh("i=0; while [ $i -lt 15 ]; do echo '{\"type\":\"heartbeat\"}' >&3; sleep 0.1; "
                  "i=$((i+1)); done; echo '{\"type\":\"final\",\"value\":1}' >&3"));
    s.stall_timeout_s = 0.5;
    auto run = f.Go(s);
    CHECK(run.outcome.stop_reason == StopReason::kNone);
    CHECK(run.outcome.exit.code == 0);
    CHECK_FALSE(run.outcome.exit.signaled);
    CHECK(run.elapsed.count() >= 1.5);
  }
}

TEST_CASE("a submitter with no account on this host is a spawn error naming the user",
          "[launcher][integration][run-as]") {
  LauncherFixture f;
  launcher::ProcessLauncher::Options options{&f.io_, &f.reaper_, common::MakeNullLogger()};
  options.run_as_submitter = true;
  launcher::ProcessLauncher run_as(options);
  LaunchSpec spec = f.Spec({"/bin/true"});
  spec.submitter = {4242424, "triald-no-such-user"};
  auto proc = run_as.Launch(spec, {});
  REQUIRE_FALSE(proc.ok());
  CHECK(proc.status().message() ==
        "cannot run the trial as its submitter: user \"triald-no-such-user\" (uid 4242424 when "
        "it submitted) has no passwd entry on this host");
  // A person has to act: the scheduler holds the study (spawn_backoff.h), not spins.
  CHECK(proc.spawn_error().step == launcher::SpawnStep::kCredentials);
  CHECK(proc.spawn_error().error_number == 0);
  // Nothing was started, and no trial folder given away.
  CHECK(ZombieChildren(::getpid()).empty());
}

TEST_CASE("a user switch the kernel refuses is a credentials spawn error, persistent",
          "[launcher][integration][run-as]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to become nobody first");
  passwd* pw = ::getpwnam("nobody");
  if (pw == nullptr) TRIALD_SKIP("no user nobody on this host");
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  // A launcher that cannot switch users (it runs as nobody, without CAP_SETGID) is asked to run
  // a trial as nobody: everything on the daemon's side works (nobody may give its own folders
  // to itself), and setgroups in the child fails with EPERM. Run in a child process, which can
  // drop root for good; its exit code is the answer.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(10);
    char tmpl[] = "/tmp/triald-credsXXXXXX";
    if (::mkdtemp(tmpl) == nullptr) ::_exit(11);
    const std::string root = tmpl;
    int code = 0;
    {
      boost::asio::io_context io;
      launcher::Reaper reaper(io, common::MakeNullLogger());
      launcher::ProcessLauncher::Options options{&io, &reaper, common::MakeNullLogger()};
      options.run_as_submitter = true;
      options.trial_root = root;
      launcher::ProcessLauncher run_as(options);
      LaunchSpec spec;
      spec.executable = "/bin/true";
      spec.argv = {"/bin/true"};
      spec.env = {"PATH=/usr/bin:/bin"};
      spec.workdir = root;
      spec.trial_dir = root + "/trials/0";
      spec.log_dir = root + "/logs/0";
      spec.submitter = {static_cast<int64_t>(uid), "nobody"};
      launcher::LaunchResult r = run_as.Launch(spec, {});
      if (r.ok()) {
        code = 12;
      } else if (r.spawn_error().step != launcher::SpawnStep::kCredentials) {
        code = 13;
      } else if (r.spawn_error().error_number != EPERM) {
        code = 14;
      } else if (r.status().message().rfind("becoming nobody (uid ", 0) != 0) {
        code = 15;
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  // 13: another step failed; 14: another errno; 15: the message does not name the user.
  CHECK(WEXITSTATUS(status) == 0);
  // The scheduler's policy holds the study after a few of these (spawn_backoff.h).
}

TEST_CASE("timeout stops the group with SIGTERM, a worker ignoring it gets SIGKILL",
          "[launcher][integration]") {
  LauncherFixture f;
  SECTION("polite worker") {
    LaunchSpec s = f.Spec(Sh("sleep 1000"));
    s.timeout_s = 0.3;
    auto run = f.Go(s);
    CHECK(run.outcome.stop_reason == StopReason::kTimeout);
    CHECK(run.outcome.exit.signaled);
    CHECK(run.outcome.exit.signal == SIGTERM);
    CHECK_FALSE(run.outcome.killed);
  }
  SECTION("worker ignoring SIGTERM") {
    LaunchSpec s = f.Spec(Sh("trap '' TERM; while :; do sleep 0.05; done"));
    s.timeout_s = 0.3;
    s.kill_grace_s = 0.5;
    auto run = f.Go(s);
    CHECK(run.outcome.stop_reason == StopReason::kTimeout);
    CHECK(run.outcome.killed);
    CHECK(run.outcome.exit.signal == SIGKILL);
    CHECK_FALSE(common::ProcessGroupExists(run.identity.pgid));
  }
}

TEST_CASE("a background grandchild left by an exited main process is stopped and reaped",
          "[launcher][integration]") {
  LauncherFixture f;
  auto run = f.Go(f.Spec(Sh("sleep 1000 & echo '{\"type\":\"final\",\"value\":1}' >&3; exit 0")));
  CHECK(run.outcome.exit.code == 0);
  CHECK(run.outcome.strays);
  CHECK(run.outcome.stop_reason == StopReason::kNone);
  CHECK_FALSE(common::ProcessGroupExists(run.identity.pgid));
  f.reaper_.ReapNow();
  CHECK(ZombieChildren(::getpid()).empty());
  CHECK(f.reaper_.orphans_reaped() >= 1);  // the adopted sleep
}

TEST_CASE("garbage and oversized lines on the report pipe are protocol errors",
          "[launcher][integration]") {
  LauncherFixture f;
  SECTION("not JSON") {
    auto run = f.Go(f.Spec(Sh("echo 'hello' >&3; sleep 1000")));
    CHECK(run.outcome.stop_reason == StopReason::kProtocol);
    CHECK_THAT(run.outcome.protocol_error, Catch::Contains("not JSON"));
  }
  SECTION("10 MB without a newline") {
    auto run = f.Go(f.Spec(Sh("head -c 10000000 /dev/zero | tr '\\0' 'x' >&3; sleep 1000")));
    CHECK(run.outcome.stop_reason == StopReason::kProtocol);
    CHECK_THAT(run.outcome.protocol_error, Catch::Contains("longer than 65536"));
  }
  SECTION("unterminated bad last line") {
    auto run = f.Go(f.Spec(Sh("printf '{\"type\":\"nope\"}' >&3")));
    CHECK_THAT(run.outcome.protocol_error, Catch::Contains("unknown type"));
  }
}

TEST_CASE("a worker that sends more than max_report_bytes ends as a protocol error",
          "[launcher][integration]") {
  LauncherFixture f;
  LaunchSpec spec =
      f.Spec(Sh("while :; do echo '{\"type\":\"heartbeat\"}' >&3 || exit 9; "
                "done"));
  spec.max_report_bytes = 4096;
  auto run = f.Go(spec);
  CHECK(run.outcome.stop_reason == StopReason::kProtocol);
  CHECK(run.outcome.protocol_error ==
        "the trial sent more than 4096 bytes on the trial channel ([study] max_report_bytes = "
        "4096)");
  // Lines are delivered up to the cap, not past it.
  CHECK(run.messages.size() <= 4096 / 20);
}

TEST_CASE("a worker that asks on the trial channel reads the answer from the same descriptor",
          "[launcher][integration]") {
  LauncherFixture f;
  f.answer = [](launcher::TrialProcess& p, const proto::ReportMessage& m) {
    if (m.type == proto::ReportType::kShouldPrune)
      p.Answer(R"({"type":"should_prune","value":true})");
    if (m.type == proto::ReportType::kSuggest) {
      p.Answer(R"({"type":"suggestion","name":")" + m.name + R"(","value":0.5})");
    }
  };
  // The worker asks twice, reads both answers in order and hands them back as attributes.
  auto run = f.Go(f.Spec(Sh(R"SH(
echo '{"type":"should_prune"}' >&3; read a <&3
echo '{"type":"suggest","name":"lr","distribution":{"type":"float","low":0,"high":1}}' >&3
read b <&3
printf '{"type":"attr","key":"a","value":%s}\n' "$a" >&3
printf '{"type":"attr","key":"b","value":%s}\n' "$b" >&3
echo '{"type":"final","value":1}' >&3)SH")));
  INFO(run.outcome.protocol_error << " / " << run.outcome.stderr_tail);
  CHECK(run.outcome.exit.code == 0);
  CHECK(run.outcome.protocol_error.empty());
  std::map<std::string, std::string> attrs;
  for (const auto& m : run.messages) {
    if (m.type == proto::ReportType::kAttr) attrs[m.key] = m.json_value;
  }
  CHECK(attrs["a"] == R"({"type":"should_prune","value":true})");
  // (attribute values are re-encoded by the daemon: 0.5 comes back as 5E-1)
  CHECK_THAT(attrs["b"], Catch::StartsWith(R"({"type":"suggestion","name":"lr","value":)"));
  CHECK(boost::json::parse(attrs["b"]).at("value").as_double() == 0.5);
  REQUIRE(run.messages.size() == 5);
  CHECK(run.messages[4].type == proto::ReportType::kFinal);
}

TEST_CASE("a worker that asks and exits without reading its answers ends as it exited",
          "[launcher][integration]") {
  LauncherFixture f;
  int answered = 0;
  f.answer = [&answered](launcher::TrialProcess& p, const proto::ReportMessage& m) {
    if (m.type != proto::ReportType::kShouldPrune) return;
    ++answered;
    // Whether the answer reaches the socket before the worker closes its end or not (then it
    // is dropped), nothing of it reaches the outcome.
    p.Answer(R"({"type":"should_prune","value":false})");
  };
  auto run = f.Go(f.Spec(Sh(R"SH(
echo '{"type":"should_prune"}' >&3
echo '{"type":"should_prune"}' >&3
exec 3>&-
sleep 0.2
exit 4)SH")));
  CHECK(answered == 2);
  CHECK(run.outcome.exit.code == 4);
  CHECK(run.outcome.protocol_error.empty());
}

TEST_CASE("a worker that never reads its answers is stopped once they pile up",
          "[launcher][integration]") {
  LauncherFixture f;
  f.answer = [](launcher::TrialProcess& p, const proto::ReportMessage& m) {
    if (m.type == proto::ReportType::kShouldPrune)
      p.Answer(R"({"type":"should_prune","value":false})");
  };
  // 200,000 questions, about 7 MB of answers: past the socket's buffer and the daemon's cap.
  auto run = f.Go(f.Spec(Sh("yes '{\"type\":\"should_prune\"}' | head -n 200000 >&3; sleep 1000")));
  CHECK(run.outcome.stop_reason == StopReason::kProtocol);
  CHECK_THAT(run.outcome.protocol_error, Catch::Contains("answers unread"));
  CHECK(run.elapsed < std::chrono::seconds(20));
}

TEST_CASE("the scheduler's refusal of a request ends the trial FAIL(protocol) with its message",
          "[launcher][integration]") {
  LauncherFixture f;
  f.answer = [](launcher::TrialProcess& p, const proto::ReportMessage& m) {
    if (m.type == proto::ReportType::kSuggest) p.FailProtocol("suggest \"x\": refused");
  };
  auto run =
      f.Go(f.Spec(Sh("echo '{\"type\":\"suggest\",\"name\":\"x\",\"distribution\":"
                     "{\"type\":\"int\",\"low\":0,\"high\":1}}' >&3; read a <&3; sleep 1000")));
  CHECK(run.outcome.stop_reason == StopReason::kProtocol);
  CHECK(run.outcome.protocol_error == "suggest \"x\": refused");
}

TEST_CASE("flooding stdout neither blocks the worker nor grows the log past its cap",
          "[launcher][integration]") {
  LauncherFixture f;
  LaunchSpec s =
      f.Spec(Sh("head -c 50000000 /dev/zero; echo '{\"type\":\"final\",\"value\":3}' >&3"));
  s.log_head_bytes = 64 * 1024;
  s.log_tail_bytes = 64 * 1024;
  auto run = f.Go(s);
  CHECK(run.outcome.exit.code == 0);
  REQUIRE(run.messages.size() == 1);
  auto size = std::filesystem::file_size(f.dir_.path() + "/logs/stdout.log");
  CHECK(size <= 2 * 64 * 1024 + 100);
  CHECK(size >= 2 * 64 * 1024);
  CHECK_THAT(f.Log("stdout"), Catch::Contains("bytes omitted]"));
}

TEST_CASE("Stop() during a run is reported with its reason, the first reason wins",
          "[launcher][integration]") {
  LauncherFixture f;
  auto run = f.Go(f.Spec(Sh("sleep 1000")), [](launcher::TrialProcess& p) {
    p.Stop(StopReason::kPrune);
    p.Stop(StopReason::kCancel);
  });
  CHECK(run.outcome.stop_reason == StopReason::kPrune);
  CHECK(run.outcome.exit.signal == SIGTERM);
}

TEST_CASE("destroying a TrialProcess kills its whole group at once", "[launcher][integration]") {
  LauncherFixture f;
  launcher::TrialCallbacks cb;
  bool exited = false;
  cb.on_exit = [&](const ProcessOutcome&) { exited = true; };
  auto proc = f.launcher_.Launch(f.Spec(Sh("sleep 1000 & sleep 1000")), cb);
  REQUIRE(proc.ok());
  pid_t pgid = (*proc)->identity().pgid;
  proc->reset();
  for (int i = 0; i < 200 && common::ProcessGroupExists(pgid); ++i) {
    f.io_.restart();
    f.io_.run_for(std::chrono::milliseconds(20));
  }
  CHECK_FALSE(common::ProcessGroupExists(pgid));
  CHECK_FALSE(exited);  // nobody is told about an abandoned trial
}

TEST_CASE("a trial's process group id is never signalled once the group is empty",
          "[launcher][integration]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to place a process at a chosen pid");
  if (::access("/proc/sys/kernel/ns_last_pid", W_OK) != 0) {
    TRIALD_SKIP("/proc/sys/kernel/ns_last_pid is not writable here");
  }
  LauncherFixture f;
  // The main process exits at once; a process that left the group keeps the output pipes open
  // for a while, so the trial is not over when its group is already empty. Its group id is
  // then given to a process of ours (as the kernel may reuse it), and the trial is stopped.
  boost::asio::steady_timer poll(f.io_);
  pid_t victim = -1;
  std::function<void()> wait_empty;
  auto run = f.Go(f.Spec(Sh("setsid sleep 3 </dev/null & exit 0")), [&](launcher::TrialProcess& p) {
    const pid_t pgid = p.identity().pgid;
    wait_empty = [&, pgid] {
      poll.expires_after(std::chrono::milliseconds(20));
      poll.async_wait([&, pgid](const boost::system::error_code& ec) {
        if (ec) return;
        if (common::ProcessGroupExists(pgid)) {
          wait_empty();
          return;
        }
        // Empty and reaped; the launcher's own check runs every few milliseconds.
        ::usleep(100 * 1000);
        victim = ForkAtPid(pgid);
        p.Stop(StopReason::kCancel);
      });
    };
    wait_empty();
  });
  if (victim < 0) TRIALD_SKIP("could not place a process at the freed pid (a busy machine)");
  // The trial is over: whatever the launcher signals for it, it has signalled.
  const bool terminated = SigTermPending(victim);
  ::kill(victim, SIGKILL);
  ::waitpid(victim, nullptr, 0);
  CHECK_FALSE(terminated);  // the victim got no SIGTERM
  CHECK(run.outcome.exit.code == 0);
}

}  // namespace triald::testing
