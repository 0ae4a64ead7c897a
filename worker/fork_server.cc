#include "worker/fork_server.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/json.h"
#include "common/process_util.h"
#include "common/status.h"
#include "config/sweep.h"
#include "worker/clone_parent.h"
#include "worker/lm_objective.h"
#include "worker/reporter.h"
#include "worker/trial_main.h"

namespace triald::worker {
namespace {

namespace json = boost::json;

// proto/README.md: a packet holds at most 64 KiB.
constexpr size_t kMaxPacketBytes = 64 * 1024;
// A fork request carries three descriptors; room for more, so that a request with too many is
// seen whole (and refused) rather than cut short.
constexpr size_t kMaxDescriptors = 16;
// How long the server waits for a new trial's pid.
constexpr int kPidWaitMs = 5000;
// The go line is 13 bytes; anything much longer is not a go.
constexpr size_t kMaxGoLineBytes = 4096;
// CUDA_ERROR_NOT_INITIALIZED of the driver API: cuInit has not been called.
constexpr int kCudaErrorNotInitialized = 3;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Log(const char* format, const std::string& text) {
  std::fprintf(stderr, "trial-worker fork server: ");
  std::fprintf(stderr, format, text.c_str());
  std::fputc('\n', stderr);
}

// The server's end of its channel to the daemon: one JSON object per SOCK_SEQPACKET packet.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  int fd() const { return fd_; }

  // Sends one message. A daemon that has gone away (EPIPE, ECONNRESET) is an error the caller
  // ends on: nobody is left to serve.
  common::Status Send(const json::object& message) const {
    const std::string text = common::SerializeJson(message);
    while (true) {
      const ssize_t sent = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (sent == static_cast<ssize_t>(text.size())) return common::Status::Ok();
      if (sent < 0 && errno == EINTR) continue;
      if (sent < 0) return common::ErrnoError("cannot write to the daemon's channel", errno);
      return common::IoError("the daemon's channel took " + std::to_string(sent) + " of " +
                             std::to_string(text.size()) + " bytes of a message");
    }
  }

 private:
  int fd_;
};

// One packet from the daemon: its bytes and the descriptors that rode on it (close-on-exec).
struct Packet {
  std::string data;
  std::vector<int> fds;
  bool eof = false;
};

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
  fds.clear();
}

// Receives one packet; a packet over kMaxPacketBytes or with its descriptors cut short is an
// error (the conversation ends), with whatever descriptors did arrive closed.
common::Result<Packet> Receive(int fd) {
  Packet packet;
  std::string buffer(kMaxPacketBytes, '\0');
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptors)];
  struct iovec iov = {buffer.data(), buffer.size()};
  struct msghdr msg;
  ssize_t got = -1;
  while (true) {
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (got >= 0 || errno != EINTR) break;
  }
  if (got < 0) return common::ErrnoError("cannot read the daemon's channel", errno);
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      packet.fds.push_back(received);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    CloseAll(packet.fds);
    return common::InvalidArgument("a packet carried more than " + std::to_string(kMaxDescriptors) +
                                   " descriptors");
  }
  if ((msg.msg_flags & MSG_TRUNC) != 0) {
    CloseAll(packet.fds);
    return common::InvalidArgument("a packet is longer than " + std::to_string(kMaxPacketBytes) +
                                   " bytes");
  }
  if (got == 0 && packet.fds.empty()) {
    packet.eof = true;
    return packet;
  }
  packet.data.assign(buffer.data(), static_cast<size_t>(got));
  return packet;
}

// A fork request, checked field by field (proto/README.md, "Daemon → server").
struct ForkRequest {
  json::value id;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  pid_t daemon_pid = 0;
};

