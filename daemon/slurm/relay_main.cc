// triald-slurm-relay: the two ends of a Slurm trial's I/O (daemon/slurm/slurm_job.h).
//
//   triald-slurm-relay submit --job-name NAME [--poll SECONDS] -- SRUN_ARGV...
//     The bridge, on the daemon's host: what the launcher starts for a Slurm trial (fds 0-3 as
//     for any trial). Runs SRUN_ARGV (whose command is `triald-slurm-relay run -- ...`), turns
//     the relay's frames back into its own stdout, stderr and fd 3, passes what it reads on fd 3
//     to srun's stdin, and tells the daemon on fd 3 what Slurm says of the job (an attr line
//     with key "triald.slurm": job id, state, Slurm's reason while it waits, node, GPUs). At
//     SIGTERM it has Slurm signal the job (scancel --signal=TERM; a job still queued is
//     cancelled). When srun ends, it reads the job's final state from scontrol, and where Slurm
//     ended the job (preempted, node failure, time limit, OOM, cancelled by someone else) says
//     so in that attr. It exits as the worker did (its exit code, or its signal), else 1.
//   triald-slurm-relay run -- COMMAND...
//     The relay, the job's one task on the node: starts COMMAND with the trial channel at fd 3
//     (a socketpair) and sends its stdout, stderr and channel as frames on its own stdout; what
//     comes on its stdin goes to the channel. The last frame is the worker's wait status.
//
// Everything here is plain POSIX with poll(); it runs as the trial's user, like the trial.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "daemon/slurm/slurm_job.h"

namespace {

using triald::slurm::Frame;
using triald::slurm::FrameDecoder;
using triald::slurm::FrameTag;

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const int saved = errno;
  const char c = static_cast<char>(sig);
  (void)!write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

void Die(const std::string& message) {
  std::fprintf(stderr, "triald-slurm-relay: %s\n", message.c_str());
  std::exit(1);
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Writes all of `data`, waiting while the descriptor is full. False on an error (EPIPE).
bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1000);
      continue;
    }
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool WriteAll(int fd, const std::string& s) { return WriteAll(fd, s.data(), s.size()); }

void InstallSignals() {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    Die("pipe: " + std::string(strerror(errno)));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// In a forked child: execs `argv` (looked up in PATH), else says why on stderr and exits 127.
[[noreturn]] void ExecOrDie(const std::vector<std::string>& argv, const std::string& who) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  const std::string msg = who + "exec " + argv[0] + ": " + strerror(errno) + "\n";
  (void)!write(2, msg.data(), msg.size());
  _exit(127);
}

// Ends this process the way `wstatus` says its worker ended.
[[noreturn]] void EndAs(int wstatus) {
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    raise(sig);
  }
  std::exit(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1);
}

// Slurm's command `argv`'s output; "" when it failed (it said why on stderr, the trial's log).
std::string RunCapture(const std::vector<std::string>& argv, double timeout_s) {
  triald::common::Result<std::string> out = triald::slurm::RunForOutput(argv, timeout_s);
  return out.ok() ? *out : std::string();
}

// ---------------------------------------------------------------------------------------------
// run: the node's end.

