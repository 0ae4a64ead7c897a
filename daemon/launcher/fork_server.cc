#include "daemon/launcher/fork_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fd.h"
#include "common/process_util.h"
#include "common/utf8.h"
#include "daemon/launcher/capped_log.h"
#include "daemon/launcher/child_setup.h"
#include "daemon/launcher/vfork_spawn.h"

namespace triald::launcher {
namespace asio = boost::asio;
namespace json = boost::json;

const char* ForkServerEventName(ForkServerEvent::Kind kind) {
  switch (kind) {
    case ForkServerEvent::Kind::kStarted:
      return "fork_server_started";
    case ForkServerEvent::Kind::kExited:
      return "fork_server_exited";
    case ForkServerEvent::Kind::kOff:
      return "fork_server_off";
  }
  return "?";
}

namespace {

constexpr size_t kMaxPacket = 64 * 1024;  // proto/README.md: one JSON object of at most 64 KiB
// The room TRIALD_FORK_ENV_SPACE adds to the server's environment block, which every fork
// inherits: a forked trial writes its own environment over that block, so that /proc/PID/environ
// of the trial and of the processes it forks names the trial as an exec'd trial's does (the
// daemon finds a trial's escaped processes, and the next start a lost trial's, by its
// TRIALD_TRIAL_DIR there). It holds what a trial's environment adds to the server's: the
// TRIALD_* variables, its GPUs, and TRIALD_PARAMS, which is small for kind = "python".
constexpr size_t kEnvSpaceBytes = 8192;

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// The state and parent pid of `pid` from /proc/PID/stat (fields 3 and 4, after the
// parenthesised name, which may itself hold parentheses); nullopt when the process is gone.
struct StatFields {
  char state = '?';
  pid_t ppid = 0;
};
std::optional<StatFields> StatOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 4 > stat.size()) return std::nullopt;
  // ") S PPID ..."
  StatFields f;
  f.state = stat[close + 2];
  const char* p = stat.c_str() + close + 3;
  char* end = nullptr;
  long ppid = std::strtol(p, &end, 10);
  if (end == p) return std::nullopt;
  f.ppid = static_cast<pid_t>(ppid);
  return f;
}

// The real uid of `pid` (the "Uid:" line of /proc/PID/status); nullopt when it is gone.
std::optional<uid_t> UidOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    char* end = nullptr;
    const unsigned long uid = std::strtoul(line.c_str() + 4, &end, 10);
    if (end == line.c_str() + 4) return std::nullopt;
    return static_cast<uid_t>(uid);
  }
  return std::nullopt;
}

std::string EndedBeforeGo(pid_t pid, int wait_status) {
  return "the forked trial process " + std::to_string(pid) + " ended before its go (" +
         common::ExitStatus::FromWaitStatus(wait_status).Describe() + ")";
}

SpawnError ServerFailure() { return SpawnError{SpawnStep::kFork, EAGAIN}; }

}  // namespace

class ForkServers::Server : public std::enable_shared_from_this<Server> {
 public:
  enum class State { kStarting, kReady, kGone };

  Server(ForkServers& owner, std::string key)
      : owner_(owner),
        key_(std::move(key)),
        channel_(*owner.options_.io),
        log_sd_(*owner.options_.io),
        ready_timer_(*owner.options_.io),
        kill_timer_(*owner.options_.io) {}

  // Starts the process. Errors name what failed.
  common::Status Start(const ForkServerSpec& spec, const std::optional<RunAs>& run_as);

  struct Pending {
    uint64_t id = 0;
    std::string packet;
    std::array<int, 3> fds = {-1, -1, -1};
    Done done;
    bool sent = false;
    std::unique_ptr<asio::steady_timer> deadline;
  };
  size_t pending() const { return queue_.size(); }
  void Enqueue(Pending p) {
    queue_.push_back(std::move(p));
    Flush();
  }
  // Drops request `id`; true when it was there. Sent already: its trial, if forked, is killed
  // when the server names it.
  bool Cancel(uint64_t id);
  // Fails every pending request with `message` and stops the server (EOF, SIGKILL after the
  // grace period). `exec`: the requests go on by exec instead.
  void Stop(const std::string& message, bool exec);
  // SIGKILL to everything the server leaves (its group, its cgroup).
  void Kill();

