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
#include <filesystem>
#include <optional>

#include "common/boost_process.h"
#include "common/fd.h"
#include "daemon/launcher/adopted.h"
#include "daemon/launcher/capped_log.h"
#include "daemon/launcher/run_as.h"
#include "proto/line_reader.h"

namespace triald::launcher {
namespace asio = boost::asio;
namespace bp = boost::process::v2;
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

// The Boost.Process initializer that runs in the child between vfork and exec. The child
// shares the daemon's memory until exec, so the hook makes system calls only: it allocates
// nothing and writes no shared state but `*step`.
struct ChildSetup {
  const char* const* envp;
  const char* workdir;
  int report_fd;
  pid_t parent;
  int cgroup_procs_fd;     // -1: no cgroup
  int pids_v1_procs_fd;    // -1: no v1 pids leaf
  int memory_v1_procs_fd;  // -1: no v1 memory leaf (accounting)
  rlim_t address_space;    // 0: no RLIMIT_AS
  // The user to become (run_as): setgroups, setgid, setuid, in that order. Raw system calls:
  // glibc's wrappers would try to change the credentials of every thread of the daemon (whose
  // memory the vfork child shares), while the child has one thread and the call is per thread.
  bool switch_user;
  uid_t uid;
  gid_t gid;
  const gid_t* groups;
  size_t n_groups;
  // The step the child is at, in the daemon's memory (the vfork child shares it, as Boost's
  // error code does): after a failure it says whether setup, the user switch, chdir or exec
  // failed.
  SpawnStep* step;

  template <typename Launcher>
  bp::error_code on_setup(Launcher& launcher, const bp::filesystem::path&, const char* const*&) {
    launcher.env = envp;
    launcher.fd_whitelist.push_back(kReportFd);
    return {};
  }

  template <typename Launcher>
  bp::error_code on_exec_setup(Launcher& launcher, const bp::filesystem::path&,
                               const char* const*&) {
    *step = SpawnStep::kCgroup;
    // Into the trial's cgroup before anything else, so nothing the worker forks escapes it.
    if (cgroup_procs_fd >= 0 && ::write(cgroup_procs_fd, "0", 1) != 1) {
      return {errno, bp::system_category()};
    }
    if (pids_v1_procs_fd >= 0 && ::write(pids_v1_procs_fd, "0", 1) != 1) {
      return {errno, bp::system_category()};
    }
    if (memory_v1_procs_fd >= 0 && ::write(memory_v1_procs_fd, "0", 1) != 1) {
      return {errno, bp::system_category()};
    }
    *step = SpawnStep::kChild;
    if (address_space > 0) {
      struct rlimit limit = {address_space, address_space};
      if (::setrlimit(RLIMIT_AS, &limit) != 0) return {errno, bp::system_category()};
    }
    if (::setpgid(0, 0) != 0) return {errno, bp::system_category()};
    // Become the trial's user before PR_SET_PDEATHSIG: the kernel clears the parent-death
    // signal whenever the credentials change.
    if (switch_user) {
      *step = SpawnStep::kCredentials;
      if (::syscall(SYS_setgroups, n_groups, groups) != 0) return {errno, bp::system_category()};
      if (::syscall(SYS_setgid, gid) != 0) return {errno, bp::system_category()};
      if (::syscall(SYS_setuid, uid) != 0) return {errno, bp::system_category()};
      *step = SpawnStep::kChild;
    }
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return {errno, bp::system_category()};
    // The daemon may have died between vfork and prctl; then nobody would ever stop us.
    if (::getppid() != parent) ::_exit(127);
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (report_fd == kReportFd) {
      if (::fcntl(kReportFd, F_SETFD, 0) != 0) return {errno, bp::system_category()};
    } else if (::dup2(report_fd, kReportFd) < 0) {  // dup2 clears FD_CLOEXEC on the copy
      return {errno, bp::system_category()};
    }
    *step = SpawnStep::kWorkdir;
    if (::chdir(workdir) != 0) return {errno, bp::system_category()};
    *step = SpawnStep::kChild;
    // Close every other descriptor ourselves. The daemon opens everything close-on-exec, but a
    // library may not (Asio's sockets are not), and Boost 1.81's own close loop skips the
    // descriptors between whitelisted ones. What must stay: 0-3 and the launcher's pipe that
    // reports an exec failure (it is close-on-exec, so exec still closes it).
    int keep = -1;
    for (int fd : launcher.fd_whitelist) keep = fd > kReportFd ? fd : keep;
    if (keep > kReportFd + 1) ::close_range(kReportFd + 1, keep - 1, 0);
    ::close_range((keep > kReportFd ? keep : kReportFd) + 1, ~0U, 0);
    *step = SpawnStep::kExec;
    return {};
  }