common::Result<std::vector<std::string>> StringArray(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_array()) {
    return common::InvalidArgument(std::string("fork: \"") + key +
                                   "\" must be an array of strings");
  }
  std::vector<std::string> out;
  for (const json::value& item : v->as_array()) {
    if (!item.is_string()) {
      return common::InvalidArgument(std::string("fork: \"") + key + "\" holds a " +
                                     (item.is_null() ? "null" : "non-string") + " element");
    }
    const json::string& s = item.as_string();
    if (s.find('\0') != json::string::npos) {
      return common::InvalidArgument(std::string("fork: an element of \"") + key +
                                     "\" holds a NUL character");
    }
    out.emplace_back(s.data(), s.size());
  }
  return out;
}

common::Result<ForkRequest> ParseForkRequest(const json::object& o) {
  ForkRequest request;
  const json::value* id = o.if_contains("id");
  if (id == nullptr || !(id->is_int64() || id->is_uint64() || id->is_string())) {
    return common::InvalidArgument("fork: \"id\" must be an integer or a string");
  }
  request.id = *id;
  TRIALD_ASSIGN_OR_RETURN(request.argv, StringArray(o, "argv"));
  TRIALD_ASSIGN_OR_RETURN(request.env, StringArray(o, "env"));
  for (const std::string& entry : request.env) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return common::InvalidArgument("fork: \"env\" entry \"" + entry + "\" is not KEY=VALUE");
    }
  }
  const json::value* cwd = o.if_contains("cwd");
  if (cwd == nullptr || !cwd->is_string() || cwd->as_string().empty() ||
      cwd->as_string().find('\0') != json::string::npos) {
    return common::InvalidArgument("fork: \"cwd\" must be a non-empty path");
  }
  request.cwd = std::string(cwd->as_string());
  const json::value* daemon_pid = o.if_contains("daemon_pid");
  if (daemon_pid == nullptr || !daemon_pid->is_int64() || daemon_pid->as_int64() <= 0 ||
      daemon_pid->as_int64() > INT32_MAX) {
    return common::InvalidArgument("fork: \"daemon_pid\" must be a positive pid");
  }
  request.daemon_pid = static_cast<pid_t>(daemon_pid->as_int64());
  return request;
}

// ---- the safety check ---------------------------------------------------------------------

// True when the CUDA driver is loaded into this process and has been initialised. Never loads
// or initialises it: dlopen(RTLD_NOLOAD) finds the library only if something loaded it already,
// and cuCtxGetCurrent answers CUDA_ERROR_NOT_INITIALIZED before cuInit without side effects.
// (torch::cuda::is_available() would not do: on a CUDA build it counts the devices, which
// initialises the driver.)
bool CudaInitialised() {
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  using CtxGetCurrent = int (*)(void**);
  auto get_current = reinterpret_cast<CtxGetCurrent>(::dlsym(driver, "cuCtxGetCurrent"));
  void* context = nullptr;
  // A driver without the entry point cannot be asked; loaded counts as initialised then.
  const bool initialised =
      get_current == nullptr || get_current(&context) != kCudaErrorNotInitialized;
  ::dlclose(driver);
  return initialised;
}

int CountThreads() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const struct dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

std::string DescribeFd(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  char target[4096];
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n < 0) return "?";
  return std::string(target, static_cast<size_t>(n));
}

// ---- the thread pools and generators of a forked trial ------------------------------------

// A positive integer at the start of the variable's value (libgomp and OpenBLAS read
// "4,2" as 4), else 0.
int EnvThreads(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return end != value && n > 0 && n < 1 << 20 ? static_cast<int>(n) : 0;
}

// OpenBLAS's entry points, when it is loaded (Debian's LibTorch links it).
struct OpenBlas {
  int (*get_num_threads)() = nullptr;
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_procs)() = nullptr;
  bool loaded() const {
    return get_num_threads != nullptr && set_num_threads != nullptr && get_num_procs != nullptr;
  }
};

OpenBlas FindOpenBlas() {
  OpenBlas blas;
  blas.get_num_threads =
      reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  blas.set_num_threads =
      reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  blas.get_num_procs = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "openblas_get_num_procs"));
  return blas;
}

