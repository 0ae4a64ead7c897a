// Faults around define-by-run trials ([objective] kind = "python"): a real triald runs
// Optuna-style objectives through the Python runner while they ask on the two-way trial channel.
// A worker SIGKILLed or stuck while it asks, triald SIGKILLed while several workers ask, and the
// processes an objective starts (as joblib/loky and multiprocessing do, and a double-forked
// setsid daemon): each case checks the trial states, that the study goes on, and which
// processes are left, in both isolation modes where the mode matters, and on both launch paths:
// each trial exec'd, and each trial a fork of the study's fork server (daemon/README.md, "Fork
// server"), which must behave exactly as the exec path (a forked trial stopped by its timeout is
// the last case's, with its children, in both modes). Then the faults of the fork path alone: its
// server SIGKILLed while its trials run, and `trialctl cancel` of forked trials.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace json = boost::json;

namespace {

enum class PythonIsolation { kCgroups, kProcessGroups };

const char* PythonIsolationName(PythonIsolation i) {
  return i == PythonIsolation::kCgroups ? "cgroups" : "process groups (--no-cgroups)";
}

// Starts `d` in `mode`. The cgroup half needs a writable cgroup v2 hierarchy: as root (CI) its
// absence fails the case; as another user it is skipped. Returns the daemon's isolation line.
std::string StartIn(TestDaemon& d, PythonIsolation mode, bool* skip) {
  if (mode == PythonIsolation::kProcessGroups) d.AddArgs({"--no-cgroups"});
  d.Start();
  const std::string log = d.log();
  const size_t at = log.find("trial isolation: ");
  REQUIRE(at != std::string::npos);
  const std::string line = log.substr(at, log.find('\n', at) - at);
  const bool cgroups = line.find("trial isolation: cgroup v2") != std::string::npos;
  *skip = false;
  if (mode == PythonIsolation::kProcessGroups) {
    REQUIRE_FALSE(cgroups);
  } else if (!cgroups) {
    INFO("the daemon says: " << line);
    if (::geteuid() == 0) FAIL("no writable cgroup v2 hierarchy although running as root");
    *skip = true;
  }
  return line;
}

// How the study's trials start: exec'd one interpreter each, or forked from its fork server.
enum class LaunchPath { kExec, kForkServer };

const char* LaunchPathName(LaunchPath p) {
  return p == LaunchPath::kExec ? "exec path" : "fork-server path";
}

// A kind = "python" sweep of `function` ("FILE.py:NAME", relative to the sweep file's folder).
// On the fork-server path the study has a server that preloads a module and the objective's file.
std::string PythonSweep(LaunchPath path, const std::string& study, const std::string& function,
                        int n_trials, int parallelism, double timeout_s,
                        const std::string& study_lines = "") {
  return "[study]\nname = \"" + study + "\"\nn_trials = " + std::to_string(n_trials) +
         "\nparallelism = " + std::to_string(parallelism) +
         "\ntrial_timeout = " + std::to_string(timeout_s) + "\nkill_grace = 1\n" + study_lines +
         "\n[objective]\nkind = \"python\"\nfunction = \"" + function + "\"\n" +
         (path == LaunchPath::kForkServer ? "fork_server = true\npreload = [\"json\"]\n" : "") +
         "\n[sampler]\nkind = \"random\"\nseed = 3\n";
}

// The study's events, as `trialctl events` prints them.
std::string Events(TestDaemon& d, const std::string& study) {
  Ctl events = Trialctl(d.socket(), {"events", study});
  REQUIRE(events.code == 0);
  return events.out;
}

// Checks that the study's trials took `path`: on the fork-server path a server started and the
// study never fell back to exec; on the exec path no server was started.
void CheckLaunchPath(TestDaemon& d, const std::string& study, LaunchPath path) {
  const std::string events = Events(d, study);
  INFO(events);
  if (path == LaunchPath::kForkServer) {
    CHECK_THAT(events, Catch::Contains("fork_server_started"));
    CHECK_THAT(events, !Catch::Contains("fork_server_off"));
  } else {
    CHECK_THAT(events, !Catch::Contains("fork_server"));
  }
}

// The pids of every fork server the study started, from its fork_server_started events ("pid P,
// preloaded: ..."): a check after the study's end needs no race with the server's life.
std::vector<pid_t> ForkServerPids(TestDaemon& d, const std::string& study) {
  std::vector<pid_t> pids;
  const json::value events = d.Call("events", {{"study", study}});
  for (const json::value& v : events.as_array()) {
    const json::object& e = v.as_object();
    if (e.at("kind").as_string() != "fork_server_started") continue;
    const std::string detail(e.at("detail").as_string());
    INFO(detail);
    REQUIRE(detail.rfind("pid ", 0) == 0);
    pids.push_back(static_cast<pid_t>(std::stol(detail.substr(4))));
  }
  return pids;
}

// The pid of the study's fork server once `status` shows it on (bounded wait); 0 if it never is.
pid_t ForkServerPid(TestDaemon& d, const std::string& study, double timeout_s = 30) {
  const json::object server = WaitForkServerOn(d, study, timeout_s);
  return server.empty() ? 0 : static_cast<pid_t>(server.at("pid").as_int64());
}

bool PythonAlive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  size_t close = line.rfind(')');
  return close != std::string::npos && line.substr(close + 2, 1) != "Z";
}

