#pragma once
// ForkServers: the daemon's side of the per-study fork servers (proto/README.md, "Fork server
// protocol"; daemon/README.md, "Fork server"). ProcessLauncher asks it for each trial whose
// LaunchSpec names a fork server; one server process runs per key (a study).
//
// A server is started like a trial (vfork+exec through the same child setup: its own process
// group, the study's submitter, PR_SET_PDEATHSIG, its own leaf cgroup where cgroups are on),
// with one end of a SOCK_SEQPACKET socketpair at fd 3 (TRIALD_FORK_SERVER_FD=3) and its stdout
// and stderr in one capped log (ForkServerSpec::log_path; the previous server's log is kept as
// log_path.1). It is started by the first request of its key; requests queue until it says
// `ready` (at most Options::ready_timeout_s), then go out one packet each, the trial's three
// descriptors attached with SCM_RIGHTS. Each sent request must be answered (`forked` or
// `fork_failed`) within Options::reply_timeout_s.
//
// A server that breaks (a malformed or unknown message, a pid that is not a new child of the
// daemon running as the server's user (not the server, not a process the reaper watches: a
// server cannot hand over another study's trial waiting for its go),
// no answer in time, not ready in time, EOF, its exit) is killed (its process group and its
// cgroup, which also holds forked trials not yet placed in their own), and every request it
// had fails: Done gets kFailed (step kFork, EAGAIN: transient, so the scheduler waits and
// tries again). The next request starts a new server. After Options::max_deaths deaths in a
// row with no successful fork between them the key falls back to exec for good.
// `unsafe` or `error` from a server also turns its key to exec for good: its requests get kExec
// (the launch goes on by exec, transparently). Each of these is a ForkServerEvent.
//
// Every Done runs on the event loop, never inside Request(): from a read, a timer, the reaper,
// or Release(), whose failures are delivered synchronously (the launcher posts its callbacks).
// The descriptors of a request stay the caller's: they must stay open until Done or Cancel().
//
// Thread-safety: event-loop thread only.

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/launcher/cgroup.h"
#include "daemon/launcher/launcher.h"
#include "daemon/launcher/reaper.h"
#include "daemon/launcher/run_as.h"

namespace triald::launcher {

// How a fork request ended.
struct ForkReply {
  enum class Kind {
    kForked,  // the trial is process `pid` (the daemon's child, started at start_time)
    kFailed,  // it could not be forked: message, error
    kExec,    // the key fell back to exec: start the trial by exec instead
  };
  Kind kind = Kind::kFailed;
  pid_t pid = 0;
  uint64_t start_time = 0;
  std::string message;
  SpawnError error;
};

// One trial's fork request: what the packet carries, and the trial channel, stdout and stderr
// to attach (in that order).
struct ForkRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  std::array<int, 3> fds = {-1, -1, -1};
};

class ForkServers {
 public:
  struct Options {
    boost::asio::io_context* io = nullptr;
    Reaper* reaper = nullptr;
    common::Logger logger;
    CgroupTree* cgroups = nullptr;  // null: process groups only
    double reply_timeout_s = 10;    // a sent request unanswered this long: the server is broken
    double ready_timeout_s = 300;   // a server not ready this long after its start: broken
    double stop_grace_s = 2;        // EOF, then SIGKILL after this long
    size_t max_pending = 64;        // queued and sent requests per server
    int max_deaths = 3;             // deaths in a row without a fork: exec for good
    size_t log_head_bytes = 256 << 10;
    size_t log_tail_bytes = 256 << 10;
  };
  using Done = std::function<void(const ForkReply&)>;

  explicit ForkServers(Options options);
  ~ForkServers();  // kills every server still running
  ForkServers(const ForkServers&) = delete;
  ForkServers& operator=(const ForkServers&) = delete;

  // Whether launches of `key` are forks (false once it fell back to exec).
  bool Forking(const std::string& key) const;

  // What Request() did.
  enum class Queued { kYes, kExec, kFailed };
  // Queues `request` to the server of spec.key, starting the server (as `run_as`, when set) if
  // none runs. kYes: `done` runs later, with `*id` naming the request for Cancel(). kExec: the key
  // falls back to exec (now or before); start by exec. kFailed: `*failure` and `*error` say why
  // (too many pending, the server could not be started); `done` will not run.
  Queued Request(const ForkServerSpec& spec, const std::optional<RunAs>& run_as,
                 ForkRequest request, Done done, uint64_t* id, std::string* failure,
                 SpawnError* error);
  // The caller gives up on request `id` of `key`: `done` will not run, its descriptors are no
  // longer used. A trial the server forks for it later is killed.
  void Cancel(const std::string& key, uint64_t id);

  // Stops the server of `key` (its pending requests fail) and forgets the key.
  void Release(const std::string& key);
  void ReleaseAll();  // at shutdown

  std::optional<ForkServerStatus> StatusOf(const std::string& key) const;
  void SetListener(std::function<void(const ForkServerEvent&)> listener) {
    *listener_ = std::move(listener);
  }

  class Server;  // one server process (fork_server.cc)

 private:
  friend class Server;
  struct Entry {
    ForkServerSpec spec;
    std::shared_ptr<Server> server;  // the live one, if any
    uint64_t forked = 0;
    int deaths_in_row = 0;
    bool off = false;
    std::string reason;  // off: why; else how the last server ended
  };
  // Release(), logging `why`.
  void ReleaseFor(const std::string& key, const char* why);
  void Emit(const std::string& key, ForkServerEvent::Kind kind, const std::string& detail);
  // Called by a Server: it is ready / it forked a trial / it is gone (`death`: count it) / the
  // key must fall back to exec.
  void OnReady(Server& server);
  void OnForked(Server& server);
  void OnDown(Server& server, const std::string& how, bool death);
  void OnFallBack(Server& server, const std::string& reason);
  // A server that ended (or was stopped) stays here until it is reaped and its cgroup removed.
  void Retire(const std::shared_ptr<Server>& server);
  void Forget(Server* server) { retired_.erase(server); }
  Entry* Find(const std::string& key);

  Options options_;
  std::map<std::string, Entry> entries_;
  std::map<Server*, std::shared_ptr<Server>> retired_;
  // Shared with the posted events, so an event posted before the listener went finds it empty.
  std::shared_ptr<std::function<void(const ForkServerEvent&)>> listener_ =
      std::make_shared<std::function<void(const ForkServerEvent&)>>();
  uint64_t next_id_ = 1;
};

}  // namespace triald::launcher