  State state() const { return state_; }
  pid_t pid() const { return pid_; }
  bool exited() const { return exited_; }
  const std::string& key() const { return key_; }
  const std::vector<std::string>& preloaded() const { return preloaded_; }
  bool objective_loaded() const { return objective_loaded_; }
  int forks() const { return forks_; }
  bool forked_any() const { return forked_any_; }

 private:
  void WaitRead();
  void OnReadable();
  void OnPacket(std::string_view packet);
  void OnForkedMessage(uint64_t id, int64_t pid);
  void Flush();
  void ReadLog();
  void OnExit(int wait_status);
  // The server misbehaved or died: kill it, fail its requests, tell the owner.
  void Broken(const std::string& how);
  void FailAll(const ForkReply& reply);
  void CleanUp();
  std::optional<Pending> Take(uint64_t id);

  ForkServers& owner_;
  std::string key_;
  State state_ = State::kStarting;
  pid_t pid_ = 0;
  uid_t uid_ = 0;  // the user it runs as (its trials too)
  bool exited_ = false;
  bool stopping_ = false;
  bool write_wait_ = false;
  bool forked_any_ = false;
  std::unique_ptr<TrialCgroup> cgroup_;
  std::unique_ptr<CappedLog> log_;
  asio::posix::stream_descriptor channel_;
  asio::posix::stream_descriptor log_sd_;
  asio::steady_timer ready_timer_;
  asio::steady_timer kill_timer_;
  std::deque<Pending> queue_;
  std::set<uint64_t> abandoned_;  // sent, then cancelled: kill what is forked for them
  std::vector<std::string> preloaded_;
  bool objective_loaded_ = false;
  int forks_ = 0;  // from ready: 1 (clone as the daemon's child) or 2; 0: not said
  std::array<char, 4096> log_buf_;
};

