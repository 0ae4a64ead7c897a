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
// Who may use which verb: daemon/control/access.h (decided once per connection from the peer's
// credentials). What each verb does: the verb table in daemon/control/verbs.h. The JSON shapes
// of its replies: daemon/control/study_json.h.
//
// Thread-safety: event-loop thread only.

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <memory>
#include <string>

#include "common/fd.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/control/access.h"
#include "daemon/control/study_json.h"
#include "daemon/control/verbs.h"
#include "daemon/scheduler.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

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

  // Handles one request from `caller` (null: unknown; submit then records no submitter) with
  // HandleVerb, no access check; exposed for tests. Returns the JSON result or an error.
  common::Result<boost::json::value> Handle(const std::string& verb,
                                            const boost::json::object& args,
                                            const PeerCredentials* caller = nullptr);

 private:
  class Connection;
  void Accept();

  ControlServerOptions options_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::shared_ptr<int> live_connections_;
  VerbContext verbs_;
  bool stopped_ = false;
};

}  // namespace triald::daemon
