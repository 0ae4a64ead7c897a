// [objective] fork_server end to end: a real triald starts kind = "python" trials as forks of the
// study's fork server (python3 -m triald fork-server), and falls back to exec when a preload
// makes forking unsafe.

#include <signal.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

namespace json = boost::json;

// An objective whose module-level state would leak between trials run in one process: each
// trial appends to SEEN and reports how many entries it found, and its pid.
const char* const kObjective = R"(import os
import time

SEEN = []


def objective(trial):
    x = trial.suggest_float("x", -2.0, 2.0)
    SEEN.append(x)
    trial.set_user_attr("seen", len(SEEN))
    trial.set_user_attr("pid", os.getpid())
    time.sleep(0.2)
    return x * x
)";

std::string Sweep(const std::string& name, const std::string& preload, int n_trials) {
  return "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
         "\nparallelism = 2\n\n[objective]\nkind = \"python\"\nfunction = \"obj.py:objective\"\n"
         "python = \"/usr/bin/python3\"\npreload = [" +
         preload + "]\n";
}

// Checks every trial: COMPLETE with x*x, not seeing another trial's module state, in a process
// of its own. Returns the pids.
std::set<int64_t> CheckTrials(const json::array& trials) {
  std::set<int64_t> pids;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    const double x = t.at("params").as_object().at("x").to_number<double>();
    CHECK(t.at("value").to_number<double>() == Approx(x * x));
    const json::object& attrs = t.at("attrs").as_object();
    CHECK(attrs.at("seen").to_number<int64_t>() == 1);
    pids.insert(attrs.at("pid").to_number<int64_t>());
  }
  CHECK(pids.size() == trials.size());
  return pids;
}

}  // namespace

TEST_CASE("kind = python with a fork server: isolated trials, forked, with their server's status",
          "[python][integration][fork_server]") {
  TempDir dir;
  std::ofstream(dir.File("obj.py")) << kObjective;
  const std::string sweep_path = dir.File("fork.toml");
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = d.Submit(Sweep("forked", "\"json\"", 8), sweep_path);

  // While it runs, status shows the server on, with what it preloaded.
  const json::object server = WaitForkServerOn(d, study, 60);
  INFO(d.log());
  REQUIRE_FALSE(server.empty());
  CHECK(json::serialize(server.at("preloaded")) == "[\"json\"]");
  CHECK(server.at("objective_loaded").as_bool());
#if defined(__x86_64__) || defined(__aarch64__)
  CHECK(server.at("forks").as_int64() == 1);  // each trial cloned as triald's child
#endif
  const int64_t server_pid = server.at("pid").as_int64();
  Ctl text = Trialctl(d.socket(), {"status", study});
  CHECK_THAT(text.out, Catch::Contains("fork server: "));

  json::object status = d.WaitStudy(study, 120);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 8);
  std::set<int64_t> pids = CheckTrials(trials);
  CHECK(pids.count(server_pid) == 0);
  Ctl events = Trialctl(d.socket(), {"events", study});
  REQUIRE(events.code == 0);
  CHECK_THAT(events.out, Catch::Contains("fork_server_started"));
  CHECK_THAT(events.out, !Catch::Contains("fork_server_off"));
  // No start failed because of the server (a start may fail for other reasons: its detail then
  // names them).
  CHECK_THAT(events.out, !Catch::Contains("the fork server"));
  // The study is over: so is its server.
  CHECK(WaitPidGone(static_cast<pid_t>(server_pid)));
  CHECK(std::ifstream(dir.File("state") + "/studies/forked/fork-server.log").good());
}

TEST_CASE("fork_twice = true: each trial forked through a middle process, as isolated",
          "[python][integration][fork_server]") {
  TempDir dir;
  std::ofstream(dir.File("obj.py")) << kObjective;
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study =
      d.Submit(Sweep("twice", "\"json\"", 4) + "fork_twice = true\n", dir.File("twice.toml"));
  const json::object server = WaitForkServerOn(d, study, 60);
  INFO(d.log());
  REQUIRE_FALSE(server.empty());
  CHECK(server.at("forks").as_int64() == 2);
  CHECK(d.WaitStudy(study, 120).at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 4);
  CheckTrials(trials);
  Ctl events = Trialctl(d.socket(), {"events", study});
  CHECK_THAT(events.out, Catch::Contains("preloaded: json and the objective, two forks per trial"));
}