int RunNode(const std::vector<std::string>& command) {
  if (command.empty()) Die("run: no command after --");
  InstallSignals();
  int chan[2], out[2], err[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
      pipe2(err, O_CLOEXEC) != 0) {
    Die("cannot make the trial's descriptors: " + std::string(strerror(errno)));
  }
  pid_t child = fork();
  if (child < 0) Die("fork: " + std::string(strerror(errno)));
  if (child == 0) {
    setpgid(0, 0);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    dup2(chan[1], 3);  // dup2 clears FD_CLOEXEC on the copy
    signal(SIGPIPE, SIG_DFL);
    ExecOrDie(command, "");
  }
  close(chan[1]);
  close(out[1]);
  close(err[1]);
  SetNonBlocking(chan[0]);
  SetNonBlocking(0);

  // Who the job is, as the node sees it.
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  std::string info = "{\"job_id\":" + triald::common::JsonQuote(env("SLURM_JOB_ID")) +
                     ",\"node\":" + triald::common::JsonQuote(env("SLURMD_NODENAME")) +
                     ",\"gpus\":" + triald::common::JsonQuote(env("CUDA_VISIBLE_DEVICES")) + "}";
  WriteAll(1, triald::slurm::EncodeFrame(FrameTag::kInfo, info));

  int fds[3] = {out[0], err[0], chan[0]};
  const FrameTag tags[3] = {FrameTag::kStdout, FrameTag::kStderr, FrameTag::kChannel};
  bool open_fd[3] = {true, true, true};
  bool stdin_open = true;
  std::string to_channel;  // from stdin, not yet taken by the worker
  int wstatus = 0;
  bool exited = false;
  char buf[65536];
  while (!exited || open_fd[0] || open_fd[1] || open_fd[2]) {
    std::vector<pollfd> p;
    p.push_back({g_signal_pipe[0], POLLIN, 0});
    for (int i = 0; i < 3; ++i) {
      if (open_fd[i]) p.push_back({fds[i], POLLIN, 0});
    }
    // Stdin is read only while little waits for the worker (it reads its answers).
    if (stdin_open && to_channel.size() < (1u << 20)) p.push_back({0, POLLIN, 0});
    if (!to_channel.empty() && open_fd[2]) p.push_back({chan[0], POLLOUT, 0});
    // Once the worker exited, its streams get a moment to drain (a grandchild may hold them).
    int r = poll(p.data(), p.size(), exited ? 2000 : -1);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && exited) break;
    for (const pollfd& q : p) {
      if (q.revents == 0) continue;
      if (q.fd == g_signal_pipe[0]) {
        char sig;
        while (read(g_signal_pipe[0], &sig, 1) == 1) {
          if (sig == SIGTERM || sig == SIGINT) kill(-child, sig);
        }
        int st = 0;
        if (!exited && waitpid(child, &st, WNOHANG) == child) {
          exited = true;
          wstatus = st;
        }
      } else if (q.fd == 0 && (q.events & POLLIN)) {
        ssize_t n = read(0, buf, sizeof(buf));
        if (n > 0) {
          to_channel.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          stdin_open = false;
          if (to_channel.empty()) shutdown(chan[0], SHUT_WR);
        }
      } else if (q.fd == chan[0] && (q.events & POLLOUT)) {
        ssize_t n = write(chan[0], to_channel.data(), to_channel.size());
        if (n > 0) to_channel.erase(0, static_cast<size_t>(n));
        if (n < 0 && errno != EAGAIN && errno != EINTR) to_channel.clear();
        if (to_channel.empty() && !stdin_open) shutdown(chan[0], SHUT_WR);
      } else {
        for (int i = 0; i < 3; ++i) {
          if (!open_fd[i] || q.fd != fds[i] || !(q.events & POLLIN)) continue;
          ssize_t n = read(fds[i], buf, sizeof(buf));
          if (n > 0) {
            if (!WriteAll(1, triald::slurm::EncodeFrame(tags[i], std::string_view(buf, n)))) {
              kill(-child, SIGKILL);  // srun is gone: nobody reads the trial any more
            }
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            open_fd[i] = false;
          }
        }
      }
    }
  }
  if (!exited) {
    while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
  // What the worker's tree consumed, as the node's kernel counted it: the largest peak RSS of a
  // process in it and the CPU time of every process waited for.
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  char exit_text[96];
  std::snprintf(exit_text, sizeof(exit_text), "%d %ld %.6f", wstatus, ru.ru_maxrss, cpu);
  WriteAll(1, triald::slurm::EncodeFrame(FrameTag::kExit, exit_text));
  return 0;
}

// ---------------------------------------------------------------------------------------------
// submit: the daemon's end.

class Bridge {
 public:
  Bridge(std::string job_name, double poll_s, std::vector<std::string> srun)
      : job_name_(std::move(job_name)), poll_s_(poll_s), srun_(std::move(srun)) {
    // scancel, squeue and scontrol: next to srun when srun is a path.
    const size_t slash = srun_[0].rfind('/');
    bin_dir_ = slash == std::string::npos ? "" : srun_[0].substr(0, slash + 1);
  }

  int Run();

 private:
  void StartSrun();
  void OnFrame(const Frame& f);
  // Sends {"type":"attr","key":"triald.slurm","value":{...}} to the daemon at a line boundary.
  void Tell();
  void PollQueue();
  void OnTerm();
  void FinalState();
  // Slurm's accounting of the job (sacct), where the cluster keeps one: its figures replace the
  // relay's; accounting_ says which the daemon got.
  void Accounting();

