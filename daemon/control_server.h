#pragma once
// ControlServer: the daemon's unix-socket endpoint for trialctl (protocol in proto/control.h).
//
// Each connection is served asynchronously on the event loop: requests are read line by line
// with a hard size cap, so an oversized, malformed or half-sent request gets an error reply or
// a closed connection and never stalls the daemon or other clients. Idle connections are
// closed after a timeout.
//
// Reads come straight from Storage (the scheduler writes through), so finished and active
// studies look the same; writes (submit, cancel, enqueue) go through the Scheduler.
//
// Verbs (arguments -> result):
//   enqueue  {study, params: {name: "value text"}} -> {study, trial, params}: a trial with fixed
//            parameters that runs next (Scheduler::Enqueue); a JSON number or boolean value is
//            taken as its text.
//
// Thread-safety: event-loop thread only.

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/json.hpp>
#include <memory>
#include <string>

#include "common/logging.h"
#include "common/status.h"
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
  int max_connections = 1024;
  int idle_timeout_s = 300;
};

class ControlServer {
 public:
  explicit ControlServer(ControlServerOptions options);
  ~ControlServer();

  // Binds (replacing a stale socket file), sets mode 0660 and starts accepting.
  common::Status Start();
  // Stops accepting and closes every connection.
  void Stop();

  // Handles one request; exposed for tests. Returns the JSON result or an error.
  common::Result<boost::json::value> Handle(const std::string& verb,
                                            const boost::json::object& args);

 private:
  class Connection;
  void Accept();

  ControlServerOptions options_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::shared_ptr<int> live_connections_;
  bool stopped_ = false;
};

// JSON views shared by the control replies (and so by trialctl's --json output).
boost::json::object TrialToJson(const storage::TrialRecord& trial);
boost::json::object StudySummaryJson(const storage::StudyRecord& study,
                                     const std::vector<storage::TrialRecord>& trials);
// The best COMPLETE trial for the direction, or nullptr.
const storage::TrialRecord* BestTrial(const storage::StudyRecord& study,
                                      const std::vector<storage::TrialRecord>& trials);

}  // namespace triald::daemon
