// trial-worker --fork-server --objective lm: the server's side of proto/README.md's "Fork server
// protocol", driven by a harness that plays the daemon (a child subreaper holding the other end
// of the SOCK_SEQPACKET channel, handing each trial its channel, stdout and stderr by
// SCM_RIGHTS, writing the go line and reaping the trials).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "config/sweep.h"
#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"
#include "tests/worker/child_run.h"
#include "tests/worker/fixtures.h"

namespace triald::worker {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using ::triald::testing::TempDir;

const std::string kWorker = std::string(TRIALD_BIN_DIR) + "/trial-worker";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<json::object> ParseLines(const std::string& data) {
  std::vector<json::object> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    REQUIRE(end != std::string::npos);
    json::value value = json::parse(data.substr(start, end - start));
    REQUIRE(value.is_object());
    lines.push_back(value.as_object());
    start = end + 1;
  }
  return lines;
}

// The descriptors /proc lists for `pid`, sorted.
std::set<int> OpenFds(pid_t pid) {
  std::set<int> fds;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (dir == nullptr) return fds;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') fds.insert(std::atoi(entry->d_name));
  }
  ::closedir(dir);
  return fds;
}

int CountThreads(pid_t pid) {
  int count = 0;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (dir == nullptr) return -1;
  while (const dirent* entry = ::readdir(dir)) count += entry->d_name[0] != '.';
  ::closedir(dir);
  return count;
}

