#include "daemon/control_server.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <boost/asio/write.hpp>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>

#include "common/fd.h"
#include "common/json.h"
#include "common/utf8.h"
#include "proto/control.h"

namespace triald::daemon {
namespace asio = boost::asio;
namespace json = boost::json;
using common::Result;
using common::Status;
using model::TrialRecord;
using model::TrialState;
using Socket = asio::local::stream_protocol::socket;

namespace {

json::value Num(std::optional<double> v) {
  if (!v) return nullptr;
  if (std::isnan(*v)) return "nan";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return *v;
}

}  // namespace

json::object TrialToJson(const TrialRecord& t) {
  json::object o;
  o["number"] = t.number;
  o["state"] = model::TrialStateName(t.state);
  o["value"] = Num(t.value);
  json::object params;
  for (const auto& [name, pv] : t.params) {
    // Exact parsing: boost::json::parse may be one ulp off (common/json.h).
    Result<json::value> v = common::ParseJsonExact(config::ExternalJson(pv.dist, pv.internal));
    params[name] = v.ok() ? std::move(*v) : json::value(nullptr);
  }
  o["params"] = std::move(params);
  json::array inter;
  for (const auto& [step, v] : t.intermediate) inter.push_back(json::array{step, Num(v)});
  o["intermediate"] = std::move(inter);
  json::object attrs;
  for (const auto& [k, v] : t.attrs) {
    Result<json::value> parsed = common::ParseJsonExact(v);
    attrs[k] = parsed.ok() ? std::move(*parsed) : json::value(v);
  }
  o["attrs"] = std::move(attrs);
  if (t.state == TrialState::kFail) {
    o["fail_reason"] = t.fail.reason;
    o["fail_detail"] = t.fail.detail;
    o["exit_code"] = t.fail.exit_code >= 0 ? json::value(t.fail.exit_code) : json::value(nullptr);
    o["signal"] = t.fail.signal > 0 ? json::value(t.fail.signal) : json::value(nullptr);
    o["core_dumped"] = t.fail.core_dumped;
    o["stderr_tail"] = t.fail.stderr_tail;
  } else {
    o["fail_reason"] = nullptr;
  }
  o["duration_s"] = t.started_at > 0 ? json::value(t.DurationSeconds()) : json::value(nullptr);
  o["created_at"] = t.created_at;
  o["started_at"] = t.started_at > 0 ? json::value(t.started_at) : json::value(nullptr);
  o["finished_at"] = t.finished_at > 0 ? json::value(t.finished_at) : json::value(nullptr);
  o["pid"] = t.process.pid > 0 ? json::value(t.process.pid) : json::value(nullptr);
  // The daemon (node) that claimed or ran it; null while no node has claimed it.
  o["node"] = t.node.empty() ? json::value(nullptr) : json::value(t.node);
  // The number of the trial this one retries (same study); null for a first attempt.
  o["retry_of"] = t.retry_of_number ? json::value(*t.retry_of_number) : json::value(nullptr);
  return o;
}

json::object StudyExportJson(const model::StudyRecord& s, const std::vector<TrialRecord>& trials) {
  json::object o;
  o["study"] = StudySummaryJson(s, trials);
  json::array out;
  for (const TrialRecord& t : trials) {
    json::object j = TrialToJson(t);
    json::object internal, dists;
    for (const auto& [name, pv] : t.params) {
      internal[name] = Num(pv.internal);
      Result<json::value> d = common::ParseJsonExact(pv.dist.ToJson());
      dists[name] = d.ok() ? std::move(*d) : json::value(nullptr);
    }
    j["params_internal"] = std::move(internal);
    j["distributions"] = std::move(dists);
    out.push_back(std::move(j));
  }
  o["trials"] = std::move(out);
  return o;
}

const TrialRecord* BestTrial(const model::StudyRecord& study,
                             const std::vector<TrialRecord>& trials) {
  const TrialRecord* best = nullptr;
  const bool max = study.direction == config::Direction::kMaximize;
  for (const TrialRecord& t : trials) {
    if (t.state != TrialState::kComplete || !t.value || std::isnan(*t.value)) continue;
    if (best == nullptr || (max ? *t.value > *best->value : *t.value < *best->value)) best = &t;
  }
  return best;
}

json::object StudySummaryJson(const model::StudyRecord& s, const std::vector<TrialRecord>& trials) {
  json::object o;
  o["name"] = s.name;
  o["state"] = model::StudyStateName(s.state);
  o["direction"] = config::DirectionName(s.direction);
  o["n_trials"] = s.n_trials;
  int counts[5] = {0, 0, 0, 0, 0};
  for (const TrialRecord& t : trials) ++counts[static_cast<int>(t.state)];
  o["waiting"] = counts[static_cast<int>(TrialState::kWaiting)];
  o["running"] = counts[static_cast<int>(TrialState::kRunning)];
  o["complete"] = counts[static_cast<int>(TrialState::kComplete)];
  o["pruned"] = counts[static_cast<int>(TrialState::kPruned)];
  o["failed"] = counts[static_cast<int>(TrialState::kFail)];
  // A failed trial that a retry replaced does not count toward n_trials: "finished" counts
  // configurations, "retried" the attempts replaced.
  int retried = 0;
  for (const TrialRecord& t : trials) retried += t.retry_of.has_value();
  o["retried"] = retried;
  o["finished"] = counts[2] + counts[3] + counts[4] - retried;
  // Mean run time of the finished trials that ran (trialctl watch's ETA); null before any.
  double ran_s = 0;
  int ran = 0;
  for (const TrialRecord& t : trials) {
    if (model::IsFinished(t.state) && t.started_at > 0) {
      ran_s += t.DurationSeconds();
      ++ran;
    }
  }
  o["mean_duration_s"] = ran > 0 ? json::value(ran_s / ran) : json::value(nullptr);
  o["seed"] = std::to_string(s.seed);
  o["created_at"] = s.created_at;
  o["finished_at"] = s.finished_at > 0 ? json::value(s.finished_at) : json::value(nullptr);
  o["spec_path"] = s.spec_path;
  const TrialRecord* best = BestTrial(s, trials);
  o["best"] = best ? json::value(TrialToJson(*best)) : json::value(nullptr);
  return o;
}

const char* AccessName(Access access) {
  switch (access) {
    case Access::kNone:
      return "none";
    case Access::kRead:
      return "read";
    case Access::kFull:
      return "full";
  }
  return "none";
}

Access DecideAccess(const AccessPolicy& policy, const PeerCredentials& peer) {
  if (peer.uid == 0 || peer.uid == policy.daemon_uid || peer.gid == policy.allowed_gid) {
    return Access::kFull;
  }
  for (gid_t g : peer.groups) {
    if (g == policy.allowed_gid) return Access::kFull;
  }
  return policy.read_open ? Access::kRead : Access::kNone;
}

bool IsReadVerb(std::string_view verb) {
  for (std::string_view v :
       {"ping", "studies", "status", "trials", "best", "logs", "export", "nodes"}) {
    if (verb == v) return true;
  }
  return false;
}

std::vector<gid_t> ParseStatusGroups(std::string_view text) {
  std::vector<gid_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.substr(0, 7) != "Groups:") continue;
    line.remove_prefix(7);
    while (!line.empty()) {
      size_t skip = line.find_first_not_of(" \t");
      if (skip == std::string_view::npos) break;
      line.remove_prefix(skip);
      size_t len = line.find_first_of(" \t");
      std::string_view tok = line.substr(0, len);
      unsigned long long g = 0;
      auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), g);
      if (ec == std::errc() && p == tok.data() + tok.size() && g <= UINT32_MAX) {
        out.push_back(static_cast<gid_t>(g));
      }
      if (len == std::string_view::npos) break;
      line.remove_prefix(len);
    }
    break;
  }
  return out;
}

