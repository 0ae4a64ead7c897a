#include "daemon/control_server.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cmath>
#include <deque>
#include <map>

#include "common/fd.h"
#include "common/utf8.h"
#include "proto/control.h"

namespace triald::daemon {
namespace asio = boost::asio;
namespace json = boost::json;
using common::Result;
using common::Status;
using storage::TrialRecord;
using storage::TrialState;
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
  o["state"] = storage::TrialStateName(t.state);
  o["value"] = Num(t.value);
  json::object params;
  for (const auto& [name, pv] : t.params) {
    params[name] = json::parse(config::ExternalJson(pv.dist, pv.internal));
  }
  o["params"] = std::move(params);
  json::array inter;
  for (const auto& [step, v] : t.intermediate) inter.push_back(json::array{step, Num(v)});
  o["intermediate"] = std::move(inter);
  json::object attrs;
  for (const auto& [k, v] : t.attrs) {
    boost::system::error_code ec;
    json::value parsed = json::parse(v, ec);
    attrs[k] = ec ? json::value(v) : parsed;
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
  o["retry_of"] = t.retry_of ? json::value(*t.retry_of) : json::value(nullptr);
  return o;
}

const TrialRecord* BestTrial(const storage::StudyRecord& study,
                             const std::vector<TrialRecord>& trials) {
  const TrialRecord* best = nullptr;
  const bool max = study.direction == config::Direction::kMaximize;
  for (const TrialRecord& t : trials) {
    if (t.state != TrialState::kComplete || !t.value || std::isnan(*t.value)) continue;
    if (best == nullptr || (max ? *t.value > *best->value : *t.value < *best->value)) best = &t;
  }
  return best;
}

json::object StudySummaryJson(const storage::StudyRecord& s,
                              const std::vector<TrialRecord>& trials) {
  json::object o;
  o["name"] = s.name;
  o["state"] = storage::StudyStateName(s.state);
  o["direction"] = config::DirectionName(s.direction);
  o["n_trials"] = s.n_trials;
  int counts[5] = {0, 0, 0, 0, 0};
  for (const TrialRecord& t : trials) ++counts[static_cast<int>(t.state)];
  o["waiting"] = counts[static_cast<int>(TrialState::kWaiting)];
  o["running"] = counts[static_cast<int>(TrialState::kRunning)];
  o["complete"] = counts[static_cast<int>(TrialState::kComplete)];
  o["pruned"] = counts[static_cast<int>(TrialState::kPruned)];
  o["failed"] = counts[static_cast<int>(TrialState::kFail)];
  o["finished"] = counts[2] + counts[3] + counts[4];
  o["seed"] = std::to_string(s.seed);
  o["created_at"] = s.created_at;
  o["finished_at"] = s.finished_at > 0 ? json::value(s.finished_at) : json::value(nullptr);
  o["spec_path"] = s.spec_path;
  const TrialRecord* best = BestTrial(s, trials);
  o["best"] = best ? json::value(TrialToJson(*best)) : json::value(nullptr);
  return o;
}

// One client connection: reads request lines, answers each in order.
class ControlServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ControlServer* server, Socket socket)
      : server_(server),
        socket_(std::move(socket)),
        buffer_(proto::kMaxRequestBytes + 1),
        idle_(socket_.get_executor()) {}

  void Start() {
    live_ = server_->live_connections_;
    ++*live_;
    ReadNext();
  }
  ~Connection() {
    if (live_) --*live_;
  }

 private:
  void ReadNext() {
    auto self = shared_from_this();
    idle_.expires_after(std::chrono::seconds(server_->options_.idle_timeout_s));
    idle_.async_wait([self](const boost::system::error_code& ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    asio::async_read_until(
        socket_, buffer_, '\n', [self](const boost::system::error_code& ec, size_t n) {
          self->idle_.cancel();
          if (ec == asio::error::not_found) {  // the line outgrew the cap
            self->Reply(
                proto::EncodeError(common::InvalidArgument(
                    "request larger than " + std::to_string(proto::kMaxRequestBytes) + " bytes")),
                /*close_after=*/true);
            return;
          }
          if (ec) return;  // EOF, reset, or closed for idleness
          std::string line(asio::buffers_begin(self->buffer_.data()),
                           asio::buffers_begin(self->buffer_.data()) + n - 1);
          self->buffer_.consume(n);
          self->Reply(self->Dispatch(line), /*close_after=*/false);
        });
  }

  std::string Dispatch(const std::string& line) {
    Result<proto::Request> req = proto::ParseRequest(line);
    if (!req.ok()) return proto::EncodeError(req.status());
    Result<json::value> res = server_->Handle(req->verb, req->args);
    if (!res.ok()) return proto::EncodeError(res.status());
    return proto::EncodeOk(std::move(res).value());
  }

  void Reply(std::string text, bool close_after) {
    auto self = shared_from_this();
    auto data = std::make_shared<std::string>(std::move(text));
    asio::async_write(socket_, asio::buffer(*data),
                      [self, data, close_after](const boost::system::error_code& ec, size_t) {
                        if (ec || close_after || self->server_->stopped_) {
                          boost::system::error_code ignored;
                          self->socket_.shutdown(Socket::shutdown_both, ignored);
                          self->socket_.close(ignored);
                          return;
                        }
                        self->ReadNext();
                      });
  }

  ControlServer* server_;
  Socket socket_;
  asio::streambuf buffer_;
  asio::steady_timer idle_;
  std::shared_ptr<int> live_;
};

ControlServer::ControlServer(ControlServerOptions options)
    : options_(std::move(options)),
      acceptor_(*options_.io),
      live_connections_(std::make_shared<int>(0)) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start() {
  const std::string& path = options_.socket_path;
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return common::InvalidArgument("socket path \"" + path + "\" is longer than " +
                                   std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  ::unlink(path.c_str());  // a stale socket from a previous run (the state-dir lock is ours)
  boost::system::error_code ec;
  asio::local::stream_protocol::endpoint ep(path);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return common::IoError("listen on " + path + ": " + ec.message());
  // Asio opens sockets without close-on-exec; no worker may inherit the control socket.
  ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  if (::chmod(path.c_str(), 0660) != 0) return common::ErrnoError("chmod " + path, errno);
  Accept();
  return Status::Ok();
}

void ControlServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void ControlServer::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, Socket socket) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (!ec) {
      ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
      if (*live_connections_ >= options_.max_connections) {
        std::string msg = proto::EncodeError(common::Unavailable("too many connections"));
        boost::system::error_code ignored;
        asio::write(socket, asio::buffer(msg), ignored);
      } else {
        std::make_shared<Connection>(this, std::move(socket))->Start();
      }
    }
    Accept();
  });
}