common::Status ForkServers::Server::Start(const ForkServerSpec& spec,
                                          const std::optional<RunAs>& run_as) {
  namespace fs = std::filesystem;
  const Options& o = owner_.options_;
  std::error_code ec;
  const fs::path log_path(spec.log_path);
  TRIALD_RETURN_IF_ERROR(common::MakeDirs(log_path.parent_path().string(), 0750));
  fs::rename(log_path, spec.log_path + ".1", ec);  // the previous server's log, if any
  common::Result<std::unique_ptr<CappedLog>> log =
      CappedLog::Open(spec.log_path, {o.log_head_bytes, o.log_tail_bytes});
  if (!log.ok()) return log.status();
  log_ = std::move(log).value();
  common::Result<common::Pipe> out = common::MakePipe(true);
  if (!out.ok()) return out.status();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return common::ErrnoError("socketpair for the fork server's channel", errno);
  }
  common::UniqueFd mine(sv[0]);
  common::UniqueFd theirs(sv[1]);
  if (common::Status nb = common::SetNonBlocking(mine.get(), true); !nb.ok()) return nb;
  common::UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) return common::ErrnoError("open /dev/null", errno);
  if (o.cgroups != nullptr) {
    common::Result<std::unique_ptr<TrialCgroup>> cg = o.cgroups->CreateTrial(CgroupLimits{});
    if (!cg.ok()) return cg.status().WithContext("creating the fork server's cgroup");
    cgroup_ = std::move(cg).value();
  }
  uid_ = run_as ? run_as->uid : ::getuid();
  std::vector<std::string> env = spec.env;
  if (run_as) env = WithUserEnvironment(std::move(env), *run_as);
  env.push_back("TRIALD_FORK_SERVER_FD=" + std::to_string(kReportFd));
  env.push_back("TRIALD_FORK_ENV_SPACE=" + std::string(kEnvSpaceBytes, '.'));
  std::vector<const char*> envp;
  for (const std::string& kv : env) envp.push_back(kv.c_str());
  envp.push_back(nullptr);
  std::vector<std::string> args(spec.argv.begin() + (spec.argv.empty() ? 0 : 1), spec.argv.end());
  SpawnStep step = SpawnStep::kFork;
  internal::ChildSetup setup{envp.data(),
                             spec.workdir.c_str(),
                             theirs.get(),
                             ::getpid(),
                             cgroup_ ? cgroup_->procs_fd() : -1,
                             cgroup_ ? cgroup_->pids_v1_procs_fd() : -1,
                             cgroup_ ? cgroup_->memory_v1_procs_fd() : -1,
                             0,
                             run_as.has_value(),
                             run_as ? run_as->uid : 0,
                             run_as ? run_as->gid : 0,
                             run_as ? run_as->groups.data() : nullptr,
                             run_as ? run_as->groups.size() : 0,
                             &step};
  const internal::Spawned spawned = internal::VforkSpawn(
      spec.executable, args, {devnull.get(), out->write.get(), out->write.get()}, setup);
  if (spawned.error != 0) {
    if (cgroup_) (void)cgroup_->Remove();
    return common::IoError("starting the fork server " + spec.executable + " (" +
                           SpawnStepName(step) + "): " + std::strerror(spawned.error));
  }
  pid_ = spawned.pid;
  std::weak_ptr<Server> weak = weak_from_this();
  o.reaper->Watch(pid_, [weak](int status, const struct rusage&) {
    if (auto self = weak.lock()) self->OnExit(status);
  });
  log_sd_.assign(out->read.Release());
  channel_.assign(mine.Release());
  ReadLog();
  WaitRead();
  ready_timer_.expires_after(Seconds(o.ready_timeout_s));
  ready_timer_.async_wait([weak, t = o.ready_timeout_s](const boost::system::error_code& e) {
    auto self = weak.lock();
    if (e || !self || self->state_ != State::kStarting) return;
    std::ostringstream s;
    s << t;
    self->Broken("not ready within " + s.str() + " s of its start");
  });
  o.logger->info("fork server of {}: started, pid {}", key_, pid_);
  return common::Status::Ok();
}

void ForkServers::Server::ReadLog() {
  auto self = shared_from_this();
  log_sd_.async_read_some(asio::buffer(log_buf_),
                          [self](const boost::system::error_code& ec, size_t n) {
                            if (n > 0)
                              self->log_->Append(std::string_view(self->log_buf_.data(), n));
                            if (ec) {
                              boost::system::error_code ignored;
                              self->log_sd_.close(ignored);
                              (void)self->log_->Close();
                              self->CleanUp();
                              return;
                            }
                            self->ReadLog();
                          });
}

void ForkServers::Server::WaitRead() {
  if (!channel_.is_open()) return;
  std::weak_ptr<Server> weak = weak_from_this();
  channel_.async_wait(asio::posix::stream_descriptor::wait_read,
                      [weak](const boost::system::error_code& ec) {
                        auto self = weak.lock();
                        if (ec || !self || self->state_ == State::kGone) return;
                        self->OnReadable();
                      });
}

