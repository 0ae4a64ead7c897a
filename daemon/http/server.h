#pragma once
// HttpServer: the dashboard's HTTP/1.1 endpoint (--http ADDRESS), served with Boost.Beast on
// the daemon's event loop: asynchronous, no threads. What it answers is the Api's (api.h).
//
// Bounds, so that no client can stall the daemon or grow its memory:
//   - at most max_connections open at once; one more is answered 503 and closed (while more
//     than kMaxRefusing such answers are in flight, further ones are closed at once);
//   - a request's header at most header_limit bytes (else 431), its body at most body_limit
//     (else 413); a malformed request gets 400; each then closes the connection;
//   - a request must arrive complete within request_timeout_s of the connection's previous
//     answer (or of connecting), and an answer must be taken within the same time: else closed;
//   - keep-alive for at most max_requests_per_connection requests.
// Every answer says Cache-Control: no-store and X-Content-Type-Options: nosniff; the page comes
// with a Content-Security-Policy that allows only its own inline script and style and requests
// to its own origin. A Host header that is neither an IP literal, "localhost" nor the host given
// in --http is refused (421), so a web page cannot reach the API through DNS rebinding.
//
// Thread-safety: event-loop thread only.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/http/address.h"
#include "daemon/http/api.h"

namespace triald::daemon::http {

struct HttpServerOptions {
  boost::asio::io_context* io = nullptr;
  common::Logger logger;
  ListenAddress listen;
  ApiOptions api;
  int max_connections = 64;
  size_t header_limit = 8 << 10;
  size_t body_limit = 64 << 10;
  double request_timeout_s = 10;
  int max_requests_per_connection = 1000;
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();

  // Binds and listens (SO_REUSEADDR, close-on-exec) and starts accepting.
  common::Status Start();
  // Stops accepting; open connections close after their current answer.
  void Stop();
  // The port bound (the one asked for, or the one the system chose for port 0).
  uint16_t port() const { return port_; }
  int open_connections() const { return state_->open; }

 private:
  class Session;
  struct State {
    int open = 0;      // sessions being served
    int refusing = 0;  // 503 answers in flight
    bool stopped = false;
  };
  void Accept();

  HttpServerOptions options_;
  Api api_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::shared_ptr<State> state_;
  uint16_t port_ = 0;
};

}  // namespace triald::daemon::http
