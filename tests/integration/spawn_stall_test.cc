// A real triald: trials that cannot be started hold their study instead of failing it
// (daemon/scheduler/spawn_backoff.h), and [study] stall_timeout ends a silent trial
// FAIL(stalled). The vfork that fails with EAGAIN under a process limit is shown on the launcher
// itself (a process limit does not bind root, so that case runs as a scratch uid in a child).

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace {
namespace json = boost::json;

// The worker of the deploy cases: reports a final value; `rm_self` also deletes its own file,
// so that the next trial finds its command missing. It waits 1 s first: with several trials in
// parallel, one that started with the others must have had its script opened by sh before the
// file goes, or it fails (exit 127) instead of having run.
std::string DeployScript(bool rm_self) {
  return std::string("#!/bin/sh\n") + (rm_self ? "sleep 1\nrm -f \"$0\"\n" : "") +
         "echo '{\"type\":\"final\",\"value\":1}' >&3\n";
}

// Writes `content` to `path` as an executable in one step (a rename), as a deploy would.
void Deploy(TempDir& dir, const std::string& path, const std::string& content) {
  const std::string tmp = dir.Write("deploy.tmp", content, 0755);
  REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0);
}

// The study's status once its spawn state is held (bounded).
json::object WaitHeld(TestDaemon& daemon, const std::string& study, double timeout_s = 15) {
  return WaitStatus(
      daemon, study,
      [](const json::object& s) {
        return s.at("spawn").is_object() && s.at("spawn").at("held").as_bool();
      },
      timeout_s);
}

TEST_CASE("a command missing for 2 s holds the study, which then completes every trial",
          "[integration][spawn]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  const std::string worker = dir.path() + "/worker.sh";
  Deploy(dir, worker, DeployScript(/*rm_self=*/true));
  const int n = 5;
  std::string toml = ExecSweep("deploy", "[\"" + worker + "\"]", n, 1, 0, 2, dir.path());
  daemon.Submit(toml, dir.Write("deploy.toml", toml));
  const auto missing_since = std::chrono::steady_clock::now();

  // Trial 0 ran and removed the command: trial 1 cannot start, and after 3 attempts in a row
  // the study is held, with the reason in `status`.
  json::object s = WaitHeld(daemon, "deploy");
  INFO(json::serialize(s));
  CHECK(s.at("state").as_string() == "RUNNING");
  CHECK(s.at("spawn").at("cause").as_string() == "persistent");
  CHECK(s.at("spawn").at("failures").as_int64() >= 3);
  CHECK_THAT(std::string(s.at("spawn").at("reason").as_string()),
             Catch::Contains("exec " + worker + ": No such file or directory"));
  Ctl status = Trialctl(daemon.socket(), {"status", "deploy"});
  CHECK(status.code == 0);
  CHECK_THAT(status.out, Catch::Contains("HELD: trials cannot start: exec " + worker +
                                         ": No such file or directory (persistent, "));
  json::array trials = daemon.Trials("deploy");
  CHECK(trials.size() == 2);
  CHECK(CountState(trials, "COMPLETE") == 1);
  CHECK(CountState(trials, "WAITING") == 1);
  CHECK(CountState(trials, "FAIL") == 0);

  // The command comes back 2 s after it went: the study goes on by itself.
  std::this_thread::sleep_until(missing_since + std::chrono::seconds(2));
  Deploy(dir, worker, DeployScript(/*rm_self=*/false));
  json::object done = daemon.WaitStudy("deploy", 60);
  CHECK(done.at("state").as_string() == "COMPLETE");
  CHECK(done.at("spawn").is_null());
  trials = daemon.Trials("deploy");
  CHECK(trials.size() == static_cast<size_t>(n));
  CHECK(CountState(trials, "COMPLETE") == n);
  CHECK_THAT(Trialctl(daemon.socket(), {"status", "deploy"}).out, !Catch::Contains("cannot start"));
  CHECK(ZombieChildren(daemon.pid()).empty());
}

TEST_CASE("a command that stays missing holds the study without using up its trials",
          "[integration][spawn]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  const std::string worker = dir.path() + "/worker.sh";
  Deploy(dir, worker, DeployScript(/*rm_self=*/true));
  const int n = 300;
  std::string toml = ExecSweep("gone", "[\"" + worker + "\"]", n, 4, 0, 2, dir.path());
  daemon.Submit(toml, dir.Write("gone.toml", toml));
  const int64_t failures_at_hold = WaitHeld(daemon, "gone").at("spawn").at("failures").as_int64();
  // Two more attempts after the hold, each after a longer back-off: the study keeps trying,
  // well past the point where the old daemon had burned all 300 trials (0.44 s), and draws no
  // other trial. (How long each wait is, is the back-off policy's unit check,
  // daemon/spawn_backoff_test.cc.)
  json::object s = WaitStatus(daemon, "gone", [&](const json::object& st) {
    return st.at("spawn").is_object() &&
           st.at("spawn").at("failures").as_int64() >= failures_at_hold + 2;
  });
  INFO(json::serialize(s));
  CHECK(s.at("state").as_string() == "RUNNING");
  CHECK(s.at("spawn").at("held").as_bool());
  CHECK(s.at("spawn").at("failures").as_int64() >= 4);
  CHECK(s.at("spawn").at("failures").as_int64() < 20);  // backing off, not spinning
  json::array trials = daemon.Trials("gone");
  // The first trials ran (one removed the command, up to 4 started before it did); the next
  // one waits, and no other is drawn while the study backs off.
  CHECK(CountState(trials, "FAIL") == 0);
  CHECK(CountState(trials, "COMPLETE") >= 1);
  CHECK(CountState(trials, "COMPLETE") <= 4);
  CHECK(CountState(trials, "WAITING") == 1);
  CHECK(trials.size() <= 5);
  CHECK(Trialctl(daemon.socket(), {"cancel", "gone"}).code == 0);
  CHECK(daemon.WaitStudy("gone").at("state").as_string() == "CANCELLED");
}

