// ProcessLauncher's forked starts, in-process: a real Reaper (the test process is the child
// subreaper), real fork servers played by tests/integration/fork_server_fixture.py (which speaks
// the protocol of proto/README.md and can misbehave on purpose), and a probe as the trial.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "daemon/launcher/cgroup.h"
#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace {

using Catch::Matchers::Contains;
using launcher::ForkServerEvent;
using launcher::LaunchSpec;
using launcher::ProcessOutcome;

const char* const kPython = "/usr/bin/python3";

// The trial: what it sees of itself, as one JSON line on stdout, then a final line on fd 3.
const char* const kProbe = R"(
import json, os, resource
cgroup = open('/proc/self/cgroup').read()
fds = []
for fd in range(0, 1024):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        pass
print(json.dumps({'pid': os.getpid(), 'pgid': os.getpgid(0), 'sid': os.getsid(0),
                  'ppid': os.getppid(), 'fds': fds, 'cwd': os.getcwd(), 'cgroup': cgroup,
                  'study': os.environ.get('TRIALD_STUDY'),
                  'rlimit_as': resource.getrlimit(resource.RLIMIT_AS)[0]}), flush=True)
os.write(3, b'{"type":"final","value":1.5}\n')
)";

struct ForkRun {
  ProcessOutcome outcome;
  std::optional<model::ProcessIdentity> started;
  bool exited = false;
  std::vector<proto::ReportMessage> messages;
};

class ForkFixture {
 public:
  explicit ForkFixture(double reply_timeout_s = 10, launcher::CgroupTree* cgroups = nullptr)
      : reaper_(io_, common::MakeNullLogger()), launcher_(MakeOptions(reply_timeout_s, cgroups)) {
    REQUIRE(reaper_.Start().ok());
    launcher_.SetForkServerListener([this](const ForkServerEvent& e) { events.push_back(e); });
  }
  ~ForkFixture() { launcher_.ReleaseAllForkServers(); }

  launcher::ProcessLauncher::Options MakeOptions(double reply_timeout_s,
                                                 launcher::CgroupTree* cgroups) {
    launcher::ProcessLauncher::Options o{&io_, &reaper_, common::MakeNullLogger(), cgroups};
    o.fork_reply_timeout_s = reply_timeout_s;
    return o;
  }

  // A trial of `key` whose fork server runs the fixture in `mode`; by exec (the fallback) it runs
  // the same probe.
  LaunchSpec Spec(const std::string& mode, const std::string& key = "study") {
    LaunchSpec s;
    s.executable = kPython;
    s.argv = {kPython, "-c", kProbe};
    s.env = {"PATH=/usr/bin:/bin", "TRIALD_REPORT_FD=3", "TRIALD_STUDY=" + key};
    s.workdir = dir_.path();
    s.log_dir = dir_.path() + "/logs/" + std::to_string(++n_);
    s.kill_grace_s = 1;
    launcher::ForkServerSpec fs;
    fs.key = key;
    fs.executable = kPython;
    fs.argv = {kPython,
               std::string(TRIALD_SOURCE_DIR) + "/tests/integration/fork_server_fixture.py", mode};
    fs.env = {"PATH=/usr/bin:/bin"};
    fs.workdir = dir_.path();
    fs.log_path = dir_.path() + "/" + key + "/fork-server.log";
    fs.request_argv = s.argv;
    s.fork_server = fs;
    return s;
  }

  // Launches; `run` fills as callbacks come. Launch must succeed.
  std::unique_ptr<launcher::TrialProcess> Launch(const LaunchSpec& spec, ForkRun& run) {
    launcher::TrialCallbacks cb;
    cb.on_started = [&run](const model::ProcessIdentity& id) { run.started = id; };
    cb.on_message = [&run](const proto::ReportMessage& m) { run.messages.push_back(m); };
    cb.on_exit = [&run](const ProcessOutcome& o) {
      run.outcome = o;
      run.exited = true;
    };
    launcher::LaunchResult r = launcher_.Launch(spec, cb);
    INFO(r.status().message());
    REQUIRE(r.ok());
    return std::move(r).value();
  }