// Waits (bounded) until none of `pids` is alive; returns those still alive.
std::vector<pid_t> WaitAllDead(const std::vector<pid_t>& pids, double timeout_s = 10) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  std::vector<pid_t> alive;
  do {
    alive.clear();
    for (pid_t p : pids) {
      if (PythonAlive(p)) alive.push_back(p);
    }
    if (alive.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return alive;
}

// The daemon's zombie children, waiting (bounded) until there are none: on the fork-server path
// the study's server is stopped when the study ends, so when the test sees the end it may have
// exited and not been reaped yet. A zombie the daemon never reaps is still found.
std::vector<pid_t> WaitNoZombieChildren(pid_t parent, double timeout_s = 5) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  std::vector<pid_t> zombies = ZombieChildren(parent);
  while (!zombies.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    zombies = ZombieChildren(parent);
  }
  return zombies;
}

// The pid in `path`, waiting (bounded) for the file; 0 when it never came.
pid_t WaitPidFile(const std::string& path, double timeout_s = 30) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

std::string PythonReason(const json::object& t) {
  return t.at("fail_reason").is_string() ? std::string(t.at("fail_reason").as_string()) : "";
}

// Python source: writes this process's pid to PIDS/<name>.pid atomically (the test polls it).
const char* kWritePid =
    "import os\n\n\n"
    "def write_pid(pids, name, pid=None):\n"
    "    tmp = os.path.join(pids, name + '.tmp')\n"
    "    with open(tmp, 'w') as f:\n"
    "        f.write(str(pid or os.getpid()))\n"
    "    os.rename(tmp, os.path.join(pids, name + '.pid'))\n\n\n";

}  // namespace