TEST_CASE("vfork refused by the process limit is reported as EAGAIN at the fork step",
          "[integration][spawn]") {
  if (::geteuid() != 0) TRIALD_SKIP("needs root to run the launcher as a scratch uid");
  // In a child: a uid no process uses, a process limit of 1 (the child itself), then a launch.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 10;
    const uid_t scratch = 3'000'000'000u - static_cast<uid_t>(::getpid());
    struct rlimit one = {1, 1};
    if (::setgid(scratch) != 0 || ::setuid(scratch) != 0) ::_exit(11);
    if (::setrlimit(RLIMIT_NPROC, &one) != 0) ::_exit(12);
    char tmpl[] = "/tmp/triald-nproc-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) ::_exit(13);
    {
      boost::asio::io_context io;
      launcher::Reaper reaper(io, common::MakeNullLogger());
      if (!reaper.Start().ok()) ::_exit(14);
      launcher::ProcessLauncher pl({&io, &reaper, common::MakeNullLogger()});
      launcher::LaunchSpec spec;
      spec.executable = "/bin/true";
      spec.argv = {"/bin/true"};
      spec.workdir = tmpl;
      spec.log_dir = std::string(tmpl) + "/logs";
      launcher::LaunchResult r = pl.Launch(spec, {});
      if (r.ok()) {
        code = 15;
      } else if (r.spawn_error().step != launcher::SpawnStep::kFork) {
        code = 16;
      } else if (r.spawn_error().error_number != EAGAIN) {
        code = 17;
      } else if (r.status().message() != "fork: Resource temporarily unavailable") {
        code = 18;
      } else {
        code = 0;
      }
    }
    std::error_code ignored;
    std::filesystem::remove_all(tmpl, ignored);  // no process to fork for it under this limit
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  // 15: launched; 16: another step; 17: another errno; 18: another message.
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("stall_timeout ends a silent trial FAIL(stalled) with its stderr, heartbeats keep one",
          "[integration][stall]") {
  TempDir dir;
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  // Even x: one report, a line on stderr, then silence. Odd: heartbeats for 3 s, then final.
  dir.Write("worker.sh",
            "case \"$TRIALD_TRIAL\" in\n"
            "  *[02468]) echo '{\"type\":\"report\",\"step\":0,\"value\":1}' >&3\n"
            "            echo \"trial $TRIALD_TRIAL: waiting for the data loader\" >&2\n"
            "            exec sleep 1000 ;;\n"
            "  *) i=0; while [ $i -lt 30 ]; do echo '{\"type\":\"heartbeat\"}' >&3; sleep 0.1;\n"
            "       i=$((i+1)); done\n"
            "     echo '{\"type\":\"final\",\"value\":2}' >&3 ;;\n"
            "esac\n",
            0755);
  std::string toml = ExecSweep("stall", "[\"sh\", \"worker.sh\"]", 2, 2, 0, 2, dir.path());
  toml.replace(toml.find("[objective]\n"), 12, "stall_timeout = 1\n\n[objective]\n");
  const auto start = std::chrono::steady_clock::now();
  daemon.Submit(toml, dir.Write("stall.toml", toml));
  json::object status = daemon.WaitStudy("stall", 60);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = daemon.Trials("stall");
  REQUIRE(trials.size() == 2);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    if (t.at("number").as_int64() == 0) {
      CHECK(t.at("state").as_string() == "FAIL");
      CHECK(t.at("fail_reason").as_string() == "stalled");
      CHECK_THAT(std::string(t.at("fail_detail").as_string()),
                 Catch::StartsWith("sent no line on the trial channel for stall_timeout of 1 s") &&
                     Catch::EndsWith("stderr ends: trial 0: waiting for the data loader"));
    } else {
      // Three times the stall_timeout, kept alive by heartbeats alone.
      CHECK(t.at("state").as_string() == "COMPLETE");
      CHECK(t.at("value").to_number<double>() == 2);
    }
  }
  CHECK(took >= 3);
  CHECK(WaitNoProcessesOfStudy("stall").empty());
}

}  // namespace
}  // namespace triald::testing