  // Boost 1.81 checks for this hook with a five-argument signature and calls it with four;
  // the variadic form matches both. It ends the child without running the daemon's atexit
  // handlers (the launcher would otherwise call exit()).
  template <typename... Args>
  void on_exec_error(Args&&...) {
    ::_exit(127);
  }
};

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

  // A failure leaves spawn_error() naming the step that failed and its errno.
  Status Start();
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
  void Read(Stream s);
  void Consume(Stream s, std::string_view data);
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
  std::string trial_dir_;  // TRIALD_TRIAL_DIR of its environment ("" when not set)
  int poll_ms_ = 2;
  std::string answers_;       // queued answer bytes the socket has not taken yet
  bool answer_wait_ = false;  // waiting for the socket to take more
};

class Handle final : public TrialProcess {
 public:
  explicit Handle(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  ~Handle() override { session_->Abandon(); }
  const model::ProcessIdentity& identity() const override { return session_->identity(); }
  void Stop(StopReason reason) override { session_->Stop(reason); }
  void StopAfterGrace(StopReason reason) override { session_->StopAfterGrace(reason); }
  void Answer(const std::string& line) override { session_->Answer(line); }
  void FailProtocol(const std::string& message) override { session_->FailProtocol(message); }

 private:
  std::shared_ptr<Session> session_;
};

Status Session::Start() {
  for (const std::string& kv : spec_.env) {
    if (kv.rfind("TRIALD_TRIAL_DIR=", 0) == 0) trial_dir_ = kv.substr(17);
  }
  spawn_step_ = SpawnStep::kPrepare;
  // Each failure keeps its errno for the scheduler's policy (EMFILE, ENFILE, ENOMEM, ...). The
  // common:: helpers below return ErrnoError of their one failed system call; errno is read at
  // once, before anything else can change it.
  auto failed = [this](Status st, int err) {
    spawn_errno_ = err;
    return st;
  };
  if (!spec_.trial_dir.empty()) {
    std::error_code fs_ec;
    std::filesystem::create_directories(spec_.trial_dir, fs_ec);
    if (fs_ec) {
      return failed(common::IoError("create " + spec_.trial_dir + ": " + fs_ec.message()),
                    fs_ec.value());
    }
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
  common::UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) {
    const int e = errno;
    return failed(common::ErrnoError("open /dev/null", e), e);
  }

  std::vector<const char*> envp;
  envp.reserve(spec_.env.size() + 1);
  for (const std::string& kv : spec_.env) envp.push_back(kv.c_str());
  envp.push_back(nullptr);
  std::vector<std::string> args(spec_.argv.begin() + (spec_.argv.empty() ? 0 : 1),
                                spec_.argv.end());

  if (cgroups_ != nullptr) {
    spawn_step_ = SpawnStep::kCgroup;
    CgroupLimits limits;
    limits.memory_max_bytes = spec_.memory_limit_bytes;
    limits.pids_max = spec_.pids_limit;
    Result<std::unique_ptr<TrialCgroup>> cg = cgroups_->CreateTrial(limits);
    if (!cg.ok()) return failed(cg.status().WithContext("creating the trial's cgroup"), errno);
    cgroup_ = std::move(cg).value();
  }
  if (spec_.memory_limit_bytes > 0 && (cgroup_ == nullptr || !cgroup_->memory_limited())) {
    address_space_ = static_cast<rlim_t>(spec_.memory_limit_bytes);
  }
  ChildSetup setup{envp.data(),
                   spec_.workdir.c_str(),
                   channel_worker.get(),
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
  // A fresh context per launch, never run: see process_launcher.h on vfork and notify_fork.
  asio::io_context spawn_io(1);
  bp::posix::vfork_launcher launcher;
  bp::error_code ec;
  spawn_step_ = SpawnStep::kFork;  // the child moves it on
  spawned_ = std::chrono::steady_clock::now();
  bp::process proc =
      launcher(spawn_io.get_executor(), ec, bp::filesystem::path(spec_.executable), args,
               bp::process_stdio{devnull.get(), out->write.get(), err->write.get()}, setup);
  if (ec) {
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
    spawn_errno_ = ec.value();
    return common::IoError(what + ": " + ec.message());
  }
  identity_.pid = proc.id();
  proc.detach();  // the Reaper, not Boost.Process, waits for it
  identity_.pgid = identity_.pid;
  // The child has exec'd by now (the launcher waits for that), so it is in its own group.
  Result<uint64_t> start = common::ProcessStartTime(identity_.pid);
  identity_.start_time = start.ok() ? *start : 0;

  std::weak_ptr<Session> weak = weak_from_this();
  reaper_.Watch(identity_.pid, [weak](int status, const struct rusage& usage) {
    if (auto self = weak.lock()) self->OnMainExit(status, usage);
  });

  stdout_sd_.assign(out->read.Release());
  stderr_sd_.assign(err->read.Release());
  report_sd_.assign(channel_daemon.Release());
  // The child-side ends (out.write, err.write, channel_worker, devnull) close here, so EOF on
  // a pipe or the channel means every process holding it has closed it.
  Read(Stream::kStdout);
  Read(Stream::kStderr);
  Read(Stream::kReport);

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
  return Status::Ok();
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
  if (callbacks_.on_message && !abandoned_) callbacks_.on_message(*msg);
  return Status::Ok();
}

void Session::Answer(const std::string& line) {
  if (finished_ || abandoned_ || !report_sd_.is_open() || !outcome_.protocol_error.empty()) {
    return;
  }
  answers_ += line;
  if (line.empty() || line.back() != '\n') answers_ += '\n';
  FlushAnswers();
  if (answers_.size() > kMaxAnswerBacklogBytes) {
    const size_t unread = answers_.size();
    answers_.clear();
    FailProtocol("the worker left " + std::to_string(unread) +
                 " bytes of answers unread on the trial channel (at most " +
                 std::to_string(kMaxAnswerBacklogBytes) + "); it must read each answer");
  }
}

void Session::FlushAnswers() {
  while (!answers_.empty() && report_sd_.is_open()) {
    ssize_t n = ::send(report_sd_.native_handle(), answers_.data(), answers_.size(),
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      answers_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (answer_wait_) return;
      answer_wait_ = true;
      auto self = shared_from_this();
      report_sd_.async_wait(asio::posix::stream_descriptor::wait_write,
                            [self](const boost::system::error_code& ec) {
                              self->answer_wait_ = false;
                              if (ec || self->finished_) return;
                              self->FlushAnswers();
                            });
      return;
    }
    // The worker closed its end (or is gone): nobody reads the answers.
    answers_.clear();
    return;
  }
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
  SignalGroup(SIGKILL);
  outcome_.killed = true;
}

void Session::OnMainExit(int wait_status, const struct rusage& usage) {
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

ProcessLauncher::ProcessLauncher(Options options) : options_(std::move(options)) {}

LaunchResult ProcessLauncher::Launch(const LaunchSpec& spec, TrialCallbacks callbacks) {
  std::optional<RunAs> run_as;
  if (options_.run_as_submitter && spec.submitter.known()) {
    // No account for the submitter on this host: a person has to act (persistent, no errno).
    Result<RunAs> user = LookUpRunAs(spec.submitter);
    if (!user.ok()) return LaunchResult(user.status(), SpawnError{SpawnStep::kCredentials, 0});
    run_as = std::move(user).value();
  }
  auto session = std::make_shared<Session>(
      *options_.io, *options_.reaper, options_.cgroups, options_.logger, spec, std::move(callbacks),
      std::move(run_as), options_.trial_root, options_.resource_accounting);
  Status started = session->Start();
  if (!started.ok()) {
    return LaunchResult(started, session->spawn_error());
  }
  return std::unique_ptr<TrialProcess>(new Handle(std::move(session)));
}

}  // namespace triald::launcher
