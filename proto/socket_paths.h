#pragma once
// Where triald keeps its state and control socket when not told, and where trialctl looks for
// it, so that both agree without configuration (as docker, systemctl and Slurm clients do).
//
// triald without --state-dir (DefaultDaemonPaths):
//   root:       state /var/lib/triald, socket /run/triald/triald.sock (the system service's)
//   other user: state $XDG_STATE_HOME/triald (else ~/.local/state/triald), socket
//               $XDG_RUNTIME_DIR/triald/triald.sock (else, without a runtime folder, the state
//               folder's triald.sock)
// With --state-dir DIR the socket stays DIR/triald.sock, as it always was.
//
// trialctl (FindDaemonSocket): --socket, else $TRIALD_SOCKET, is used as given (an explicit
// choice never falls through to another daemon). Otherwise the first of these that answers:
//   1. /run/triald/triald.sock                    the system service
//   2. $XDG_RUNTIME_DIR/triald/triald.sock        the user's own daemon
//   3. $XDG_STATE_HOME/triald/triald.sock         the user's own daemon started without
//      (else ~/.local/state/triald/triald.sock)   $XDG_RUNTIME_DIR
//   4. .triald/triald.sock                        the current folder (triald --state-dir .triald,
//                                                 the default of earlier versions)
// When none answers, the error names every place tried and why it failed.
//
// Everything here is a pure function of the values it is given (SocketEnv), so tests pass fake
// environments; SocketEnv::FromProcess reads the real one. Thread-safety: pure functions;
// FromProcess reads the environment (getenv) and the password database.

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace triald::proto {

// The system service's socket (config/systemd/triald.socket) and state folder.
inline constexpr const char* kSystemSocket = "/run/triald/triald.sock";
inline constexpr const char* kSystemStateDir = "/var/lib/triald";
// Where earlier versions' trialctl looked, relative to the current folder.
inline constexpr const char* kCurrentFolderSocket = ".triald/triald.sock";

// What the defaults depend on. Empty strings stand for unset variables.
struct SocketEnv {
  std::string triald_socket;    // $TRIALD_SOCKET
  std::string xdg_runtime_dir;  // $XDG_RUNTIME_DIR
  std::string xdg_state_home;   // $XDG_STATE_HOME
  std::string home;             // $HOME, else the password database's home folder
  bool root = false;            // the effective uid is 0

  static SocketEnv FromProcess();
};

// The state folder and socket triald uses when --state-dir is not given.
struct DaemonPaths {
  std::string state_dir;
  // "" when the socket stays in the state folder (state_dir/triald.sock, the daemon's own
  // default); else the socket path, whose folder (socket_dir) triald creates when missing.
  std::string socket;
  std::string socket_dir;
  unsigned socket_dir_mode = 0755;
};

// kInvalidArgument naming what to set when no default can be made (a non-root user with
// neither an absolute $XDG_STATE_HOME nor a home folder). Relative XDG values are ignored, as
// the XDG Base Directory specification says.
common::Result<DaemonPaths> DefaultDaemonPaths(const SocketEnv& env);

// One place trialctl may look: its path and, for messages, what it is.
struct SocketCandidate {
  std::string path;
  std::string what;  // "the system service", ...
};

// The places trialctl looks when neither --socket nor $TRIALD_SOCKET is given, in order.
std::vector<SocketCandidate> SocketSearchOrder(const SocketEnv& env);

// Whether a daemon answers at a path: 0 when a connection is accepted, else the connect()
// errno (ENOENT: missing, ECONNREFUSED: a socket nobody listens on, EACCES: permission).
using SocketProbe = std::function<int(const std::string& path)>;

// The socket trialctl talks to: `flag` (--socket) when given, else env.triald_socket when set,
// both without probing; else the first of SocketSearchOrder(env) that `probe` answers 0 for.
// kUnavailable listing every place tried with why, and what to do, when none answers.
common::Result<std::string> FindDaemonSocket(const std::string& flag, const SocketEnv& env,
                                             const SocketProbe& probe);

// Connects to `path` and closes the connection: the probe trialctl uses.
int ProbeSocket(const std::string& path);

}  // namespace triald::proto