void ForkServers::Server::OnReadable() {
  std::string buf(kMaxPacket + 1, '\0');
  for (;;) {
    if (state_ == State::kGone || !channel_.is_open()) return;
    struct iovec iov = {buf.data(), buf.size()};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(channel_.native_handle(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // Descriptors have no business on this side of the channel.
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          ::close(fd);
        }
      }
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      // Its end is closed: it is exiting. Its exit status says more than the channel does, so
      // the reaper's news is awaited for a moment.
      std::weak_ptr<Server> weak = weak_from_this();
      kill_timer_.expires_after(std::chrono::seconds(1));
      kill_timer_.async_wait([weak](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (!ec && self && self->state_ != State::kGone) self->Broken("closed its channel");
      });
      return;
    }
    if (n < 0) {
      Broken(std::string("reading its channel: ") + std::strerror(errno));
      return;
    }
    if ((msg.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(n) > kMaxPacket) {
      Broken("sent a packet of more than " + std::to_string(kMaxPacket) + " bytes");
      return;
    }
    OnPacket(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
  WaitRead();
}

void ForkServers::Server::OnPacket(std::string_view packet) {
  boost::system::error_code ec;
  json::value v = json::parse(packet, ec);
  auto shown = [&]() {
    std::string s(packet.substr(0, 200));
    return "\"" + common::SanitizeUtf8(s) + (packet.size() > 200 ? "...\"" : "\"");
  };
  if (ec || !v.is_object()) {
    Broken("sent " + shown() + ", which is not a JSON object");
    return;
  }
  const json::object& o = v.as_object();
  const json::value* type = o.if_contains("type");
  if (type == nullptr || !type->is_string()) {
    Broken("sent " + shown() + " without a string \"type\"");
    return;
  }
  const std::string t(type->as_string());
  auto str = [&](const char* key) -> std::optional<std::string> {
    const json::value* x = o.if_contains(key);
    if (x == nullptr || !x->is_string()) return std::nullopt;
    return std::string(x->as_string());
  };
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    const json::value* x = o.if_contains(key);
    if (x == nullptr) return std::nullopt;
    if (x->is_int64()) return x->as_int64();
    if (x->is_uint64() && x->as_uint64() <= INT64_MAX) return static_cast<int64_t>(x->as_uint64());
    return std::nullopt;
  };
  if (t == "ready") {
    if (state_ != State::kStarting) {
      Broken("sent a second ready");
      return;
    }
    std::optional<int64_t> pid = integer("pid");
    if (!pid || *pid != pid_) {
      Broken("sent " + shown() + ": expected \"pid\": " + std::to_string(pid_));
      return;
    }
    preloaded_.clear();
    if (const json::value* p = o.if_contains("preloaded"); p != nullptr && p->is_array()) {
      for (const json::value& m : p->as_array()) {
        if (m.is_string() && preloaded_.size() < 256) preloaded_.emplace_back(m.as_string());
      }
    }
    const json::value* ol = o.if_contains("objective_loaded");
    objective_loaded_ = ol != nullptr && ol->is_bool() && ol->as_bool();
    const std::optional<int64_t> forks = integer("forks");
    forks_ = forks && (*forks == 1 || *forks == 2) ? static_cast<int>(*forks) : 0;
    state_ = State::kReady;
    ready_timer_.cancel();
    owner_.OnReady(*this);
    Flush();
    return;
  }
  if (t == "unsafe" || t == "error") {
    std::optional<std::string> why = str(t == "unsafe" ? "reason" : "message");
    if (!why) {
      Broken("sent " + shown() + " without a string \"" + (t == "unsafe" ? "reason" : "message") +
             "\"");
      return;
    }
    std::string text = common::SanitizeUtf8(why->substr(0, 2000));
    owner_.OnFallBack(*this,
                      t == "unsafe" ? "not safe to fork: " + text : "the preload failed: " + text);
    return;
  }
  if (t == "forked" || t == "fork_failed") {
    std::optional<int64_t> id = integer("id");
    if (!id || *id <= 0) {
      Broken("sent " + shown() + " without a request \"id\"");
      return;
    }
    if (t == "forked") {
      std::optional<int64_t> pid = integer("pid");
      if (!pid || *pid <= 1 || *pid > INT32_MAX) {
        Broken("sent " + shown() + " without a valid \"pid\"");
        return;
      }
      OnForkedMessage(static_cast<uint64_t>(*id), *pid);
      return;
    }
    std::optional<Pending> p = Take(static_cast<uint64_t>(*id));
    if (!p) {
      if (abandoned_.erase(static_cast<uint64_t>(*id)) > 0) return;
      Broken("answered request " + std::to_string(*id) + ", which it was not sent");
      return;
    }
    ForkReply reply;
    reply.kind = ForkReply::Kind::kFailed;
    reply.message =
        "the fork server could not fork: " + common::SanitizeUtf8(str("message").value_or("?"));
    reply.error = ServerFailure();
    p->done(reply);
    return;
  }
  Broken("sent a message of unknown type " + shown());
}

void ForkServers::Server::OnForkedMessage(uint64_t id, int64_t pid64) {
  const pid_t pid = static_cast<pid_t>(pid64);
  const Options& o = owner_.options_;
  common::Span(o.logger, common::WallMillis(), "forked_received req={} pid={}", id, pid);
  // The trial must be the daemon's child by now (the server reaped the middle process before
  // answering); a process the daemon does not parent is not ours to touch.
  std::optional<StatFields> stat = StatOf(pid);
  std::optional<Reaper::Kept> ended;
  if (!stat) ended = o.reaper->TakeUnwatched(pid);
  // Nor one the daemon already knows: the server itself, another trial. And it runs as the
  // server does: another study's trial waiting for its go is the daemon's child too.
  const bool known = pid == pid_ || o.reaper->Watching(pid);
  const std::optional<uid_t> uid = stat ? UidOf(pid) : std::nullopt;
  const bool stranger = stat && (!uid || *uid != uid_);
  if (known || stranger || (stat ? stat->ppid != ::getpid() : !ended)) {
    Broken("named pid " + std::to_string(pid) + " for request " + std::to_string(id) +
           ", which is not a new child of triald");
    return;
  }
  std::optional<Pending> p = Take(id);
  if (!p) {
    if (abandoned_.erase(id) == 0) {
      Broken("answered request " + std::to_string(id) + ", which it was not sent");
      return;
    }
    // Given up on meanwhile: it waits for a go that never comes; end it now.
    if (!ended) ::kill(pid, SIGKILL);
    return;
  }
  forked_any_ = true;
  owner_.OnForked(*this);
  ForkReply reply;
  if (stat && stat->state == 'Z') {
    // Dead already, not reaped yet: its status comes with the reaper's next round.
    o.reaper->Watch(pid, [done = std::move(p->done), pid](int status, const struct rusage&) {
      ForkReply r;
      r.kind = ForkReply::Kind::kFailed;
      r.message = EndedBeforeGo(pid, status);
      r.error = SpawnError{SpawnStep::kChild, 0};
      done(r);
    });
    return;
  }
  if (ended) {
    reply.kind = ForkReply::Kind::kFailed;
    reply.message = EndedBeforeGo(pid, ended->wait_status);
    reply.error = SpawnError{SpawnStep::kChild, 0};
  } else {
    common::Result<uint64_t> start = common::ProcessStartTime(pid);
    reply.kind = ForkReply::Kind::kForked;
    reply.pid = pid;
    reply.start_time = start.ok() ? *start : 0;
  }
  p->done(reply);
}

std::optional<ForkServers::Server::Pending> ForkServers::Server::Take(uint64_t id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->id != id || !it->sent) continue;
    Pending p = std::move(*it);
    queue_.erase(it);
    if (p.deadline) p.deadline->cancel();
    return p;
  }
  return std::nullopt;
}