Result<json::value> ControlServer::Handle(const std::string& verb, const json::object& args) {
  storage::Storage& st = *options_.storage;
  auto study_of = [&](storage::StudyRecord* out) -> Status {
    Result<std::string> name = proto::GetString(args, "study");
    if (!name.ok()) return name.status();
    Result<storage::StudyRecord> rec = st.GetStudy(*name);
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
    return json::value(std::move(o));
  }
  if (verb == "submit") {
    TRIALD_ASSIGN_OR_RETURN(std::string text, proto::GetString(args, "sweep"));
    std::string path;
    if (const json::value* p = args.if_contains("path"); p && p->is_string()) {
      path = std::string(p->get_string());
    }
    TRIALD_ASSIGN_OR_RETURN(storage::StudyRecord rec,
                            options_.scheduler->Submit(config::SweepSource{text, path}));
    json::object o;
    o["study"] = rec.name;
    o["n_trials"] = rec.n_trials;
    o["seed"] = std::to_string(rec.seed);
    return json::value(std::move(o));
  }
  if (verb == "studies") {
    TRIALD_ASSIGN_OR_RETURN(std::vector<storage::StudyRecord> all, st.ListStudies());
    json::array a;
    for (const auto& s : all) {
      TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, st.GetTrials(s.id));
      a.push_back(StudySummaryJson(s, trials));
    }
    return json::value(std::move(a));
  }
  if (verb == "status" || verb == "trials" || verb == "best") {
    storage::StudyRecord s;
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
    storage::StudyRecord s;
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
    std::string path = options_.state_dir + "/studies/" + s.name + "/trials/" +
                       std::to_string(t.number) + "/" + stream + ".log";
    Result<std::string> content = common::ReadFile(path);
    json::object o;
    o["path"] = path;
    o["state"] = storage::TrialStateName(t.state);
    // Logs hold whatever the worker wrote; JSON needs valid UTF-8.
    o["content"] = content.ok() ? common::SanitizeUtf8(*content) : std::string();
    o["exists"] = content.ok();
    return json::value(std::move(o));
  }
  return common::InvalidArgument(
      "unknown verb \"" + verb +
      "\"; expected one of ping, submit, studies, status, trials, best, cancel, enqueue, "
      "logs");
}

}  // namespace triald::daemon