// A field of /proc/PID/status in kB ("VmRSS").
long StatusKb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// The parent pid from /proc/PID/stat (the field after the parenthesised command and the state).
pid_t ParentOf(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  pid_t ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

// Waits for `pid` (a child of this process) and returns its exit code, or -signal.
int WaitExit(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    REQUIRE(got >= 0);
    if (got == pid) break;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("process " << pid << " still running after " << timeout.count() << " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Every trial's stdout, stderr and report channel, as the daemon holds them.
struct Trial {
  int64_t id = 0;
  pid_t pid = -1;
  int channel = -1;  // the daemon's end of the trial channel
  std::string out_path, err_path;

  void SendGo() const {
    const std::string go = "{\"type\":\"go\"}\n";
    REQUIRE(::write(channel, go.data(), go.size()) == static_cast<ssize_t>(go.size()));
  }
  // Everything the trial writes to its channel until it closes it.
  std::string ReadReports(std::chrono::seconds timeout = std::chrono::seconds(120)) const {
    std::string data;
    const auto deadline = Clock::now() + timeout;
    char buffer[4096];
    while (Clock::now() < deadline) {
      pollfd p = {channel, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::read(channel, buffer, sizeof buffer);
      if (n <= 0) return data;
      data.append(buffer, static_cast<size_t>(n));
    }
    FAIL("the trial's channel was still open after " << timeout.count() << " s");
    return data;
  }
  // Reads report lines until `count` {"type":"report"} lines have come; returns what was read.
  std::string ReadUntilReports(int count) const {
    std::string data, line;
    int reports = 0;
    while (reports < count) {
      pollfd p = {channel, POLLIN, 0};
      REQUIRE(::poll(&p, 1, 120000) == 1);
      char c;
      REQUIRE(::read(channel, &c, 1) == 1);
      data.push_back(c);
      line.push_back(c);
      if (c != '\n') continue;
      if (line.find("\"type\":\"report\"") != std::string::npos) ++reports;
      line.clear();
    }
    return data;
  }
  void CloseChannel() {
    if (channel >= 0) ::close(channel);
    channel = -1;
  }
};

// Whether madvise(MADV_COLLAPSE) works here, tried on a mapping of this process's own.
bool CollapseWorksHere() {
  const size_t size = 8 << 20, huge = 2 << 20;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 1, size);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const bool works = ::madvise(reinterpret_cast<void*>(aligned), huge, 25) == 0;
  ::munmap(p, size);
  return works;
}

// AnonHugePages of `pid`, in KiB.
int64_t AnonHugeKib(pid_t pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/smaps_rollup"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14));
  }
  return -1;
}

// The daemon's side of one fork server.
class Harness {
 public:
  // Starts `trial-worker --fork-server --objective lm --config JSON` with the channel at fd 3 and
  // its stdout and stderr in `log`. `extra_fd`: a descriptor left open in the server besides.
  // `fork_twice`: with --fork-twice.
  Harness(const std::string& config_json, std::vector<std::string> env = {}, int extra_fd = -1,
          bool fork_twice = false) {
    static const bool subreaper = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
    REQUIRE(subreaper);
    log_path_ = dir_.File("fork-server.log");
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
    const int log = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(log >= 0);
    env.push_back("TRIALD_FORK_SERVER_FD=3");
    // As triald pads it: the room each trial's environment takes in the block /proc shows.
    env.push_back("TRIALD_FORK_ENV_SPACE=" + std::string(8192, '.'));
    std::vector<std::string> argv = {kWorker, "--fork-server", "--objective",
                                     "lm",    "--config",      config_json};
    if (fork_twice) argv.emplace_back("--fork-twice");
    std::vector<char*> c_argv, c_env;
    for (auto& a : argv) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    for (auto& e : env) c_env.push_back(e.data());
    c_env.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      // As the daemon starts it: /dev/null, the log, the log, the channel, and nothing else
      // (but `extra_fd`).
      ::setpgid(0, 0);
      const int high = ::fcntl(pair[1], F_DUPFD_CLOEXEC, 10);
      const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (high < 0 || devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(log, 1) < 0 ||
          ::dup2(log, 2) < 0 || ::dup2(high, 3) < 0) {
        _exit(127);
      }
      if (extra_fd >= 0) {
        const int flags = ::fcntl(extra_fd, F_GETFD);
        ::fcntl(extra_fd, F_SETFD, flags & ~FD_CLOEXEC);
        if (extra_fd > 4) ::close_range(4, static_cast<unsigned>(extra_fd) - 1, 0);
        ::close_range(static_cast<unsigned>(extra_fd) + 1, ~0U, 0);
      } else {
        ::close_range(4, ~0U, 0);
      }
      ::execve(c_argv[0], c_argv.data(), c_env.data());
      _exit(127);
    }
    ::close(pair[1]);
    ::close(log);
    channel_ = pair[0];
  }
  ~Harness() {
    for (Trial& t : trials_) t.CloseChannel();
    if (channel_ >= 0) ::close(channel_);
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  std::string Log() const { return ReadFile(log_path_); }

  // The next message from the server; nullopt at EOF.
  std::optional<json::object> Receive(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    pollfd p = {channel_, POLLIN, 0};
    REQUIRE(::poll(&p, 1, static_cast<int>(timeout.count() * 1000)) == 1);
    std::string buffer(65536, '\0');
    const ssize_t n = ::recv(channel_, buffer.data(), buffer.size(), 0);
    REQUIRE(n >= 0);
    if (n == 0) return std::nullopt;
    json::value v = json::parse(buffer.substr(0, static_cast<size_t>(n)));
    REQUIRE(v.is_object());
    return v.as_object();
  }

  json::object ReceiveReady() {
    std::optional<json::object> ready = Receive();
    INFO("server log: " << Log());
    REQUIRE(ready.has_value());
    REQUIRE(ready->at("type").as_string() == "ready");
    return *ready;
  }

  // Sends one packet, with `fds` attached.
  void SendPacket(const std::string& data, const std::vector<int>& fds = {}) {
    iovec iov = {const_cast<char*>(data.data()), data.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
    if (!fds.empty()) {
      msg.msg_control = control.data();
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    REQUIRE(::sendmsg(channel_, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(data.size()));
  }

  // Sends a fork request for a trial with TRIALD_PARAMS = `params` and returns the trial once
  // the server answers forked.
  // `cwd`: the trial's working folder (default: the harness's temporary folder).
  Trial& Fork(const std::string& params, std::vector<std::string> extra_env = {},
              const std::string& cwd = "") {
    Trial trial;
    trial.id = next_id_++;
    trial.out_path = dir_.File("trial-" + std::to_string(trial.id) + ".out");
    trial.err_path = dir_.File("trial-" + std::to_string(trial.id) + ".err");
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
    const int out = ::open(trial.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open(trial.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    REQUIRE(out >= 0);
    REQUIRE(err >= 0);
    json::array env = {"TRIALD_REPORT_FD=3", "TRIALD_PARAMS=" + params, "TRIALD_STUDY=lm",
                       "TRIALD_TRIAL=" + std::to_string(trial.id),
                       "TRIALD_TRIAL_DIR=" + dir_.path()};
    for (const std::string& e : extra_env) env.push_back(json::value(e));
    json::object request = {{"type", "fork"},
                            {"id", trial.id},
                            {"argv", json::array{"--objective", "lm", "--config", config_}},
                            {"env", env},
                            {"cwd", cwd.empty() ? dir_.path() : cwd},
                            {"daemon_pid", static_cast<int64_t>(::getpid())}};
    sent_at_ = Clock::now();
    SendPacket(json::serialize(request), {pair[1], out, err});
    ::close(pair[1]);
    ::close(out);
    ::close(err);
    trial.channel = pair[0];
    std::optional<json::object> forked = Receive();
    INFO("server log: " << Log());
    REQUIRE(forked.has_value());
    REQUIRE(forked->at("type").as_string() == "forked");
    REQUIRE(forked->at("id").as_int64() == trial.id);
    trial.pid = static_cast<pid_t>(forked->at("pid").as_int64());
    trials_.push_back(trial);
    return trials_.back();
  }

  void SetConfig(const std::string& config_json) { config_ = config_json; }
  Clock::time_point sent_at() const { return sent_at_; }

  // Closes the daemon's end and returns the server's exit code.
  int CloseAndWait() {
    ::close(channel_);
    channel_ = -1;
    return Wait();
  }
  int Wait() {
    const int code = WaitExit(pid_);
    exited_ = true;
    return code;
  }

 private:
  TempDir dir_;
  std::string log_path_;
  std::string config_;
  pid_t pid_ = -1;
  int channel_ = -1;
  bool exited_ = false;
  int64_t next_id_ = 1;
  std::deque<Trial> trials_;  // references to its trials stay valid as it grows
  Clock::time_point sent_at_;
};

// A harness serving `config`, its ready received.
struct Served {
  std::string config_json;
  Harness harness;
  explicit Served(const config::LmObjectiveConfig& config, std::vector<std::string> env = {})
      : config_json(config::LmObjectiveToJson(config)), harness(config_json, std::move(env)) {
    harness.SetConfig(config_json);
    harness.ReceiveReady();
  }
};

struct RunResult {
  int exit_code = 0;
  std::vector<json::object> lines;
  std::string out, err;
};

RunResult RunForked(Harness& harness, const std::string& params) {
  Trial& trial = harness.Fork(params);
  trial.SendGo();
  RunResult result;
  const std::string reports = trial.ReadReports();
  result.exit_code = WaitExit(trial.pid);
  trial.CloseChannel();
  result.lines = ParseLines(reports);
  result.out = ReadFile(trial.out_path);
  result.err = ReadFile(trial.err_path);
  return result;
}

TEST_CASE("fork server: ready after LibTorch and the inputs, one thread, only its channel",
          "[worker][fork_server]") {
  const std::string config = config::LmObjectiveToJson(testing::TinyLmConfig());
  Harness harness(config);
  json::object ready = harness.ReceiveReady();
  const pid_t server = harness.pid();
  INFO("server log: " << harness.Log());
  CHECK(ready.at("pid").as_int64() == server);
  CHECK(ready.at("preloaded").as_array() == json::array{"libtorch"});
  CHECK(ready.at("objective_loaded").as_bool());
#if defined(__x86_64__) || defined(__aarch64__)
  CHECK(ready.at("forks").as_int64() == 1);  // clone(CLONE_PARENT): worker/clone_parent.h
#else
  CHECK(ready.at("forks").as_int64() == 2);
#endif
  // LibTorch is initialised, the checkpoint mapped, and still no thread but the main one (the
  // server ran again with OPENBLAS_NUM_THREADS=1 where OpenBLAS had started its own).
  CHECK(CountThreads(server) == 1);
  CHECK(OpenFds(server) == std::set<int>{0, 1, 2, 3});
  CHECK(ReadFile("/proc/" + std::to_string(server) + "/maps").find("model.safetensors") !=
        std::string::npos);
  CHECK(harness.Log().find("ready in ") != std::string::npos);
  SECTION("stop ends the server, which waits for nothing") {
    harness.SendPacket(R"({"type":"stop"})");
    CHECK(harness.Wait() == 0);
  }
  SECTION("so does EOF") { CHECK(harness.CloseAndWait() == 0); }
}

TEST_CASE("fork server: its LibTorch heap is in huge pages before the first fork",
          "[worker][fork_server]") {
  // worker/clone_parent.h, CollapseToHugePages: a fork then copies one entry per 2 MiB.
  if (!CollapseWorksHere()) TRIALD_SKIP("this kernel does not collapse memory on request");
  Served s(testing::TinyLmConfig());
  INFO("server log: " << s.harness.Log());
  CHECK(s.harness.Log().find("MiB of memory in huge pages (MADV_COLLAPSE") != std::string::npos);
  CHECK(AnonHugeKib(s.harness.pid()) > 0);
  RunResult run = RunForked(s.harness, R"({"seed": 1})");
  CHECK(run.exit_code == 0);
  CHECK(s.harness.CloseAndWait() == 0);
}

TEST_CASE("fork server: a trial gives the exec path's values for the same parameters",
          "[worker][fork_server]") {
  const config::LmObjectiveConfig config = testing::TinyLmConfig();
  const std::string params = R"({"learning_rate": 0.003, "seed": 4, "lr_schedule": "cosine"})";
  testing::ChildResult exec = testing::RunChild(
      {kWorker, "--objective", "lm", "--config", config::LmObjectiveToJson(config)},
      {"TRIALD_PARAMS=" + params, "TRIALD_STUDY=lm", "TRIALD_TRIAL=0"});
  INFO("exec stderr: " << exec.err);
  REQUIRE(exec.exit_code == 0);
  std::vector<json::object> exec_lines = ParseLines(exec.report);

  // The server's own environment is not the trial's: these would fail the trial if it leaked.
  Served s(config, {R"(TRIALD_PARAMS={"learning_rate": -1})", "TRIALD_REPORT_FD=9"});
  RunResult forked = RunForked(s.harness, params);
  INFO("forked stderr: " << forked.err);
  REQUIRE(forked.exit_code == 0);
  // The same lines in the same order: values equal (to 1e-6) but for the timings.
  REQUIRE(forked.lines.size() == exec_lines.size());
  for (size_t i = 0; i < exec_lines.size(); ++i) {
    const json::object& a = exec_lines[i];
    const json::object& b = forked.lines[i];
    INFO("line " << i << ": exec " << json::serialize(a) << ", forked " << json::serialize(b));
    REQUIRE(a.at("type") == b.at("type"));
    const std::string type(a.at("type").as_string());
    if (type == "attr") {
      REQUIRE(a.at("key") == b.at("key"));
      const std::string key(a.at("key").as_string());
      if (key == "train_seconds" || key == "tokens_per_second") continue;
      if (a.at("value").is_number()) {
        CHECK(std::abs(a.at("value").to_number<double>() - b.at("value").to_number<double>()) <
              1e-6);
      } else {
        CHECK(a.at("value") == b.at("value"));
      }
    } else if (type == "report") {
      CHECK(a.at("step") == b.at("step"));
      CHECK(std::abs(a.at("value").to_number<double>() - b.at("value").to_number<double>()) < 1e-6);
    } else {
      REQUIRE(type == "final");
      const double exec_value = a.at("value").to_number<double>();
      const double fork_value = b.at("value").to_number<double>();
      std::printf("final eval loss: exec %.9f, fork server %.9f (difference %.3g)\n", exec_value,
                  fork_value, std::abs(exec_value - fork_value));
      CHECK(std::abs(exec_value - fork_value) < 1e-6);
    }
  }
  CHECK(forked.out.find("final value ") != std::string::npos);
  CHECK(forked.out.find("step 6 value ") != std::string::npos);
  // A bad parameter fails the forked trial as it fails the exec'd one.
  RunResult bad = RunForked(s.harness, R"({"learning_rate": -1})");
  CHECK(bad.exit_code == 1);
  REQUIRE(!bad.lines.empty());
  CHECK(bad.lines.back().at("message").as_string().find("'learning_rate' must be > 0, got -1") !=
        std::string::npos);
  // A working folder the trial cannot enter fails it before anything runs.
  Trial& lost = s.harness.Fork("{}", {}, "/nonexistent/trial-dir");
  lost.SendGo();
  const std::string lost_reports = lost.ReadReports();
  CHECK(WaitExit(lost.pid) == 1);
  CHECK(lost_reports.find("cannot enter the trial's working folder /nonexistent/trial-dir") !=
        std::string::npos);
  CHECK(s.harness.CloseAndWait() == 0);
}

TEST_CASE("fork server: each trial is its own session, placed under the daemon, fds 0-3",
          "[worker][fork_server]") {
  Served s(testing::TinyLmConfig());
  Trial& first = s.harness.Fork("{}");
  Trial& second = s.harness.Fork("{}");
  CHECK(first.pid != second.pid);
  for (const Trial* t : {&first, &second}) {
    CHECK(t->pid != s.harness.pid());
    CHECK(::getpgid(t->pid) == t->pid);
    CHECK(::getsid(t->pid) == t->pid);
    // Re-parented to the subreaper, i.e. the daemon, not the server.
    CHECK(ParentOf(t->pid) == ::getpid());
    // Before its go, the trial has closed everything but 0-3 (the server's channel included).
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (OpenFds(t->pid) != std::set<int>{0, 1, 2, 3} && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    CHECK(OpenFds(t->pid) == std::set<int>{0, 1, 2, 3});
  }
  // Nothing runs without the go: EOF on the trial channel ends the trial with 0, silently.
  first.CloseChannel();
  CHECK(WaitExit(first.pid) == 0);
  CHECK(ReadFile(first.out_path).empty());
  // Anything but the go line too.
  const std::string nogo = "{\"type\":\"stop\"}\n";
  REQUIRE(::write(second.channel, nogo.data(), nogo.size()) == static_cast<ssize_t>(nogo.size()));
  CHECK(second.ReadReports().empty());
  CHECK(WaitExit(second.pid) == 0);
  CHECK(ReadFile(second.out_path).empty());
  // The server goes on serving.
  RunResult after = RunForked(s.harness, R"({"seed": 1})");
  CHECK(after.exit_code == 0);
  CHECK(s.harness.CloseAndWait() == 0);
}

TEST_CASE("fork server: --fork-twice forks each trial through a middle process",
          "[worker][fork_server]") {
  const std::string config = config::LmObjectiveToJson(testing::TinyLmConfig());
  Harness harness(config, {}, -1, /*fork_twice=*/true);
  CHECK(harness.ReceiveReady().at("forks").as_int64() == 2);
  harness.SetConfig(config);
  Trial& trial = harness.Fork("{}");
  CHECK(::getsid(trial.pid) == trial.pid);
  CHECK(ParentOf(trial.pid) == ::getpid());  // re-parented to the subreaper
  RunResult run = RunForked(harness, R"({"seed": 1})");
  CHECK(run.exit_code == 0);
  trial.CloseChannel();
  CHECK(WaitExit(trial.pid) == 0);
  CHECK(harness.CloseAndWait() == 0);
}

TEST_CASE("fork server: SIGKILL or SIGTERM of a trial does not disturb the server",
          "[worker][fork_server]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  config.max_steps = 100000;  // hours: only a signal ends these trials
  config.eval_every = 1;
  Served s(config);
  Trial& killed = s.harness.Fork("{}");
  killed.SendGo();
  killed.ReadUntilReports(1);
  // While it runs, /proc shows the trial's environment, not the server's (the daemon finds a
  // trial's escaped processes by its TRIALD_TRIAL_DIR there).
  const std::string environ = ReadFile("/proc/" + std::to_string(killed.pid) + "/environ");
  CHECK_THAT(environ, Catch::Contains(std::string("\0TRIALD_STUDY=lm\0", 17)));
  CHECK_THAT(environ, Catch::Contains("TRIALD_TRIAL=" + std::to_string(killed.id) + '\0'));
  CHECK_THAT(environ, Catch::StartsWith("TRIALD_TRIAL_DIR=/"));
  CHECK_THAT(environ, !Catch::Contains("TRIALD_FORK_SERVER_FD"));
  CHECK_THAT(environ, !Catch::Contains("TRIALD_FORK_ENV_SPACE"));
  REQUIRE(::kill(killed.pid, SIGKILL) == 0);
  CHECK(WaitExit(killed.pid) == -SIGKILL);

  // SIGTERM is the exec path's: an error line "stopped by SIGTERM" and exit 143, promptly.
  Trial& stopped = s.harness.Fork("{}");
  stopped.SendGo();
  std::string reports = stopped.ReadUntilReports(2);
  const auto sigterm = Clock::now();
  REQUIRE(::kill(stopped.pid, SIGTERM) == 0);
  reports += stopped.ReadReports();
  CHECK(WaitExit(stopped.pid) == 143);
  CHECK(std::chrono::duration<double>(Clock::now() - sigterm).count() < 10);
  std::vector<json::object> lines = ParseLines(reports);
  REQUIRE(!lines.empty());
  CHECK(lines.back().at("message").as_string() == "stopped by SIGTERM");

  CHECK(::kill(s.harness.pid(), 0) == 0);
  CHECK(CountThreads(s.harness.pid()) == 1);
  Trial& next = s.harness.Fork("{}");
  CHECK(next.pid > 0);
  next.CloseChannel();
  CHECK(WaitExit(next.pid) == 0);
  s.harness.SendPacket(R"({"type":"stop"})");
  CHECK(s.harness.Wait() == 0);
}

// Starts `trial-worker --objective lm --config JSON` with `env` and the report pipe at 3, waits
// for `reports` report lines, and returns its thread count then; the worker is killed after.
int ExecThreadsAfterReports(const std::string& config_json, std::vector<std::string> env,
                            int reports) {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  env.push_back("TRIALD_REPORT_FD=3");
  std::vector<std::string> argv = {kWorker, "--objective", "lm", "--config", config_json};
  std::vector<char*> c_argv, c_env;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  for (auto& e : env) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0 || ::dup2(devnull, 1) < 0 || ::dup2(pipe_fds[1], 3) < 0) _exit(127);
    ::execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  ::close(pipe_fds[1]);
  Trial reader;
  reader.channel = pipe_fds[0];
  reader.ReadUntilReports(reports);
  const int threads = CountThreads(pid);
  ::kill(pid, SIGKILL);
  WaitExit(pid);
  reader.CloseChannel();
  return threads;
}

TEST_CASE("fork server: a trial's thread pools are sized from its environment, as by exec",
          "[worker][fork_server]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  config.max_steps = 100000;
  config.eval_every = 1;
  const std::string config_json = config::LmObjectiveToJson(config);
  Served s(config);  // the server's environment sets no thread count
  for (const std::string& threads :
       {std::string(), std::string("OMP_NUM_THREADS=1"), std::string("OMP_NUM_THREADS=2")}) {
    std::vector<std::string> env = {"TRIALD_PARAMS={}"};
    if (!threads.empty()) env.push_back(threads);
    const int exec_threads = ExecThreadsAfterReports(config_json, env, 2);
    Trial& trial = s.harness.Fork(
        "{}", threads.empty() ? std::vector<std::string>{} : std::vector<std::string>{threads});
    trial.SendGo();
    trial.ReadUntilReports(2);
    const int fork_threads = CountThreads(trial.pid);
    ::kill(trial.pid, SIGKILL);
    WaitExit(trial.pid);
    std::printf("threads while training (%s): exec %d, forked %d\n",
                threads.empty() ? "no thread variable" : threads.c_str(), exec_threads,
                fork_threads);
    CHECK(fork_threads == exec_threads);
  }
  CHECK(CountThreads(s.harness.pid()) == 1);
}

TEST_CASE("fork server: a malformed packet ends the server with exit 2", "[worker][fork_server]") {
  const std::string config = config::LmObjectiveToJson(testing::TinyLmConfig());
  const std::string packet = GENERATE(as<std::string>{}, "not json", R"({"type":"bogus"})",
                                      R"(["fork"])", R"({"type":"fork","id":1})");
  Harness harness(config);
  harness.ReceiveReady();
  harness.SendPacket(packet);
  CHECK(harness.Wait() == 2);
  INFO("server log: " << harness.Log());
  CHECK(harness.Log().find("malformed message from the daemon") != std::string::npos);
}

TEST_CASE("fork server: a fork request without its three descriptors is malformed",
          "[worker][fork_server]") {
  const std::string config = config::LmObjectiveToJson(testing::TinyLmConfig());
  Harness harness(config);
  harness.ReceiveReady();
  json::object request = {
      {"type", "fork"},       {"id", 7},    {"argv", json::array{}},
      {"env", json::array{}}, {"cwd", "/"}, {"daemon_pid", static_cast<int64_t>(::getpid())}};
  harness.SendPacket(json::serialize(request), {0, 1});
  CHECK(harness.Wait() == 2);
  CHECK(harness.Log().find("2 descriptors attached, not 3") != std::string::npos);
}

TEST_CASE("fork server: the safety check refuses an extra descriptor or thread",
          "[worker][fork_server]") {
  const std::string config = config::LmObjectiveToJson(testing::TinyLmConfig());
  SECTION("a descriptor inherited from the starter") {
    TempDir dir;
    const std::string path = dir.Write("held-open.bin", "x");
    const int low = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(low >= 0);
    // Above the descriptors the server is given (0-3).
    const int fd = ::fcntl(low, F_DUPFD_CLOEXEC, 20);
    ::close(low);
    REQUIRE(fd >= 0);
    Harness harness(config, {}, fd);
    ::close(fd);
    std::optional<json::object> unsafe = harness.Receive();
    REQUIRE(unsafe.has_value());
    INFO(json::serialize(*unsafe));
    CHECK(unsafe->at("type").as_string() == "unsafe");
    const std::string reason(unsafe->at("reason").as_string());
    CHECK(reason == "descriptor " + std::to_string(fd) + " (" + path + ") is open");
    CHECK(harness.Wait() == 0);
  }
  SECTION("OpenBLAS threads the user asked for") {
    if (std::thread::hardware_concurrency() < 2) {
      TRIALD_SKIP("one processor: OpenBLAS starts no thread to detect");
    }
    Harness harness(config, {"OPENBLAS_NUM_THREADS=2"});
    std::optional<json::object> unsafe = harness.Receive();
    REQUIRE(unsafe.has_value());
    INFO(json::serialize(*unsafe));
    CHECK(unsafe->at("type").as_string() == "unsafe");
    CHECK(unsafe->at("reason").as_string() == "2 threads");
    CHECK(harness.Wait() == 0);
  }
}

TEST_CASE("fork server: a set-up that fails sends error and exits 1", "[worker][fork_server]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  config.train_file = "/nonexistent/train.txt";
  Harness harness(config::LmObjectiveToJson(config));
  std::optional<json::object> error = harness.Receive();
  REQUIRE(error.has_value());
  CHECK(error->at("type").as_string() == "error");
  CHECK(error->at("message").as_string().find("/nonexistent/train.txt") != std::string::npos);
  CHECK(harness.Wait() == 1);
}

TEST_CASE("fork server: its RSS stays flat over 100 trials", "[worker][fork_server]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  config.max_steps = 1;
  config.eval_every = 0;
  config.seq_len = 8;
  config.batch_size = 1;
  Served s(config);
  constexpr int kTrials = 100;
  constexpr int kWarmup = 10;
  long rss_after_warmup = 0;
  const long rss_ready = StatusKb(s.harness.pid(), "VmRSS");
  const auto began = Clock::now();
  for (int i = 0; i < kTrials; ++i) {
    // Every other trial fails at its parameters right after the go: the server's work per fork
    // is the same, and the run stays short.
    RunResult run =
        RunForked(s.harness, i % 2 == 0 ? R"({"seed": 3})" : R"({"learning_rate": -1})");
    INFO("trial " << i << " stderr: " << run.err);
    REQUIRE(run.exit_code == (i % 2 == 0 ? 0 : 1));
    if (i + 1 == kWarmup) rss_after_warmup = StatusKb(s.harness.pid(), "VmRSS");
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  const long rss_end = StatusKb(s.harness.pid(), "VmRSS");
  std::printf(
      "fork server RSS: %ld kB ready, %ld kB after %d trials, %ld kB after %d (%+ld kB); "
      "%d trials in %.1f s\n",
      rss_ready, rss_after_warmup, kWarmup, rss_end, kTrials, rss_end - rss_after_warmup, kTrials,
      seconds);
  REQUIRE(rss_ready > 0);
  CHECK(rss_end - rss_after_warmup < 1024);
  CHECK(CountThreads(s.harness.pid()) == 1);
  CHECK(s.harness.CloseAndWait() == 0);
}

}  // namespace
}  // namespace triald::worker