bool ForkServers::Server::Cancel(uint64_t id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->id != id) continue;
    if (it->sent) abandoned_.insert(id);
    if (it->deadline) it->deadline->cancel();
    queue_.erase(it);
    return true;
  }
  return false;
}

void ForkServers::Server::Flush() {
  if (state_ != State::kReady || stopping_ || write_wait_) return;
  const Options& o = owner_.options_;
  for (Pending& p : queue_) {
    if (p.sent) continue;
    struct iovec iov = {p.packet.data(), p.packet.size()};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 3);
    std::memcpy(CMSG_DATA(c), p.fds.data(), sizeof(int) * 3);
    ssize_t n;
    do {
      n = ::sendmsg(channel_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      write_wait_ = true;
      std::weak_ptr<Server> weak = weak_from_this();
      channel_.async_wait(asio::posix::stream_descriptor::wait_write,
                          [weak](const boost::system::error_code& ec) {
                            auto self = weak.lock();
                            if (!self) return;
                            self->write_wait_ = false;
                            if (!ec) self->Flush();
                          });
      return;
    }
    if (n < 0) {
      Broken(std::string("sending a fork request: ") + std::strerror(errno));
      return;
    }
    p.sent = true;
    common::Span(o.logger, common::WallMillis(), "request_sent req={}", p.id);
    p.deadline = std::make_unique<asio::steady_timer>(*o.io);
    p.deadline->expires_after(Seconds(o.reply_timeout_s));
    std::weak_ptr<Server> weak = weak_from_this();
    p.deadline->async_wait(
        [weak, id = p.id, t = o.reply_timeout_s](const boost::system::error_code& ec) {
          auto self = weak.lock();
          if (ec || !self || self->state_ == State::kGone) return;
          std::ostringstream s;
          s << t;
          self->Broken("did not answer fork request " + std::to_string(id) + " within " + s.str() +
                       " s");
        });
  }
}