  std::string job_name_;
  double poll_s_;
  std::vector<std::string> srun_;
  std::string bin_dir_;
  pid_t srun_pid_ = -1;
  int srun_in_ = -1;
  int srun_out_ = -1;
  FrameDecoder decoder_;
  // What the daemon is told.
  std::string job_id_, state_ = "SUBMITTING", reason_, node_, gpus_, ending_;
  std::string peak_memory_, cpu_time_;  // the worker's, from the relay's last frame or sacct
  std::string accounting_;
  bool cancelled_ = false;  // by us, at SIGTERM
  bool channel_at_line_start_ = true;
  std::string pending_tell_;  // a line waiting for a line boundary on fd 3
  std::optional<int> worker_status_;
  bool raw_ = false;  // srun's stdout is not a relay's: passed to stderr unread
};

void Bridge::StartSrun() {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    Die("pipe: " + std::string(strerror(errno)));
  }
  const pid_t parent = getpid();
  srun_pid_ = fork();
  if (srun_pid_ < 0) Die("fork: " + std::string(strerror(errno)));
  if (srun_pid_ == 0) {
    // srun in a process group of its own: a SIGTERM to the trial's group is the bridge's to turn
    // into scancel (srun itself would kill the step at once). It dies with the bridge.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(in[0], 0);
    dup2(out[1], 1);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ExecOrDie(srun_, "triald-slurm-relay: ");
  }
  close(in[0]);
  close(out[1]);
  srun_in_ = in[1];
  srun_out_ = out[0];
  SetNonBlocking(srun_in_);
}

void Bridge::Tell() {
  std::string line = "{\"type\":\"attr\",\"key\":\"triald.slurm\",\"value\":{\"job_name\":" +
                     triald::common::JsonQuote(job_name_) +
                     ",\"job_id\":" + triald::common::JsonQuote(job_id_) +
                     ",\"state\":" + triald::common::JsonQuote(state_) +
                     ",\"reason\":" + triald::common::JsonQuote(reason_) +
                     ",\"node\":" + triald::common::JsonQuote(node_) +
                     ",\"gpus\":" + triald::common::JsonQuote(gpus_);
  if (!ending_.empty()) line += ",\"ending\":" + triald::common::JsonQuote(ending_);
  if (!accounting_.empty()) line += ",\"accounting\":" + triald::common::JsonQuote(accounting_);
  if (!peak_memory_.empty()) {
    line += ",\"peak_memory_bytes\":" + triald::common::JsonQuote(peak_memory_) +
            ",\"cpu_time_s\":" + triald::common::JsonQuote(cpu_time_);
  }
  line += "}}\n";
  pending_tell_ = line;  // only the latest matters
  if (channel_at_line_start_) {
    WriteAll(3, pending_tell_);
    pending_tell_.clear();
  }
}

void Bridge::OnFrame(const Frame& f) {
  switch (f.tag) {
    case FrameTag::kStdout:
      WriteAll(1, f.payload);
      break;
    case FrameTag::kStderr:
      WriteAll(2, f.payload);
      break;
    case FrameTag::kChannel:
      WriteAll(3, f.payload);
      if (!f.payload.empty()) channel_at_line_start_ = f.payload.back() == '\n';
      if (channel_at_line_start_ && !pending_tell_.empty()) {
        WriteAll(3, pending_tell_);
        pending_tell_.clear();
      }
      break;
    case FrameTag::kInfo: {
      // {"job_id":"..","node":"..","gpus":".."}: our own relay's, three flat strings.
      auto field = [&](const std::string& key) {
        const std::string k = "\"" + key + "\":\"";
        size_t b = f.payload.find(k);
        if (b == std::string::npos) return std::string();
        b += k.size();
        size_t e = f.payload.find('"', b);
        return e == std::string::npos ? std::string() : f.payload.substr(b, e - b);
      };
      job_id_ = field("job_id");
      node_ = field("node");
      gpus_ = field("gpus");
      state_ = "RUNNING";
      reason_.clear();
      Tell();
      break;
    }
    case FrameTag::kExit: {
      // "WSTATUS MAXRSS_KIB CPU_SECONDS"
      int status = 0;
      long maxrss_kib = 0;
      double cpu = 0;
      if (std::sscanf(f.payload.c_str(), "%d %ld %lf", &status, &maxrss_kib, &cpu) == 3) {
        worker_status_ = status;
        peak_memory_ = std::to_string(static_cast<uint64_t>(maxrss_kib) * 1024);
        cpu_time_ = std::to_string(cpu);
        Tell();
      }
    } break;
  }
}

