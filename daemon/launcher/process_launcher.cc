#include "daemon/launcher/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/fd.h"
#include "daemon/launcher/adopted.h"
#include "daemon/launcher/capped_log.h"
#include "daemon/launcher/child_setup.h"
#include "daemon/launcher/fork_server.h"
#include "daemon/launcher/queued_answers.h"
#include "daemon/launcher/run_as.h"
#include "daemon/launcher/vfork_spawn.h"
#include "proto/line_reader.h"

namespace triald::launcher {
namespace asio = boost::asio;
using common::Result;
using common::Status;

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kNone:
      return "none";
    case StopReason::kTimeout:
      return "timeout";
    case StopReason::kPrune:
      return "prune";
    case StopReason::kCancel:
      return "cancel";
    case StopReason::kShutdown:
      return "shutdown";
    case StopReason::kProtocol:
      return "protocol";
    case StopReason::kStall:
      return "stall";
  }
  return "?";
}

const char* SpawnStepName(SpawnStep step) {
  switch (step) {
    case SpawnStep::kPrepare:
      return "prepare";
    case SpawnStep::kCgroup:
      return "cgroup";
    case SpawnStep::kFork:
      return "fork";
    case SpawnStep::kChild:
      return "child";
    case SpawnStep::kCredentials:
      return "credentials";
    case SpawnStep::kWorkdir:
      return "workdir";
    case SpawnStep::kExec:
      return "exec";
  }
  return "?";
}

namespace {

constexpr size_t kStderrTailBytes = 4096;
constexpr size_t kReadChunk = 64 * 1024;
// Bytes read from one pipe in the final drain; a process outside the group that keeps writing
// must not keep the daemon reading for ever.
constexpr size_t kFinalDrainLimit = 8 << 20;
// Once the group is empty every writer of the pipes is gone, so EOF follows at once; only a
// process that escaped the group (setsid) can hold a pipe open. This bounds the wait for it.
constexpr auto kEofWait = std::chrono::seconds(1);

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(asio::io_context& io, Reaper& reaper, CgroupTree* cgroups, common::Logger logger,
          const LaunchSpec& spec, TrialCallbacks callbacks, std::optional<RunAs> run_as,
          std::string trial_root, bool accounting)
      : io_(io),
        reaper_(reaper),
        cgroups_(cgroups),
        accounting_(accounting),
        run_as_(std::move(run_as)),
        trial_root_(std::move(trial_root)),
        logger_(std::move(logger)),
        spec_(spec),
        callbacks_(std::move(callbacks)),
        stdout_sd_(io),
        stderr_sd_(io),
        report_sd_(io),
        timeout_timer_(io),
        grace_timer_(io),
        poll_timer_(io),
        eof_timer_(io),
        cooperative_timer_(io),
        stall_timer_(io),
        reports_(proto::kMaxReportLineBytes) {}

  // A failure leaves spawn_error() naming the step that failed and its errno. With `forks` and
  // a spec naming a fork server, the trial is started by the server later (or fails later).
  Status Start(ForkServers* forks);
  bool started() const { return started_; }
  SpawnError spawn_error() const { return {spawn_step_, spawn_errno_}; }
  void Stop(StopReason reason);
  void StopAfterGrace(StopReason reason);
  void Answer(const std::string& line);
  void FailProtocol(const std::string& message);
  // Kills the group at once and forgets the trial (its TrialProcess was destroyed).
  void Abandon();
  const model::ProcessIdentity& identity() const { return identity_; }

 private:
  enum class Stream { kStdout, kStderr, kReport };
  asio::posix::stream_descriptor& Descriptor(Stream s) {
    return s == Stream::kStdout ? stdout_sd_ : s == Stream::kStderr ? stderr_sd_ : report_sd_;
  }
  // Start's steps: the folders, logs and cgroup; the pipes and the trial channel; the exec
  // path's vfork+exec; and, once a process runs, reading its streams and arming its timers.
  Status Prepare();
  Status MakeStreams();
  Status Exec();
  void Begin();
  // The forked start: the server's reply; the trial process `pid` to place and let go.
  void OnForkReply(const ForkReply& reply);
  void OnForked(pid_t pid, uint64_t start_time);
  void PostStarted();
  // The start failed after Launch() returned: on_exit with never_started.
  void FailStart(const std::string& message, SpawnError error);
  void Read(Stream s);
  void Consume(Stream s, std::string_view data);
  bool first_line_seen_ = false;  // the first report line's span was logged
  Status OnReportLine(std::string_view line);
  void OnMainExit(int wait_status, const struct rusage& usage);
  // outcome_.resources, at Finish (the tree is over; the cgroup leaves are still there).
  void MeasureResources();
  // stall_timeout: fires at the last line's time plus the timeout; re-arms when a line came since.
  void ArmStallTimer();
  void CheckGroup();
  void SignalGroup(int sig);
  // No process of the trial is left: its group is empty and so is its cgroup, if it has one;
  // without a cgroup, no process that left the group is among the daemon's adopted children.
  bool GroupEmpty() const;
  // Without a cgroup: the trial's processes that left its group (setsid) and were re-parented
  // to the daemon, a child subreaper (adopted.h). Empty with a cgroup, which holds them.
  std::vector<pid_t> Escaped() const;
  void JudgeOom();
  // The trial is over when its main process is reaped, its group is empty and its pipes have
  // reached EOF (the reads deliver everything in order, the last final line included).
  void MaybeFinish();
  void Finish();
  void FinishReports();
  void DrainAndClose(Stream s);
  // Sends what the socket takes of the answers queued; waits for room for the rest.
  void FlushAnswers();