void ForkServers::Server::FailAll(const ForkReply& reply) {
  std::deque<Pending> pending;
  pending.swap(queue_);
  for (Pending& p : pending) {
    if (p.deadline) p.deadline->cancel();
    if (p.sent) abandoned_.insert(p.id);
  }
  for (Pending& p : pending) p.done(reply);
}

void ForkServers::Server::Kill() {
  if (pid_ > 1 && !exited_) ::kill(-pid_, SIGKILL);
  if (pid_ > 1 && !exited_) ::kill(pid_, SIGKILL);
  if (cgroup_) cgroup_->Kill();
}

void ForkServers::Server::Stop(const std::string& message, bool exec) {
  if (state_ == State::kGone) return;
  state_ = State::kGone;
  stopping_ = true;
  ready_timer_.cancel();
  ForkReply reply;
  reply.kind = exec ? ForkReply::Kind::kExec : ForkReply::Kind::kFailed;
  reply.message = message;
  reply.error = ServerFailure();
  FailAll(reply);
  // EOF ends a well-behaved server; the grace period bounds one that is stuck.
  boost::system::error_code ignored;
  channel_.close(ignored);
  if (exited_) {
    CleanUp();
    return;
  }
  std::weak_ptr<Server> weak = weak_from_this();
  kill_timer_.expires_after(Seconds(owner_.options_.stop_grace_s));
  kill_timer_.async_wait([weak](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!ec && self && !self->exited_) self->Kill();
  });
}

void ForkServers::Server::Broken(const std::string& how) {
  if (state_ == State::kGone) return;
  owner_.options_.logger->warn("fork server of {} (pid {}) {}: stopping it", key_, pid_, how);
  Kill();
  const bool death = !forked_any_;
  Stop("the fork server " + how, /*exec=*/false);
  owner_.OnDown(*this, how, death);
}

void ForkServers::Server::OnExit(int wait_status) {
  exited_ = true;
  kill_timer_.cancel();
  if (state_ != State::kGone) {
    Broken("exited (" + common::ExitStatus::FromWaitStatus(wait_status).Describe() + ")");
  }
  // Forked trials not yet placed in their own cgroup are still in the server's: they end too.
  if (cgroup_) cgroup_->Kill();
  CleanUp();
}

void ForkServers::Server::CleanUp() {
  if (!exited_ || log_sd_.is_open()) return;  // the log drains until every writer is gone
  if (cgroup_) {
    if (cgroup_->Populated()) {
      // Unplaced trials killed above take a moment to go; look again shortly.
      auto self = shared_from_this();
      kill_timer_.expires_after(std::chrono::milliseconds(50));
      kill_timer_.async_wait([self](const boost::system::error_code& ec) {
        if (ec) return;
        self->cgroup_->Kill();
        self->CleanUp();
      });
      return;
    }
    common::Status removed = cgroup_->Remove();
    if (!removed.ok())
      owner_.options_.logger->warn("fork server of {}: {}", key_, removed.message());
    cgroup_.reset();
  }
  owner_.Forget(this);
}

