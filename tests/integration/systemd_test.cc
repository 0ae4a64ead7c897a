// triald under systemd, without systemd: the test plays the service manager.
//  - sd_notify: a NOTIFY_SOCKET datagram socket receives READY=1 (only after recovery),
//    STATUS= lines, WATCHDOG=1 at half of WATCHDOG_USEC, and STOPPING=1, in that order.
//  - Socket activation: the test binds and listens on the control socket, passes it as fd 3
//    with LISTEN_FDS/LISTEN_PID (set in the child after fork, so LISTEN_PID is triald's own
//    pid), and trialctl works through it.
//  - The unit files pass `systemd-analyze verify` (a copy with ExecStart rewritten to the
//    build's triald, since the installed path need not exist here).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/ctl/client.h"
#include "tests/integration/harness.h"

namespace triald::testing {
namespace {

int BindUnix(int type, const std::string& path) {
  int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// Runs a shell command; returns its exit status and what it wrote (stdout and stderr).
int Run(const std::string& cmd, std::string* output) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("triald tells the service manager READY, STATUS, WATCHDOG and STOPPING in order",
          "[integration][systemd]") {
  TempDir dir;
  const std::string notify_path = dir.File("notify.sock");
  int notify = BindUnix(SOCK_DGRAM, notify_path);
  ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
  ::setenv("WATCHDOG_USEC", "200000", 1);  // WATCHDOG=1 every 100 ms
  TestDaemon daemon(dir.File("state"));
  daemon.Start();
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");

  std::vector<std::string> messages;
  auto receive = [&](double seconds) {
    auto until = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{notify, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(notify, buf, sizeof(buf), 0);
      if (n > 0) messages.emplace_back(buf, static_cast<size_t>(n));
    }
  };
  dir.Write("w.sh", "sleep 1\necho '{\"type\":\"final\",\"value\":1}' >&3\n", 0755);
  std::string toml = ExecSweep("sd", "[\"sh\", \"w.sh\"]", 2, 2, 0, 2, dir.path());
  daemon.Submit(toml, dir.Write("sd.toml", toml));
  receive(0.2);
  daemon.WaitStudy("sd");
  receive(0.8);
  CHECK(daemon.Stop() == 0);
  receive(0.1);
  ::close(notify);

  std::string all;
  for (const std::string& m : messages) all += "[" + m + "] ";
  INFO("messages: " << all);
  REQUIRE(!messages.empty());
  // READY first (with the counts), STOPPING last; WATCHDOG only in between.
  CHECK(messages.front().rfind("READY=1\nSTATUS=0 running, 0 queued", 0) == 0);
  CHECK(messages.back().rfind("STOPPING=1", 0) == 0);
  int ready = 0, stopping = 0, watchdog = 0;
  bool saw_running = false, saw_idle_after = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& m = messages[i];
    ready += m.find("READY=1") != std::string::npos;
    stopping += m.find("STOPPING=1") != std::string::npos;
    watchdog += m == "WATCHDOG=1";
    if (m == "WATCHDOG=1") CHECK((i > 0 && i + 1 < messages.size()));
    if (m.rfind("STATUS=2 running", 0) == 0) saw_running = true;
    if (saw_running && m.rfind("STATUS=0 running, 0 queued", 0) == 0) saw_idle_after = true;
  }
  CHECK(ready == 1);
  CHECK(stopping == 1);
  CHECK(watchdog >= 5);  // about 1.5 s of a 100 ms watchdog
  CHECK(saw_running);
  CHECK(saw_idle_after);
  CHECK(daemon.log().find("systemd watchdog: every 100 ms") != std::string::npos);
}

TEST_CASE("with socket activation triald serves on the socket it was passed",
          "[integration][systemd]") {
  TempDir dir;
  const std::string sock = dir.File("activated.sock");
  int listener = BindUnix(SOCK_STREAM, sock);
  REQUIRE(::listen(listener, 16) == 0);
  const std::string state = dir.File("state");
  const std::string exe = BinDir() + "/triald";
  const std::string log = dir.File("triald.log");
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // As systemd does: the socket at fd 3, LISTEN_PID naming the process that will exec.
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(out, 1);
    ::dup2(out, 2);
    if (listener == 3) {
      ::fcntl(3, F_SETFD, 0);  // already in place: only make it survive exec
    } else {
      ::dup2(listener, 3);  // dup2 clears close-on-exec on the copy
    }
    char pid_text[32];
    std::snprintf(pid_text, sizeof(pid_text), "%d", static_cast<int>(::getpid()));
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("LISTEN_PID", pid_text, 1);
    ::execl(exe.c_str(), exe.c_str(), "--state-dir", state.c_str(), "--log-level", "debug",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(listener);  // triald owns it now

  std::string out;
  int rc = -1;
  for (int i = 0; i < 300 && rc != 0; ++i) {
    out.clear();
    rc = Run(BinDir() + "/trialctl --socket " + sock + " ping", &out);
    if (rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO("trialctl: " << out);
  CHECK(rc == 0);
  CHECK(out.find("triald pid " + std::to_string(pid)) != std::string::npos);
  // It did not bind a socket of its own.
  CHECK_FALSE(std::filesystem::exists(state + "/triald.sock"));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("control socket passed by systemd") != std::string::npos);

  ::kill(pid, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("the systemd units pass systemd-analyze verify", "[integration][systemd]") {
  std::string out;
  if (Run("command -v systemd-analyze", &out) != 0) {
    FAIL(
        "systemd-analyze is not installed: Debian's systemd package has it "
        "(scripts/install-deps.sh installs it)");
  }
  TempDir dir;
  const std::string built = BinDir() + "/../config/systemd/triald.service";
  std::ifstream in(built);
  REQUIRE(in.good());
  std::stringstream unit;
  unit << in.rdbuf();
  const std::string text = unit.str();
  for (const char* key :
       {"Type=notify", "WatchdogSec=", "KillMode=control-group", "Delegate=yes",
        "StateDirectory=triald", "RuntimeDirectory=triald", "User=root", "Group=triald",
        "ProtectSystem=full", "NoNewPrivileges=yes", "TimeoutStopSec=", "Documentation=file:"}) {
    CHECK(text.find(std::string("\n") + key) != std::string::npos);
  }
  CHECK(text.find("\nPrivateDevices=") == std::string::npos);  // workers open /dev/nvidia*
  // Trials run as their submitters and see the file system as their shell does: nothing hides
  // or freezes their projects, nor a sweep in /tmp.
  CHECK(text.find("\nPrivateTmp=") == std::string::npos);
  CHECK(text.find("\nProtectHome=") == std::string::npos);
  // ExecStart names the installed triald; verify a copy that names the one just built.
  const std::string rewritten = std::regex_replace(
      text, std::regex("ExecStart=\\S+/triald "),
      "ExecStart=" + std::filesystem::canonical(BinDir() + "/triald").string() + " ");
  REQUIRE(rewritten != text);
  dir.Write("triald.service", rewritten);
  std::filesystem::copy_file(std::string(TRIALD_SOURCE_DIR) + "/config/systemd/triald.socket",
                             dir.File("triald.socket"));
  // The user unit (systemctl --user), checked the same way.
  std::ifstream user_in(BinDir() + "/../config/systemd/triald-user.service");
  REQUIRE(user_in.good());
  std::stringstream user_unit;
  user_unit << user_in.rdbuf();
  const std::string user_text =
      std::regex_replace(user_unit.str(), std::regex("ExecStart=\\S+/triald"),
                         "ExecStart=" + std::filesystem::canonical(BinDir() + "/triald").string());
  CHECK(user_text.find("\nUser=") == std::string::npos);
  CHECK(user_text.find("\nType=notify") != std::string::npos);
  dir.Write("triald-user.service", user_text);
  out.clear();
  int rc = Run("cd " + dir.path() +
                   " && systemd-analyze verify --man=no triald.service "
                   "triald.socket && mkdir -m 0700 -p run && XDG_RUNTIME_DIR=" +
                   dir.path() + "/run systemd-analyze verify --man=no --user triald-user.service",
               &out);
  INFO("systemd-analyze verify: " << out);
  CHECK(rc == 0);
  // It only warns about unknown keys or bad values; any output here is a defect in a unit.
  CHECK(out.find(".service:") == std::string::npos);
  CHECK(out.find(".socket:") == std::string::npos);
}

}  // namespace triald::testing