  asio::io_context& io_;
  Reaper& reaper_;
  CgroupTree* cgroups_;
  bool accounting_;                                // fill outcome_.resources beyond wall_s
  std::chrono::steady_clock::time_point spawned_;  // just before the vfork
  struct rusage main_usage_ = {};                  // wait4's, for the main process
  std::optional<RunAs> run_as_;                    // the user the trial runs as; none: the daemon's
  std::string trial_root_;                         // PrepareTrialFolder's root
  std::unique_ptr<TrialCgroup> cgroup_;
  rlim_t address_space_ = 0;
  // Until the process runs: the pipes and the trial channel (both ends).
  common::Pipe out_, err_;
  common::UniqueFd channel_daemon_, channel_worker_;
  bool started_ = false;
  ForkServers* forks_ = nullptr;  // a fork request is pending there (fork_id_)
  uint64_t fork_id_ = 0;
  common::Logger logger_;
  LaunchSpec spec_;
  TrialCallbacks callbacks_;
  model::ProcessIdentity identity_;
  std::unique_ptr<CappedLog> stdout_log_, stderr_log_;
  asio::posix::stream_descriptor stdout_sd_, stderr_sd_, report_sd_;
  asio::steady_timer timeout_timer_, grace_timer_, poll_timer_, eof_timer_, cooperative_timer_,
      stall_timer_;
  std::chrono::steady_clock::time_point last_line_;  // the last valid trial-channel line (or start)
  SpawnStep spawn_step_ = SpawnStep::kPrepare;
  int spawn_errno_ = 0;
  std::array<std::array<char, kReadChunk>, 3> buffers_;
  proto::LineReader reports_;
  uint64_t report_bytes_ = 0;  // read from the trial channel so far
  ProcessOutcome outcome_;
  bool main_exited_ = false;
  bool group_empty_ = false;
  bool terminating_ = false;
  bool finished_ = false;
  bool abandoned_ = false;
  bool cooperative_stop_ = false;  // StopAfterGrace() was called
  bool grace_over_ = false;        // the grace period after SIGTERM has run out
  bool escapes_logged_ = false;
  std::string trial_dir_;     // TRIALD_TRIAL_DIR of its environment ("" when not set)
  std::string number_ = "?";  // TRIALD_TRIAL of its environment, for the trial's spans
  int poll_ms_ = 2;
  std::string answers_;       // queued answer bytes the socket has not taken yet
  bool answer_wait_ = false;  // waiting for the socket to take more
};