// ---- ForkServers ----

ForkServers::ForkServers(Options options) : options_(std::move(options)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
}

ForkServers::~ForkServers() {
  for (auto& [key, e] : entries_) {
    if (e.server) e.server->Kill();
  }
  for (auto& [raw, s] : retired_) s->Kill();
}

ForkServers::Entry* ForkServers::Find(const std::string& key) {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

bool ForkServers::Forking(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() || !it->second.off;
}

void ForkServers::Emit(const std::string& key, ForkServerEvent::Kind kind,
                       const std::string& detail) {
  // Posted: never inside a call to the launcher. The holder outlives this object and is
  // emptied when the listener goes.
  asio::post(*options_.io, [holder = listener_, ev = ForkServerEvent{key, kind, detail}]() {
    if (*holder) (*holder)(ev);
  });
}

ForkServers::Queued ForkServers::Request(const ForkServerSpec& spec,
                                         const std::optional<RunAs>& run_as, ForkRequest request,
                                         Done done, uint64_t* id, std::string* failure,
                                         SpawnError* error) {
  Entry& e = entries_[spec.key];
  if (e.off) return Queued::kExec;
  if (e.server && !(e.spec == spec) && e.server->pending() == 0) {
    // The study's command changed (a study of the same name): a new server for it.
    e.server->Stop("replaced", false);
    Retire(e.server);
    e.server.reset();
  }
  if (!e.server) {
    e.spec = spec;
    auto server = std::make_shared<Server>(*this, spec.key);
    common::Status st = server->Start(spec, run_as);
    if (!st.ok()) {
      options_.logger->warn("fork server of {}: {}", spec.key, st.message());
      ++e.deaths_in_row;
      e.reason = st.message();
      if (e.deaths_in_row >= options_.max_deaths) {
        e.off = true;
        e.reason = "the fork server could not be started " + std::to_string(e.deaths_in_row) +
                   " times in a row (" + st.message() + "); trials start by exec";
        Emit(spec.key, ForkServerEvent::Kind::kOff, e.reason);
        return Queued::kExec;
      }
      *failure = st.message();
      *error = ServerFailure();
      return Queued::kFailed;
    }
    e.server = std::move(server);
  }
  if (e.server->pending() >= options_.max_pending) {
    *failure = "the fork server of " + spec.key + " has " + std::to_string(options_.max_pending) +
               " starts pending";
    *error = SpawnError{SpawnStep::kPrepare, EAGAIN};
    return Queued::kFailed;
  }
  Server::Pending p;
  p.id = next_id_++;
  p.fds = request.fds;
  p.done = std::move(done);
  json::array argv, env;
  for (const std::string& a : request.argv) argv.emplace_back(a);
  for (const std::string& kv : request.env) env.emplace_back(kv);
  json::object msg{{"type", "fork"},     {"id", p.id},
                   {"argv", argv},       {"env", env},
                   {"cwd", request.cwd}, {"daemon_pid", static_cast<int64_t>(::getpid())}};
  p.packet = json::serialize(msg);
  if (p.packet.size() > kMaxPacket) {
    *failure = "the fork request is " + std::to_string(p.packet.size()) +
               " bytes (its argv and environment); a fork server takes at most " +
               std::to_string(kMaxPacket);
    *error = SpawnError{SpawnStep::kPrepare, E2BIG};
    return Queued::kFailed;
  }
  *id = p.id;
  e.server->Enqueue(std::move(p));
  return Queued::kYes;
}

void ForkServers::Cancel(const std::string& key, uint64_t id) {
  Entry* e = Find(key);
  if (e != nullptr && e->server && e->server->Cancel(id)) return;
  for (auto& [raw, s] : retired_) {
    if (s->key() == key && s->Cancel(id)) return;
  }
}

void ForkServers::Release(const std::string& key) { ReleaseFor(key, "its study is over"); }

void ForkServers::ReleaseFor(const std::string& key, const char* why) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (it->second.server) {
    std::shared_ptr<Server> s = std::move(it->second.server);
    options_.logger->info("fork server of {} (pid {}): stopped ({})", key, s->pid(), why);
    s->Stop("the study's fork server was stopped", false);
    Retire(s);
  }
  entries_.erase(it);
}

