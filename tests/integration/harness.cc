#include "tests/integration/harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/fd.h"
#include "daemon/ctl/client.h"
#include "daemon/ctl/trialctl.h"

namespace triald::testing {
namespace json = boost::json;
namespace fs = std::filesystem;

std::string BinDir() { return TRIALD_BIN_DIR; }

std::string ExamplesDir() { return std::string(TRIALD_SOURCE_DIR) + "/config/examples"; }

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string SetTomlKey(std::string toml, const std::string& key, const std::string& value) {
  const size_t at = toml.find("\n" + key + " = ");
  INFO(key);
  REQUIRE(at != std::string::npos);
  const size_t end = toml.find('\n', at + 1);
  return toml.replace(at + 1, end - at - 1, key + " = " + value);
}

std::pair<int, std::string> Shell(const std::string& cmd, bool with_stderr) {
  std::string output;
  FILE* p = ::popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

void CheckOptunaExport(const std::string& socket, const std::string& study, const std::string& db,
                       const std::string& exported_json, int n_trials) {
  Ctl opt = Trialctl(socket, {"export", study, "--format", "optuna", "--out", db});
  INFO(opt.err);
  REQUIRE(opt.code == 0);
  auto [code, output] =
      Shell("/usr/bin/python3 " + std::string(TRIALD_SOURCE_DIR) +
            "/tests/integration/check_optuna_export.py " + db + " " + exported_json);
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Catch::Contains(std::to_string(n_trials) + " trials match"));
}

TestDaemon::TestDaemon(std::string state_dir, int max_workers)
    : state_dir_(std::move(state_dir)), max_workers_(max_workers) {}

TestDaemon::~TestDaemon() {
  if (pid_ > 0) Kill();
}

std::string TestDaemon::log() const {
  std::ifstream in(state_dir_ + ".log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void TestDaemon::Start() {
  std::string exe = BinDir() + "/triald";
  std::string workers = std::to_string(max_workers_);
  std::string logfile = state_dir_ + ".log";
  std::vector<std::string> args = {exe,     "--state-dir", state_dir_, "--max-workers",
                                   workers, "--log-level", "debug"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    int fd = ::open(logfile.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    if (set_nofile_ && ::setrlimit(RLIMIT_NOFILE, &nofile_) != 0) ::_exit(126);
    if (!netns_.empty()) {
      int ns = ::open(netns_.c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) ::_exit(126);
      ::close(ns);
    }
    if (run_as_uid_ != static_cast<uid_t>(-1) &&
        (::setgroups(0, nullptr) != 0 || ::setgid(run_as_gid_) != 0 ||
         ::setuid(run_as_uid_) != 0)) {
      ::_exit(126);
    }
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = ctl::Client::Connect(socket());
    if (c.ok() && c->Call("ping").ok()) return;
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL("triald exited during start-up:\n" << log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("triald did not answer within 30 s:\n" << log());
}

int TestDaemon::Stop(double timeout_s) {
  REQUIRE(pid_ > 0);
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  FAIL("triald did not exit within " << timeout_s << " s of SIGTERM");
  return -1;
}

void TestDaemon::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

json::value TestDaemon::Call(const std::string& verb, json::object args) {
  auto c = ctl::Client::Connect(socket());
  REQUIRE(c.ok());
  auto r = c->Call(verb, std::move(args));
  INFO(verb << ": " << r.status().message());
  REQUIRE(r.ok());
  return *r;
}

std::string TestDaemon::Submit(const std::string& toml, const std::string& path) {
  json::value r = Call("submit", {{"sweep", toml}, {"path", path}});
  return std::string(r.at("study").as_string());
}

json::object TestDaemon::WaitStudy(const std::string& study, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    json::value s = Call("status", {{"study", study}});
    if (s.at("state").as_string() != "RUNNING" && s.at("running").as_int64() == 0) {
      return s.as_object();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  FAIL("study " << study << " still running after " << timeout_s << " s\n" << log());
  return {};
}

json::array TestDaemon::Trials(const std::string& study) {
  return Call("trials", {{"study", study}}).as_array();
}

namespace {

template <typename Fn>
void ForEachPid(Fn fn) {
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return;
  while (dirent* ent = ::readdir(dir)) {
    char* end;
    long pid = std::strtol(ent->d_name, &end, 10);
    if (*end == '\0' && pid > 0) fn(static_cast<pid_t>(pid));
  }
  ::closedir(dir);
}

}  // namespace

std::vector<pid_t> ZombieChildren(pid_t parent) {
  std::vector<pid_t> out;
  ForEachPid([&](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return;
    size_t close = line.rfind(')');
    if (close == std::string::npos) return;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    if (state == "Z" && ppid == parent) out.push_back(pid);
  });
  return out;
}

std::vector<pid_t> ProcessesOfStudy(const std::string& study) {
  std::vector<pid_t> out;
  const std::string want = std::string("\0TRIALD_STUDY=", 14) + study + '\0';
  ForEachPid([&](pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    if (!in) return;
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    env.insert(env.begin(), '\0');
    if (env.find(want) != std::string::npos) out.push_back(pid);
  });
  return out;
}

std::vector<pid_t> WaitNoProcessesOfStudy(const std::string& study, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  std::vector<pid_t> left = ProcessesOfStudy(study);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = ProcessesOfStudy(study);
  }
  return left;
}

bool WaitPidGone(pid_t pid, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (::kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::kill(pid, 0) != 0;
}

bool WaitFor(const std::function<bool()>& done, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

boost::json::object WaitForkServerOn(TestDaemon& d, const std::string& study, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    boost::json::object st = d.Call("status", {{"study", study}}).as_object();
    const boost::json::value& server = st.at("fork_server");
    if (server.is_object() && server.as_object().at("state").as_string() == "on") {
      return server.as_object();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

namespace {

// Calls `done` until it holds or `timeout_s` has passed (at least once, and once more at the
// deadline), every `every`; whether it held.
bool PollUntil(double timeout_s, std::chrono::milliseconds every,
               const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
}

}  // namespace

boost::json::object WaitStatus(TestDaemon& d, const std::string& study,
                               const std::function<bool(const boost::json::object&)>& done,
                               double timeout_s) {
  boost::json::object st;
  if (PollUntil(timeout_s, std::chrono::milliseconds(10), [&] {
        st = d.Call("status", {{"study", study}}).as_object();
        return done(st);
      })) {
    return st;
  }
  FAIL("study " << study << " never reached the awaited status within " << timeout_s
                << " s; the last: " << boost::json::serialize(st) << "\n"
                << d.log());
  return st;
}

boost::json::array WaitTrials(TestDaemon& d, const std::string& study,
                              const std::function<bool(const boost::json::array&)>& done,
                              double timeout_s) {
  boost::json::array trials;
  if (PollUntil(timeout_s, std::chrono::milliseconds(20), [&] {
        trials = d.Trials(study);
        return done(trials);
      })) {
    return trials;
  }
  FAIL("the trials of study " << study << " never reached the awaited state within " << timeout_s
                              << " s; the last: " << boost::json::serialize(trials) << "\n"
                              << d.log());
  return trials;
}

std::string WaitEvent(TestDaemon& d, const std::string& study, const std::string& text,
                      double timeout_s) {
  Ctl events;
  if (PollUntil(timeout_s, std::chrono::milliseconds(10), [&] {
        events = Trialctl(d.socket(), {"events", study});
        return events.code == 0 && events.out.find(text) != std::string::npos;
      })) {
    return events.out;
  }
  FAIL("study " << study << " never recorded an event with \"" << text << "\" within " << timeout_s
                << " s; trialctl events (exit " << events.code << "):\n"
                << events.out << events.err << "\n"
                << d.log());
  return events.out;
}

Ctl Trialctl(const std::string& socket, std::vector<std::string> args) {
  std::ostringstream out, err;
  args.insert(args.begin(), {"--socket", socket});
  Ctl c;
  c.code = ctl::RunTrialctl(args, out, err);
  c.out = out.str();
  c.err = err.str();
  return c;
}

std::string ExecSweep(const std::string& study, const std::string& command, int n_trials,
                      int parallelism, double timeout_s, double kill_grace_s,
                      const std::string& workdir) {
  std::ostringstream o;
  o << "[study]\nname = \"" << study << "\"\nn_trials = " << n_trials
    << "\nparallelism = " << parallelism << "\ntrial_timeout = " << timeout_s
    << "\nkill_grace = " << kill_grace_s
    << "\n\n[objective]\nkind = \"exec\"\ncommand = " << command << "\n";
  if (!workdir.empty()) o << "workdir = \"" << workdir << "\"\n";
  o << "\n[space.x]\ntype = \"float\"\nlow = -1.0\nhigh = 1.0\n\n[sampler]\nkind = "
       "\"random\"\nseed = 1\n";
  return o.str();
}

int CountState(const json::array& trials, const std::string& state) {
  int n = 0;
  for (const json::value& t : trials) n += t.at("state").as_string() == state;
  return n;
}

namespace {

// A name no account has: the test's pid and a counter (at most 32 characters).
std::string UniqueAccountName(const char* prefix) {
  static int counter = 0;
  return std::string(prefix) + std::to_string(::getpid()) + "x" + std::to_string(counter++);
}

void RunOrFail(const std::string& command) {
  INFO(command);
  REQUIRE(std::system((command + " >/dev/null 2>&1").c_str()) == 0);
}

}  // namespace

ScratchGroup::ScratchGroup() : name_(UniqueAccountName("tdg")) {
  RunOrFail("groupadd " + name_);
  group* g = ::getgrnam(name_.c_str());
  REQUIRE(g != nullptr);
  gid_ = g->gr_gid;
}

ScratchGroup::~ScratchGroup() {
  (void)std::system(("groupdel " + name_ + " >/dev/null 2>&1").c_str());
}

ScratchUser::ScratchUser(const std::string& home_root,
                         const std::vector<const ScratchGroup*>& groups)
    : name_(UniqueAccountName("tdu")) {
  std::string list;
  for (const ScratchGroup* g : groups) list += (list.empty() ? "" : ",") + g->name();
  std::string cmd = "useradd -U";
  if (home_root.empty()) {
    cmd += " -M -s /usr/sbin/nologin";
  } else {
    home_ = home_root + "/" + name_;
    cmd += " -m -d " + home_ + " -s /bin/sh";
  }
  RunOrFail(cmd + (list.empty() ? "" : " -G " + list) + " " + name_);
  passwd* pw = ::getpwnam(name_.c_str());
  REQUIRE(pw != nullptr);
  uid_ = pw->pw_uid;
  gid_ = pw->pw_gid;
}

ScratchUser::~ScratchUser() {
  const std::string remove_home = home_.empty() ? "" : " -r";
  (void)std::system(("userdel -f" + remove_home + " " + name_ + " >/dev/null 2>&1").c_str());
}

std::string OutputOfChild(const std::function<bool()>& become,
                          const std::function<std::string()>& body) {
  common::Result<common::Pipe> pipe = common::MakePipe(false);
  REQUIRE(pipe.ok());
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    pipe->read.Reset();
    if (!become()) ::_exit(3);
    std::string out = body();
    (void)common::WriteAll(pipe->write.get(), out.data(), out.size());
    ::_exit(0);
  }
  pipe->write.Reset();
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe->read.get(), buf, sizeof(buf))) > 0) all.append(buf, n);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return all;
}

}  // namespace triald::testing