class Handle final : public TrialProcess {
 public:
  explicit Handle(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  ~Handle() override { session_->Abandon(); }
  const model::ProcessIdentity& identity() const override { return session_->identity(); }
  bool started() const override { return session_->started(); }
  void Stop(StopReason reason) override { session_->Stop(reason); }
  void StopAfterGrace(StopReason reason) override { session_->StopAfterGrace(reason); }
  void Answer(const std::string& line) override { session_->Answer(line); }
  void FailProtocol(const std::string& message) override { session_->FailProtocol(message); }

 private:
  std::shared_ptr<Session> session_;
};

Status Session::Start(ForkServers* forks) {
  for (const std::string& kv : spec_.env) {
    if (kv.rfind("TRIALD_TRIAL_DIR=", 0) == 0) trial_dir_ = kv.substr(17);
    if (kv.rfind("TRIALD_TRIAL=", 0) == 0) number_ = kv.substr(13);
  }
  TRIALD_RETURN_IF_ERROR(Prepare());
  TRIALD_RETURN_IF_ERROR(MakeStreams());
  if (forks != nullptr && spec_.fork_server && forks->Forking(spec_.fork_server->key)) {
    // A fork of the study's server: everything above is the exec path's; the server forks the
    // trial with its three descriptors, and OnForkReply carries on.
    ForkRequest request;
    request.argv = spec_.fork_server->request_argv;
    request.env = spec_.env;
    request.cwd = spec_.workdir;
    request.fds = {channel_worker_.get(), out_.write.get(), err_.write.get()};
    std::weak_ptr<Session> weak = weak_from_this();
    std::string failure;
    SpawnError error;
    spawned_ = std::chrono::steady_clock::now();
    forks_ = forks;
    ForkServers::Queued queued = forks->Request(
        *spec_.fork_server, run_as_, std::move(request),
        [weak](const ForkReply& reply) {
          if (auto self = weak.lock()) self->OnForkReply(reply);
        },
        &fork_id_, &failure, &error);
    if (queued == ForkServers::Queued::kYes) {
      common::Span(logger_, common::WallMillis(), "fork_requested trial={} req={}", number_,
                   fork_id_);
      return Status::Ok();
    }
    forks_ = nullptr;
    if (queued == ForkServers::Queued::kFailed) {
      if (cgroup_) (void)cgroup_->Remove();
      spawn_step_ = error.step;
      spawn_errno_ = error.error_number;
      return common::IoError(failure);
    }
    // kExec: the study's trials start by exec now.
  }
  return Exec();
}

Status Session::Prepare() {
  spawn_step_ = SpawnStep::kPrepare;
  // Each failure keeps its errno for the scheduler's policy (EMFILE, ENFILE, ENOMEM, ...). The
  // common:: helpers below return ErrnoError of their one failed system call; errno is read at
  // once, before anything else can change it.
  auto failed = [this](Status st, int err) {
    spawn_errno_ = err;
    return st;
  };
  if (!spec_.trial_dir.empty()) {
    // 0750: the study's folders are no one else's to list (a root daemon running trials as
    // their submitters adds o+x for the way down: run_as.h).
    errno = 0;
    Status made = common::MakeDirs(spec_.trial_dir, 0750);
    if (!made.ok()) return failed(made, errno);
  }
  errno = 0;  // MakeLogDir's refusals (a link, someone else's folder) set none: persistent
  Status log_dir = MakeLogDir(spec_.log_dir);
  if (!log_dir.ok()) return failed(log_dir, errno);
  CappedLog::Options log_opts{spec_.log_head_bytes, spec_.log_tail_bytes};
  Result<std::unique_ptr<CappedLog>> out_log =
      CappedLog::Open(spec_.log_dir + "/stdout.log", log_opts);
  if (!out_log.ok()) return failed(out_log.status(), errno);
  stdout_log_ = std::move(out_log).value();
  Result<std::unique_ptr<CappedLog>> err_log =
      CappedLog::Open(spec_.log_dir + "/stderr.log", log_opts);
  if (!err_log.ok()) return failed(err_log.status(), errno);
  stderr_log_ = std::move(err_log).value();
  if (run_as_) {
    // The trial folder becomes the user's; the log folder stays the daemon's, readable by the
    // user's group (run_as.h).
    errno = 0;
    if (!spec_.trial_dir.empty()) {
      Status own = PrepareTrialFolder(trial_root_, spec_.trial_dir, *run_as_);
      if (!own.ok()) return failed(own, errno);
    }
    Status logs =
        ShareLogFolder(trial_root_, spec_.log_dir, {"stdout.log", "stderr.log"}, *run_as_);
    if (!logs.ok()) return failed(logs, errno);
    spec_.env = WithUserEnvironment(std::move(spec_.env), *run_as_);
  }
  if (cgroups_ != nullptr) {
    spawn_step_ = SpawnStep::kCgroup;
    CgroupLimits limits;
    limits.memory_max_bytes = spec_.memory_limit_bytes;
    limits.pids_max = spec_.pids_limit;
    Result<std::unique_ptr<TrialCgroup>> cg = cgroups_->CreateTrial(limits);
    if (!cg.ok()) return failed(cg.status().WithContext("creating the trial's cgroup"), errno);
    cgroup_ = std::move(cg).value();
    spawn_step_ = SpawnStep::kPrepare;
  }
  if (spec_.memory_limit_bytes > 0 && (cgroup_ == nullptr || !cgroup_->memory_limited())) {
    address_space_ = static_cast<rlim_t>(spec_.memory_limit_bytes);
  }
  return Status::Ok();
}

Status Session::MakeStreams() {
  auto failed = [this](Status st, int err) {
    spawn_step_ = SpawnStep::kPrepare;
    spawn_errno_ = err;
    if (cgroup_) (void)cgroup_->Remove();
    return st;
  };
  Result<common::Pipe> out = common::MakePipe(true);
  if (!out.ok()) return failed(out.status(), errno);
  Result<common::Pipe> err = common::MakePipe(true);
  if (!err.ok()) return failed(err.status(), errno);
  // The trial channel: a stream socketpair, both ends close-on-exec (the child's end loses it
  // when the hook places it at fd 3), the daemon's end non-blocking.
  int channel[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) != 0) {
    const int e = errno;
    return failed(common::ErrnoError("socketpair for the trial channel", e), e);
  }
  common::UniqueFd channel_daemon(channel[0]);
  common::UniqueFd channel_worker(channel[1]);
  if (Status nb = common::SetNonBlocking(channel_daemon.get(), true); !nb.ok()) {
    return failed(nb, errno);
  }
  out_ = std::move(out).value();
  err_ = std::move(err).value();
  channel_daemon_ = std::move(channel_daemon);
  channel_worker_ = std::move(channel_worker);
  return Status::Ok();
}