Result<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return common::ErrnoError("getsockopt(SO_PEERCRED) on the control socket", errno);
  }
  PeerCredentials peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  // SO_PEERGROUPS (Linux 4.13) gives the groups the peer had when it connected, race-free.
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      peer.groups = std::move(groups);
      return peer;
    }
    if (errno == ERANGE && glen > groups.size() * sizeof(gid_t)) {
      groups.resize(glen / sizeof(gid_t));
      continue;
    }
    break;
  }
  // Older kernels: the peer process's current groups (it may have exited: then none).
  Result<std::string> status = common::ReadFile("/proc/" + std::to_string(cred.pid) + "/status");
  if (status.ok()) peer.groups = ParseStatusGroups(*status);
  return peer;
}

Result<gid_t> ResolveGroup(const std::string& name) {
  if (name.empty()) return common::InvalidArgument("empty group name");
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  int err = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
  if (err == 0 && found != nullptr) return found->gr_gid;
  unsigned long long n = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
  if (ec == std::errc() && p == name.data() + name.size() && n < UINT32_MAX) {
    return static_cast<gid_t>(n);
  }
  return common::NotFound("group \"" + name + "\" does not exist (not in the group database" +
                          (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) +
                          ", not a number)");
}

std::string GroupLabel(gid_t gid) {
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return std::string(found->gr_name) + " (gid " + std::to_string(gid) + ")";
  }
  return "gid " + std::to_string(gid);
}

