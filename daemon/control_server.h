#pragma once
// ControlServer: the daemon's unix-socket endpoint for trialctl (protocol in proto/control.h).
//
// Each connection is served asynchronously on the event loop. Requests are read into a buffer
// capped at proto::kMaxRequestBytes (4 MiB, enough for any sweep file), so an oversized,
// malformed or half-sent request gets an error reply and/or a closed connection and never
// stalls the daemon or other clients:
//   - a line over the cap: an invalid_argument reply, then the connection is closed;
//   - malformed JSON or an invalid request: an error reply, the connection stays usable;
//   - a request started but not finished (no newline) within request_timeout_s, or a reply
//     the client does not read within request_timeout_s: an error reply (best effort) and the
//     connection is closed; an idle connection (no partial request) is closed after
//     idle_timeout_s;
//   - end of stream in the middle of a request: an error reply, then close.
// At most max_connections are open at once; one more gets an "unavailable" reply and is
// closed. A failing accept (e.g. out of descriptors) is retried after a short pause instead of
// spinning.
//
// Access (see DecideAccess): the peer's credentials are read once per connection with
// SO_PEERCRED (uid, gid) and SO_PEERGROUPS (supplementary groups; /proc/PID/status on kernels
// without it). Root, the daemon's own uid and members of the allowed group may use every
// verb; anyone else who could connect (the socket file is 0660, or 0666 with read_open) may use
// the read verbs only when read_open is set, and nothing otherwise. A denied request gets a
// permission_denied reply naming the peer and who may do it.
//
// Reads come straight from Storage (the scheduler writes through), so finished and active
// studies look the same; writes (submit, cancel, enqueue) go through the Scheduler.
//
// Verbs (arguments -> result):
//   enqueue  {study, params: {name: "value text"}} -> {study, trial, params}: a trial with fixed
//            parameters that runs next (Scheduler::Enqueue); a JSON number or boolean value is
//            taken as its text.
//   export   {study} -> StudyExportJson: the study and every trial with its parameters'
//            internal values and distributions (trialctl report / export).
//
// Thread-safety: event-loop thread only. The free functions are thread-safe.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/scheduler.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

// Who may use the control socket. Mutating verbs (anything but the read verbs below) need
// full access.
struct AccessPolicy {
  uid_t daemon_uid = 0;    // the daemon's own (effective) uid
  gid_t allowed_gid = 0;   // members (primary or supplementary) get full access
  bool read_open = false;  // anyone who can connect may use the read verbs
};

// The peer of a connection, as the kernel recorded it at connect time.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;              // primary (effective) gid
  std::vector<gid_t> groups;  // supplementary gids
};

enum class Access { kNone, kRead, kFull };
const char* AccessName(Access access);

Access DecideAccess(const AccessPolicy& policy, const PeerCredentials& peer);
// ping, studies, status, trials, best, logs, export. Every other verb, including ones added later,
// counts as mutating.
bool IsReadVerb(std::string_view verb);

// The supplementary groups listed on the "Groups:" line of /proc/PID/status text; empty when
// the line is missing.
std::vector<gid_t> ParseStatusGroups(std::string_view status_text);
// SO_PEERCRED plus the peer's supplementary groups.
common::Result<PeerCredentials> ReadPeerCredentials(int socket_fd);

// A group given by name or number (--socket-group); errors name the group.
common::Result<gid_t> ResolveGroup(const std::string& name_or_gid);
// "name (gid N)" or "gid N" when the group has no name.
std::string GroupLabel(gid_t gid);

// Creates the control socket at `path` and listens on it: a stale socket file is replaced (the
// state-directory lock is ours), the file is created 0600, given to `gid` and then set to
// `mode`, so it is never reachable with looser permissions than asked. Close-on-exec.
common::Result<common::UniqueFd> ListenControlSocket(const std::string& path, mode_t mode,
                                                     gid_t gid);

struct ControlServerOptions {
  boost::asio::io_context* io = nullptr;
  Scheduler* scheduler = nullptr;
  storage::Storage* storage = nullptr;
  common::Logger logger;
  std::string socket_path;
  std::string state_dir;
  AccessPolicy access;
  int max_connections = 512;
  double idle_timeout_s = 300;    // no request in progress
  double request_timeout_s = 10;  // to finish a request once started, or to read a reply
  double node_timeout_s = 30;     // shared storage: `nodes` calls a node silent longer dead
};

class ControlServer {
 public:
  explicit ControlServer(ControlServerOptions options);
  ~ControlServer();

  // Listens on options.socket_path (ListenControlSocket with mode 0660, or 0666 when
  // access.read_open, and group access.allowed_gid) and starts accepting.
  common::Status Start();
  // Starts accepting on a socket that already listens (e.g. one passed by systemd socket
  // activation, whose mode and group the unit sets). Takes ownership.
  common::Status Start(common::UniqueFd listening_fd);
  // Stops accepting; open connections are closed after their next reply.
  void Stop();

  // Handles one request; exposed for tests. Returns the JSON result or an error.
  common::Result<boost::json::value> Handle(const std::string& verb,
                                            const boost::json::object& args);

 private:
  class Connection;
  void Accept();

  ControlServerOptions options_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::shared_ptr<int> live_connections_;
  bool stopped_ = false;
};

// JSON views shared by the control replies (and so by trialctl's --json output).
boost::json::object TrialToJson(const model::TrialRecord& trial);
boost::json::object StudySummaryJson(const model::StudyRecord& study,
                                     const std::vector<model::TrialRecord>& trials);
// The "export" reply: {study: StudySummaryJson, trials: [TrialToJson plus params_internal
// {name: internal value (a categorical's choice index)} and distributions {name:
// Distribution::ToJson as an object}]}; everything trialctl's report and exports need.
boost::json::object StudyExportJson(const model::StudyRecord& study,
                                    const std::vector<model::TrialRecord>& trials);
// The best COMPLETE trial for the direction, or nullptr.
const model::TrialRecord* BestTrial(const model::StudyRecord& study,
                                    const std::vector<model::TrialRecord>& trials);

}  // namespace triald::daemon