// The thread count OpenBLAS 0.3 takes when it loads with the current environment:
// OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS, else OMP_NUM_THREADS, else every processor it may
// run on; never more than those processors.
int OpenBlasThreadsFromEnv(const OpenBlas& blas) {
  int n = EnvThreads("OPENBLAS_NUM_THREADS");
  if (n == 0) n = EnvThreads("GOTO_NUM_THREADS");
  if (n == 0) n = EnvThreads("OMP_NUM_THREADS");
  const int procs = blas.get_num_procs();
  if (n == 0 || n > procs) n = procs;
  return n;
}

// What an exec'd trial-worker has at main() with the current (the trial's) environment: LibTorch
// sizes its intra-op pool from OMP_NUM_THREADS and MKL_NUM_THREADS (or the cores) on its first
// parallel operation, which at::init_num_threads() redoes now; OpenBLAS as above; LibTorch's CPU
// generator at its default seed, as a fresh process has it (the lm objective then seeds it from
// the trial's `seed`). No thread pool has run in the server, so none is inherited half-started.
void RestoreProcessState() {
  at::init_num_threads();
  const OpenBlas blas = FindOpenBlas();
  if (blas.loaded()) {
    const int want = OpenBlasThreadsFromEnv(blas);
    if (blas.get_num_threads() != want) blas.set_num_threads(want);
  }
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(c10::default_rng_seed_val);
}

// ---- one forked trial ---------------------------------------------------------------------

// Step 1: the trial channel at 3, stdout at 1, stderr at 2, /dev/null at 0, nothing else open.
bool PlaceDescriptors(const std::vector<int>& fds) {
  int high[3];
  for (int i = 0; i < 3; ++i) {
    high[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
    if (high[i] < 0) return false;
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return false;
  if (::dup2(high[0], 3) < 0 || ::dup2(high[1], 1) < 0 || ::dup2(high[2], 2) < 0 ||
      ::dup2(devnull, 0) < 0) {
    return false;
  }
  if (::close_range(4, ~0U, 0) == 0) return true;
  // Kernels before 5.9: close what /proc/self/fd lists.
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  std::vector<int> open;
  while (const struct dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd > 3 && fd != ::dirfd(dir)) open.push_back(fd);
  }
  ::closedir(dir);
  for (int fd : open) ::close(fd);
  return true;
}

// Step 2: default dispositions, nothing blocked.
void ResetSignals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::signal(sig, SIG_DFL);  // fails harmlessly for the C library's reserved signals
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Step 3: the first line on the trial channel, up to its newline; nullopt on EOF, an error or a
// line too long to be a go. Read a byte at a time so that nothing after the line is consumed.
std::optional<std::string> ReadGoLine() {
  std::string line;
  while (line.size() < kMaxGoLineBytes) {
    char c;
    const ssize_t n = ::read(3, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    if (c == '\n') return line;
    line.push_back(c);
  }
  return std::nullopt;
}

bool IsGo(const std::string& line) {
  json::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) return false;
  const json::object& o = v.as_object();
  const json::value* type = o.if_contains("type");
  return o.size() == 1 && type != nullptr && type->is_string() && type->as_string() == "go";
}

[[noreturn]] void Exit(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

// Writes `env` over this process's initial environment block, the one /proc/PID/environ shows
// (proto/README.md, "The trial's environment in /proc"), so that the trial and what it forks show
// the trial's environment there, not the server's: the trial's own variables first, the rest while
// they fit, NUL bytes to the block's end. libc's environment must no longer point into the block
// (the caller cleared it and set `env` anew). Does nothing when the block cannot be located.
void ShowEnvironment(const std::vector<std::string>& env) {
  const common::Result<common::EnvironBlock> where = common::ReadEnvironBlock(::getpid());
  if (!where.ok()) return;
  const size_t size = where->end - where->start;
  static constexpr std::string_view kTrialKeys[] = {
      "TRIALD_TRIAL_DIR=", "TRIALD_STUDY=", "TRIALD_TRIAL=", "TRIALD_NODE="};
  auto rank = [](const std::string& entry) {  // its place in kTrialKeys; the others after them
    size_t i = 0;
    while (i < std::size(kTrialKeys) &&
           entry.compare(0, kTrialKeys[i].size(), kTrialKeys[i]) != 0) {
      ++i;
    }
    return i;
  };
  std::vector<std::string> ordered = env;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  std::string block;
  for (const std::string& entry : ordered) {
    if (block.size() + entry.size() + 1 <= size) block.append(entry).push_back('\0');
  }
  block.resize(size, '\0');
  std::memcpy(reinterpret_cast<void*>(where->start), block.data(), size);
}

// T, from its setsid() on (proto/README.md, "One fork, step by step"). Never returns.
[[noreturn]] void RunForkedTrial(const ForkRequest& request, const std::vector<int>& fds,
                                 LmInputs& inputs, const std::string& config_text) {
  if (!PlaceDescriptors(fds)) ::_exit(1);
  ResetSignals();
  const std::optional<std::string> go = ReadGoLine();
  if (!go || !IsGo(*go)) ::_exit(0);  // the daemon has given up on this trial

  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != request.daemon_pid) {
    std::fprintf(stderr,
                 "trial-worker: this forked trial's parent is process %d, not the daemon (%d); "
                 "it was not re-parented to triald, so it does not run\n",
                 static_cast<int>(::getppid()), static_cast<int>(request.daemon_pid));
    Exit(1);
  }
  ::clearenv();
  for (const std::string& entry : request.env) {
    const size_t eq = entry.find('=');
    ::setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1);
  }
  ShowEnvironment(request.env);
  if (::chdir(request.cwd.c_str()) != 0) {
    const std::string message =
        "cannot enter the trial's working folder " + request.cwd + ": " + std::strerror(errno);
    std::fprintf(stderr, "trial-worker: %s\n", message.c_str());
    (void)Reporter(3).Error(message);
    Exit(1);
  }
  try {
    RestoreProcessState();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trial-worker: cannot restore LibTorch's thread pool and seed: %s\n",
                 e.what());
    (void)Reporter(3).Error(std::string("cannot restore LibTorch's state: ") + e.what());
    Exit(1);
  }

  auto parsed = ParseTrialCommandLine(request.argv);
  if (const int* code = std::get_if<int>(&parsed)) Exit(*code);
  const TrialCommand& command = std::get<TrialCommand>(parsed);
  if (command.fork_server) {
    std::fprintf(stderr, "trial-worker: a forked trial's argv holds --fork-server\n");
    Exit(1);
  }
  Exit(RunTrial(command, &inputs, config_text));
}