Status Session::Exec() {
  auto failed = [this](Status st, int err) {
    spawn_errno_ = err;
    if (cgroup_) (void)cgroup_->Remove();
    return st;
  };
  common::UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) {
    const int e = errno;
    spawn_step_ = SpawnStep::kPrepare;
    return failed(common::ErrnoError("open /dev/null", e), e);
  }

  std::vector<const char*> envp;
  envp.reserve(spec_.env.size() + 1);
  for (const std::string& kv : spec_.env) envp.push_back(kv.c_str());
  envp.push_back(nullptr);
  std::vector<std::string> args(spec_.argv.begin() + (spec_.argv.empty() ? 0 : 1),
                                spec_.argv.end());

  internal::ChildSetup setup{envp.data(),
                             spec_.workdir.c_str(),
                             channel_worker_.get(),
                             ::getpid(),
                             cgroup_ ? cgroup_->procs_fd() : -1,
                             cgroup_ ? cgroup_->pids_v1_procs_fd() : -1,
                             cgroup_ ? cgroup_->memory_v1_procs_fd() : -1,
                             address_space_,
                             run_as_.has_value(),
                             run_as_ ? run_as_->uid : 0,
                             run_as_ ? run_as_->gid : 0,
                             run_as_ ? run_as_->groups.data() : nullptr,
                             run_as_ ? run_as_->groups.size() : 0,
                             &spawn_step_};
  spawned_ = std::chrono::steady_clock::now();
  // The event loop waits from here until the child has exec'd (vfork): scripts/bench_throughput.py
  // --trace shows how long.
  common::Span(logger_, common::WallMillis(), "vfork trial={}", number_);
  const internal::Spawned spawned = internal::VforkSpawn(
      spec_.executable, args, {devnull.get(), out_.write.get(), err_.write.get()}, setup);
  common::Span(logger_, common::WallMillis(), "exec_done trial={}", number_);
  if (spawned.error != 0) {
    if (cgroup_) (void)cgroup_->Remove();
    std::string what = "exec " + spec_.executable;
    if (spawn_step_ == SpawnStep::kFork) what = "fork";
    if (spawn_step_ == SpawnStep::kCgroup) what = "joining the trial's cgroup";
    if (spawn_step_ == SpawnStep::kChild) what = "setting up the trial process";
    if (spawn_step_ == SpawnStep::kCredentials && run_as_) {
      what = "becoming " + run_as_->Describe() + " to run " + spec_.executable;
    }
    if (spawn_step_ == SpawnStep::kWorkdir) {
      what = "workdir " + spec_.workdir + (run_as_ ? " (as " + run_as_->name + ")" : "");
    }
    spawn_errno_ = spawned.error;
    return common::IoError(what + ": " + std::strerror(spawned.error));
  }
  identity_.pid = spawned.pid;  // the Reaper waits for it
  identity_.pgid = identity_.pid;
  // The child has exec'd by now (the launcher waits for that), so it is in its own group. Its
  // start time: bracketed by the spawn when it could be (nearly always), else from /proc.
  identity_.start_time = spawned.start_time;
  if (identity_.start_time == 0) {
    Result<uint64_t> start = common::ProcessStartTime(identity_.pid);
    identity_.start_time = start.ok() ? *start : 0;
  }

  std::weak_ptr<Session> weak = weak_from_this();
  reaper_.Watch(identity_.pid, [weak](int status, const struct rusage& usage) {
    if (auto self = weak.lock()) self->OnMainExit(status, usage);
  });
  Begin();
  return Status::Ok();
}

void Session::Begin() {
  started_ = true;
  stdout_sd_.assign(out_.read.Release());
  stderr_sd_.assign(err_.read.Release());
  report_sd_.assign(channel_daemon_.Release());
  // The child-side ends close here, so EOF on a pipe or the channel means every process
  // holding it has closed it.
  out_.write.Reset();
  err_.write.Reset();
  channel_worker_.Reset();
  Read(Stream::kStdout);
  Read(Stream::kStderr);
  Read(Stream::kReport);

  std::weak_ptr<Session> weak = weak_from_this();
  if (spec_.timeout_s > 0) {
    timeout_timer_.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(spec_.timeout_s)));
    timeout_timer_.async_wait([weak](const boost::system::error_code& e) {
      auto self = weak.lock();
      if (!e && self) self->Stop(StopReason::kTimeout);
    });
  }
  last_line_ = std::chrono::steady_clock::now();
  if (spec_.stall_timeout_s > 0) ArmStallTimer();
}

void Session::OnForkReply(const ForkReply& reply) {
  forks_ = nullptr;  // answered: nothing to cancel any more
  if (finished_ || abandoned_) return;
  switch (reply.kind) {
    case ForkReply::Kind::kFailed:
      FailStart(reply.message, reply.error);
      return;
    case ForkReply::Kind::kExec: {
      // The study fell back to exec. Fresh descriptors: whatever the server did with the old
      // ones (it forked nothing for this request) must not share the trial's channel.
      out_ = {};
      err_ = {};
      channel_daemon_.Reset();
      channel_worker_.Reset();
      Status st = MakeStreams();
      if (st.ok()) st = Exec();
      if (!st.ok()) {
        FailStart(st.message(), spawn_error());
        return;
      }
      PostStarted();
      return;
    }
    case ForkReply::Kind::kForked:
      OnForked(reply.pid, reply.start_time);
      return;
  }
}