void Bridge::PollQueue() {
  if (state_ == "RUNNING") return;  // the relay already said so
  // %i job id, %T state, %r reason (why it waits).
  std::string out = RunCapture(
      {bin_dir_ + "squeue", "--noheader", "--name=" + job_name_, "--format=%i|%T|%r"}, 10);
  size_t nl = out.find('\n');
  std::string line = out.substr(0, nl);
  size_t a = line.find('|'), b = line.find('|', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos) return;
  std::string id = line.substr(0, a), state = line.substr(a + 1, b - a - 1),
              reason = line.substr(b + 1);
  if (id != job_id_ || state != state_ || reason != reason_) {
    job_id_ = id;
    state_ = state;
    reason_ = reason == "None" ? "" : reason;
    Tell();
  }
}

void Bridge::OnTerm() {
  if (cancelled_) return;
  cancelled_ = true;
  // A running job: its tasks get SIGTERM (the relay passes it to the worker's group) and the
  // worker its grace; a queued one is cancelled. Without a job id yet, by name.
  std::vector<std::string> argv = {bin_dir_ + "scancel", "--quiet"};
  if (state_ == "RUNNING" && !job_id_.empty()) {
    argv.push_back("--signal=TERM");
    argv.push_back(job_id_);
  } else {
    argv.push_back("--name=" + job_name_);
  }
  RunCapture(argv, 10);
}

void Bridge::Accounting() {
  if (job_id_.empty()) return;
  triald::common::Result<std::string> out =
      triald::slurm::RunForOutput({bin_dir_ + "sacct", "--noheader", "--parsable2",
                                   "--format=JobID,MaxRSS,TotalCPU,Elapsed", "-j", job_id_},
                                  10, /*quiet=*/true);
  triald::common::Result<triald::slurm::JobAccounting> acct =
      out.ok() ? triald::slurm::ParseSacct(*out)
               : triald::common::Result<triald::slurm::JobAccounting>(out.status());
  if (acct.ok() && (acct->max_rss_bytes || acct->total_cpu_s)) {
    accounting_ = "sacct";
    if (acct->max_rss_bytes) peak_memory_ = std::to_string(*acct->max_rss_bytes);
    if (acct->total_cpu_s) cpu_time_ = std::to_string(*acct->total_cpu_s);
  } else {
    accounting_ =
        "none (sacct: " + (acct.ok() ? std::string("no usage recorded") : acct.status().message()) +
        ")";
  }
  Tell();
}

void Bridge::FinalState() {
  if (job_id_.empty()) {
    // srun ended before its job ran (refused, or cancelled while queued): ask squeue once more
    // for the id, then the record.
    PollQueue();
    if (job_id_.empty()) return;
  }
  // The job ends shortly after srun does (COMPLETING): wait for its final state, a while.
  for (int i = 0; i < 50; ++i) {
    std::string out = RunCapture({bin_dir_ + "scontrol", "show", "job", "-o", job_id_}, 10);
    auto fields = triald::slurm::ParseScontrolJob(out);
    auto st = fields.find("JobState");
    if (st == fields.end()) return;  // gone already (MinJobAge): nothing more to learn
    if (!triald::slurm::JobStateIsActive(st->second)) {
      state_ = st->second;
      auto reason = fields.find("Reason");
      reason_ = reason == fields.end() || reason->second == "None" ? "" : reason->second;
      if (auto why = triald::slurm::FailureReason(state_, cancelled_)) ending_ = *why;
      Tell();
      return;
    }
    usleep(100 * 1000);
  }
}