// ---- the server ---------------------------------------------------------------------------

class Server {
 public:
  // `clone`: how trials are forked, once (CloneParent) or, without one, twice.
  Server(Channel channel, std::string config_text, LmInputs inputs,
         std::optional<CloneParent> clone)
      : channel_(channel),
        config_text_(std::move(config_text)),
        inputs_(std::move(inputs)),
        clone_(clone) {}

  // Serves until stop, EOF, a malformed packet or a failed check; returns the exit code.
  int Serve() {
    while (true) {
      common::Result<Packet> packet = Receive(channel_.fd());
      if (!packet.ok()) return Malformed(packet.status().message());
      if (packet->eof) {
        Log("the daemon closed the channel after %s forked trials; exiting",
            std::to_string(forks_));
        return 0;
      }
      json::error_code ec;
      json::value message = json::parse(packet->data, ec);
      const json::value* type = nullptr;
      if (!ec && message.is_object()) type = message.as_object().if_contains("type");
      if (type == nullptr || !type->is_string()) {
        CloseAll(packet->fds);
        return Malformed("a packet is not a JSON object with a string \"type\": " +
                         Excerpt(packet->data));
      }
      if (type->as_string() == "stop") {
        CloseAll(packet->fds);
        Log("stop received after %s forked trials; exiting", std::to_string(forks_));
        return 0;
      }
      if (type->as_string() != "fork") {
        CloseAll(packet->fds);
        return Malformed("unknown message type \"" + std::string(type->as_string()) + "\"");
      }
      common::Result<ForkRequest> request = ParseForkRequest(message.as_object());
      if (!request.ok() || packet->fds.size() != 3) {
        const std::string why = !request.ok() ? request.status().message()
                                              : "fork: " + std::to_string(packet->fds.size()) +
                                                    " descriptors attached, not 3";
        CloseAll(packet->fds);
        return Malformed(why);
      }
      std::optional<int> code = Fork(*request, packet->fds);
      CloseAll(packet->fds);
      if (code) return *code;
    }
  }

