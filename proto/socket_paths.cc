#include "proto/socket_paths.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "common/fd.h"

namespace triald::proto {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// XDG variables count only when absolute (the XDG Base Directory specification: a relative
// value is invalid and ignored).
std::string AbsoluteOrEmpty(const std::string& path) {
  return !path.empty() && path[0] == '/' ? path : std::string();
}

std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// $XDG_STATE_HOME/triald, else ~/.local/state/triald; "" with neither.
std::string UserStateDir(const SocketEnv& env) {
  const std::string state_home = AbsoluteOrEmpty(env.xdg_state_home);
  if (!state_home.empty()) return WithoutTrailingSlashes(state_home) + "/triald";
  const std::string home = AbsoluteOrEmpty(env.home);
  if (!home.empty())
    return (home == "/" ? "" : WithoutTrailingSlashes(home)) + "/.local/state/triald";
  return "";
}

// $XDG_RUNTIME_DIR/triald; "" when unset.
std::string UserRuntimeDir(const SocketEnv& env) {
  const std::string runtime = AbsoluteOrEmpty(env.xdg_runtime_dir);
  if (runtime.empty()) return "";
  return (runtime == "/" ? "" : WithoutTrailingSlashes(runtime)) + "/triald";
}

std::string Why(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return "missing";
    case ECONNREFUSED:
      return "refused (a socket nothing listens on: that triald has stopped)";
    case EACCES:
    case EPERM:
      return "permission denied (only its user, root and its socket group may connect)";
    default:
      return std::strerror(err);
  }
}

}  // namespace

SocketEnv SocketEnv::FromProcess() {
  SocketEnv env;
  env.triald_socket = Env("TRIALD_SOCKET");
  env.xdg_runtime_dir = Env("XDG_RUNTIME_DIR");
  env.xdg_state_home = Env("XDG_STATE_HOME");
  env.home = Env("HOME");
  if (env.home.empty()) {
    std::string buf(16384, '\0');
    passwd pw{};
    passwd* found = nullptr;
    if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
        found->pw_dir != nullptr) {
      env.home = found->pw_dir;
    }
  }
  env.root = ::geteuid() == 0;
  return env;
}

common::Result<DaemonPaths> DefaultDaemonPaths(const SocketEnv& env) {
  DaemonPaths paths;
  if (env.root) {
    paths.state_dir = kSystemStateDir;
    paths.socket = kSystemSocket;
    paths.socket_dir = "/run/triald";
    paths.socket_dir_mode = 0755;  // as the systemd units make it: the socket's mode decides
    return paths;
  }
  paths.state_dir = UserStateDir(env);
  if (paths.state_dir.empty()) {
    return common::InvalidArgument(
        "no default state directory: neither $XDG_STATE_HOME nor $HOME is an absolute path; "
        "give --state-dir DIR");
  }
  const std::string runtime = UserRuntimeDir(env);
  if (!runtime.empty()) {
    paths.socket = runtime + "/triald.sock";
    paths.socket_dir = runtime;
    paths.socket_dir_mode = 0700;  // $XDG_RUNTIME_DIR is the user's alone anyway
  }
  return paths;
}

std::vector<SocketCandidate> SocketSearchOrder(const SocketEnv& env) {
  std::vector<SocketCandidate> all;
  all.push_back({kSystemSocket, "the system service"});
  const std::string runtime = UserRuntimeDir(env);
  if (!runtime.empty()) {
    all.push_back({runtime + "/triald.sock", "your own triald, $XDG_RUNTIME_DIR"});
  }
  const std::string state = UserStateDir(env);
  if (!state.empty()) {
    all.push_back({state + "/triald.sock", "your own triald started without $XDG_RUNTIME_DIR"});
  }
  all.push_back({kCurrentFolderSocket, "the current folder"});
  // One place named twice (XDG_RUNTIME_DIR=/run) is tried once.
  std::vector<SocketCandidate> out;
  std::set<std::string> seen;
  for (SocketCandidate& c : all) {
    if (seen.insert(c.path).second) out.push_back(std::move(c));
  }
  return out;
}

common::Result<std::string> FindDaemonSocket(const std::string& flag, const SocketEnv& env,
                                             const SocketProbe& probe) {
  if (!flag.empty()) return flag;
  if (!env.triald_socket.empty()) return env.triald_socket;
  std::string tried;
  for (const SocketCandidate& c : SocketSearchOrder(env)) {
    const int err = probe(c.path);
    if (err == 0) return c.path;
    tried += "\n  " + c.path + " (" + c.what + "): " + Why(err);
  }
  return common::Unavailable(
      "no triald answers; tried:" + tried +
      "\nstart triald (without --state-dir it listens at one of these), or name its socket with "
      "--socket PATH or TRIALD_SOCKET");
}

int ProbeSocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return errno;
  return 0;
}

}  // namespace triald::proto
