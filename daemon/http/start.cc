#include "daemon/http/start.h"

#include "daemon/http/token.h"

namespace triald::daemon::http {

common::Result<std::unique_ptr<HttpServer>> StartDashboard(const DashboardStart& s) {
  TRIALD_ASSIGN_OR_RETURN(ListenAddress listen, ParseListenAddress(s.address));
  TRIALD_ASSIGN_OR_RETURN(std::string token, MakeToken());
  TRIALD_ASSIGN_OR_RETURN(std::string token_path, WriteTokenFile(s.state_dir, token));
  HttpServerOptions o;
  o.io = s.io;
  o.storage_wait = s.storage != nullptr ? s.storage->wait_gauge() : nullptr;
  o.logger = s.logger;
  o.listen = listen;
  o.reads = s.reads;
  o.api.scheduler = s.scheduler;
  o.api.storage = s.storage;
  o.api.state_dir = s.state_dir;
  o.api.node_timeout_s = s.node_timeout_s;
  o.api.read_open = s.read_open;
  o.api.token = token;
  auto server = std::make_unique<HttpServer>(o);
  TRIALD_RETURN_IF_ERROR(server->Start());
  listen.port = server->port();
  if (!listen.loopback()) {
    s.logger->warn(
        "dashboard: listening on {}, which is not a loopback address: anyone who can reach it "
        "can try the token and, with --socket-read-open, read every study; prefer 127.0.0.1 "
        "and an SSH tunnel (daemon/README.md, Dashboard)",
        listen.Url());
  }
  s.logger->info(
      "dashboard: {}/ (actions need the token in {}, readable by this user only; open "
      "{}/#token=TOKEN to give it to the page; reading is {})",
      listen.Url(), token_path, listen.Url(),
      s.read_open ? "open to anyone who can connect (--socket-read-open)" : "for the token too");
  return server;
}

}  // namespace triald::daemon::http