void Session::OnForked(pid_t pid, uint64_t start_time) {
  identity_.pid = pid;
  identity_.pgid = pid;
  identity_.start_time = start_time;
  std::weak_ptr<Session> weak = weak_from_this();
  reaper_.Watch(pid, [weak](int status, const struct rusage& usage) {
    if (auto self = weak.lock()) self->OnMainExit(status, usage);
  });
  // The trial waits for its go: first its own process group (it made it before naming its pid),
  // then its cgroup(s) and memory limit, so no user code runs outside them.
  auto refuse = [&](SpawnStep step, int err, const std::string& what) {
    reaper_.Unwatch(pid);
    ::kill(pid, SIGKILL);  // the daemon's child, not yet reaped: the pid is still its
    identity_ = {};
    FailStart("forked trial process " + std::to_string(pid) + ": " + what +
                  (err != 0 ? std::string(": ") + std::strerror(err) : ""),
              SpawnError{step, err});
  };
  if (::getpgid(pid) != pid) {
    refuse(SpawnStep::kChild, 0, "not the leader of its own process group");
    return;
  }
  if (cgroup_) {
    const std::string text = std::to_string(pid);
    for (int fd :
         {cgroup_->procs_fd(), cgroup_->pids_v1_procs_fd(), cgroup_->memory_v1_procs_fd()}) {
      if (fd < 0) continue;
      if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        refuse(SpawnStep::kCgroup, errno, "joining the trial's cgroup");
        return;
      }
    }
  }
  if (address_space_ > 0) {
    struct rlimit limit = {address_space_, address_space_};
    if (::prlimit(pid, RLIMIT_AS, &limit, nullptr) != 0) {
      refuse(SpawnStep::kChild, errno, "setting RLIMIT_AS");
      return;
    }
  }
  static constexpr char kGo[] = "{\"type\":\"go\"}\n";
  ssize_t n;
  do {
    n = ::send(channel_daemon_.get(), kGo, sizeof(kGo) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(kGo) - 1)) {
    // An empty socket buffer takes 14 bytes; only a trial that is gone refuses them. Its exit
    // comes through the reaper like any trial's.
    logger_->debug("trial pid {}: its go could not be sent: {}", pid,
                   n < 0 ? std::strerror(errno) : "short write");
  }
  common::Span(logger_, common::WallMillis(), "go pid={}", pid);
  Begin();
  PostStarted();
}

void Session::PostStarted() {
  auto self = shared_from_this();
  asio::post(io_, [self]() {
    if (!self->abandoned_ && self->callbacks_.on_started) {
      self->callbacks_.on_started(self->identity_);
    }
  });
}

void Session::FailStart(const std::string& message, SpawnError error) {
  if (finished_) return;
  finished_ = true;
  if (forks_ != nullptr && spec_.fork_server) forks_->Cancel(spec_.fork_server->key, fork_id_);
  forks_ = nullptr;
  // Closing the daemon's copies: a forked trial that never got its go reads EOF and exits.
  out_ = {};
  err_ = {};
  channel_daemon_.Reset();
  channel_worker_.Reset();
  if (cgroup_) {
    cgroup_->Kill();  // nothing should be there; a trial placed just before a failure would be
    Status removed = cgroup_->Remove();
    if (!removed.ok()) logger_->debug("trial cgroup: {}", removed.message());
  }
  if (stdout_log_) (void)stdout_log_->Close();
  if (stderr_log_) (void)stderr_log_->Close();
  outcome_.never_started = true;
  outcome_.spawn_error = error;
  outcome_.spawn_message = message;
  if (abandoned_ || !callbacks_.on_exit) return;
  auto self = shared_from_this();
  asio::post(io_, [self]() {
    if (!self->abandoned_) self->callbacks_.on_exit(self->outcome_);
  });
}

void Session::ArmStallTimer() {
  const auto deadline =
      last_line_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(spec_.stall_timeout_s));
  std::weak_ptr<Session> weak = weak_from_this();
  stall_timer_.expires_at(deadline);
  stall_timer_.async_wait([weak](const boost::system::error_code& e) {
    auto self = weak.lock();
    if (e || !self || self->finished_ || self->terminating_ || self->main_exited_ ||
        self->cooperative_stop_) {
      return;  // over, or being stopped for another reason
    }
    if (std::chrono::steady_clock::now() - self->last_line_ <
        std::chrono::duration<double>(self->spec_.stall_timeout_s)) {
      self->ArmStallTimer();  // a line came meanwhile
      return;
    }
    self->logger_->debug("trial pid {}: no line on the trial channel for {} s", self->identity_.pid,
                         self->spec_.stall_timeout_s);
    self->Stop(StopReason::kStall);
  });
}

void Session::Read(Stream s) {
  auto self = shared_from_this();
  auto& buf = buffers_[static_cast<int>(s)];
  Descriptor(s).async_read_some(
      asio::buffer(buf), [self, s](const boost::system::error_code& ec, size_t n) {
        if (self->finished_) return;
        if (n > 0) {
          self->Consume(s, std::string_view(self->buffers_[static_cast<int>(s)].data(), n));
        }
        if (ec) {  // EOF, an error, or closed by us: this stream is done
          boost::system::error_code ignored;
          self->Descriptor(s).close(ignored);
          if (s == Stream::kReport) self->FinishReports();
          self->MaybeFinish();
          return;
        }
        if (self->Descriptor(s).is_open()) self->Read(s);
      });
}

void Session::FinishReports() {
  if (!outcome_.protocol_error.empty()) return;
  Status st = reports_.Finish([this](std::string_view l) { return OnReportLine(l); });
  if (!st.ok()) {
    outcome_.protocol_error = "report pipe: " + st.message();
    Stop(StopReason::kProtocol);
  }
}