 private:
  static std::string Excerpt(const std::string& data) {
    return data.size() <= 200 ? data : data.substr(0, 200) + "...";
  }

  int Malformed(const std::string& why) {
    Log("malformed message from the daemon, exiting: %s", why);
    return 2;
  }

  // One fork request; returns an exit code when the server must end, nullopt to go on.
  std::optional<int> Fork(const ForkRequest& request, const std::vector<int>& fds) {
    std::vector<int> allowed = fds;
    allowed.push_back(channel_.fd());
    const std::string problem = ForkSafetyProblem(allowed);
    if (!problem.empty()) {
      json::object unsafe{{"type", "unsafe"}, {"reason", problem}, {"id", request.id}};
      Log("no longer safe to fork, exiting: %s", problem);
      (void)channel_.Send(unsafe);
      return 0;
    }
    int pid_pipe[2];
    if (::pipe2(pid_pipe, O_CLOEXEC) != 0) return ForkFailed(request, errno);
    // Nothing buffered may be written twice, by the server and by the trial.
    std::fflush(stdout);
    std::fflush(stderr);
    const bool once = clone_ && clone_->RobustListEmpty();
    const pid_t c1 = once ? (*clone_)() : ::fork();
    if (c1 < 0) {
      const int err = errno;
      ::close(pid_pipe[0]);
      ::close(pid_pipe[1]);
      if (once && CloneParent::Unsupported(err)) {
        Log("clone(CLONE_PARENT) failed (%s): forking each trial twice from now on",
            std::strerror(err));
        clone_.reset();
        return Fork(request, fds);
      }
      return ForkFailed(request, err);
    }
    if (c1 == 0 && once) {
      // T itself, triald's child.
      ::close(pid_pipe[0]);
      StartTrial(request, fds, pid_pipe[1]);
    }
    if (c1 == 0) {
      // C1: fork T and leave at once, so that T is re-parented to the subreaper (triald).
      ::close(pid_pipe[0]);
      const pid_t t = ::fork();
      if (t < 0) {
        const int32_t failure = -errno;
        (void)!::write(pid_pipe[1], &failure, sizeof failure);
        ::_exit(1);
      }
      if (t > 0) ::_exit(0);
      StartTrial(request, fds, pid_pipe[1]);
    }
    ::close(pid_pipe[1]);
    int32_t reported = 0;
    size_t have = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kPidWaitMs);
    while (have < sizeof reported) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      struct pollfd p = {pid_pipe[0], POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;
      const ssize_t n =
          ::read(pid_pipe[0], reinterpret_cast<char*>(&reported) + have, sizeof reported - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      have += static_cast<size_t>(n);
    }
    ::close(pid_pipe[0]);
    while (!once && ::waitpid(c1, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (have < sizeof reported) {
      return SendOrExit(json::object{{"type", "fork_failed"},
                                     {"id", request.id},
                                     {"message", "the forked trial did not report its pid within " +
                                                     std::to_string(kPidWaitMs / 1000) + " s"}});
    }
    if (reported < 0) return ForkFailed(request, -reported);
    ++forks_;
    return SendOrExit(json::object{{"type", "forked"}, {"id", request.id}, {"pid", reported}});
  }

  // T, just forked: dumpable again, as an exec'd trial is (the server is not: see below), its own
  // session, its pid reported on `pid_pipe`, then the trial. Never returns.
  [[noreturn]] void StartTrial(const ForkRequest& request, const std::vector<int>& fds,
                               int pid_pipe) {
    ::prctl(PR_SET_DUMPABLE, 1);
    ::setsid();
    const int32_t self = static_cast<int32_t>(::getpid());
    (void)!::write(pid_pipe, &self, sizeof self);
    ::close(pid_pipe);
    RunForkedTrial(request, fds, inputs_, config_text_);
  }

  std::optional<int> ForkFailed(const ForkRequest& request, int err) {
    return SendOrExit(
        json::object{{"type", "fork_failed"}, {"id", request.id}, {"message", std::strerror(err)}});
  }

  std::optional<int> SendOrExit(const json::object& message) {
    common::Status sent = channel_.Send(message);
    if (sent.ok()) return std::nullopt;
    Log("%s; exiting", sent.message());
    return 1;
  }

  Channel channel_;
  std::string config_text_;
  LmInputs inputs_;
  std::optional<CloneParent> clone_;
  int64_t forks_ = 0;
};

// TRIALD_FORK_SERVER_FD: an open SOCK_SEQPACKET socket.
common::Result<int> ChannelFromEnv() {
  const char* value = std::getenv("TRIALD_FORK_SERVER_FD");
  if (value == nullptr) {
    return common::FailedPrecondition(
        "TRIALD_FORK_SERVER_FD is not set: --fork-server is started by triald, with its channel "
        "to the daemon at that descriptor");
  }
  char* end = nullptr;
  errno = 0;
  const long fd = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno != 0 || fd < 0 || fd > INT32_MAX) {
    return common::InvalidArgument("TRIALD_FORK_SERVER_FD=\"" + std::string(value) +
                                   "\" is not a descriptor number");
  }
  int type = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_SEQPACKET) {
    return common::InvalidArgument("TRIALD_FORK_SERVER_FD=" + std::string(value) +
                                   " is not an open SOCK_SEQPACKET socket");
  }
  return static_cast<int>(fd);
}