TEST_CASE("a preload that starts a thread: the study falls back to exec, with the event",
          "[python][integration][fork_server]") {
  TempDir dir;
  std::ofstream(dir.File("obj.py")) << kObjective;
  std::ofstream(dir.File("threaded.py"))
      << "import threading, time\n"
         "threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()\n";
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string study = d.Submit(Sweep("threads", "\"threaded\"", 4), dir.File("threads.toml"));
  json::object status = d.WaitStudy(study, 120);
  INFO(d.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials(study);
  REQUIRE(trials.size() == 4);
  CheckTrials(trials);
  Ctl events = Trialctl(d.socket(), {"events", study});
  REQUIRE(events.code == 0);
  INFO(events.out);
  CHECK_THAT(events.out, Catch::Contains("fork_server_off"));
  CHECK_THAT(events.out, Catch::Contains("thread"));
}

TEST_CASE("a trial's OpenBLAS spins briefly, forked or exec'd: it loaded with the short timeout",
          "[python][integration][fork_server]") {
  // OpenBLAS reads OPENBLAS_THREAD_TIMEOUT as it loads (a forked trial's in its server, at
  // `import numpy`; an exec'd one's in the trial); openblas_thread_timeout() gives back what it
  // read.
  TempDir dir;
  std::ofstream(dir.File("blas.py")) << R"(import ctypes
import os

import numpy


def objective(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    read = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and "openblas" in fields[5].lower() and read is None:
                lib = ctypes.CDLL(fields[5].strip(), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                if hasattr(lib, "openblas_thread_timeout"):
                    read = lib.openblas_thread_timeout()
    trial.set_user_attr("blas_timeout", read)
    trial.set_user_attr("env", os.environ.get("OPENBLAS_THREAD_TIMEOUT"))
    return x
)";
  TestDaemon d(dir.File("state"));
  d.Start();
  const std::string base =
      "n_trials = 2\nparallelism = 2\n\n[objective]\nkind = \"python\"\nfunction = "
      "\"blas.py:objective\"\npython = \"/usr/bin/python3\"\n";
  const std::string forked = d.Submit(
      "[study]\nname = \"forked\"\n" + base + "preload = [\"numpy\"]\n", dir.File("forked.toml"));
  const std::string execd = d.Submit("[study]\nname = \"execd\"\n" + base, dir.File("execd.toml"));
  // A study's own value wins.
  const std::string own =
      d.Submit("[study]\nname = \"own\"\n" + base + "env = { OPENBLAS_THREAD_TIMEOUT = \"24\" }\n",
               dir.File("own.toml"));
  for (const auto& [study, expected] :
       std::vector<std::pair<std::string, int64_t>>{{forked, 20}, {execd, 20}, {own, 24}}) {
    INFO(study);
    json::object status = d.WaitStudy(study, 120);
    INFO(d.log());
    REQUIRE(status.at("state").as_string() == "COMPLETE");
    Ctl events = Trialctl(d.socket(), {"events", study});
    INFO(events.out);
    const bool server_started = events.out.find("fork_server_started") != std::string::npos;
    CHECK(server_started == (study == forked));
    json::array trials = d.Trials(study);
    REQUIRE(trials.size() == 2);
    for (const json::value& v : trials) {
      const json::object& attrs = v.as_object().at("attrs").as_object();
      INFO(json::serialize(v));
      REQUIRE(attrs.at("blas_timeout").is_int64());  // numpy's BLAS is OpenBLAS here
      CHECK(attrs.at("blas_timeout").as_int64() == expected);
      CHECK(attrs.at("env").as_string() == std::to_string(expected));
    }
  }
}

}  // namespace triald::testing
