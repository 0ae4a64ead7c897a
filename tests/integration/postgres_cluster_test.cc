// Several real triald daemons sharing studies through a real PostgreSQL server (the `postgres`
// CTest fixture, scripts/pg_test_server.sh): each daemon has its own state directory and node
// name, as if on its own host. The sh worker appends "number node pid" to a run log shared by
// all nodes when it starts, so a trial run twice, on one node or two, shows as two lines.
//
// - One daemon is SIGKILLed in the middle of a 90-trial sweep: the study still ends with exactly
//   90 configurations, every one finished, its running trials FAIL(lost) and retried by the
//   others, and no trial ran twice.
// - One daemon is frozen (SIGSTOP) past the node timeout and thawed: the others end its trials
//   as FAIL(lost), and when it comes back it stops their processes and reports nothing for them.
// - Control changes (pause, resume, set parallelism, extend, cancel) sent to different daemons,
//   each stored off that daemon's event loop: every node obeys them, each is recorded once.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/support/postgres.h"

namespace triald::testing {
namespace {
namespace json = boost::json;

struct RunLine {
  int number = -1;
  std::string node;
  long pid = 0;
};

std::vector<RunLine> ReadClusterRunLog(const std::string& path) {
  std::vector<RunLine> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    RunLine r;
    if (fields >> r.number >> r.node >> r.pid) out.push_back(r);
  }
  return out;
}

// Three daemons on one database, with fast heartbeats so that a dead node is noticed in 3 s.
class Cluster {
 public:
  explicit Cluster(const std::string& url) {
    for (const char* name : {"node-a", "node-b", "node-c"}) {
      auto d = std::make_unique<TestDaemon>(dir_.File(std::string("state-") + name), 2);
      d->AddArgs({"--storage", url, "--node-name", name, "--heartbeat-interval", "0.25",
                  "--node-timeout", "3"});
      d->Start();
      daemons_.push_back(std::move(d));
    }
  }
  TestDaemon& operator[](size_t i) { return *daemons_.at(i); }
  TempDir& dir() { return dir_; }

  // A study whose sh worker logs its start, sleeps `sleep_s` and reports its trial number.
  std::string Submit(const std::string& study, int n_trials, double sleep_s) {
    const std::string script = dir_.Write(
        "worker.sh",
        "printf '%s %s %s\\n' \"$TRIALD_TRIAL\" \"$TRIALD_NODE\" \"$$\" >> \"$RUN_LOG\"\n"
        "sleep " +
            std::to_string(sleep_s) +
            "\n"
            "echo \"{\\\"type\\\":\\\"final\\\",\\\"value\\\":$TRIALD_TRIAL}\" >&3\n",
        0755);
    std::string toml = ExecSweep(study, "[\"sh\", \"" + script + "\"]", n_trials, 2, 0, 1);
    toml.replace(toml.find("[objective]\n"), 12,
                 "retries = 1\nretry_on = [\"lost\"]\n\n[objective]\nenv = { RUN_LOG = \"" +
                     run_log() + "\" }\n");
    return daemons_[0]->Submit(toml, dir_.Write(study + ".toml", toml));
  }
  std::string run_log() const { return dir_.path() + "/runs.log"; }

 private:
  TempDir dir_;
  std::vector<std::unique_ptr<TestDaemon>> daemons_;
};

int CountFinished(const json::array& trials) {
  int n = 0;
  for (const json::value& v : trials) {
    const auto& s = v.at("state").as_string();
    n += s == "COMPLETE" || s == "PRUNED" || s == "FAIL";
  }
  return n;
}

// The checks both cases share: n configurations, all finished; no trial number started twice;
// every COMPLETE trial logged once, by the node and pid its record names; every FAIL trial lost
// with the lost node (ran or claimed there) and retried once.
void CheckStudy(Cluster& c, const std::string& study, int n, const std::string& lost_node) {
  json::array trials = c[0].Trials(study);
  std::map<int64_t, const json::object*> by_number;
  std::set<int64_t> retried;
  for (const json::value& v : trials) {
    by_number[v.at("number").as_int64()] = &v.as_object();
    if (!v.at("retry_of").is_null()) retried.insert(v.at("retry_of").as_int64());
  }
  int configurations = 0;
  for (const json::value& v : trials) {
    configurations += retried.count(v.at("number").as_int64()) == 0;
  }
  CHECK(configurations == n);
  CHECK(CountFinished(trials) == static_cast<int>(trials.size()));

  std::map<int, std::vector<RunLine>> runs;
  for (const RunLine& r : ReadClusterRunLog(c.run_log())) runs[r.number].push_back(r);
  std::set<std::string> nodes;
  int lost = 0;
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    const int number = static_cast<int>(t.at("number").as_int64());
    INFO(json::serialize(t));
    CHECK(runs[number].size() <= 1);  // no trial number started twice, on one node or two
    REQUIRE(t.at("node").is_string());
    if (t.at("state").as_string() == "FAIL") {
      // Lost with its node: it ran there, or was claimed there and perhaps started before the
      // node went silent (then its pid was never recorded).
      CHECK(t.at("fail_reason").as_string() == "lost");
      CHECK(t.at("node").as_string() == lost_node);
      CHECK(t.at("fail_detail").as_string().find(lost_node) != std::string::npos);
      CHECK(t.at("value").is_null());
      CHECK(retried.count(number) == 1);
      for (const RunLine& run : runs[number]) {
        CHECK(run.node == lost_node);
        if (!t.at("pid").is_null()) CHECK(t.at("pid").as_int64() == run.pid);
      }
      ++lost;
      continue;
    }
    CHECK(t.at("state").as_string() == "COMPLETE");
    REQUIRE(runs[number].size() == 1);  // it started, once
    const RunLine& run = runs[number].front();
    CHECK(t.at("node").as_string() == run.node);
    CHECK(t.at("pid").as_int64() == run.pid);
    nodes.insert(run.node);
  }
  nodes.insert(lost_node);
  CHECK(nodes.size() == 3);  // every node ran trials
  CHECK(lost > 0);           // the lost node had trials running, or this proves nothing
  CHECK(static_cast<int>(trials.size()) == n + lost);
}