TEST_CASE("fault: kind = python: a worker SIGKILLed while it asks is FAIL(signal) SIGKILL",
          "[fault][python]") {
  const LaunchPath path = GENERATE(LaunchPath::kExec, LaunchPath::kForkServer);
  INFO(LaunchPathName(path));
  TempDir dir;
  TestDaemon d(dir.File("state"));
  bool skip = false;
  StartIn(d, PythonIsolation::kCgroups, &skip);
  if (skip) TRIALD_SKIP("no writable cgroup v2 hierarchy");
  std::filesystem::create_directories(dir.File("pids"));
  // Trial 0 asks without end (each suggest and should_prune waits for its answer), so the
  // SIGKILL from outside finds it waiting for an answer or about to.
  dir.Write("asker.py", std::string(kWritePid) +
                            "def objective(trial):\n"
                            "    x = trial.suggest_float('x', 0.0, 1.0)\n"
                            "    if trial.number == 0:\n"
                            "        write_pid('" +
                            dir.File("pids") +
                            "', 'asker')\n"
                            "        while True:\n"
                            "            assert trial.suggest_float('x', 0.0, 1.0) == x\n"
                            "            trial.should_prune()\n"
                            "    return x\n");
  const std::string toml = PythonSweep(path, "asker", "asker.py:objective", 3, 1, 30);
  d.Submit(toml, dir.Write("asker.toml", toml));
  const pid_t asker = WaitPidFile(dir.File("pids/asker.pid"));
  REQUIRE(asker > 0);
  const pid_t server = path == LaunchPath::kForkServer ? ForkServerPid(d, "asker") : 0;
  if (path == LaunchPath::kForkServer) REQUIRE(server > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a few thousand requests in
  REQUIRE(::kill(asker, SIGKILL) == 0);
  json::object status = d.WaitStudy("asker", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("asker");
  REQUIRE(trials.size() == 3);
  INFO(d.log());
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    if (t.at("number").as_int64() == 0) {
      CHECK(t.at("state").as_string() == "FAIL");
      CHECK(PythonReason(t) == "signal");
      CHECK(t.at("signal").as_int64() == SIGKILL);
      CHECK(t.at("params").as_object().contains("x"));
    } else {
      CHECK(t.at("state").as_string() == "COMPLETE");
    }
  }
  CheckLaunchPath(d, "asker", path);
  CHECK(WaitNoProcessesOfStudy("asker").empty());
  CHECK(WaitAllDead({asker}).empty());
  if (path == LaunchPath::kForkServer) CHECK(WaitAllDead({server}).empty());  // the study is over
  CHECK(WaitNoZombieChildren(d.pid()).empty());
  d.Call("ping");
}

TEST_CASE("fault: kind = python: a worker blocked after asking ends by trial_timeout",
          "[fault][python]") {
  const LaunchPath path = GENERATE(LaunchPath::kExec, LaunchPath::kForkServer);
  INFO(LaunchPathName(path));
  TempDir dir;
  TestDaemon d(dir.File("state"));
  bool skip = false;
  StartIn(d, PythonIsolation::kCgroups, &skip);
  if (skip) TRIALD_SKIP("no writable cgroup v2 hierarchy");
  std::filesystem::create_directories(dir.File("pids"));
  // After its answer it waits on the channel for a second answer that never comes (nothing
  // was asked): only the timeout ends it. The runner's SIGTERM handler cannot interrupt a read
  // that is not its own, so it takes the SIGKILL after kill_grace.
  dir.Write("stuck.py", std::string(kWritePid) +
                            "def objective(trial):\n"
                            "    x = trial.suggest_float('x', 0.0, 1.0)\n"
                            "    write_pid('" +
                            dir.File("pids") +
                            "', str(trial.number))\n"
                            "    if trial.number == 0:\n"
                            "        os.read(int(os.environ['TRIALD_REPORT_FD']), 1)\n"
                            "    return x\n");
  const std::string toml = PythonSweep(path, "stuck", "stuck.py:objective", 2, 1, 3);
  const auto start = std::chrono::steady_clock::now();
  d.Submit(toml, dir.Write("stuck.toml", toml));
  const pid_t server = path == LaunchPath::kForkServer ? ForkServerPid(d, "stuck") : 0;
  if (path == LaunchPath::kForkServer) REQUIRE(server > 0);
  json::object status = d.WaitStudy("stuck", 60);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("stuck");
  REQUIRE(trials.size() == 2);
  INFO(d.log());
  INFO(json::serialize(trials));
  CHECK(trials[0].at("state").as_string() == "FAIL");
  CHECK(PythonReason(trials[0].as_object()) == "timeout");
  CHECK(trials[1].at("state").as_string() == "COMPLETE");
  CHECK(took < 20);  // 3 s timeout + 1 s grace + two interpreter starts
  CheckLaunchPath(d, "stuck", path);
  CHECK(WaitNoProcessesOfStudy("stuck").empty());
  for (const char* number : {"0", "1"}) {
    const pid_t pid = WaitPidFile(dir.File(std::string("pids/") + number + ".pid"), 1);
    CHECK(pid > 0);
    CHECK(WaitAllDead({pid}).empty());
  }
  if (path == LaunchPath::kForkServer) CHECK(WaitAllDead({server}).empty());  // the study is over
  CHECK(WaitNoZombieChildren(d.pid()).empty());
}

TEST_CASE("fault: triald SIGKILLed while kind = python workers ask: they exit, FAIL(lost), retried",
          "[fault][python]") {
  PythonIsolation mode = GENERATE(PythonIsolation::kCgroups, PythonIsolation::kProcessGroups);
  const LaunchPath path = GENERATE(LaunchPath::kExec, LaunchPath::kForkServer);
  INFO(PythonIsolationName(mode) << ", " << LaunchPathName(path));
  TempDir dir;
  auto d = std::make_unique<TestDaemon>(dir.File("state"));
  bool skip = false;
  StartIn(*d, mode, &skip);
  if (skip) TRIALD_SKIP("no writable cgroup v2 hierarchy");
  std::filesystem::create_directories(dir.File("pids"));
  // Each worker asks, sleeps, asks again, until the release file exists: at the kill some are
  // inside a request, some between two. The retries after the restart find the file and finish.
  // Before that, each first attempt starts an escapee as a daemon would (fork, no exec, setsid,
  // its descriptors closed): no parent-death signal reaches it, so only the restarted triald's
  // recovery ends it, finding it by its TRIALD_TRIAL_DIR (or, with cgroups, by the lost trial's
  // leaf): on the fork path that is a forked trial's environment, not its server's.
  const std::string release = dir.File("release");
  dir.Write("waiter.py", std::string(kWritePid) +
                             "import time\n\n\n"
                             "def objective(trial):\n"
                             "    x = trial.suggest_float('x', 0.0, 1.0)\n"
                             "    if not os.path.exists('" +
                             release +
                             "') and os.fork() == 0:\n"
                             "        os.setsid()\n"
                             "        os.closerange(0, 4)\n"
                             "        write_pid('" +
                             dir.File("pids") +
                             "', 'escapee%d' % trial.number)\n"
                             "        time.sleep(300)\n"
                             "        os._exit(0)\n"
                             "    write_pid('" +
                             dir.File("pids") +
                             "', str(trial.number))\n"
                             "    i = 0\n"
                             "    while not os.path.exists('" +
                             release +
                             "'):\n"
                             "        trial.suggest_int('n%d' % (i % 3), 1, 9)\n"
                             "        time.sleep(0.01 * (trial.number + 1))\n"
                             "        trial.should_prune()\n"
                             "        i += 1\n"
                             "    return x\n");
  const int n = 3;
  const std::string toml =
      PythonSweep(path, "waiters", "waiter.py:objective", n, n, 60, "retries = 1\n");
  d->Submit(toml, dir.Write("waiters.toml", toml));
  std::vector<pid_t> workers, escapees;
  for (int i = 0; i < n; ++i) {
    pid_t pid = WaitPidFile(dir.File("pids/" + std::to_string(i) + ".pid"));
    REQUIRE(pid > 0);
    workers.push_back(pid);
    pid_t escapee = WaitPidFile(dir.File("pids/escapee" + std::to_string(i) + ".pid"));
    REQUIRE(escapee > 0);
    escapees.push_back(escapee);
  }
  // The fork server dies with the daemon too (its parent-death signal).
  const pid_t server = path == LaunchPath::kForkServer ? ForkServerPid(*d, "waiters") : 0;
  if (path == LaunchPath::kForkServer) REQUIRE(server > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  d->Kill();
  // Nothing answers them now: each sees the channel's EOF (or its parent-death signal) and
  // exits; none hangs until the next start.
  CHECK(WaitAllDead(workers, 10).empty());
  if (path == LaunchPath::kForkServer) CHECK(WaitAllDead({server}, 10).empty());
  for (pid_t escapee : escapees) CHECK(PythonAlive(escapee));

  dir.Write("release", "");
  d = std::make_unique<TestDaemon>(dir.File("state"));
  StartIn(*d, mode, &skip);
  CHECK(WaitAllDead(escapees).empty());  // recovery killed them before any retry started
  json::object status = d->WaitStudy("waiters", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d->Trials("waiters");
  INFO(d->log());
  INFO(json::serialize(trials));
  REQUIRE(trials.size() == 2 * n);
  std::map<int64_t, const json::object*> by_number;
  for (const json::value& v : trials) by_number[v.at("number").as_int64()] = &v.as_object();
  int lost = 0, retries = 0;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    if (t.at("retry_of").is_null()) {
      ++lost;
      CHECK(t.at("state").as_string() == "FAIL");
      CHECK(PythonReason(t) == "lost");
      continue;
    }
    ++retries;
    CHECK(t.at("state").as_string() == "COMPLETE");
    const json::object& first = *by_number.at(t.at("retry_of").as_int64());
    // The retry holds what the lost trial was given, and its answers come from there.
    CHECK(t.at("params").at("x") == first.at("params").at("x"));
    CHECK(t.at("value").to_number<double>() == first.at("params").at("x").to_number<double>());
  }
  CHECK(lost == n);
  CHECK(retries == n);
  CheckLaunchPath(*d, "waiters", path);
  CHECK(WaitNoProcessesOfStudy("waiters").empty());
  CHECK(WaitNoZombieChildren(d->pid()).empty());
}

TEST_CASE("fault: kind = python: processes the objective starts end with its trial",
          "[fault][python]") {
  PythonIsolation mode = GENERATE(PythonIsolation::kCgroups, PythonIsolation::kProcessGroups);
  const LaunchPath path = GENERATE(LaunchPath::kExec, LaunchPath::kForkServer);
  const bool timeout = GENERATE(false, true);
  INFO(PythonIsolationName(mode) << ", " << LaunchPathName(path)
                                 << (timeout ? ", trial stopped by its timeout"
                                             : ", trial COMPLETE"));
  TempDir dir;
  TestDaemon d(dir.File("state"));
  bool skip = false;
  const std::string isolation = StartIn(d, mode, &skip);
  if (skip) TRIALD_SKIP("no writable cgroup v2 hierarchy");
  INFO(isolation);
  std::filesystem::create_directories(dir.File("pids"));
  // Children as training libraries start them: a multiprocessing worker (fork, as loky's and
  // joblib's are forked processes in the trial's group), a subprocess, a forked child, and a
  // double-forked setsid daemon; none ends by itself within the test. The objective then
  // returns (COMPLETE) or hangs past trial_timeout.
  dir.Write("parent.py", std::string(kWritePid) +
                             "import multiprocessing\nimport subprocess\nimport time\n\n\n"
                             "PIDS = '" +
                             dir.File("pids") +
                             "'\n\n\n"
                             "def objective(trial):\n"
                             "    x = trial.suggest_float('x', 0.0, 1.0)\n"
                             "    write_pid(PIDS, 'trial')\n"
                             "    mp = multiprocessing.get_context('fork').Process(\n"
                             "        target=time.sleep, args=(300,), daemon=True)\n"
                             "    mp.start()\n"
                             "    write_pid(PIDS, 'multiprocessing', mp.pid)\n"
                             "    sub = subprocess.Popen(['sleep', '300'])\n"
                             "    write_pid(PIDS, 'subprocess', sub.pid)\n"
                             "    child = os.fork()\n"
                             "    if child == 0:\n"
                             "        time.sleep(300)\n"
                             "        os._exit(0)\n"
                             "    write_pid(PIDS, 'fork', child)\n"
                             "    middle = os.fork()\n"
                             "    if middle == 0:\n"
                             "        os.setsid()\n"
                             "        if os.fork() == 0:\n"
                             "            write_pid(PIDS, 'setsid')\n"
                             "            time.sleep(300)\n"
                             "        os._exit(0)\n"
                             "    os.waitpid(middle, 0)\n"
                             "    while not os.path.exists(os.path.join(PIDS, 'setsid.pid')):\n"
                             "        time.sleep(0.01)\n"
                             "    if trial.number == 0 and " +
                             std::string(timeout ? "True" : "False") +
                             ":\n"
                             "        time.sleep(300)\n"
                             "    return x\n");
  const std::string toml =
      PythonSweep(path, "parent", "parent.py:objective", 1, 1, timeout ? 4 : 30);
  d.Submit(toml, dir.Write("parent.toml", toml));
  json::object status = d.WaitStudy("parent", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("parent");
  REQUIRE(trials.size() == 1);
  INFO(d.log());
  INFO(json::serialize(trials[0]));
  CHECK(trials[0].at("state").as_string() == (timeout ? "FAIL" : "COMPLETE"));
  if (timeout) CHECK(PythonReason(trials[0].as_object()) == "timeout");
  std::map<std::string, pid_t> children;
  for (const char* name : {"trial", "multiprocessing", "subprocess", "fork", "setsid"}) {
    children[name] = WaitPidFile(dir.File(std::string("pids/") + name + ".pid"), 1);
    CHECK(children[name] > 0);
  }
  // Once the trial is over, its children are gone. The cgroup holds every one of them; without
  // one, the setsid daemon left the process group but, its parent gone, became the daemon's
  // child (a subreaper) with the trial's TRIALD_TRIAL_DIR, and was stopped with the trial. A
  // forked trial and what it forks show the trial's environment in /proc too, not the server's.
  for (const auto& [name, pid] : children) {
    INFO(name << " " << pid);
    CHECK_FALSE(PythonAlive(pid));
  }
  CheckLaunchPath(d, "parent", path);
  if (path == LaunchPath::kForkServer) {
    std::vector<pid_t> servers = ForkServerPids(d, "parent");
    CHECK(servers.size() == 1);
    CHECK(WaitAllDead(servers).empty());  // the study is over
  }
  CHECK(WaitNoProcessesOfStudy("parent", 1).empty());
  CHECK(WaitNoZombieChildren(d.pid()).empty());
}

TEST_CASE("fault: kind = python with a fork server: the server SIGKILLed while its trials run",
          "[fault][python][fork_server]") {
  PythonIsolation mode = GENERATE(PythonIsolation::kCgroups, PythonIsolation::kProcessGroups);
  INFO(PythonIsolationName(mode));
  TempDir dir;
  TestDaemon d(dir.File("state"));
  bool skip = false;
  StartIn(d, mode, &skip);
  if (skip) TRIALD_SKIP("no writable cgroup v2 hierarchy");
  std::filesystem::create_directories(dir.File("pids"));
  std::filesystem::create_directories(dir.File("answers"));
  // Trials 0 and 1 ask until the release file exists, adding a byte to answers/N for each
  // answer; 2 and 3 start after them, so after the
  // server's death. A forked trial is not the server's child (the double fork) and lives in its
  // own session and cgroup: the server's death, and the daemon's clean-up of what is left of the
  // server, must not reach it.
  const std::string release = dir.File("release");
  dir.Write("held.py", std::string(kWritePid) +
                           "import time\n\n\n"
                           "def objective(trial):\n"
                           "    x = trial.suggest_float('x', 0.0, 1.0)\n"
                           "    write_pid('" +
                           dir.File("pids") +
                           "', str(trial.number))\n"
                           "    while trial.number < 2 and not os.path.exists('" +
                           release +
                           "'):\n"
                           "        trial.should_prune()\n"
                           "        with open(os.path.join('" +
                           dir.File("answers") +
                           "', str(trial.number)), 'a') as f:\n"
                           "            f.write('.')\n"
                           "        time.sleep(0.01)\n"
                           "    return x\n");
  const std::string toml =
      PythonSweep(LaunchPath::kForkServer, "held", "held.py:objective", 4, 2, 60);
  d.Submit(toml, dir.Write("held.toml", toml));
  std::vector<pid_t> held;
  for (const char* number : {"0", "1"}) {
    const pid_t pid = WaitPidFile(dir.File(std::string("pids/") + number + ".pid"));
    REQUIRE(pid > 0);
    held.push_back(pid);
  }
  const pid_t server = ForkServerPid(d, "held");
  REQUIRE(server > 0);
  REQUIRE(::kill(server, SIGKILL) == 0);
  CHECK(WaitAllDead({server}).empty());
  // The daemon sees it go (the event) before the next launch needs a server.
  WaitEvent(d, "held", "fork_server_exited", 10);
  // Still asking, and answered: each held trial gets two more answers after the server died.
  auto answers = [&](const char* number) {
    std::error_code ec;
    const uintmax_t n = std::filesystem::file_size(dir.File(std::string("answers/") + number), ec);
    return ec ? uintmax_t{0} : n;
  };
  const uintmax_t before0 = answers("0"), before1 = answers("1");
  const auto answered_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((answers("0") < before0 + 2 || answers("1") < before1 + 2) &&
         std::chrono::steady_clock::now() < answered_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(answers("0") >= before0 + 2);
  CHECK(answers("1") >= before1 + 2);
  for (pid_t pid : held) CHECK(PythonAlive(pid));
  dir.Write("release", "");

  json::object status = d.WaitStudy("held", 60);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("held");
  INFO(json::serialize(trials));
  REQUIRE(trials.size() == 4);
  for (const json::value& v : trials) CHECK(v.at("state").as_string() == "COMPLETE");
  // The next trial started a new server: started, exited, started, and no fallback to exec.
  const std::string events = Events(d, "held");
  INFO(events);
  const size_t first = events.find("fork_server_started");
  const size_t exited = events.find("fork_server_exited");
  REQUIRE(first != std::string::npos);
  REQUIRE(exited != std::string::npos);
  CHECK(first < exited);
  CHECK(events.find("fork_server_started", exited) != std::string::npos);
  CHECK_THAT(events, !Catch::Contains("fork_server_off"));
  std::vector<pid_t> all = held;
  for (const char* number : {"2", "3"}) {
    const pid_t pid = WaitPidFile(dir.File(std::string("pids/") + number + ".pid"), 1);
    CHECK(pid > 0);
    all.push_back(pid);
  }
  std::vector<pid_t> servers = ForkServerPids(d, "held");
  CHECK(servers.size() == 2);
  CHECK(std::count(servers.begin(), servers.end(), server) == 1);
  all.insert(all.end(), servers.begin(), servers.end());
  CHECK(WaitAllDead(all).empty());  // the trials, and both servers now that the study is over
  CHECK(WaitNoProcessesOfStudy("held").empty());
  CHECK(WaitNoZombieChildren(d.pid()).empty());
}

TEST_CASE("fault: kind = python with a fork server: trialctl cancel stops forked trials",
          "[fault][python][fork_server]") {
  PythonIsolation mode = GENERATE(PythonIsolation::kCgroups, PythonIsolation::kProcessGroups);
  INFO(PythonIsolationName(mode));
  TempDir dir;
  TestDaemon d(dir.File("state"));
  bool skip = false;
  StartIn(d, mode, &skip);
  if (skip) TRIALD_SKIP("no writable cgroup v2 hierarchy");
  std::filesystem::create_directories(dir.File("pids"));
  // Each trial forks a child as a training library would, then hangs; only the cancel ends them.
  // Trials 2 and 3 would start only after 0 and 1: the cancel leaves them unrun.
  const std::string pids = dir.File("pids");
  dir.Write("hang.py", std::string(kWritePid) +
                           "import time\n\n\n"
                           "def objective(trial):\n"
                           "    x = trial.suggest_float('x', 0.0, 1.0)\n"
                           "    child = os.fork()\n"
                           "    if child == 0:\n"
                           "        time.sleep(300)\n"
                           "        os._exit(0)\n"
                           "    write_pid('" +
                           pids + "', 'child%d' % trial.number, child)\n" + "    write_pid('" +
                           pids +
                           "', str(trial.number))\n"
                           "    time.sleep(300)\n"
                           "    return x\n");
  const std::string toml =
      PythonSweep(LaunchPath::kForkServer, "hang", "hang.py:objective", 4, 2, 60);
  d.Submit(toml, dir.Write("hang.toml", toml));
  std::vector<pid_t> reported;
  for (const char* number : {"0", "1"}) {
    for (const std::string& name : {std::string("child") + number, std::string(number)}) {
      const pid_t pid = WaitPidFile(dir.File("pids/" + name + ".pid"));
      INFO(name);
      REQUIRE(pid > 0);
      reported.push_back(pid);
    }
  }
  Ctl c = Trialctl(d.socket(), {"cancel", "hang"});
  INFO(c.out << c.err);
  CHECK(c.code == 0);
  json::object status = d.WaitStudy("hang", 60);
  INFO(d.log());
  CHECK(status.at("state").as_string() == "CANCELLED");
  json::array trials = d.Trials("hang");
  INFO(json::serialize(trials));
  REQUIRE(trials.size() == 2);
  for (const json::value& v : trials) {
    CHECK(v.at("state").as_string() == "FAIL");
    CHECK(PythonReason(v.as_object()) == "cancelled");
  }
  CheckLaunchPath(d, "hang", LaunchPath::kForkServer);
  // Every process the trials reported is gone, and so is the server once the study is over.
  CHECK(WaitAllDead(reported).empty());
  std::vector<pid_t> servers = ForkServerPids(d, "hang");
  CHECK(servers.size() == 1);
  CHECK(WaitAllDead(servers).empty());
  CHECK(WaitNoProcessesOfStudy("hang").empty());
  CHECK(WaitNoZombieChildren(d.pid()).empty());
}

}  // namespace triald::testing