void Session::Consume(Stream s, std::string_view data) {
  switch (s) {
    case Stream::kStdout:
      stdout_log_->Append(data);
      break;
    case Stream::kStderr:
      stderr_log_->Append(data);
      break;
    case Stream::kReport: {
      if (!outcome_.protocol_error.empty()) return;  // already failed; discard the rest
      report_bytes_ += data.size();
      if (spec_.max_report_bytes > 0 && report_bytes_ > spec_.max_report_bytes) {
        boost::system::error_code ignored;
        report_sd_.close(ignored);
        FailProtocol("the trial sent more than " + std::to_string(spec_.max_report_bytes) +
                     " bytes on the trial channel ([study] max_report_bytes = " +
                     std::to_string(spec_.max_report_bytes) + ")");
        return;
      }
      Status st = reports_.Feed(data, [this](std::string_view l) { return OnReportLine(l); });
      if (!st.ok()) {
        outcome_.protocol_error = "report pipe: " + st.message();
        boost::system::error_code ignored;
        report_sd_.close(ignored);
        Stop(StopReason::kProtocol);
      }
      break;
    }
  }
}

Status Session::OnReportLine(std::string_view line) {
  if (line.empty()) return Status::Ok();  // tolerate blank lines
  Result<proto::ReportMessage> msg = proto::ParseReportLine(line);
  if (!msg.ok()) return msg.status();
  last_line_ = std::chrono::steady_clock::now();  // a sign of life (stall_timeout)
  if (!first_line_seen_) {
    first_line_seen_ = true;
    common::Span(logger_, common::WallMillis(), "first_line trial={} pid={}", number_,
                 identity_.pid);
  }
  if (callbacks_.on_message && !abandoned_) callbacks_.on_message(*msg);
  return Status::Ok();
}

void Session::Answer(const std::string& line) {
  if (finished_ || abandoned_ || !report_sd_.is_open() || !outcome_.protocol_error.empty()) {
    return;
  }
  QueueAnswer(&answers_, line);
  FlushAnswers();
  if (auto over = AnswerBacklogError(&answers_, "the worker", "the trial channel")) {
    FailProtocol(*over);
  }
}

void Session::FlushAnswers() {
  if (!report_sd_.is_open()) return;
  if (SendQueuedAnswers(report_sd_.native_handle(), &answers_) != SendQueued::kBlocked ||
      answer_wait_) {
    return;
  }
  answer_wait_ = true;
  auto self = shared_from_this();
  report_sd_.async_wait(asio::posix::stream_descriptor::wait_write,
                        [self](const boost::system::error_code& ec) {
                          self->answer_wait_ = false;
                          if (ec || self->finished_) return;
                          self->FlushAnswers();
                        });
}

void Session::FailProtocol(const std::string& message) {
  if (finished_) return;
  if (outcome_.protocol_error.empty()) outcome_.protocol_error = message;
  Stop(StopReason::kProtocol);
}

void Session::SignalGroup(int sig) {
  // A process group id names our trial only while the group exists: until the main process
  // (its leader) is reaped its pid is held, and after that only while a member is left. Once the
  // group is known empty, or found empty now, the number may belong to someone else's group, so
  // it is never signalled again (the cgroup, which is ours alone, still is).
  // With a cgroup, that alone reaches the members once the leader is gone. Without one, a
  // process that now holds the reaped leader's pid is someone else's, and so is the group named
  // by it (a new group takes its creator's pid as id).
  bool by_pgid = identity_.pgid > 1 && !group_empty_;
  if (by_pgid && main_exited_) {
    const bool pid_reused = ::kill(identity_.pgid, 0) == 0 || errno == EPERM;
    by_pgid = cgroup_ == nullptr && !pid_reused && common::ProcessGroupExists(identity_.pgid);
  }
  if (by_pgid) ::kill(-identity_.pgid, sig);
  if (cgroup_) {
    if (sig == SIGKILL) {
      cgroup_->Kill();
    } else {
      cgroup_->Signal(sig);
    }
    return;
  }
  for (pid_t pid : Escaped()) {
    if (!escapes_logged_) {
      escapes_logged_ = true;
      logger_->info(
          "trial pid {}: process {} left its group (setsid) and lives on; stopping it "
          "with the trial",
          identity_.pid, pid);
    }
    ::kill(pid, sig);
    if (::getpgid(pid) == pid) ::kill(-pid, sig);  // the group it leads, if it made one
  }
}

bool Session::GroupEmpty() const {
  if (common::ProcessGroupExists(identity_.pgid)) return false;
  if (cgroup_ != nullptr) return !cgroup_->Populated();
  return Escaped().empty();
}

std::vector<pid_t> Session::Escaped() const {
  if (cgroup_ != nullptr) return {};
  const pid_t main_pid = identity_.pid;
  return AdoptedProcessesOf(trial_dir_, [this, main_pid](pid_t pid) {
    return pid == main_pid || reaper_.Watching(pid);  // a main process, its own or another's
  });
}

