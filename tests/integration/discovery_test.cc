// triald without --state-dir and trialctl without --socket find each other (proto/socket_paths.h):
// a user's triald keeps its state under $XDG_STATE_HOME and listens under $XDG_RUNTIME_DIR, and
// trialctl, run from any folder, reaches it there; without a runtime folder both use the state
// folder; the error when nothing answers names every place tried.
//
// A root triald would take /var/lib/triald and /run/triald: run as root, these cases start
// triald as a scratch user, a user's daemon.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "daemon/ctl/trialctl.h"
#include "proto/socket_paths.h"
#include "tests/integration/harness.h"
#include "tests/support/skip.h"

namespace triald::testing {
namespace {
namespace json = boost::json;

// Sets (or, with nullopt, unsets) environment variables and the current folder for one scope,
// then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const std::vector<std::pair<std::string, std::optional<std::string>>>& vars,
            const std::string& cwd)
      : old_cwd_(std::filesystem::current_path().string()) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      Set(name, value);
    }
    REQUIRE(::chdir(cwd.c_str()) == 0);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) Set(name, value);
    (void)::chdir(old_cwd_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void Set(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  std::string old_cwd_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// Who the daemon runs as: a scratch user when this test runs as root, else this user.
struct Identity {
  std::unique_ptr<ScratchUser> user;
  uid_t uid = ::getuid();
  gid_t gid = ::getgid();
};

Identity UserIdentity() {
  Identity id;
  if (::geteuid() == 0) {
    id.user = std::make_unique<ScratchUser>();
    id.uid = id.user->uid();
    id.gid = id.user->gid();
  }
  return id;
}

// A folder owned by the daemon's user.
std::string OwnedDir(const std::string& path, const Identity& id, mode_t mode = 0700) {
  REQUIRE(::mkdir(path.c_str(), mode) == 0);
  REQUIRE(::chown(path.c_str(), id.uid, id.gid) == 0);
  return path;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// A triald started without --state-dir or --socket; killed when still running at the end.
class DefaultTriald {
 public:
  // Runs triald as `id` in `cwd` with `env` (NAME=VALUE) as its whole environment besides PATH.
  DefaultTriald(const Identity& id, std::vector<std::string> env, const std::string& cwd,
                std::string log)
      : log_(std::move(log)) {
    std::string exe = BinDir() + "/triald";
    std::vector<std::string> args = {exe,           "--max-workers", "1", "--no-cgroups",
                                     "--log-level", "debug"};
    env.push_back("PATH=/usr/bin:/bin");
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0 || ::chdir(cwd.c_str()) != 0) {
        ::_exit(126);
      }
      if (::geteuid() == 0 &&
          (::setgroups(0, nullptr) != 0 || ::setgid(id.gid) != 0 || ::setuid(id.uid) != 0)) {
        ::_exit(126);
      }
      ::execve(exe.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
  }
  ~DefaultTriald() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  DefaultTriald(const DefaultTriald&) = delete;
  DefaultTriald& operator=(const DefaultTriald&) = delete;

  pid_t pid() const { return pid_; }
  std::string log() const { return ReadTextFile(log_); }

  // Waits until a ping at `socket` answers.
  void WaitAnswers(const std::string& socket) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      Ctl ping = Trialctl(socket, {"ping"});
      if (ping.code == 0) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL("triald exited during start-up:\n" << log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL("triald did not answer at " << socket << " within 30 s:\n" << log());
  }

  // Waits for the exit (after SIGTERM when `stop`); returns the exit code, -1 for a signal.
  int Wait(bool stop) {
    REQUIRE(pid_ > 0);
    if (stop) ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("triald did not exit within 30 s:\n" << log());
    return -1;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

Ctl RunCtlHere(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Ctl c;
  c.code = ctl::RunTrialctl(args, out, err);
  c.out = out.str();
  c.err = err.str();
  return c;
}

// The system service's socket comes first in trialctl's search: a host where it answers would
// have trialctl reach that daemon instead of the test's.
bool SystemDaemonAnswers() { return proto::ProbeSocket(proto::kSystemSocket) == 0; }

}  // namespace

TEST_CASE("triald without --state-dir is reached by trialctl without --socket from any folder",
          "[discovery][trialctl][integration]") {
  if (SystemDaemonAnswers()) TRIALD_SKIP("a triald answers at /run/triald/triald.sock");
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);  // the daemon's user enters it
  Identity id = UserIdentity();
  const std::string home = OwnedDir(dir.File("home"), id);
  const std::string runtime = OwnedDir(dir.File("runtime"), id);
  const std::string state_home = OwnedDir(dir.File("state"), id);
  const std::string elsewhere = dir.File("elsewhere");
  REQUIRE(::mkdir(elsewhere.c_str(), 0755) == 0);
  const std::string socket = runtime + "/triald/triald.sock";

  DefaultTriald d(id,
                  {"HOME=" + home, "XDG_RUNTIME_DIR=" + runtime, "XDG_STATE_HOME=" + state_home},
                  home, dir.File("triald.log"));
  d.WaitAnswers(socket);
  CHECK(std::filesystem::exists(state_home + "/triald/triald.db"));
  CHECK(ModeOf(runtime + "/triald") == 0700);
  CHECK_FALSE(std::filesystem::exists(state_home + "/triald/triald.sock"));

  {
    // Another folder, and an environment that names no socket.
    ScopedEnv env({{"TRIALD_SOCKET", std::nullopt},
                   {"XDG_RUNTIME_DIR", runtime},
                   {"XDG_STATE_HOME", dir.File("unused")},
                   {"HOME", home}},
                  elsewhere);
    Ctl ping = RunCtlHere({"ping"});
    INFO(ping.err);
    REQUIRE(ping.code == 0);
    CHECK_THAT(ping.out, Catch::StartsWith("triald pid " + std::to_string(d.pid()) + " at " +
                                           socket + ": 0 running, 0 queued\n"));
    CHECK_THAT(ping.out, Catch::Contains("  state " + state_home + "/triald, node ") &&
                             Catch::Contains(", version "));
    Ctl ping_json = RunCtlHere({"ping", "--json"});
    REQUIRE(ping_json.code == 0);
    json::value reply = json::parse(ping_json.out);
    CHECK(reply.at("state_dir").as_string() == state_home + "/triald");
    CHECK_FALSE(reply.at("version").as_string().empty());
    Ctl studies = RunCtlHere({"studies", "--json"});
    CHECK(studies.code == 0);
    CHECK(studies.out == "[]\n");
  }
  {
    // A socket named explicitly is used alone, even when another place would answer.
    ScopedEnv env({{"TRIALD_SOCKET", dir.File("none.sock")}, {"XDG_RUNTIME_DIR", runtime}},
                  elsewhere);
    Ctl ping = RunCtlHere({"ping"});
    CHECK(ping.code == ctl::kExitUnavailable);
    CHECK_THAT(ping.err,
               Catch::StartsWith("trialctl: cannot reach triald at " + dir.File("none.sock")));
  }

  // A second default triald of the same user (another state folder) does not take over the
  // socket the first one listens on.
  const std::string state_home2 = OwnedDir(dir.File("state2"), id);
  DefaultTriald second(
      id, {"HOME=" + home, "XDG_RUNTIME_DIR=" + runtime, "XDG_STATE_HOME=" + state_home2}, home,
      dir.File("triald2.log"));
  CHECK(second.Wait(/*stop=*/false) == 1);
  CHECK_THAT(second.log(), Catch::Contains("triald: a triald already answers at " + socket));
  CHECK(Trialctl(socket, {"ping"}).code == 0);
  CHECK(d.Wait(/*stop=*/true) == 0);
}

TEST_CASE("without XDG_RUNTIME_DIR the socket stays in the state folder, where trialctl looks",
          "[discovery][trialctl][integration]") {
  if (SystemDaemonAnswers()) TRIALD_SKIP("a triald answers at /run/triald/triald.sock");
  TempDir dir;
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  Identity id = UserIdentity();
  const std::string home = OwnedDir(dir.File("home"), id);
  const std::string no_daemon = dir.File("runtime");  // trialctl's runtime folder: empty
  REQUIRE(::mkdir(no_daemon.c_str(), 0700) == 0);
  const std::string socket = home + "/.local/state/triald/triald.sock";

  DefaultTriald d(id, {"HOME=" + home}, home, dir.File("triald.log"));
  d.WaitAnswers(socket);
  {
    ScopedEnv env({{"TRIALD_SOCKET", std::nullopt},
                   {"XDG_RUNTIME_DIR", no_daemon},
                   {"XDG_STATE_HOME", std::nullopt},
                   {"HOME", home}},
                  dir.path());
    Ctl ping = RunCtlHere({"ping"});
    INFO(ping.err);
    REQUIRE(ping.code == 0);
    CHECK_THAT(ping.out,
               Catch::StartsWith("triald pid " + std::to_string(d.pid()) + " at " + socket + ": "));
  }
  CHECK(d.Wait(/*stop=*/true) == 0);
}

TEST_CASE("trialctl finds a triald of the current folder's .triald last",
          "[discovery][trialctl][integration]") {
  if (SystemDaemonAnswers()) TRIALD_SKIP("a triald answers at /run/triald/triald.sock");
  TempDir dir;
  const std::string project = dir.File("project");
  REQUIRE(::mkdir(project.c_str(), 0755) == 0);
  TestDaemon d(project + "/.triald");
  d.Start();
  ScopedEnv env({{"TRIALD_SOCKET", std::nullopt},
                 {"XDG_RUNTIME_DIR", std::nullopt},
                 {"XDG_STATE_HOME", dir.File("state")},
                 {"HOME", dir.path()}},
                project);
  Ctl ping = RunCtlHere({"ping"});
  INFO(ping.err);
  REQUIRE(ping.code == 0);
  CHECK_THAT(ping.out, Catch::StartsWith("triald pid " + std::to_string(d.pid()) +
                                         " at .triald/triald.sock"));
}

TEST_CASE("trialctl with no triald anywhere lists the places it tried and why",
          "[discovery][trialctl][integration]") {
  if (SystemDaemonAnswers()) TRIALD_SKIP("a triald answers at /run/triald/triald.sock");
  TempDir dir;
  // A stale socket in the runtime folder (bound, never listened on): connecting is refused.
  const std::string runtime = dir.File("runtime");
  REQUIRE(::mkdir(runtime.c_str(), 0700) == 0);
  REQUIRE(::mkdir((runtime + "/triald").c_str(), 0700) == 0);
  const std::string stale = runtime + "/triald/triald.sock";
  {
    common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", stale.c_str());
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ScopedEnv env({{"TRIALD_SOCKET", std::nullopt},
                 {"XDG_RUNTIME_DIR", runtime},
                 {"XDG_STATE_HOME", dir.File("state")},
                 {"HOME", dir.path()}},
                dir.path());
  Ctl c = RunCtlHere({"studies"});
  CHECK(c.code == ctl::kExitUnavailable);
  CHECK_THAT(c.err, Catch::StartsWith("trialctl: no triald answers; tried:\n"
                                      "  /run/triald/triald.sock (the system service): "));
  CHECK_THAT(c.err, Catch::Contains("\n  " + stale +
                                    " (your own triald, $XDG_RUNTIME_DIR): refused (a socket "
                                    "nothing listens on: that triald has stopped)\n"));
  CHECK_THAT(c.err, Catch::Contains("\n  " + dir.File("state") +
                                    "/triald/triald.sock (your own triald started without "
                                    "$XDG_RUNTIME_DIR): missing\n"));
  CHECK_THAT(c.err, Catch::Contains("\n  .triald/triald.sock (the current folder): missing\n"));
  CHECK_THAT(c.err, Catch::EndsWith("--socket PATH or TRIALD_SOCKET\n"));
}

}  // namespace triald::testing