void ForkServers::ReleaseAll() {
  std::vector<std::string> keys;
  for (const auto& [key, e] : entries_) keys.push_back(key);
  for (const std::string& k : keys) ReleaseFor(k, "triald stops");
}

void ForkServers::Retire(const std::shared_ptr<Server>& server) {
  retired_[server.get()] = server;  // until CleanUp (reaped, log drained, cgroup removed)
}

std::optional<ForkServerStatus> ForkServers::StatusOf(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  ForkServerStatus st;
  st.forked = e.forked;
  st.deaths_in_row = e.deaths_in_row;
  st.reason = e.reason;
  if (e.off) {
    st.state = "off";
  } else if (!e.server) {
    st.state = "down";
  } else {
    st.state = e.server->state() == Server::State::kReady ? "on" : "starting";
    st.pid = e.server->pid();
    st.preloaded = e.server->preloaded();
    st.objective_loaded = e.server->objective_loaded();
    st.forks = e.server->forks();
  }
  return st;
}

void ForkServers::OnReady(Server& server) {
  Entry* e = Find(server.key());
  if (e == nullptr) return;
  std::string mods;
  for (const std::string& m : server.preloaded()) mods += (mods.empty() ? "" : ", ") + m;
  const std::string detail = "pid " + std::to_string(server.pid()) +
                             ", preloaded: " + (mods.empty() ? "nothing" : mods) +
                             (server.objective_loaded() ? " and the objective" : "") +
                             (server.forks() == 1   ? ", one fork per trial"
                              : server.forks() == 2 ? ", two forks per trial"
                                                    : "");
  options_.logger->info("fork server of {}: ready ({})", server.key(), detail);
  Emit(server.key(), ForkServerEvent::Kind::kStarted, detail);
}

void ForkServers::OnForked(Server& server) {
  Entry* e = Find(server.key());
  if (e == nullptr || e->server.get() != &server) return;
  ++e->forked;
  e->deaths_in_row = 0;
}

void ForkServers::OnDown(Server& server, const std::string& how, bool death) {
  Entry* e = Find(server.key());
  if (e == nullptr || e->server.get() != &server) return;
  std::shared_ptr<Server> s = std::move(e->server);
  Retire(s);
  if (death) ++e->deaths_in_row;
  e->reason = "the fork server " + how;
  std::string detail = "pid " + std::to_string(s->pid()) + " " + how +
                       "; its pending trials wait again and a new server starts with the next";
  if (e->deaths_in_row >= options_.max_deaths) {
    e->off = true;
    e->reason = "the fork server died " + std::to_string(e->deaths_in_row) +
                " times in a row without forking a trial (last: " + how + "); trials start by exec";
    Emit(server.key(), ForkServerEvent::Kind::kExited, detail);
    Emit(server.key(), ForkServerEvent::Kind::kOff, e->reason);
    return;
  }
  Emit(server.key(), ForkServerEvent::Kind::kExited, detail);
}

void ForkServers::OnFallBack(Server& server, const std::string& reason) {
  Entry* e = Find(server.key());
  options_.logger->warn("fork server of {}: {}; its trials start by exec from now on", server.key(),
                        reason);
  std::shared_ptr<Server> keep = server.shared_from_this();
  if (e != nullptr && e->server.get() == &server) {
    e->off = true;
    e->reason = reason;
    e->server.reset();
    Emit(server.key(), ForkServerEvent::Kind::kOff, reason + "; trials start by exec");
  }
  Retire(keep);
  server.Stop(reason, /*exec=*/true);
}

}  // namespace triald::launcher