void Session::Stop(StopReason reason) {
  if (finished_) return;
  if (outcome_.stop_reason == StopReason::kNone) outcome_.stop_reason = reason;
  if (!started_) {
    // Not started yet (a fork pending): the start is called off; nothing ran.
    FailStart(std::string("stopped (") + StopReasonName(reason) + ") before it started",
              SpawnError{SpawnStep::kPrepare, 0});
    return;
  }
  if (terminating_) return;
  terminating_ = true;
  timeout_timer_.cancel();
  stall_timer_.cancel();
  logger_->debug("trial pid {}: SIGTERM to group ({})", identity_.pid, StopReasonName(reason));
  SignalGroup(SIGTERM);
  auto self = shared_from_this();
  grace_timer_.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(spec_.kill_grace_s)));
  grace_timer_.async_wait([self](const boost::system::error_code& ec) {
    if (ec || self->finished_) return;
    self->grace_over_ = true;
    if (!self->GroupEmpty()) {
      self->logger_->info("trial pid {}: grace period over, SIGKILL to group", self->identity_.pid);
      self->outcome_.killed = true;
      self->SignalGroup(SIGKILL);
    }
  });
  // A main process that already exited leaves only strays; CheckGroup keeps polling.
}

void Session::StopAfterGrace(StopReason reason) {
  if (finished_ || terminating_ || cooperative_stop_) return;
  if (!started_) {
    Stop(reason);
    return;
  }
  cooperative_stop_ = true;
  auto self = shared_from_this();
  cooperative_timer_.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(spec_.kill_grace_s)));
  cooperative_timer_.async_wait([self, reason](const boost::system::error_code& ec) {
    if (ec || self->finished_ || self->main_exited_) return;
    self->logger_->debug("trial pid {}: did not end within the grace period after being told to",
                         self->identity_.pid);
    self->Stop(reason);
  });
}

void Session::Abandon() {
  abandoned_ = true;
  if (finished_) return;
  if (!started_) {
    FailStart("abandoned before it started", SpawnError{SpawnStep::kPrepare, 0});
    return;
  }
  SignalGroup(SIGKILL);
  outcome_.killed = true;
}

void Session::OnMainExit(int wait_status, const struct rusage& usage) {
  common::Span(logger_, common::WallMillis(), "reaped trial={}", number_);
  main_exited_ = true;
  main_usage_ = usage;
  outcome_.exit = common::ExitStatus::FromWaitStatus(wait_status);
  timeout_timer_.cancel();
  stall_timer_.cancel();
  CheckGroup();
}

void Session::CheckGroup() {
  if (finished_ || !main_exited_) return;
  if (GroupEmpty()) {
    group_empty_ = true;
    poll_timer_.cancel();
    grace_timer_.cancel();
    auto self = shared_from_this();
    eof_timer_.expires_after(kEofWait);
    eof_timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      self->logger_->warn(
          "trial pid {}: output pipes still open with its group gone (a process "
          "escaped the group?); closing them",
          self->identity_.pid);
      self->DrainAndClose(Stream::kReport);
      self->DrainAndClose(Stream::kStdout);
      self->DrainAndClose(Stream::kStderr);
      self->Finish();
    });
    MaybeFinish();
    return;
  }
  if (!outcome_.strays) {
    outcome_.strays = true;
    logger_->info("trial pid {} exited but left processes in its group; stopping them",
                  identity_.pid);
  }
  if (!terminating_) {
    // Strays are stopped the same way as a trial, but the trial's result stands.
    terminating_ = true;
    SignalGroup(SIGTERM);
    auto self = shared_from_this();
    grace_timer_.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(spec_.kill_grace_s)));
    grace_timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      self->grace_over_ = true;
      self->SignalGroup(SIGKILL);
    });
  } else if (abandoned_ || grace_over_) {
    // Also what left the group and was adopted after the group's SIGKILL.
    SignalGroup(SIGKILL);
  }
  // Group members may be children of other members (not ours to reap), so poll as well as
  // listening to the reaper.
  auto self = shared_from_this();
  poll_timer_.expires_after(std::chrono::milliseconds(poll_ms_));
  poll_ms_ = std::min(poll_ms_ * 2, 100);
  poll_timer_.async_wait([self](const boost::system::error_code& ec) {
    if (!ec) self->CheckGroup();
  });
}

