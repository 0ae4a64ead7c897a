#pragma once
// HttpServer: the dashboard's HTTP/1.1 endpoint (--http ADDRESS), served with Boost.Beast on a
// thread of its own from the moment the event loop runs: connections, reading, the Host check and
// writing answers happen there, and each request is posted to the daemon's event loop, where the
// Api (api.h) answers it, and its answer posted back. While storage holds the loop
// (Storage::wait_gauge() shows a wait of kMemoryAfter, kept_answers.h) a GET the loop has not
// answered (busy with something else, or inside this very request) is answered with the loop's last
// answer to the same target and Authorization, with an X-Triald-From-Memory header saying how old
// it is (the loop's own answer, when it comes, is dropped: control/answer_claim.h); every POST
// forgets those answers before its own is sent. So the page and its polls answer within
// milliseconds while the loop waits on a database that does not answer (control/server.h does the
// same for `ping` and `status`).
//
// With HttpServerOptions::reads (shared storage), a GET makes no storage call on the loop: the
// loop gathers what it needs of the scheduler's memory (ApiMemory: the running trials, the
// study's status fields from memory), then a read Api of the server's own answers it on the
// ReadThread (control/read_thread.h) with that thread's connection; a GET waiting there is
// answered from the last answer as above, by that connection's wait gauge. An action (a POST)
// is checked and stored there too (Api::CheckAction, Api::StoreAction: scheduler/
// control_change.h), and the loop's Api then has the scheduler follow what was stored without
// storage (Api::FollowAction) before the answer; it counts as a change, so the read Api builds
// its next answers afresh and no GET read while it ran is kept.
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
// Thread-safety: the public calls on the event-loop thread only.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>

#include "common/logging.h"
#include "common/status.h"
#include "daemon/control/kept_answers.h"
#include "daemon/control/read_thread.h"
#include "daemon/control/server_thread.h"
#include "daemon/http/address.h"
#include "daemon/http/api.h"
#include "daemon/storage/wait_gauge.h"

namespace triald::daemon::http {

struct HttpServerOptions {
  boost::asio::io_context* io = nullptr;  // the event loop: the Api runs on it
  // Storage's waits (Storage::wait_gauge(); null: never known, and every request waits for the
  // loop). Not owned, outlives the server.
  const storage::WaitGauge* storage_wait = nullptr;
  common::Logger logger;
  ListenAddress listen;
  ApiOptions api;
  // Shared storage: GETs read there, off the event loop (control/read_thread.h), with what they
  // need of the scheduler's memory gathered on the loop first (ApiMemory). Null: on the loop.
  std::shared_ptr<ReadThread> reads;
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
  // Stops accepting; open connections close after their current answer. The server's thread
  // runs on until the server is destroyed (after the loop has stopped).
  void Stop();
  // The port bound (the one asked for, or the one the system chose for port 0).
  uint16_t port() const { return port_; }
  int open_connections() const { return state_->open; }

 private:
  class Session;
  // Read on either thread (a session may end on the loop's, holding the last reference).
  struct State {
    std::atomic<int> open{0};      // sessions being served
    std::atomic<int> refusing{0};  // 503 answers in flight
    std::atomic<bool> stopped{false};
  };
  void Accept();

  HttpServerOptions options_;
  Api api_;
  // The GETs' Api on options_.reads (its own caches; used on the ReadThread only), and the
  // changes it has built since.
  std::unique_ptr<Api> read_api_;
  uint64_t read_api_seen_ = 0;
  std::atomic<uint64_t> changes_{0};  // POSTs run (each invalidates the read Api's caches)
  // The server's own thread and io_context (server_thread.h); declared before the acceptor and
  // timer, which are served on it.
  ServerThread front_;
  // The loop's last answer per (target, Authorization) to a GET (kept_answers.h); emptied by
  // every POST.
  KeptAnswers<ApiResponse> last_answers_{256};
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::shared_ptr<State> state_;
  uint16_t port_ = 0;
};

}  // namespace triald::daemon::http