  // Runs the loop until `done` (bounded by `limit_s`).
  void RunUntil(const std::function<bool()>& done, double limit_s = 30) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int>(limit_s * 1000));
    while (!done() && std::chrono::steady_clock::now() < end) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(10));
    }
    REQUIRE(done());
  }

  ForkRun Go(const LaunchSpec& spec) {
    ForkRun run;
    auto proc = Launch(spec, run);
    CHECK_FALSE(proc->started());
    RunUntil([&] { return run.exited; });
    return run;
  }

  boost::json::object Probe(int n) {
    std::ifstream in(dir_.path() + "/logs/" + std::to_string(n) + "/stdout.log");
    std::string line;
    std::getline(in, line);
    INFO("stdout: " << line);
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(line, ec);
    REQUIRE_FALSE(ec);
    return v.as_object();
  }

  bool Saw(ForkServerEvent::Kind kind, const std::string& part) const {
    for (const ForkServerEvent& e : events) {
      if (e.kind == kind && e.detail.find(part) != std::string::npos) return true;
    }
    return false;
  }

  std::vector<ForkServerEvent> events;
  TempDir dir_;
  int n_ = 0;
  boost::asio::io_context io_;
  launcher::Reaper reaper_;
  launcher::ProcessLauncher launcher_;
};

TEST_CASE("a forked trial has fds 0-3 only, its own session, the daemon as parent, its limits",
          "[fork_server]") {
  ForkFixture f;
  LaunchSpec spec = f.Spec("normal");
  const uint64_t limit = 6ull << 30;
  spec.memory_limit_bytes = limit;  // no cgroup here: RLIMIT_AS, set before the go
  ForkRun a = f.Go(spec);
  INFO(a.outcome.spawn_message);
  REQUIRE_FALSE(a.outcome.never_started);
  REQUIRE(a.started.has_value());
  CHECK(a.outcome.exit.code == 0);
  REQUIRE(a.messages.size() == 1);
  CHECK(a.messages[0].type == proto::ReportType::kFinal);
  boost::json::object p = f.Probe(1);
  CHECK(p.at("pid").as_int64() == a.started->pid);
  CHECK(a.started->pgid == a.started->pid);
  CHECK(a.started->start_time > 0);
  CHECK(p.at("pgid").as_int64() == a.started->pid);
  CHECK(p.at("sid").as_int64() == a.started->pid);
  CHECK(p.at("ppid").as_int64() == ::getpid());
  CHECK(boost::json::serialize(p.at("fds")) == "[0,1,2,3]");
  CHECK(p.at("cwd").as_string() == f.dir_.path());
  CHECK(p.at("study").as_string() == "study");
  CHECK(p.at("rlimit_as").as_int64() == static_cast<int64_t>(limit));

  ForkRun b = f.Go(f.Spec("normal"));
  REQUIRE(b.started.has_value());
  CHECK(b.started->pid != a.started->pid);
  CHECK(f.Probe(2).at("ppid").as_int64() == ::getpid());
  std::optional<launcher::ForkServerStatus> st = f.launcher_.fork_server_status("study");
  REQUIRE(st.has_value());
  CHECK(st->state == "on");
  CHECK(st->forked == 2);
  CHECK(st->preloaded == std::vector<std::string>{"json"});
  CHECK(st->pid > 0);
  CHECK(st->pid != a.started->pid);
  CHECK(f.Saw(ForkServerEvent::Kind::kStarted, "preloaded: json"));
  f.launcher_.ReleaseForkServer("study");
  CHECK_FALSE(f.launcher_.fork_server_status("study").has_value());
  f.RunUntil([&] { return ::kill(st->pid, 0) != 0; });  // EOF ends it, and it is reaped
}

