#include "daemon/http/server.h"

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <variant>

#include "daemon/control/kept_answers.h"

namespace triald::daemon::http {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// Connections over the limit being answered 503 (and lingering) at once; past it, they are
// closed unanswered.
constexpr int kMaxRefusing = 16;

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

constexpr const char* kPagePolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

using Response = bhttp::response<bhttp::string_body>;

std::shared_ptr<Response> MakeResponse(int status, const std::string& type, std::string body,
                                       unsigned version, bool keep_alive) {
  auto res = std::make_shared<Response>(static_cast<bhttp::status>(status), version);
  res->set(bhttp::field::server, "triald");
  res->set(bhttp::field::content_type, type);
  res->set(bhttp::field::cache_control, "no-store");
  res->set("X-Content-Type-Options", "nosniff");
  res->set("Referrer-Policy", "no-referrer");
  if (type.rfind("text/html", 0) == 0) {
    res->set("Content-Security-Policy", kPagePolicy);
    res->set("X-Frame-Options", "DENY");
  }
  res->body() = std::move(body);
  res->keep_alive(keep_alive);
  res->prepare_payload();
  return res;
}

std::string ErrorBody(const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return "{\"ok\":false,\"error\":\"" + escaped + "\"}";
}

// Closes `stream` gracefully after an answer to a request that was not read whole (or at all):
// our side is shut down, then whatever the client still sends is read and dropped, for at most
// kLingerBytes or kLingerTime, so that closing with unread data (a TCP reset) does not destroy
// the answer before the client reads it.
constexpr size_t kLingerBytes = 1 << 20;
constexpr auto kLingerTime = std::chrono::seconds(2);

// `stream` may point into the object `stream` owns (an aliasing pointer): the connection's slot
// (a session, or a 503 answer's count) is held until the lingering ends.
void LingerRead(std::shared_ptr<beast::tcp_stream> stream,
                std::shared_ptr<std::array<char, 4096>> buf, size_t drained) {
  stream->async_read_some(asio::buffer(*buf),
                          [stream, buf, drained](beast::error_code ec, size_t n) {
                            if (ec || drained + n >= kLingerBytes) {
                              beast::error_code ignored;
                              stream->socket().close(ignored);
                              return;
                            }
                            LingerRead(stream, buf, drained + n);
                          });
}

void LingerClose(std::shared_ptr<beast::tcp_stream> stream) {
  beast::error_code ignored;
  stream->socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream->expires_after(kLingerTime);
  LingerRead(std::move(stream), std::make_shared<std::array<char, 4096>>(), 0);
}

}  // namespace

class HttpServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer* server, tcp::socket socket)
      : server_(server),
        options_(&server->options_),
        state_(server->state_),
        stream_(std::move(socket)),
        memory_check_(stream_.get_executor()),
        buffer_(options_->header_limit + 4096) {
    ++state_->open;
  }
  ~Session() { --state_->open; }

  void Start() { Read(); }

 private:
  // A request as posted to the loop.
  struct Posted {
    bhttp::verb verb;
    std::string method;
    std::string target;
    std::string authorization;
    std::string body;
    // Its key among the last answers: its target and Authorization.
    std::string Key() const { return target + '\n' + authorization; }
  };

  static ApiRequest ToApi(const Posted& req) {
    ApiRequest r;
    r.method = req.method;
    r.target = req.target;
    r.authorization = req.authorization;
    r.body = req.body;
    return r;
  }

  void Read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(options_->header_limit));
    parser_->body_limit(options_->body_limit);
    stream_.expires_after(Seconds(options_->request_timeout_s));
    auto self = shared_from_this();
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
        ec == asio::error::eof) {
      return Close();
    }
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      return Refuse(
          431, "request header larger than " + std::to_string(options_->header_limit) + " bytes");
    }
    if (ec == bhttp::error::body_limit) {
      return Refuse(413,
                    "request body larger than " + std::to_string(options_->body_limit) + " bytes");
    }
    if (ec) return Refuse(400, "malformed HTTP request: " + ec.message());
    bhttp::request<bhttp::string_body>& req = parser_->get();
    ++served_;
    if (!HostAllowed(std::string_view(req[bhttp::field::host]), options_->listen)) {
      std::shared_ptr<Response> res =
          MakeResponse(421, "application/json",
                       ErrorBody("the Host header must be an IP address or localhost (as in "
                                 "the URL triald logs)"),
                       req.version(), false);
      return Write(res, res->keep_alive());
    }
    // Answered on the loop (or, while storage holds it, from the loop's last answer), from a copy:
    // once answered from memory, this thread reads the next request while the loop may still be
    // inside this one.
    auto posted = std::make_shared<const Posted>(
        Posted{req.method(), std::string(req.method_string()), std::string(req.target()),
               std::string(req[bhttp::field::authorization]), req.body()});
    auto claim = std::make_shared<AnswerClaim>();
    // A read on shared storage: its memory gathered on the loop, its reads on the ReadThread.
    const bool off_loop = server_->read_api_ != nullptr &&
                          (posted->verb == bhttp::verb::get || posted->verb == bhttp::verb::head);
    // Off the loop, a GET waits on the loop (which may be inside a storage call of its own),
    // then on the ReadThread's storage: either wait counts.
    const StorageWaits waits =
        RequestWaits(server_->options_.storage_wait, server_->options_.reads, off_loop);
    if (posted->verb == bhttp::verb::get && waits.known()) {
      AnswerWhileHeld(memory_check_, waits, server_->last_answers_, posted->Key(), "answer of",
                      claim,
                      [self = shared_from_this()](const ApiResponse& kept, const std::string& why) {
                        self->Answer(kept, why);
                      });
    }
    if (off_loop) {
      OnLoop([posted, claim](Session& s) { s.GatherThenRead(posted, claim); });
      return;
    }
    // An action on shared storage: checked and stored on the ReadThread, then followed on the
    // loop (scheduler/control_change.h).
    if (server_->read_api_ != nullptr && posted->verb == bhttp::verb::post) {
      OnReads([posted, claim](Session& s) { s.StoreAction(*posted, claim); });
      return;
    }
    OnLoop([posted, claim](Session& s) { s.RunApi(*posted, *claim); });
  }

  // Event loop: what the request needs of the scheduler's memory (no storage), then its reads
  // on the ReadThread.
  void GatherThenRead(const std::shared_ptr<const Posted>& req,
                      const std::shared_ptr<AnswerClaim>& claim) {
    if (!claim->Takes()) return;
    auto memory = std::make_shared<const ApiMemory>(server_->api_.GatherMemory(ToApi(*req)));
    const uint64_t changes = server_->changes_.load();
    OnReads(
        [req, claim, memory, changes](Session& s) { s.RunRead(*req, *memory, changes, *claim); });
  }

  // ReadThread: the read Api answers (built afresh after a change through the loop's), kept
  // unless a change came since its memory was gathered; 503: the last answer, as RunApi.
  void RunRead(const Posted& req, const ApiMemory& memory, uint64_t changes, AnswerClaim& claim) {
    const uint64_t now = server_->changes_.load();
    if (now != server_->read_api_seen_) {
      server_->read_api_->Invalidate();
      server_->read_api_seen_ = now;
    }
    ApiResponse out = server_->read_api_->Handle(ToApi(req), &memory);
    std::string from_memory;
    Settle(req, changes, &out, &from_memory);
    if (!claim.Delivers()) return;
    OnFront([self = shared_from_this(), out = std::move(out), from_memory] {
      self->Answer(out, from_memory);
    });
  }

  // ReadThread: an action (a POST) checked and its change stored with the ReadThread's Api; the
  // loop's Api then has the scheduler follow it (FinishAction). An answer before that (a wrong
  // path, token or body, a refusal, storage away) goes back from here.
  void StoreAction(const Posted& req, const std::shared_ptr<AnswerClaim>& claim) {
    if (!claim->Takes()) return;
    server_->changes_.fetch_add(1);
    Api& api = *server_->read_api_;
    std::variant<ApiResponse, ControlChange> checked = api.CheckAction(ToApi(req));
    if (ApiResponse* answer = std::get_if<ApiResponse>(&checked)) {
      return Finish(req, std::move(*answer), *claim);
    }
    ControlChange change = std::get<ControlChange>(std::move(checked));
    std::variant<ApiResponse, ControlStored> stored = api.StoreAction(change);
    if (ApiResponse* answer = std::get_if<ApiResponse>(&stored)) {
      return Finish(req, std::move(*answer), *claim);
    }
    OnLoop([req, change = std::move(change), stored = std::get<ControlStored>(std::move(stored)),
            claim](Session& s) {
      s.Finish(req, s.server_->api_.FollowAction(change, stored), *claim);
    });
  }

  // The answer to a request run off the loop goes back to be written, settled as RunApi's.
  void Finish(const Posted& req, ApiResponse out, AnswerClaim& claim) {
    std::string from_memory;
    Settle(req, server_->changes_.load(), &out, &from_memory);
    if (!claim.Delivers()) return;
    OnFront([self = shared_from_this(), out = std::move(out), from_memory] {
      self->Answer(out, from_memory);
    });
  }

  // Event loop: the Api answers the request; the answer goes back to be written.
  void RunApi(const Posted& req, AnswerClaim& claim) {
    if (!claim.Takes()) return;
    const bool change = req.verb != bhttp::verb::get && req.verb != bhttp::verb::head;
    if (change) server_->changes_.fetch_add(1);
    ApiResponse out = server_->api_.Handle(ToApi(req));
    std::string from_memory;
    Settle(req, server_->changes_.load(), &out, &from_memory);
    if (!claim.Delivers()) return;
    OnFront([self = shared_from_this(), out = std::move(out), from_memory] {
      self->Answer(out, from_memory);
    });
  }

  // An answer given: a GET's kept (unless a change came since `changes` was read), a 503 replaced
  // by the last answer (from_memory says so); a change forgets the kept answers (and counts,
  // so the read Api builds afresh).
  void Settle(const Posted& req, uint64_t changes, ApiResponse* answer, std::string* memory_why) {
    ApiResponse& out = *answer;
    std::string& from_memory = *memory_why;
    KeptAnswers<ApiResponse>& last = server_->last_answers_;
    const bool kept = req.verb == bhttp::verb::get &&
                      (server_->options_.storage_wait != nullptr || server_->read_api_ != nullptr);
    if (kept && out.status == 200) {
      if (changes == server_->changes_.load()) last.Keep(req.Key(), out);
    } else if (kept && out.status == 503) {
      // Storage cannot answer (or triald is shutting down): the last answer, saying so, as
      // `status` answers from memory then.
      if (auto it = last.Find(req.Key())) {
        from_memory = "storage cannot answer (" + ErrorOf(out) + "); this is its answer of " +
                      SecondsText(it->age_s) + " ago";
        out = std::move(it->answer);
      }
    } else if (req.verb != bhttp::verb::get && req.verb != bhttp::verb::head) {
      // A change may make the kept answers wrong: none outlives an action.
      server_->changes_.fetch_add(1);
      last.Forget();
    }
  }

  // The error message of an error answer ({"ok": false, "error": ...}), or its status.
  static std::string ErrorOf(const ApiResponse& out) {
    if (out.body) {
      boost::system::error_code ec;
      boost::json::value v = boost::json::parse(*out.body, ec);
      if (!ec && v.is_object()) {
        if (const boost::json::value* e = v.as_object().if_contains("error");
            e != nullptr && e->is_string()) {
          return std::string(e->as_string());
        }
      }
    }
    return "HTTP " + std::to_string(out.status);
  }

  // Writes the Api's answer `out` to the request read (`from_memory`: the header's text, when
  // it is a kept answer).
  void Answer(const ApiResponse& out, const std::string& from_memory) {
    bhttp::request<bhttp::string_body>& req = parser_->get();
    const bool keep_alive =
        req.keep_alive() && !state_->stopped && served_ < options_->max_requests_per_connection;
    std::shared_ptr<Response> res =
        MakeResponse(out.status, out.content_type, out.body ? *out.body : std::string(),
                     req.version(), keep_alive);
    if (!out.allow.empty()) res->set(bhttp::field::allow, out.allow);
    if (!from_memory.empty()) res->set("X-Triald-From-Memory", from_memory);
    if (req.method() == bhttp::verb::head) {
      // The headers GET would send, Content-Length included, and no body (RFC 9110, 9.3.2).
      const size_t length = res->body().size();
      res->body().clear();
      res->content_length(length);
    }
    Write(res, res->keep_alive());
  }

  // Runs `fn(*this)` on the event loop.
  template <typename Fn>
  void OnLoop(Fn fn) {
    server_->front_.PostToLoop(shared_from_this(), std::move(fn));
  }
  // Runs `fn(*this)` on the ReadThread (options.reads).
  template <typename Fn>
  void OnReads(Fn fn) {
    server_->options_.reads->Post(server_->front_.shared_io(), shared_from_this(), std::move(fn));
  }
  // Runs `fn` on the server's thread.
  template <typename Fn>
  void OnFront(Fn fn) {
    asio::post(stream_.get_executor(), std::move(fn));
  }

  // Answers an unreadable request, then closes (lingering: the rest of it may be on its way).
  void Refuse(int status, const std::string& why) {
    auto res = MakeResponse(status, "application/json", ErrorBody(why), 11, false);
    stream_.expires_after(Seconds(options_->request_timeout_s));
    auto self = shared_from_this();
    bhttp::async_write(stream_, *res, [self, res](beast::error_code ec, size_t) {
      if (ec) return self->Close();
      LingerClose(std::shared_ptr<beast::tcp_stream>(self, &self->stream_));
    });
  }

  void Write(std::shared_ptr<Response> res, bool then_read) {
    stream_.expires_after(Seconds(options_->request_timeout_s));
    auto self = shared_from_this();
    bhttp::async_write(stream_, *res, [self, res, then_read](beast::error_code ec, size_t) {
      if (ec || !then_read) return self->Close();
      self->Read();
    });
  }

  void Close() {
    memory_check_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  HttpServer* server_;
  const HttpServerOptions* options_;
  std::shared_ptr<State> state_;
  beast::tcp_stream stream_;
  asio::steady_timer memory_check_;  // AnswerWhileHeld's
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  int served_ = 0;
};

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)),
      api_(options_.api),
      front_(*options_.io),
      acceptor_(front_.io()),
      accept_retry_(front_.io()),
      state_(std::make_shared<State>()) {
  if (options_.reads != nullptr) {
    ApiOptions ro = options_.api;
    ro.scheduler = nullptr;  // its memory comes gathered on the loop (ApiMemory)
    ro.storage = &options_.reads->storage();
    read_api_ = std::make_unique<Api>(std::move(ro));
  }
}