// Ends the set-up with an error: on stderr (the server's log) and, when the channel is usable, to
// the daemon. Returns the exit code 1.
int SetupFailed(const std::optional<Channel>& channel, const std::string& message) {
  Log("%s", message);
  if (channel) (void)channel->Send(json::object{{"type", "error"}, {"message", message}});
  return 1;
}

}  // namespace

std::string ForkSafetyProblem(const std::vector<int>& allowed) {
  const int threads = CountThreads();
  if (threads != 1) {
    return threads < 0 ? "/proc/self/task cannot be read" : std::to_string(threads) + " threads";
  }
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return "/proc/self/fd cannot be read";
  std::string problem;
  while (const struct dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd <= 2 || fd == ::dirfd(dir)) continue;
    if (std::find(allowed.begin(), allowed.end(), fd) != allowed.end()) continue;
    problem = "descriptor " + std::to_string(fd) + " (" + DescribeFd(fd) + ") is open";
    break;
  }
  ::closedir(dir);
  if (!problem.empty()) return problem;
  if (CudaInitialised()) return "CUDA is initialised";
  return "";
}

int RunForkServer(const TrialCommand& command, int argc, char** argv) {
  (void)argc;
  const auto began = std::chrono::steady_clock::now();
  // The server's own dispositions: SIGTERM ends it (main() installed the trial's handler), a
  // vanished daemon fails a send instead of killing it. Each trial resets all of them.
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGPIPE, SIG_IGN);

  std::optional<Channel> channel;
  common::Result<int> fd = ChannelFromEnv();
  if (!fd.ok()) return SetupFailed(channel, fd.status().message());
  channel.emplace(*fd);

  // OpenBLAS started its threads before main(); run again with one, unless the user chose.
  const OpenBlas blas = FindOpenBlas();
  if (blas.loaded() && blas.get_num_threads() > 1 &&
      std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    const int flags = ::fcntl(*fd, F_GETFD);
    if (flags >= 0) ::fcntl(*fd, F_SETFD, flags & ~FD_CLOEXEC);
    std::fflush(stdout);
    std::fflush(stderr);
    ::execv("/proc/self/exe", argv);
    return SetupFailed(channel, std::string("cannot execute /proc/self/exe again with "
                                            "OPENBLAS_NUM_THREADS=1: ") +
                                    std::strerror(errno));
  }

  // The padding of the environment block is the trials' (ShowEnvironment), not a variable; it
  // stays in the block, and went with the environment into the exec above.
  ::unsetenv("TRIALD_FORK_ENV_SPACE");

  if (command.objective != "lm") {
    return SetupFailed(channel,
                       "--fork-server serves objective lm only, not \"" + command.objective + "\"");
  }
  if (command.config.empty()) {
    return SetupFailed(channel, "--fork-server --objective lm needs --config '<JSON>'");
  }
  common::Result<config::LmObjectiveConfig> config = config::LmObjectiveFromJson(command.config);
  if (!config.ok()) return SetupFailed(channel, "--config: " + config.status().message());

  // LibTorch's lazy set-up (the dispatcher, the CPU allocator, the default generator) done once:
  // one element, so no parallel region and no thread starts; CPU only, so CUDA stays untouched.
  const auto torch_began = std::chrono::steady_clock::now();
  try {
    const double two = (torch::ones({1}) + 1).item<double>();
    if (two != 2) return SetupFailed(channel, "LibTorch computed 1 + 1 = " + std::to_string(two));
  } catch (const std::exception& e) {
    return SetupFailed(channel, std::string("cannot initialise LibTorch: ") + e.what());
  }
  const double torch_seconds = SecondsSince(torch_began);

  const auto inputs_began = std::chrono::steady_clock::now();
  common::Result<LmInputs> inputs = LoadLmInputs(*config);
  if (!inputs.ok()) return SetupFailed(channel, inputs.status().message());
  const double inputs_seconds = SecondsSince(inputs_began);

  const std::string problem = ForkSafetyProblem({*fd});
  if (!problem.empty()) {
    Log("not safe to fork: %s", problem);
    (void)channel->Send(json::object{{"type", "unsafe"}, {"reason", problem}});
    return 0;
  }
  char summary[512];
  std::snprintf(summary, sizeof summary,
                "ready in %.3f s (LibTorch %.3f s; config.json, %s mapped, tokenizer, %zu train "
                "and %zu eval tokens %.3f s)",
                SecondsSince(began), torch_seconds, inputs->weights->path().c_str(),
                inputs->train.size(), inputs->eval.size(), inputs_seconds);
  Log("%s", summary);
  // Not dumpable: a process of the same user (one of this study's trials, say) cannot ptrace the
  // server or write its memory through /proc/PID/mem, and so cannot plant code that every later
  // trial would inherit. Each trial makes itself dumpable again.
  if (::prctl(PR_SET_DUMPABLE, 0) != 0) {
    Log("prctl(PR_SET_DUMPABLE, 0) failed: %s", std::strerror(errno));
  }
  // Cheaper forks: the server's anonymous memory in huge pages, before the first fork.
  const auto collapse_began = std::chrono::steady_clock::now();
  if (const size_t huge = CollapseToHugePages(); huge > 0) {
    Log("%s", std::to_string(huge >> 20) + " MiB of memory in huge pages (MADV_COLLAPSE, " +
                  std::to_string(static_cast<int>(SecondsSince(collapse_began) * 1000)) + " ms)");
  }
  std::optional<CloneParent> clone;
  if (!command.fork_twice) {
    std::string why;
    clone = CloneParent::Probe(&why);
    if (!clone) Log("forking each trial twice: %s", why);
  }
  common::Status sent = channel->Send(json::object{{"type", "ready"},
                                                   {"pid", static_cast<int64_t>(::getpid())},
                                                   {"preloaded", json::array{"libtorch"}},
                                                   {"objective_loaded", true},
                                                   {"forks", clone ? 1 : 2}});
  if (!sent.ok()) return SetupFailed(std::nullopt, sent.message());
  Server server(*channel, command.config, std::move(*inputs), clone);
  return server.Serve();
}

}  // namespace triald::worker
