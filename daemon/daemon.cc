#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "daemon/control_server.h"
#include "daemon/devices/gpu_pool.h"
#include "daemon/devices/nvml_probe.h"
#include "daemon/launcher/cgroup.h"
#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "daemon/objective_command.h"
#include "daemon/scheduler.h"
#include "daemon/storage/postgres_storage.h"
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

  char host[256] = {};
  const std::string host_name =
      ::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0' ? host : "localhost";
  const std::string node = opts.node_name.empty() ? host_name : opts.node_name;
  // Where this daemon runs: the same daemon restarted has the same instance (NodeRecord).
  const std::string instance = host_name + ":" + state_dir;
  const bool postgres = opts.storage_url.rfind("postgresql://", 0) == 0 ||
                        opts.storage_url.rfind("postgres://", 0) == 0;
  if (!opts.storage_url.empty() && !postgres) {
    log->critical(
        "--storage \"{}\": expected a postgresql://USER@HOST:PORT/DB URL (or none, "
        "for SQLite in the state directory)",
        storage::MaskPostgresUrl(opts.storage_url));
    return 1;
  }
  storage::SqliteOptions sqlite_options;
  sqlite_options.path = state_dir + "/triald.db";
  sqlite_options.node = node;
  sqlite_options.instance = instance;
  storage::PostgresOptions postgres_options;
  postgres_options.url = opts.storage_url;
  postgres_options.node = node;
  postgres_options.instance = instance;
  postgres_options.idle_in_transaction_timeout_s = opts.node_timeout_s / 2;
  postgres_options.lock_timeout_s = std::min(2.0, opts.node_timeout_s / 4);
  auto storage = postgres ? storage::OpenPostgresStorage(postgres_options)
                          : storage::OpenSqliteStorage(sqlite_options);
  if (!storage.ok()) {
    log->critical("{}", storage.status().message());
    return 1;
  }
  log->info("storage: {}; node {}",
            postgres ? "PostgreSQL " + storage::MaskPostgresUrl(opts.storage_url) +
                           " (shared with the other nodes on it)"
                     : "SQLite " + state_dir + "/triald.db",
            node);

  asio::io_context io(1);
  launcher::Reaper reaper(io, log);
  Status st = reaper.Start();
  if (!st.ok()) {
    log->critical("{}", st.message());
    return 1;
  }
  // Trial isolation: a cgroup per trial where possible, else process groups. The mode is logged
  // because it decides what a trial can escape (see README, "How it works").
  std::unique_ptr<launcher::CgroupTree> cgroups;
  if (opts.use_cgroups) {
    auto tree = launcher::CgroupTree::Open({state_dir, log});
    if (tree.ok()) {
      cgroups = std::move(tree).value();
      int leftovers = cgroups->CleanLeftovers();
      if (leftovers > 0) {
        log->warn("removed {} trial cgroup(s) left by the previous triald", leftovers);
      }
      log->info("trial isolation: {}", cgroups->Describe());
    } else {
      log->info("trial isolation: process groups (no cgroups: {})", tree.status().message());
    }
  } else {
    log->info("trial isolation: process groups (--no-cgroups)");
  }
  launcher::ProcessLauncher process_launcher({&io, &reaper, log, cgroups.get()});
  common::SystemClock clock;

  // GPUs: NVML's inventory where the driver is there, else the configured list, unchecked.
  std::unique_ptr<devices::GpuProbe> nvml;
  std::vector<int> gpus = opts.gpus.value_or(std::vector<int>{});
  {
    const char* env_lib = std::getenv("TRIALD_NVML_LIBRARY");
    const bool explicit_lib = !opts.nvml_library.empty() || (env_lib && *env_lib);
    const std::string lib = !opts.nvml_library.empty() ? opts.nvml_library
                            : (env_lib && *env_lib)    ? std::string(env_lib)
                                                       : devices::kDefaultNvmlLibrary;
    auto probe = devices::OpenNvml(lib);
    common::Result<std::vector<devices::GpuInfo>> found =
        probe.ok() ? (*probe)->Gpus()
                   : common::Result<std::vector<devices::GpuInfo>>(probe.status());
    if (found.ok()) {
      nvml = std::move(probe).value();
      for (const devices::GpuInfo& g : *found) {
        log->info("GPU {}: {} {} ({} MiB)", g.index, g.name, g.uuid, g.memory_total >> 20);
      }
      if (!opts.gpus) {
        for (const devices::GpuInfo& g : *found) gpus.push_back(g.index);
      }
      for (int g : gpus) {
        if (g >= static_cast<int>(found->size())) {
          log->critical("GPU {} is configured but {} reports {} GPU(s)", g, nvml->Describe(),
                        found->size());
          return 1;
        }
      }
    } else if (explicit_lib || probe.status().code() != common::Code::kNotFound) {
      log->critical("NVML: {}", found.status().message());
      return 1;
    } else if (!gpus.empty()) {
      log->warn(
          "no NVML ({}): using the configured GPUs unchecked; their slots are given out "
          "again as soon as a trial's processes are gone",
          probe.status().message());
    }
  }
  devices::GpuPoolOptions gpo;
  gpo.gpus = gpus;
  gpo.slots_per_gpu = opts.slots_per_gpu;
  gpo.probe = nvml.get();
  gpo.release_timeout_s = opts.gpu_release_timeout_s;
  devices::GpuPool gpu_pool(gpo);
  if (!gpus.empty()) {
    log->info("GPU slots: GPUs {} x {} slot(s) each{}", devices::GpuPool::CudaVisibleDevices([&] {
                std::vector<devices::GpuSlot> v;
                for (int g : gpus) v.push_back({g, 0});
                return v;
              }()),
              opts.slots_per_gpu,
              nvml ? ", released after " + nvml->Describe() + " shows them free" : "");
  }

  // systemd: STATUS= with the running and queued counts whenever they change; at most one line
  // per 500 ms (a change within that time is sent when it ends). sd_notify is a no-op without
  // NOTIFY_SOCKET.
  asio::steady_timer status_timer(io);
  bool status_pending = false;
  std::string last_status;
  std::chrono::steady_clock::time_point last_status_at{};
  Scheduler* scheduler_ptr = nullptr;
  bool ready = false;  // no STATUS= before READY=1
  auto status_line = [&]() {
    return "STATUS=" + std::to_string(scheduler_ptr->running_count()) + " running, " +
           std::to_string(scheduler_ptr->queued_count()) + " queued, " +
           std::to_string(scheduler_ptr->active_study_count()) + " active studies";
  };
  auto send_status = [&]() {
    std::string line = status_line();
    if (line == last_status) return;
    sd_notify(0, line.c_str());
    last_status = line;
    last_status_at = std::chrono::steady_clock::now();
  };

  SchedulerOptions so;
  so.gpus = &gpu_pool;
  so.on_change = [&]() {
    if (status_pending || !ready) return;
    const auto next = last_status_at + std::chrono::milliseconds(500);
    if (std::chrono::steady_clock::now() >= next) {
      send_status();
      return;
    }
    status_pending = true;
    status_timer.expires_at(next);
    status_timer.async_wait([&](const boost::system::error_code& ec) {
      status_pending = false;
      if (!ec) send_status();
    });
  };
  so.storage = storage->get();
  so.node_timeout_s = opts.node_timeout_s;
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
  scheduler_ptr = &scheduler;
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
  co.access.daemon_uid = ::geteuid();
  co.access.allowed_gid = ::getegid();
  co.access.read_open = opts.socket_read_open;
  co.request_timeout_s = opts.request_timeout_s;
  co.node_timeout_s = opts.node_timeout_s;
  if (!opts.socket_group.empty()) {
    common::Result<gid_t> gid = ResolveGroup(opts.socket_group);
    if (!gid.ok()) {
      log->critical("--socket-group: {}", gid.status().message());
      return 1;
    }
    co.access.allowed_gid = *gid;
  }
  ControlServer server(co);
  // Socket activation: systemd passes the listening socket (triald.socket) as fd 3.
  const int passed = sd_listen_fds(/*unset_environment=*/1);
  if (passed > 1) {
    log->critical("systemd passed {} sockets; expected one (the control socket)", passed);
    return 1;
  }
  if (passed == 1) {
    const int fd = SD_LISTEN_FDS_START;
    if (sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) <= 0) {
      log->critical("the socket systemd passed (fd {}) is not a listening unix stream socket", fd);
      return 1;
    }
    log->info("control socket passed by systemd (socket activation)");
    st = server.Start(common::UniqueFd(fd));
  } else {
    st = server.Start();
  }
  if (!st.ok()) {
    log->critical("{}", st.message());
    return 1;
  }
  log->info("control socket {}: every verb for root, uid {} and group {}; read verbs for {}",
            co.socket_path, co.access.daemon_uid, GroupLabel(co.access.allowed_gid),
            co.access.read_open ? "anyone" : "no one else");
  (void)(*storage)->AppendEvent({}, {}, "daemon_started", "pid " + std::to_string(::getpid()),
                                clock.WallSeconds());
  log->info("triald ready: state {}, socket {}, {} worker slot(s)", state_dir, co.socket_path,
            so.max_workers);
  // Recovery is done and the socket listens: only now is triald ready.
  last_status = status_line();
  last_status_at = std::chrono::steady_clock::now();
  sd_notify(0, ("READY=1\n" + last_status).c_str());
  ready = true;
  scheduler.Pump();

  // systemd's watchdog: WATCHDOG=1 from the event loop at half the interval, so a stuck loop
  // gets the daemon restarted.
  uint64_t watchdog_usec = 0;
  asio::steady_timer watchdog(io);
  std::function<void()> pet_watchdog = [&]() {
    sd_notify(0, "WATCHDOG=1");
    watchdog.expires_after(std::chrono::microseconds(watchdog_usec / 2));
    watchdog.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) pet_watchdog();
    });
  };
  if (sd_watchdog_enabled(/*unset_environment=*/0, &watchdog_usec) > 0 && watchdog_usec > 0) {
    log->info("systemd watchdog: every {} ms", watchdog_usec / 2000);
    pet_watchdog();
  }

  // GPU slots drain and running GPU trials' processes are tracked by polling the driver.
  asio::steady_timer gpu_timer(io);
  std::function<void()> poll_gpus = [&]() {
    gpu_timer.expires_after(std::chrono::milliseconds(250));
    gpu_timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (scheduler.gpu_work()) scheduler.PollDevices();
      poll_gpus();
    });
  };
  if (!gpus.empty()) poll_gpus();

  // Shared storage: this node's heartbeat, and what the other nodes did (daemon/scheduler.h).
  asio::steady_timer shared_timer(io);
  std::function<void()> shared_tick = [&]() {
    shared_timer.expires_after(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(opts.heartbeat_interval_s)));
    shared_timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      scheduler.SharedTick();
      shared_tick();
    });
  };
  if ((*storage)->shared()) shared_tick();

  asio::signal_set stop_signals(io, SIGTERM, SIGINT);
  asio::steady_timer deadline(io);
  bool clean = true;
  stop_signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log->info("{} received: stopping {} running trial(s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
              scheduler.running_count());
    sd_notify(0, ("STOPPING=1\nSTATUS=stopping: " + std::to_string(scheduler.running_count()) +
                  " running trial(s)")
                     .c_str());
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