HttpServer::~HttpServer() {
  Stop();
  front_.Join();
  // Nothing posts to the ReadThread any more: its tasks for this server's sessions run before
  // the server goes.
  if (options_.reads != nullptr) options_.reads->Drain();
  // Not served any more: close the acceptor here (Stop() posted its close to the thread).
  beast::error_code ignored;
  acceptor_.close(ignored);
}

common::Status HttpServer::Start() {
  const tcp::endpoint endpoint(options_.listen.address, options_.listen.port);
  beast::error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return common::Unavailable("dashboard: cannot listen on " + options_.listen.Url() + ": " +
                               ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  Accept();
  front_.Start();  // serving from the moment the loop runs (server_thread.h)
  return common::Status::Ok();
}

void HttpServer::Stop() {
  if (state_->stopped.exchange(true)) return;
  auto close = [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  };
  if (front_.running()) {
    asio::post(front_.io(), close);
  } else {
    close();
  }
}

void HttpServer::Accept() {
  if (state_->stopped) return;
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (state_->stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (EMFILE) or the like: try again shortly rather than spin.
      options_.logger->warn("dashboard: accept failed: {}", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](beast::error_code e) {
        if (!e) Accept();
      });
      return;
    }
    if (state_->open >= options_.max_connections) {
      if (state_->refusing < kMaxRefusing) {
        // Answer 503 on a stream of its own, then close; counted in `refusing` until closed.
        struct Refused {
          Refused(tcp::socket s, std::shared_ptr<State> st) : stream(std::move(s)), state(st) {
            ++state->refusing;
          }
          ~Refused() { --state->refusing; }
          beast::tcp_stream stream;
          std::shared_ptr<State> state;
        };
        auto owner = std::make_shared<Refused>(std::move(socket), state_);
        std::shared_ptr<beast::tcp_stream> refused(owner, &owner->stream);
        auto res =
            MakeResponse(503, "application/json",
                         ErrorBody("too many dashboard connections (" +
                                   std::to_string(options_.max_connections) + " open); try again"),
                         11, false);
        refused->expires_after(std::chrono::seconds(2));
        bhttp::async_write(*refused, *res, [refused, res](beast::error_code ec, size_t) {
          if (!ec) LingerClose(refused);
        });
      }
    } else {
      std::make_shared<Session>(this, std::move(socket))->Start();
    }
    Accept();
  });
}

}  // namespace triald::daemon::http