TEST_CASE("a forked trial is in its cgroup before its go", "[fork_server][cgroup]") {
  TempDir state;
  launcher::CgroupTree::Options o;
  o.state_dir = state.path();
  o.logger = common::MakeNullLogger();
  auto tree = launcher::CgroupTree::Open(o);
  if (!tree.ok()) TRIALD_SKIP("no writable cgroup v2 hierarchy: " << tree.status().message());
  ForkFixture f(10, tree->get());
  ForkRun a = f.Go(f.Spec("normal"));
  REQUIRE(a.started.has_value());
  CHECK(a.outcome.exit.code == 0);
  const std::string cgroup(f.Probe(1).at("cgroup").as_string());
  std::string v2;
  for (size_t at = 0; at < cgroup.size();) {
    size_t nl = cgroup.find('\n', at);
    std::string line = cgroup.substr(at, nl - at);
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
    at = nl == std::string::npos ? cgroup.size() : nl + 1;
  }
  INFO(cgroup);
  CHECK_THAT(v2, Contains("/triald-"));
  // Not the server's leaf: the trial's own (its sequence number comes after the server's).
  std::optional<launcher::ForkServerStatus> st = f.launcher_.fork_server_status("study");
  REQUIRE(st.has_value());
  std::ifstream sc("/proc/" + std::to_string(st->pid) + "/cgroup");
  std::string server_cgroup((std::istreambuf_iterator<char>(sc)), std::istreambuf_iterator<char>());
  CHECK(server_cgroup.find(v2 + "\n") == std::string::npos);
}

TEST_CASE("unsafe or error from the server: the launch goes on by exec and the key is off",
          "[fork_server]") {
  const std::string mode = GENERATE(as<std::string>{}, "unsafe", "error");
  ForkFixture f;
  ForkRun a = f.Go(f.Spec(mode));
  INFO(a.outcome.spawn_message);
  REQUIRE_FALSE(a.outcome.never_started);
  REQUIRE(a.started.has_value());
  CHECK(a.outcome.exit.code == 0);
  CHECK(f.Probe(1).at("pid").as_int64() == a.started->pid);
  std::optional<launcher::ForkServerStatus> st = f.launcher_.fork_server_status("study");
  REQUIRE(st.has_value());
  CHECK(st->state == "off");
  CHECK(st->forked == 0);
  if (mode == "unsafe") {
    CHECK(st->reason == "not safe to fork: 2 threads");
    f.RunUntil([&] { return f.Saw(ForkServerEvent::Kind::kOff, "not safe to fork: 2 threads"); });
  } else {
    CHECK_THAT(st->reason, Contains("the preload failed: ModuleNotFoundError"));
    f.RunUntil([&] { return f.Saw(ForkServerEvent::Kind::kOff, "the preload failed"); });
  }
  // Later launches of the key are exec'd at once: started when Launch() returns.
  ForkRun b;
  auto proc = f.Launch(f.Spec(mode), b);
  CHECK(proc->started());
  f.RunUntil([&] { return b.exited; });
  CHECK(b.outcome.exit.code == 0);
}

TEST_CASE("a trial that dies before its go fails its start, the server goes on", "[fork_server]") {
  ForkFixture f;
  ForkRun a = f.Go(f.Spec("early-death"));
  CHECK(a.outcome.never_started);
  CHECK_FALSE(a.started.has_value());
  // The daemon reaped it before the server named it (the fixture waits): the reaper kept its
  // status.
  CHECK_THAT(a.outcome.spawn_message, Contains("ended before its go (exited with code 7)"));
  CHECK(a.outcome.spawn_error.step == launcher::SpawnStep::kChild);
  std::optional<launcher::ForkServerStatus> st = f.launcher_.fork_server_status("study");
  REQUIRE(st.has_value());
  CHECK(st->state == "on");
  CHECK(st->forked == 1);
}

TEST_CASE("fork_failed fails that start only", "[fork_server]") {
  ForkFixture f;
  ForkRun a = f.Go(f.Spec("fork-failed"));
  CHECK(a.outcome.never_started);
  CHECK_THAT(a.outcome.spawn_message, Contains("could not fork: Resource temporarily unavailable"));
  CHECK(f.launcher_.fork_server_status("study")->state == "on");
}

