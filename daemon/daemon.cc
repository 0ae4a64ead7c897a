#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "daemon/control_server.h"
#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "daemon/objective.h"
#include "daemon/scheduler.h"
#include "daemon/storage/sqlite_storage.h"

extern char** environ;

namespace triald::daemon {
namespace asio = boost::asio;
using common::Status;

namespace {

// Variables a worker inherits from the daemon; everything else it gets is explicit.
const char* const kInheritedEnv[] = {
    "PATH",   "HOME",     "USER", "LOGNAME", "SHELL",           "LANG",       "LANGUAGE",
    "LC_ALL", "LC_CTYPE", "TZ",   "TMPDIR",  "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_HOME"};

std::vector<std::string> BaseEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    for (const char* k : kInheritedEnv) {
      if (key == k) env.push_back(kv);
    }
  }
  return env;
}

// Makes sure descriptors 0, 1 and 2 are open, so that no pipe or database file the daemon
// opens later lands on them (a worker would then inherit it as stdin/stdout), and marks every
// descriptor inherited from whoever started the daemon close-on-exec, so none reaches a worker.
void SanitizeDescriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1) {
      int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) ::close(n);
    }
  }
  for (int fd : common::ListOpenFds()) {
    if (fd > 2) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

}  // namespace

int RunDaemon(const DaemonOptions& opts) {
  common::Logger log = opts.logger ? opts.logger : common::MakeNullLogger();
  SanitizeDescriptors();
  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the daemon

  std::error_code fs_ec;
  std::filesystem::create_directories(opts.state_dir, fs_ec);
  if (fs_ec) {
    log->critical("cannot create state directory {}: {}", opts.state_dir, fs_ec.message());
    return 1;
  }
  const std::string state_dir = std::filesystem::absolute(opts.state_dir).lexically_normal();
  const std::string lock_path = state_dir + "/triald.lock";
  common::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640));
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    log->critical("state directory {} is in use by another triald (lock {} held)", state_dir,
                  lock_path);
    return 1;
  }

  auto storage = storage::OpenSqliteStorage({state_dir + "/triald.db"});
  if (!storage.ok()) {
    log->critical("{}", storage.status().message());
    return 1;
  }

  asio::io_context io(1);
  launcher::Reaper reaper(io, log);
  Status st = reaper.Start();
  if (!st.ok()) {
    log->critical("{}", st.message());
    return 1;
  }
  launcher::ProcessLauncher process_launcher({&io, &reaper, log});
  common::SystemClock clock;

  SchedulerOptions so;
  so.storage = storage->get();
  so.launcher = &process_launcher;
  so.clock = &clock;
  so.logger = log;
  so.state_dir = state_dir;
  so.max_workers = opts.max_workers > 0
                       ? opts.max_workers
                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  so.base_env = BaseEnvironment();
  so.trial_worker = DefaultTrialWorkerPath();
  so.seed_source = []() {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  };
  Scheduler scheduler(so);
  st = scheduler.Recover();
  if (!st.ok()) {
    log->critical("recovery failed: {}", st.message());
    return 1;
  }

  ControlServerOptions co;
  co.io = &io;
  co.scheduler = &scheduler;
  co.storage = storage->get();
  co.logger = log;
  co.socket_path = opts.socket_path.empty() ? state_dir + "/triald.sock" : opts.socket_path;
  co.state_dir = state_dir;
  ControlServer server(co);
  st = server.Start();
  if (!st.ok()) {
    log->critical("{}", st.message());
    return 1;
  }
  (void)(*storage)->AppendEvent({}, {}, "daemon_started", "pid " + std::to_string(::getpid()),
                                clock.WallSeconds());
  log->info("triald ready: state {}, socket {}, {} worker slot(s)", state_dir, co.socket_path,
            so.max_workers);
  sd_notify(0, "READY=1");
  scheduler.Pump();

  asio::signal_set stop_signals(io, SIGTERM, SIGINT);
  asio::steady_timer deadline(io);
  bool clean = true;
  stop_signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log->info("{} received: stopping {} running trial(s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
              scheduler.running_count());
    sd_notify(0, "STOPPING=1");
    server.Stop();
    deadline.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(opts.shutdown_timeout_s)));
    deadline.async_wait([&](const boost::system::error_code& e) {
      if (e) return;
      log->error("trials still running {} s after shutdown began; exiting anyway",
                 opts.shutdown_timeout_s);
      clean = false;
      io.stop();
    });
    scheduler.BeginShutdown([&]() {
      deadline.cancel();
      io.stop();
    });
  });

  io.run();
  reaper.ReapNow();
  (void)(*storage)->AppendEvent({}, {}, "daemon_stopped", clean ? "clean" : "timed out",
                                clock.WallSeconds());
  log->info("triald stopped");
  return 0;
}

}  // namespace triald::daemon
