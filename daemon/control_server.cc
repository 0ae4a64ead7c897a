#include "daemon/control_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <boost/asio/write.hpp>

#include "proto/control.h"

namespace triald::daemon {
namespace asio = boost::asio;
namespace json = boost::json;
using common::Result;
using common::Status;
using Socket = asio::local::stream_protocol::socket;

// One client connection: reads request lines into a capped buffer and answers each in order.
// Only one request is handled at a time and nothing more is read until its reply is written,
// so a client cannot make the daemon buffer more than one request and one reply.
class ControlServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ControlServer* server, Socket socket, PeerCredentials peer)
      : server_(server),
        socket_(std::move(socket)),
        peer_(std::move(peer)),
        access_(DecideAccess(server_->options_.access, peer_)),
        deadline_(socket_.get_executor()) {}

  void Start() {
    live_ = server_->live_connections_;
    ++*live_;
    Pump();
  }
  ~Connection() {
    if (live_) --*live_;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // Answers the next complete request, or reads more.
  void Pump() {
    size_t nl = pending_.find('\n', scanned_);
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      scanned_ = 0;
      if (!pending_.empty()) request_started_ = Clock::now();
      bool close_after = false;
      std::string reply = Dispatch(line, &close_after);
      Reply(std::move(reply), close_after);
      return;
    }
    scanned_ = pending_.size();
    if (pending_.size() > proto::kMaxRequestBytes) {
      Reply(proto::EncodeError(common::InvalidArgument(
                "request larger than " + std::to_string(proto::kMaxRequestBytes) +
                " bytes (the limit; a sweep file travels inside \"submit\")")),
            /*close_after=*/true);
      return;
    }
    if (eof_) {
      if (pending_.empty()) {
        Close();
      } else {
        Reply(proto::EncodeError(
                  common::InvalidArgument("incomplete request: " + std::to_string(pending_.size()) +
                                          " bytes without a newline before the end of the stream")),
              /*close_after=*/true);
      }
      return;
    }
    ReadSome();
  }

  void ReadSome() {
    auto self = shared_from_this();
    const ControlServerOptions& o = server_->options_;
    if (pending_.empty()) {
      Arm(Clock::now() + Seconds(o.idle_timeout_s), "");
    } else {
      Arm(request_started_ + Seconds(o.request_timeout_s),
          "request not completed (no newline) within " + FormatSeconds(o.request_timeout_s));
    }
    socket_.async_read_some(asio::buffer(chunk_),
                            [self](const boost::system::error_code& ec, size_t n) {
                              self->Disarm();
                              if (ec == asio::error::eof) {
                                self->eof_ = true;
                              } else if (ec) {
                                self->Close();  // reset, or closed by the deadline
                                return;
                              } else {
                                if (self->pending_.empty()) self->request_started_ = Clock::now();
                                self->pending_.append(self->chunk_.data(), n);
                              }
                              self->Pump();
                            });
  }

  std::string Dispatch(const std::string& line, bool* close_after) {
    Result<proto::Request> req = proto::ParseRequest(line);
    if (!req.ok()) return proto::EncodeError(req.status());
    if (!Permits(access_, IsReadVerb(req->verb))) {
      *close_after = access_ == Access::kNone;
      server_->options_.logger->warn(
          "control socket: denied \"{}\" to uid {} gid {} pid {} (access {})", req->verb, peer_.uid,
          peer_.gid, peer_.pid, AccessName(access_));
      return proto::EncodeError(DenialFor(server_->options_.access, peer_, access_, req->verb));
    }
    if (Status owner = AuthorizeStudyVerb(*server_->options_.storage, server_->options_.access,
                                          peer_, req->verb, req->args);
        !owner.ok()) {
      server_->options_.logger->warn("control socket: denied \"{}\" to uid {} pid {}: {}",
                                     req->verb, peer_.uid, peer_.pid, owner.message());
      return proto::EncodeError(owner);
    }
    Result<json::value> res = server_->Handle(req->verb, req->args, &peer_);
    if (!res.ok()) return proto::EncodeError(res.status());
    return proto::EncodeOk(std::move(res).value());
  }

  void Reply(std::string text, bool close_after) {
    auto self = shared_from_this();
    auto data = std::make_shared<std::string>(std::move(text));
    Arm(Clock::now() + Seconds(server_->options_.request_timeout_s), "");
    asio::async_write(socket_, asio::buffer(*data),
                      [self, data, close_after](const boost::system::error_code& ec, size_t) {
                        self->Disarm();
                        if (ec || close_after || self->server_->stopped_) {
                          self->Close();
                          return;
                        }
                        self->Pump();
                      });
  }

  // Closes the connection at `when` unless the pending operation finishes first (and re-arms
  // or cancels); `why`, when given, is sent as a last error reply (best effort, never blocking).
  void Arm(Clock::time_point when, std::string why) {
    const uint64_t generation = ++deadline_generation_;
    deadline_.expires_at(when);
    deadline_.async_wait([self = shared_from_this(), why = std::move(why),
                          generation](const boost::system::error_code& ec) {
      // A later Arm or a cancel supersedes this deadline, even if it had already fired.
      if (ec || generation != self->deadline_generation_) return;
      if (!why.empty()) {
        self->server_->options_.logger->info("control socket: closing connection of pid {}: {}",
                                             self->peer_.pid, why);
        std::string msg = proto::EncodeError(common::InvalidArgument(why + "; closing"));
        (void)::send(self->socket_.native_handle(), msg.data(), msg.size(),
                     MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      self->Close();
    });
  }

  void Disarm() {
    ++deadline_generation_;
    deadline_.cancel();
  }

  static std::string FormatSeconds(double s) {
    std::string t = std::to_string(s);
    t.erase(t.find_last_not_of('0') + 1);
    if (!t.empty() && t.back() == '.') t.pop_back();
    return t + " s";
  }

  void Close() {
    boost::system::error_code ignored;
    Disarm();
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  ControlServer* server_;
  Socket socket_;
  PeerCredentials peer_;
  Access access_;
  asio::steady_timer deadline_;
  uint64_t deadline_generation_ = 0;
  std::array<char, 64 * 1024> chunk_;
  std::string pending_;  // bytes read but not yet answered; at most one chunk past the cap
  size_t scanned_ = 0;   // pending_[0, scanned_) holds no newline
  Clock::time_point request_started_;
  bool eof_ = false;
  std::shared_ptr<int> live_;
};

ControlServer::ControlServer(ControlServerOptions options)
    : options_(std::move(options)),
      acceptor_(*options_.io),
      accept_retry_(*options_.io),
      live_connections_(std::make_shared<int>(0)),
      verbs_{options_.scheduler, options_.storage, options_.state_dir, options_.node_timeout_s} {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start() {
  const mode_t mode = options_.access.read_open ? 0666 : 0660;
  TRIALD_ASSIGN_OR_RETURN(common::UniqueFd fd, ListenControlSocket(options_.socket_path, mode,
                                                                   options_.access.allowed_gid));
  return Start(std::move(fd));
}

Status ControlServer::Start(common::UniqueFd listening_fd) {
  // Whoever created it, no worker may inherit the control socket.
  ::fcntl(listening_fd.get(), F_SETFD, FD_CLOEXEC);
  boost::system::error_code ec;
  acceptor_.assign(asio::local::stream_protocol(), listening_fd.get(), ec);
  if (ec) {
    return common::IoError("control socket " + options_.socket_path + ": " + ec.message());
  }
  listening_fd.Release();
  Accept();
  return Status::Ok();
}

void ControlServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  accept_retry_.cancel();
}

void ControlServer::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, Socket socket) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      // Typically EMFILE/ENFILE: the pending connection stays in the backlog; try again after
      // a pause rather than spinning on the event loop.
      options_.logger->warn("control socket: accept failed: {}; retrying in 100 ms", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopped_) Accept();
      });
      return;
    }
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    auto refuse = [&socket](const Status& why) {
      std::string msg = proto::EncodeError(why);
      (void)::send(socket.native_handle(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      boost::system::error_code ignored;
      socket.close(ignored);
    };
    if (*live_connections_ >= options_.max_connections) {
      refuse(common::Unavailable("too many connections (" +
                                 std::to_string(options_.max_connections) +
                                 " open); try again later"));
    } else if (Result<PeerCredentials> peer = ReadPeerCredentials(socket.native_handle());
               !peer.ok()) {
      options_.logger->warn("control socket: {}", peer.status().message());
      refuse(peer.status());
    } else {
      std::make_shared<Connection>(this, std::move(socket), std::move(*peer))->Start();
    }
    Accept();
  });
}

Result<json::value> ControlServer::Handle(const std::string& verb, const json::object& args,
                                          const PeerCredentials* caller) {
  VerbContext context = verbs_;
  context.caller = caller;
  return HandleVerb(context, verb, args);
}

}  // namespace triald::daemon