void Session::DrainAndClose(Stream s) {
  auto& sd = Descriptor(s);
  if (!sd.is_open()) return;
  auto& buf = buffers_[static_cast<int>(s)];
  size_t total = 0;
  while (total < kFinalDrainLimit) {
    ssize_t n = ::read(sd.native_handle(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += static_cast<size_t>(n);
    Consume(s, std::string_view(buf.data(), static_cast<size_t>(n)));
    if (!sd.is_open()) return;  // a protocol error closed it
  }
  boost::system::error_code ignored;
  sd.close(ignored);
  if (s == Stream::kReport) FinishReports();
}

// What can be told about running out of memory. With memory.max the kernel counts its OOM
// kills in memory.events: exact. Under RLIMIT_AS nothing is killed: an allocation fails and the
// worker decides what happens, so the only evidence is what it says on the way out. Python
// raises MemoryError, a C++ worker dies of an uncaught std::bad_alloc, C reports ENOMEM; a
// worker that dies silently (or with SIGSEGV from a NULL it did not check) stays FAIL(signal)
// or FAIL(exit). The scheduler uses this only for trials that failed.
void Session::JudgeOom() {
  if (cgroup_ && cgroup_->memory_limited()) {
    uint64_t kills = cgroup_->OomKills();
    if (kills > 0) {
      outcome_.oom = true;
      outcome_.oom_detail = "memory.events oom_kill = " + std::to_string(kills) +
                            " (memory.max = " + std::to_string(spec_.memory_limit_bytes) +
                            " bytes)";
    }
    return;
  }
  if (address_space_ == 0) return;
  if (!outcome_.exit.signaled && outcome_.exit.code == 0) return;
  for (const char* marker : {"std::bad_alloc", "MemoryError", "Cannot allocate memory",
                             "out of memory", "Out of memory"}) {
    if (outcome_.stderr_tail.find(marker) != std::string::npos) {
      outcome_.oom = true;
      outcome_.oom_detail =
          "allocation failed under RLIMIT_AS = " + std::to_string(spec_.memory_limit_bytes) +
          " bytes (stderr: \"" + marker + "\")";
      return;
    }
  }
}

// Each figure from the best source there is: the cgroup leaves (ReadLeafResources), else the
// main process's wait4 usage, which counts it and the descendants it waited for itself (a
// lower bound for a tree: what the daemon reaped as subreaper, and strays still running when
// the main process ended, are not in it). Without accounting only the wall time is kept.
void Session::MeasureResources() {
  model::TrialResources& r = outcome_.resources;
  if (accounting_) {
    if (cgroup_) r = cgroup_->ReadResources();
    if (!r.peak_memory_bytes && main_exited_) {
      r.peak_memory_bytes = static_cast<uint64_t>(main_usage_.ru_maxrss) * 1024;  // KiB
      r.memory_source = "getrusage ru_maxrss";
    }
    if (!r.cpu_time_s && main_exited_) {
      auto seconds = [](const struct timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
      };
      r.cpu_time_s = seconds(main_usage_.ru_utime) + seconds(main_usage_.ru_stime);
      r.cpu_source = "getrusage";
    }
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - spawned_).count();
}

void Session::MaybeFinish() {
  if (finished_ || !main_exited_ || !group_empty_) return;
  if (stdout_sd_.is_open() || stderr_sd_.is_open() || report_sd_.is_open()) return;
  Finish();
}

void Session::Finish() {
  if (finished_) return;
  common::Span(logger_, common::WallMillis(), "over trial={}", number_);
  finished_ = true;
  timeout_timer_.cancel();
  grace_timer_.cancel();
  poll_timer_.cancel();
  eof_timer_.cancel();
  cooperative_timer_.cancel();
  stall_timer_.cancel();
  reaper_.Unwatch(identity_.pid);
  outcome_.stderr_tail = stderr_log_->Tail(kStderrTailBytes);
  JudgeOom();
  MeasureResources();
  if (cgroup_) {
    Status removed = cgroup_->Remove();
    if (!removed.ok()) logger_->warn("trial pid {}: {}", identity_.pid, removed.message());
  }
  Status st = stdout_log_->Close();
  if (!st.ok()) logger_->warn("trial pid {}: stdout log: {}", identity_.pid, st.message());
  st = stderr_log_->Close();
  if (!st.ok()) logger_->warn("trial pid {}: stderr log: {}", identity_.pid, st.message());
  if (abandoned_ || !callbacks_.on_exit) return;
  // Deliver from a fresh handler so the receiver may destroy the TrialProcess.
  auto self = shared_from_this();
  asio::post(io_, [self]() {
    if (!self->abandoned_) self->callbacks_.on_exit(self->outcome_);
  });
}

}  // namespace

ProcessLauncher::ProcessLauncher(Options options)
    : options_(std::move(options)),
      forks_(ForkServers::Options{options_.io, options_.reaper, options_.logger, options_.cgroups,
                                  options_.fork_reply_timeout_s, options_.fork_ready_timeout_s}) {}

ProcessLauncher::~ProcessLauncher() = default;

void ProcessLauncher::SetForkServerListener(std::function<void(const ForkServerEvent&)> listener) {
  forks_.SetListener(std::move(listener));
}

void ProcessLauncher::ReleaseForkServer(const std::string& key) { forks_.Release(key); }

void ProcessLauncher::ReleaseAllForkServers() { forks_.ReleaseAll(); }

std::optional<ForkServerStatus> ProcessLauncher::fork_server_status(const std::string& key) const {
  return forks_.StatusOf(key);
}

LaunchResult ProcessLauncher::Launch(const LaunchSpec& spec, TrialCallbacks callbacks) {
  if (spec.slurm) {
    // Never run a Slurm trial here by mistake (slurm/slurm_launcher.h turns it into its bridge).
    return LaunchResult(
        common::FailedPrecondition("a trial of a study with [executor] kind = "
                                   "\"slurm\" reached the local launcher"));
  }
  std::optional<RunAs> run_as;
  if (options_.run_as_submitter && spec.submitter.known()) {
    // No account for the submitter on this host: a person has to act (persistent, no errno).
    Result<RunAs> user = run_as_cache_.Get(spec.submitter);
    if (!user.ok()) return LaunchResult(user.status(), SpawnError{SpawnStep::kCredentials, 0});
    run_as = std::move(user).value();
  }
  auto session = std::make_shared<Session>(
      *options_.io, *options_.reaper, options_.cgroups, options_.logger, spec, std::move(callbacks),
      std::move(run_as), options_.trial_root, options_.resource_accounting);
  Status started = session->Start(&forks_);
  if (!started.ok()) {
    return LaunchResult(started, session->spawn_error());
  }
  return std::unique_ptr<TrialProcess>(new Handle(std::move(session)));
}

}  // namespace triald::launcher