// Runs triald with `args` (after --state-dir) to its exit; returns the exit code and stderr.
std::pair<int, std::string> RunTriald(TempDir& dir, std::vector<std::string> args) {
  const std::string err_path = dir.File("triald.err");
  std::vector<std::string> all = {BinDir() + "/triald", "--state-dir", dir.File("state")};
  all.insert(all.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::ifstream in(err_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

}  // namespace

TEST_CASE("bad storage options are refused with what was wrong, and no password shown",
          "[integration][postgres]") {
  TempDir dir;
  auto [code, err] = RunTriald(dir, {"--storage", "mysql://triald@db/triald"});
  CHECK(code == 1);
  CHECK(err.find("--storage \"mysql://triald@db/triald\": expected a postgresql://") !=
        std::string::npos);
  // Port 1 on loopback: nothing listens, the connection is refused at once.
  std::tie(code, err) =
      RunTriald(dir, {"--storage", "postgresql://triald:s3cret@127.0.0.1:1/triald"});
  CHECK(code == 1);
  CHECK(err.find("127.0.0.1:1") != std::string::npos);
  CHECK(err.find("s3cret") == std::string::npos);
  std::tie(code, err) = RunTriald(dir, {"--heartbeat-interval", "5", "--node-timeout", "6"});
  CHECK(code == 2);
  CHECK(err.find("must be at least twice --heartbeat-interval") != std::string::npos);
}

TEST_CASE("three daemons share a 90-trial sweep, and one SIGKILLed mid-way changes nothing",
          "[integration][postgres]") {
  TestDatabase db;
  Cluster c(db.url());
  const std::string study = c.Submit("shared", 90, 0.3);

  // Every node joins; node-b dies once a third of the trials are done, with trials running.
  REQUIRE(WaitFor(
      [&] {
        json::array trials = c[0].Trials(study);
        int running_on_b = 0;
        for (const json::value& v : trials) {
          running_on_b += v.at("state").as_string() == "RUNNING" && v.at("node").is_string() &&
                          v.at("node").as_string() == "node-b";
        }
        return CountFinished(trials) >= 30 && running_on_b > 0;
      },
      60));
  c[1].Kill();

  json::object status = c[0].WaitStudy(study, 120);
  CHECK(status.at("state").as_string() == "COMPLETE");
  CheckStudy(c, study, 90, "node-b");

  // Any daemon tells which nodes are alive: node-b is dead, the other two alive.
  Ctl nodes = Trialctl(c[2].socket(), {"nodes", "--json"});
  REQUIRE(nodes.code == 0);
  std::map<std::string, bool> alive;
  const json::value listed = json::parse(nodes.out);
  for (const json::value& n : listed.as_array()) {
    alive[std::string(n.at("name").as_string())] = n.at("alive").as_bool();
  }
  CHECK(alive ==
        std::map<std::string, bool>{{"node-a", true}, {"node-b", false}, {"node-c", true}});
  Ctl table = Trialctl(c[0].socket(), {"nodes"});
  CHECK(table.out.find("node-a (this)") != std::string::npos);

  // trialctl works against any daemon of the group: node-c shows the same trials, and a log
  // of a trial that ran elsewhere is refused with where it is.
  json::array via_a = c[0].Trials(study);
  json::array via_c = c[2].Trials(study);
  CHECK(via_a == via_c);
  for (const json::value& v : via_a) {
    if (v.at("node").as_string() != "node-a") continue;
    Ctl logs = Trialctl(c[2].socket(), {"logs", study, std::to_string(v.at("number").as_int64())});
    CHECK(logs.code != 0);
    CHECK(logs.err.find("ran on node node-a") != std::string::npos);
    break;
  }
  for (size_t i : {0u, 2u}) {
    CHECK(c[i].Stop() == 0);
  }
  CHECK(WaitNoProcessesOfStudy(study).empty());
}

TEST_CASE(
    "the trials of a frozen daemon are recovered by the others, and thawed it reports nothing",
    "[integration][postgres]") {
  TestDatabase db;
  Cluster c(db.url());
  const std::string study = c.Submit("frozen", 24, 0.5);
  REQUIRE(WaitFor(
      [&] {
        for (const json::value& v : c[0].Trials(study)) {
          if (v.at("state").as_string() == "RUNNING" && v.at("node").as_string() == "node-c") {
            return true;
          }
        }
        return false;
      },
      30));
  REQUIRE(::kill(c[2].pid(), SIGSTOP) == 0);
  // The others notice the silence (node timeout 3 s) and end node-c's trials as lost.
  const bool recovered = WaitFor(
      [&] {
        for (const json::value& v : c[0].Trials(study)) {
          if (v.at("state").as_string() == "FAIL" && v.at("fail_reason").as_string() == "lost") {
            return true;
          }
        }
        return false;
      },
      30);
  REQUIRE(::kill(c[2].pid(), SIGCONT) == 0);
  REQUIRE(recovered);
  json::object status = c[0].WaitStudy(study, 120);
  CHECK(status.at("state").as_string() == "COMPLETE");
  CheckStudy(c, study, 24, "node-c");
  CHECK(c[2].log().find("by another node") != std::string::npos);
  for (size_t i : {0u, 1u, 2u}) {
    CHECK(c[i].Stop() == 0);
  }
  CHECK(WaitNoProcessesOfStudy(study).empty());
}

// The kinds of the study's events, as node `d` reads them.
std::vector<std::string> EventKinds(TestDaemon& d, const std::string& study) {
  std::vector<std::string> kinds;
  const json::value events = d.Call("events", {{"study", study}});
  for (const json::value& e : events.as_array()) {
    kinds.emplace_back(e.at("kind").as_string());
  }
  return kinds;
}

TEST_CASE(
    "control changes sent to any daemon are stored off its loop and obeyed by every node: "
    "pause, resume, extend, set parallelism, cancel",
    "[integration][postgres]") {
  TestDatabase db;
  Cluster c(db.url());
  const std::string study = c.Submit("control", 400, 0.3);
  auto runs = [&c] { return ReadClusterRunLog(c.run_log()).size(); };
  REQUIRE(WaitFor([&] { return runs() >= 6; }, 30));

  // Paused through node-b: no node starts a trial (those running end).
  const json::value paused = c[1].Call("pause", {{"study", study}});
  CHECK(paused.at("paused").as_bool());
  CHECK(c[2].Call("status", {{"study", study}}).at("paused").as_bool());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the running ones end
  const size_t at_pause = runs();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  CHECK(runs() == at_pause);
  for (const json::value& t : c[0].Trials(study)) {
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() != "RUNNING");
  }

  // Resumed through node-c: trials start again.
  const json::value resumed = c[2].Call("resume", {{"study", study}});
  CHECK_FALSE(resumed.at("paused").as_bool());
  CHECK(WaitFor([&] { return runs() >= at_pause + 3; }, 30));

  // Parallelism and n_trials through node-a.
  const json::value set = c[0].Call("set", {{"study", study}, {"parallelism", 1}});
  CHECK(set.at("parallelism").as_int64() == 1);
  const json::value extended = c[0].Call("extend", {{"study", study}, {"n_trials", 500}});
  CHECK(extended.at("n_trials").as_int64() == 500);
  CHECK(c[1].Call("status", {{"study", study}}).at("n_trials").as_int64() == 500);

  // Cancelled through node-b: every node's trials stop, none waits, the study is CANCELLED.
  const json::value cancelled = c[1].Call("cancel", {{"study", study}});
  CHECK(cancelled.at("state").as_string() == "CANCELLED");
  json::object status = c[0].WaitStudy(study, 60);
  CHECK(status.at("state").as_string() == "CANCELLED");
  json::array trials = c[2].Trials(study);
  CHECK(CountFinished(trials) == static_cast<int>(trials.size()));
  CHECK(static_cast<int>(trials.size()) < 500);
  const std::vector<std::string> kinds = EventKinds(c[0], study);
  for (const char* kind : {"study_paused", "study_resumed", "study_parallelism", "study_extended",
                           "study_cancelled"}) {
    INFO(kind);
    CHECK(std::count(kinds.begin(), kinds.end(), kind) == 1);
  }
  // Said by the daemon that was asked, as its own (not "through another node").
  CHECK(c[1].log().find("study_paused") != std::string::npos);
  CHECK(c[1].log().find("study_cancelled") != std::string::npos);
  for (size_t i : {0u, 1u, 2u}) {
    CHECK(c[i].Stop() == 0);
  }
  CHECK(WaitNoProcessesOfStudy(study).empty());
}

}  // namespace triald::testing