Result<common::UniqueFd> ListenControlSocket(const std::string& path, mode_t mode, gid_t gid) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return common::InvalidArgument("socket path \"" + path + "\" is longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return common::ErrnoError("socket for " + path, errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return common::FailedPrecondition("control socket path " + path +
                                        " exists and is not a socket; refusing to replace it");
    }
    ::unlink(path.c_str());  // a stale socket from a previous run (the state-dir lock is ours)
  }
  // Created 0600 (umask), then given its group and final mode: never looser than asked.
  mode_t old_mask = ::umask(0177);
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0) return common::ErrnoError("bind control socket " + path, bind_errno);
  if (::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
    int e = errno;
    ::unlink(path.c_str());
    return common::ErrnoError("give control socket " + path + " to group " + GroupLabel(gid) +
                                  " (the daemon must be root or a member of that group)",
                              e);
  }
  if (::chmod(path.c_str(), mode) != 0) {
    int e = errno;
    ::unlink(path.c_str());
    return common::ErrnoError("chmod control socket " + path, e);
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    return common::ErrnoError("listen on control socket " + path, errno);
  }
  return fd;
}

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
    if (access_ == Access::kNone || (access_ == Access::kRead && !IsReadVerb(req->verb))) {
      *close_after = access_ == Access::kNone;
      const AccessPolicy& pol = server_->options_.access;
      server_->options_.logger->warn(
          "control socket: denied \"{}\" to uid {} gid {} pid {} (access {})", req->verb, peer_.uid,
          peer_.gid, peer_.pid, AccessName(access_));
      return proto::EncodeError(common::PermissionDenied(
          "uid " + std::to_string(peer_.uid) + " may not use \"" + req->verb +
          "\": only root, triald's user (uid " + std::to_string(pol.daemon_uid) +
          ") and members of group " + GroupLabel(pol.allowed_gid) + " may" +
          (access_ == Access::kRead ? " change anything (others may only read)" : "")));
    }
    Result<json::value> res = server_->Handle(req->verb, req->args);
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
      live_connections_(std::make_shared<int>(0)) {
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

Result<json::value> ControlServer::Handle(const std::string& verb, const json::object& args) {
  storage::Storage& st = *options_.storage;
  auto study_of = [&](model::StudyRecord* out) -> Status {
    Result<std::string> name = proto::GetString(args, "study");
    if (!name.ok()) return name.status();
    Result<model::StudyRecord> rec = st.GetStudy(*name);
    if (!rec.ok()) {
      if (rec.status().code() == common::Code::kNotFound) {
        return common::NotFound("no study named \"" + *name + "\" (see `trialctl studies`)");
      }
      return rec.status();
    }
    *out = *rec;
    return Status::Ok();
  };

  if (verb == "ping") {
    json::object o;
    o["pid"] = ::getpid();
    o["running"] = options_.scheduler->running_count();
    o["queued"] = options_.scheduler->queued_count();
    o["state_dir"] = options_.state_dir;
    o["node"] = st.node();
    o["shared"] = st.shared();
    return json::value(std::move(o));
  }
  if (verb == "nodes") {
    // The daemons sharing this storage, with their heartbeats and running trials; on a storage
    // of its own, this daemon alone.
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::vector<model::NodeRecord> nodes;
    if (st.shared()) {
      TRIALD_ASSIGN_OR_RETURN(nodes, st.GetNodes(now));
    } else {
      model::NodeRecord self;
      self.name = st.node();
      self.last_beat = now;
      nodes.push_back(self);
    }
    TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> running, st.GetRunningTrials());
    json::array a;
    for (const model::NodeRecord& n : nodes) {
      json::object o;
      o["name"] = n.name;
      o["self"] = n.name == st.node();
      o["alive"] = n.AliveWithin(options_.node_timeout_s);
      o["silent_for"] = n.silent_for;
      o["first_beat"] = n.first_beat > 0 ? json::value(n.first_beat) : json::value(nullptr);
      o["last_beat"] = n.last_beat;
      int64_t count = 0;
      for (const TrialRecord& t : running) count += t.node == n.name || !st.shared();
      o["running"] = count;
      a.push_back(std::move(o));
    }
    return json::value(std::move(a));
  }
  if (verb == "submit") {
    TRIALD_ASSIGN_OR_RETURN(std::string text, proto::GetString(args, "sweep"));
    std::string path;
    if (const json::value* p = args.if_contains("path"); p && p->is_string()) {
      path = std::string(p->get_string());
    }
    TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec,
                            options_.scheduler->Submit(config::SweepSource{text, path}));
    json::object o;
    o["study"] = rec.name;
    o["n_trials"] = rec.n_trials;
    o["seed"] = std::to_string(rec.seed);
    return json::value(std::move(o));
  }
  if (verb == "studies") {
    TRIALD_ASSIGN_OR_RETURN(std::vector<model::StudyRecord> all, st.ListStudies());
    json::array a;
    for (const auto& s : all) {
      TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, st.GetTrials(s.id));
      a.push_back(StudySummaryJson(s, trials));
    }
    return json::value(std::move(a));
  }
  if (verb == "status" || verb == "trials" || verb == "best") {
    model::StudyRecord s;
    TRIALD_RETURN_IF_ERROR(study_of(&s));
    TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, st.GetTrials(s.id));
    if (verb == "status") return json::value(StudySummaryJson(s, trials));
    if (verb == "trials") {
      json::array a;
      for (const TrialRecord& t : trials) a.push_back(TrialToJson(t));
      return json::value(std::move(a));
    }
    const TrialRecord* best = BestTrial(s, trials);
    if (best == nullptr) {
      return common::NotFound("study \"" + s.name + "\" has no COMPLETE trial yet");
    }
    return json::value(TrialToJson(*best));
  }
  if (verb == "export") {
    model::StudyRecord s;
    TRIALD_RETURN_IF_ERROR(study_of(&s));
    TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, st.GetTrials(s.id));
    return json::value(StudyExportJson(s, trials));
  }
  if (verb == "cancel") {
    TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
    TRIALD_RETURN_IF_ERROR(options_.scheduler->Cancel(name));
    return json::value(json::object{{"study", name}, {"state", "CANCELLED"}});
  }
  if (verb == "enqueue") {
    TRIALD_ASSIGN_OR_RETURN(std::string name, proto::GetString(args, "study"));
    std::map<std::string, std::string> params;
    if (const json::value* p = args.if_contains("params"); p != nullptr && !p->is_null()) {
      if (!p->is_object()) {
        return common::InvalidArgument(
            "field \"params\" must be an object of parameter name to value text");
      }
      for (const auto& kv : p->get_object()) {
        const json::value& v = kv.value();
        // Values are text as a user typed them; a JSON number or boolean is taken as its text.
        if (v.is_string()) {
          params[std::string(kv.key())] = std::string(v.get_string());
        } else if (v.is_number() || v.is_bool()) {
          params[std::string(kv.key())] = json::serialize(v);
        } else {
          return common::InvalidArgument("params." + std::string(kv.key()) +
                                         " must be a string (the value as text)");
        }
      }
    }
    TRIALD_ASSIGN_OR_RETURN(TrialRecord t, options_.scheduler->Enqueue(name, params));
    json::object o;
    o["study"] = name;
    o["trial"] = t.number;
    o["params"] = TrialToJson(t).at("params");
    return json::value(std::move(o));
  }
  if (verb == "logs") {
    model::StudyRecord s;
    TRIALD_RETURN_IF_ERROR(study_of(&s));
    TRIALD_ASSIGN_OR_RETURN(int64_t number, proto::GetInt(args, "trial"));
    TRIALD_ASSIGN_OR_RETURN(TrialRecord t, st.GetTrial(s.id, static_cast<int>(number)));
    std::string stream = "stdout";
    if (const json::value* v = args.if_contains("stream"); v && v->is_string()) {
      stream = std::string(v->get_string());
    }
    if (stream != "stdout" && stream != "stderr") {
      return common::InvalidArgument("stream \"" + stream + "\"; expected stdout or stderr");
    }
    if (!t.node.empty() && t.node != st.node() && st.shared()) {
      return common::FailedPrecondition(
          "trial " + std::to_string(t.number) + " of study \"" + s.name + "\" ran on node " +
          t.node +
          "; its logs are in that node's state directory (run trialctl logs against the "
          "triald there); this is node " +
          st.node());
    }
    std::string path =
        model::TrialDir(options_.state_dir, s.name, t.number) + "/" + stream + ".log";
    Result<std::string> content = common::ReadFile(path);
    json::object o;
    o["path"] = path;
    o["state"] = model::TrialStateName(t.state);
    // Logs hold whatever the worker wrote; JSON needs valid UTF-8.
    o["content"] = content.ok() ? common::SanitizeUtf8(*content) : std::string();
    o["exists"] = content.ok();
    return json::value(std::move(o));
  }
  return common::InvalidArgument(
      "unknown verb \"" + verb +
      "\"; expected one of ping, submit, studies, status, trials, best, cancel, enqueue, "
      "logs, export, nodes");
}

}  // namespace triald::daemon
