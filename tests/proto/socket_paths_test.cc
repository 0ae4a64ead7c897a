// Where triald puts its state and socket by default, and the order in which trialctl looks for
// it, on fake environments.
#include "proto/socket_paths.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <map>
#include <string>
#include <vector>

namespace triald::proto {
using common::Result;

namespace {

SocketEnv User() {
  SocketEnv env;
  env.home = "/home/ada";
  return env;
}

// A probe answering from a table (every other path: ENOENT), recording what it was asked.
struct FakeProbe {
  std::map<std::string, int> answers;
  std::vector<std::string> asked;
  SocketProbe Fn() {
    return [this](const std::string& path) {
      asked.push_back(path);
      auto it = answers.find(path);
      return it == answers.end() ? ENOENT : it->second;
    };
  }
};

std::vector<std::string> Paths(const std::vector<SocketCandidate>& c) {
  std::vector<std::string> out;
  for (const SocketCandidate& x : c) out.push_back(x.path);
  return out;
}

}  // namespace

TEST_CASE("triald's default state and socket: root", "[socket_paths]") {
  SocketEnv env = User();
  env.root = true;
  env.xdg_runtime_dir = "/run/user/0";  // ignored: root is the system service
  env.xdg_state_home = "/root/.state";
  Result<DaemonPaths> p = DefaultDaemonPaths(env);
  REQUIRE(p.ok());
  CHECK(p->state_dir == "/var/lib/triald");
  CHECK(p->socket == "/run/triald/triald.sock");
  CHECK(p->socket_dir == "/run/triald");
  CHECK(p->socket_dir_mode == 0755);
}

TEST_CASE("triald's default state and socket: a user", "[socket_paths]") {
  SocketEnv env = User();
  SECTION("XDG variables set") {
    env.xdg_state_home = "/home/ada/.st/";
    env.xdg_runtime_dir = "/run/user/1000";
    Result<DaemonPaths> p = DefaultDaemonPaths(env);
    REQUIRE(p.ok());
    CHECK(p->state_dir == "/home/ada/.st/triald");
    CHECK(p->socket == "/run/user/1000/triald/triald.sock");
    CHECK(p->socket_dir == "/run/user/1000/triald");
    CHECK(p->socket_dir_mode == 0700);
  }
  SECTION("no XDG variables: ~/.local/state, the socket in the state folder") {
    Result<DaemonPaths> p = DefaultDaemonPaths(env);
    REQUIRE(p.ok());
    CHECK(p->state_dir == "/home/ada/.local/state/triald");
    CHECK(p->socket.empty());
  }
  SECTION("relative XDG values are ignored") {
    env.xdg_state_home = "state";
    env.xdg_runtime_dir = "run";
    Result<DaemonPaths> p = DefaultDaemonPaths(env);
    REQUIRE(p.ok());
    CHECK(p->state_dir == "/home/ada/.local/state/triald");
    CHECK(p->socket.empty());
  }
  SECTION("no home and no XDG_STATE_HOME: --state-dir is needed") {
    env.home = "";
    Result<DaemonPaths> p = DefaultDaemonPaths(env);
    REQUIRE_FALSE(p.ok());
    CHECK_THAT(p.status().message(), Catch::Contains("--state-dir") &&
                                         Catch::Contains("$XDG_STATE_HOME") &&
                                         Catch::Contains("$HOME"));
  }
}

TEST_CASE("trialctl's search order", "[socket_paths]") {
  SocketEnv env = User();
  env.xdg_runtime_dir = "/run/user/1000";
  CHECK(Paths(SocketSearchOrder(env)) ==
        std::vector<std::string>{"/run/triald/triald.sock", "/run/user/1000/triald/triald.sock",
                                 "/home/ada/.local/state/triald/triald.sock",
                                 ".triald/triald.sock"});
  env.xdg_runtime_dir = "";
  env.xdg_state_home = "/data/state";
  CHECK(Paths(SocketSearchOrder(env)) == std::vector<std::string>{"/run/triald/triald.sock",
                                                                  "/data/state/triald/triald.sock",
                                                                  ".triald/triald.sock"});
  // A place named twice is tried once.
  env.xdg_runtime_dir = "/run";
  CHECK(Paths(SocketSearchOrder(env)) == std::vector<std::string>{"/run/triald/triald.sock",
                                                                  "/data/state/triald/triald.sock",
                                                                  ".triald/triald.sock"});
}

TEST_CASE("trialctl finds the socket a default triald listens on", "[socket_paths]") {
  // For every kind of user environment, the daemon's default socket is one trialctl tries.
  for (bool root : {false, true}) {
    for (const char* runtime : {"", "/run/user/1000", "relative"}) {
      for (const char* state_home : {"", "/srv/state", "relative"}) {
        SocketEnv env = User();
        env.root = root;
        env.xdg_runtime_dir = runtime;
        env.xdg_state_home = state_home;
        Result<DaemonPaths> p = DefaultDaemonPaths(env);
        REQUIRE(p.ok());
        const std::string socket = p->socket.empty() ? p->state_dir + "/triald.sock" : p->socket;
        INFO("root " << root << ", runtime \"" << runtime << "\", state \"" << state_home
                     << "\": " << socket);
        FakeProbe probe;
        probe.answers[socket] = 0;
        Result<std::string> found = FindDaemonSocket("", env, probe.Fn());
        REQUIRE(found.ok());
        CHECK(*found == socket);
      }
    }
  }
}

TEST_CASE("trialctl: --socket, then $TRIALD_SOCKET, are used as given", "[socket_paths]") {
  SocketEnv env = User();
  env.triald_socket = "/env.sock";
  FakeProbe probe;
  probe.answers["/run/triald/triald.sock"] = 0;
  Result<std::string> flag = FindDaemonSocket("/flag.sock", env, probe.Fn());
  REQUIRE(flag.ok());
  CHECK(*flag == "/flag.sock");
  Result<std::string> from_env = FindDaemonSocket("", env, probe.Fn());
  REQUIRE(from_env.ok());
  CHECK(*from_env == "/env.sock");
  // Nothing was probed: an explicit socket never falls through to another daemon.
  CHECK(probe.asked.empty());
}

TEST_CASE("trialctl takes the first place that answers", "[socket_paths]") {
  SocketEnv env = User();
  env.xdg_runtime_dir = "/run/user/1000";
  FakeProbe probe;
  probe.answers["/run/triald/triald.sock"] = EACCES;
  probe.answers["/run/user/1000/triald/triald.sock"] = 0;
  probe.answers[".triald/triald.sock"] = 0;
  Result<std::string> found = FindDaemonSocket("", env, probe.Fn());
  REQUIRE(found.ok());
  CHECK(*found == "/run/user/1000/triald/triald.sock");
  CHECK(probe.asked ==
        std::vector<std::string>{"/run/triald/triald.sock", "/run/user/1000/triald/triald.sock"});

  // The system service comes first when it answers.
  probe.answers["/run/triald/triald.sock"] = 0;
  found = FindDaemonSocket("", env, probe.Fn());
  REQUIRE(found.ok());
  CHECK(*found == "/run/triald/triald.sock");
}

TEST_CASE("trialctl's error lists every place tried and why", "[socket_paths]") {
  SocketEnv env = User();
  env.xdg_runtime_dir = "/run/user/1000";
  FakeProbe probe;
  probe.answers["/run/triald/triald.sock"] = EACCES;
  probe.answers["/run/user/1000/triald/triald.sock"] = ECONNREFUSED;
  Result<std::string> found = FindDaemonSocket("", env, probe.Fn());
  REQUIRE_FALSE(found.ok());
  CHECK(found.status().code() == common::Code::kUnavailable);
  CHECK(found.status().message() ==
        "no triald answers; tried:\n"
        "  /run/triald/triald.sock (the system service): permission denied (only its user, root "
        "and its socket group may connect)\n"
        "  /run/user/1000/triald/triald.sock (your own triald, $XDG_RUNTIME_DIR): refused (a "
        "socket nothing listens on: that triald has stopped)\n"
        "  /home/ada/.local/state/triald/triald.sock (your own triald started without "
        "$XDG_RUNTIME_DIR): missing\n"
        "  .triald/triald.sock (the current folder): missing\n"
        "start triald (without --state-dir it listens at one of these), or name its socket with "
        "--socket PATH or TRIALD_SOCKET");
}

}  // namespace triald::proto