TEST_CASE("a server killed mid-launch: the start fails, the next launch starts a new server",
          "[fork_server]") {
  ForkFixture f;
  ForkRun a;
  auto proc = f.Launch(f.Spec("silent"), a);
  f.RunUntil([&] { return f.launcher_.fork_server_status("study")->state == "on"; });
  const pid_t server = f.launcher_.fork_server_status("study")->pid;
  REQUIRE(::kill(server, SIGKILL) == 0);
  f.RunUntil([&] { return a.exited; });
  CHECK(a.outcome.never_started);
  CHECK_THAT(a.outcome.spawn_message, Contains("exited (killed by"));
  CHECK(a.outcome.spawn_error.step == launcher::SpawnStep::kFork);
  CHECK(a.outcome.spawn_error.error_number == EAGAIN);  // transient: the scheduler waits
  f.RunUntil([&] { return f.Saw(ForkServerEvent::Kind::kExited, "exited (killed by"); });
  CHECK(f.launcher_.fork_server_status("study")->state == "down");

  ForkRun b;
  auto next = f.Launch(f.Spec("normal"), b);  // same key, its spec as the first's but the mode
  f.RunUntil([&] { return b.exited; });
  CHECK(b.started.has_value());
  CHECK(b.outcome.exit.code == 0);
  std::optional<launcher::ForkServerStatus> st = f.launcher_.fork_server_status("study");
  CHECK(st->pid != server);
  CHECK(st->deaths_in_row == 0);
}

TEST_CASE("a malformed message or a stranger's pid breaks the server", "[fork_server]") {
  const std::string mode = GENERATE(as<std::string>{}, "garbage", "stranger");
  ForkFixture f;
  ForkRun a = f.Go(f.Spec(mode));
  CHECK(a.outcome.never_started);
  CHECK_THAT(a.outcome.spawn_message, Contains(mode == "garbage" ? "which is not a JSON object"
                                                                 : "not a new child of triald"));
  f.RunUntil([&] { return !f.events.empty(); });
  CHECK(f.events.back().kind == ForkServerEvent::Kind::kExited);
}

TEST_CASE("an unanswered fork request breaks the server at the deadline", "[fork_server]") {
  ForkFixture f(/*reply_timeout_s=*/0.5);
  const auto start = std::chrono::steady_clock::now();
  ForkRun a = f.Go(f.Spec("silent"));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(a.outcome.never_started);
  CHECK_THAT(a.outcome.spawn_message, Contains("did not answer fork request 1 within 0.5 s"));
  CHECK(took >= 0.5);
  CHECK(took < 10);
}

TEST_CASE("three deaths in a row without a fork: the key falls back to exec", "[fork_server]") {
  ForkFixture f;
  for (int i = 0; i < 3; ++i) {
    ForkRun r = f.Go(f.Spec("garbage"));
    CHECK(r.outcome.never_started);
  }
  f.RunUntil([&] { return f.Saw(ForkServerEvent::Kind::kOff, "died 3 times in a row"); });
  std::optional<launcher::ForkServerStatus> st = f.launcher_.fork_server_status("study");
  REQUIRE(st.has_value());
  CHECK(st->state == "off");
  ForkRun r;
  auto proc = f.Launch(f.Spec("garbage"), r);
  CHECK(proc->started());  // exec'd
  f.RunUntil([&] { return r.exited; });
  CHECK(r.outcome.exit.code == 0);
}

TEST_CASE("a start stopped or released before the fork ends never started", "[fork_server]") {
  ForkFixture f;
  ForkRun a, b;
  auto pa = f.Launch(f.Spec("silent"), a);
  auto pb = f.Launch(f.Spec("silent"), b);
  pa->Stop(launcher::StopReason::kCancel);
  f.RunUntil([&] { return a.exited; });
  CHECK(a.outcome.never_started);
  CHECK(a.outcome.stop_reason == launcher::StopReason::kCancel);
  CHECK_FALSE(b.exited);
  f.launcher_.ReleaseForkServer("study");
  f.RunUntil([&] { return b.exited; });
  CHECK(b.outcome.never_started);
  CHECK_THAT(b.outcome.spawn_message, Contains("fork server was stopped"));
}

}  // namespace
}  // namespace triald::testing
