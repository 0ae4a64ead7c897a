#pragma once
// Starting the dashboard from the daemon (--http ADDRESS): a fresh token in STATE_DIR/http.token,
// the server listening, and the log lines that say where it is and who may do what.
//
// Thread-safety: event-loop thread only.

#include <memory>
#include <string>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/http/server.h"

namespace triald::daemon::http {

struct DashboardStart {
  boost::asio::io_context* io = nullptr;
  Scheduler* scheduler = nullptr;
  storage::Storage* storage = nullptr;
  common::Logger logger;
  std::string state_dir;
  std::string address;     // --http, as given (ParseListenAddress)
  bool read_open = false;  // --socket-read-open
  double node_timeout_s = 30;
  // Shared storage: the GETs' reads off the event loop (HttpServerOptions::reads).
  std::shared_ptr<ReadThread> reads;
};

common::Result<std::unique_ptr<HttpServer>> StartDashboard(const DashboardStart& start);

}  // namespace triald::daemon::http