int Bridge::Run() {
  InstallSignals();
  SetNonBlocking(3);
  StartSrun();
  std::string to_srun;
  bool fd3_open = true;
  bool srun_out_open = true;
  bool srun_exited = false;
  int srun_status = 0;
  auto next_poll = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  char buf[65536];
  while (srun_out_open || !srun_exited) {
    std::vector<pollfd> p;
    p.push_back({g_signal_pipe[0], POLLIN, 0});
    if (srun_out_open) p.push_back({srun_out_, POLLIN, 0});
    if (fd3_open && to_srun.size() < (1u << 20)) p.push_back({3, POLLIN, 0});
    if (!to_srun.empty() && srun_in_ >= 0) p.push_back({srun_in_, POLLOUT, 0});
    int timeout_ms = -1;
    if (state_ != "RUNNING" && !srun_exited) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      next_poll - std::chrono::steady_clock::now())
                      .count();
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left));
    }
    if (srun_exited) timeout_ms = 2000;  // its output drains, or a stray holds the pipe
    int r = poll(p.data(), p.size(), timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && srun_exited) break;
    if (state_ != "RUNNING" && !srun_exited && std::chrono::steady_clock::now() >= next_poll) {
      PollQueue();
      next_poll = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int>(poll_s_ * 1000));
    }
    for (const pollfd& q : p) {
      if (q.revents == 0) continue;
      if (q.fd == g_signal_pipe[0]) {
        char sig;
        while (read(g_signal_pipe[0], &sig, 1) == 1) {
          if (sig == SIGTERM || sig == SIGINT) OnTerm();
        }
        int st = 0;
        if (!srun_exited && waitpid(srun_pid_, &st, WNOHANG) == srun_pid_) {
          srun_exited = true;
          srun_status = st;
        }
      } else if (q.fd == srun_out_) {
        ssize_t n = read(srun_out_, buf, sizeof(buf));
        if (n > 0 && raw_) {
          WriteAll(2, buf, static_cast<size_t>(n));
        } else if (n > 0) {
          std::vector<Frame> frames;
          triald::common::Status st = decoder_.Feed(std::string_view(buf, n), &frames);
          for (const Frame& f : frames) OnFrame(f);
          if (!st.ok()) {
            // Not a relay on the other end (the relay missing on the node, a site's prolog
            // writing to the job's stdout): the rest goes to stderr as it is, and srun is
            // still drained so it can end.
            std::fprintf(stderr, "triald-slurm-relay: %s; what follows is srun's output as is\n",
                         st.message().c_str());
            raw_ = true;
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          srun_out_open = false;
        }
      } else if (q.fd == 3) {
        ssize_t n = read(3, buf, sizeof(buf));
        if (n > 0) {
          to_srun.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          fd3_open = false;
          if (to_srun.empty() && srun_in_ >= 0) {
            close(srun_in_);
            srun_in_ = -1;
          }
        }
      } else if (q.fd == srun_in_) {
        ssize_t n = write(srun_in_, to_srun.data(), to_srun.size());
        if (n > 0) to_srun.erase(0, static_cast<size_t>(n));
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          to_srun.clear();
          close(srun_in_);
          srun_in_ = -1;
        } else if (to_srun.empty() && !fd3_open) {
          close(srun_in_);
          srun_in_ = -1;
        }
      }
    }
  }
  if (!srun_exited) {
    while (waitpid(srun_pid_, &srun_status, 0) < 0 && errno == EINTR) {
    }
  }
  const bool worker_ok =
      worker_status_ && WIFEXITED(*worker_status_) && WEXITSTATUS(*worker_status_) == 0;
  if (!worker_ok) FinalState();
  Accounting();
  if (!ending_.empty()) {
    std::fprintf(stderr, "triald-slurm-relay: Slurm ended job %s: %s%s%s\n", job_id_.c_str(),
                 state_.c_str(), reason_.empty() ? "" : " ", reason_.c_str());
  }
  if (worker_status_ && ending_.empty()) EndAs(*worker_status_);
  if (!worker_status_ && ending_.empty()) {
    std::fprintf(stderr, "triald-slurm-relay: srun ended (%s %d) without the worker's status\n",
                 WIFEXITED(srun_status) ? "exit code" : "signal",
                 WIFEXITED(srun_status) ? WEXITSTATUS(srun_status) : WTERMSIG(srun_status));
  }
  return 1;
}

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: triald-slurm-relay submit --job-name NAME [--poll SECONDS] -- SRUN_ARGV...\n"
               "       triald-slurm-relay run -- COMMAND...\n"
               "(started by triald for trials of studies with [executor] kind = \"slurm\")\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) Usage();
  const std::string mode = args[0];
  size_t i = 1;
  std::string job_name;
  double poll_s = 2;
  for (; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--job-name" && i + 1 < args.size()) {
      job_name = args[++i];
    } else if (args[i] == "--poll" && i + 1 < args.size()) {
      poll_s = std::atof(args[++i].c_str());
      if (!(poll_s > 0)) Usage();
    } else {
      Usage();
    }
  }
  if (i >= args.size()) Usage();
  std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
  if (mode == "run") return RunNode(rest);
  if (mode == "submit") {
    if (job_name.empty() || rest.empty()) Usage();
    return Bridge(job_name, poll_s, rest).Run();
  }
  Usage();
}
