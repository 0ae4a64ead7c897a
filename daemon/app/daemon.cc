#include "daemon/app/daemon.h"

#include <fcntl.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "daemon/app/descriptor_limit.h"
#include "daemon/app/state_dir_modes.h"
#include "daemon/control/ping_board.h"
#include "daemon/control/server.h"
#include "daemon/devices/gpu_pool.h"
#include "daemon/devices/nvml_probe.h"
#include "daemon/http/start.h"
#include "daemon/launcher/cgroup.h"
#include "daemon/launcher/client_launcher.h"
#include "daemon/launcher/process_launcher.h"
#include "daemon/launcher/reaper.h"
#include "daemon/objective/objective_command.h"
#include "daemon/scheduler.h"
#include "daemon/scheduler/shared_coordinator.h"
#include "daemon/slurm/slurm_cluster.h"
#include "daemon/slurm/slurm_launcher.h"
#include "daemon/storage/postgres_storage.h"
#include "daemon/storage/sqlite_storage.h"

namespace triald::daemon {
namespace asio = boost::asio;
using common::Status;

namespace {

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

// Runs `tick` on the event loop every `interval`, the first time one interval after Start(),
// until the loop stops or the timer is destroyed (which cancels the pending wait). The next
// interval is counted from the end of a tick, so a slow tick delays, never stacks, the next.
// Event-loop thread only.
class PeriodicTimer {
 public:
  PeriodicTimer(asio::io_context& io, std::chrono::steady_clock::duration interval,
                std::function<void()> tick)
      : timer_(io), interval_(interval), tick_(std::move(tick)) {}

  void Start() {
    timer_.expires_after(interval_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      tick_();
      Start();
    });
  }

 private:
  asio::steady_timer timer_;
  std::chrono::steady_clock::duration interval_;
  std::function<void()> tick_;
};

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

// The state directory, created if needed, as an absolute path, with its lock held: one daemon
// per directory. The lock is released when `lock` closes (at exit).
struct StateDir {
  std::string path;
  common::UniqueFd lock;
};

common::Result<StateDir> LockStateDir(const std::string& dir) {
  std::error_code fs_ec;
  std::filesystem::create_directories(dir, fs_ec);
  if (fs_ec) {
    return common::IoError("cannot create state directory " + dir + ": " + fs_ec.message());
  }
  StateDir out;
  out.path = std::filesystem::absolute(dir).lexically_normal();
  const std::string lock_path = out.path + "/triald.lock";
  out.lock = common::UniqueFd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640));
  // A POSIX record lock, owned by this process's descriptor table: it ends with the daemon. (A
  // flock() lock belongs to the open file, which a child forked or vforked at the moment the
  // daemon is SIGKILLed still holds until it executes or exits: the next daemon could be
  // refused for that long.) This is the only descriptor of the file the daemon opens, so no
  // close elsewhere drops the lock.
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (!out.lock.valid() || ::fcntl(out.lock.get(), F_SETLK, &whole) != 0) {
    return common::FailedPrecondition("state directory " + out.path +
                                      " is in use by another triald (lock " + lock_path + " held)");
  }
  return out;
}

// Opens the studies' storage: SQLite in the state directory, or the PostgreSQL database of
// --storage shared with other nodes. Errors name the URL with its password masked.
// `purpose`: empty for the event loop's own connection; else what another connection is for
// (the lazy writer's, daemon/scheduler/lazy_writer.h; the reads off the loop, storage_reads.h).
// Such a connection shares the loop's (`first`'s) watchdog.
common::Result<std::unique_ptr<storage::Storage>> OpenStorage(
    const DaemonOptions& opts, const std::string& state_dir, const common::Logger& log,
    const std::string& purpose = "", const storage::Storage* first = nullptr) {
  char host[256] = {};
  const std::string host_name =
      ::gethostname(host, sizeof host - 1) == 0 && host[0] != '\0' ? host : "localhost";
  const std::string node = opts.node_name.empty() ? host_name : opts.node_name;
  // Where this daemon runs: the same daemon restarted has the same instance (NodeRecord).
  const std::string instance = host_name + ":" + state_dir;
  const bool postgres = opts.storage_url.rfind("postgresql://", 0) == 0 ||
                        opts.storage_url.rfind("postgres://", 0) == 0;
  if (!opts.storage_url.empty() && !postgres) {
    return common::InvalidArgument("--storage \"" + storage::MaskPostgresUrl(opts.storage_url) +
                                   "\": expected a postgresql://USER@HOST:PORT/DB URL (or none, "
                                   "for SQLite in the state directory)");
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
  // A database that stops answering fails a call within a third of the node timeout (and a
  // reconnect within the same), so the event loop keeps beating well inside it.
  postgres_options.call_timeout_s = opts.node_timeout_s / 3;
  postgres_options.unresponsive_after_s = std::min(1.0, postgres_options.call_timeout_s / 2);
  if (first != nullptr) postgres_options.watchdog = storage::PostgresWatchdogOf(*first);
  postgres_options.connect_timeout_s =
      std::max(2, static_cast<int>(std::lround(opts.node_timeout_s / 3)));
  auto storage = postgres ? storage::OpenPostgresStorage(postgres_options)
                          : storage::OpenSqliteStorage(sqlite_options);
  if (!storage.ok()) return storage.status();
  if (!purpose.empty()) {
    log->debug("storage: a connection of its own for {}", purpose);
    return storage;
  }
  log->info("storage: {}; node {}",
            postgres ? "PostgreSQL " + storage::MaskPostgresUrl(opts.storage_url) +
                           " (shared with the other nodes on it)"
                     : "SQLite " + state_dir + "/triald.db",
            node);
  return storage;
}

// Trial isolation: a cgroup per trial where possible, else process groups (nullptr). The mode
// is logged because it decides what a trial can escape (see daemon/README.md, "Cgroups").
std::unique_ptr<launcher::CgroupTree> OpenCgroups(const DaemonOptions& opts,
                                                  const std::string& state_dir,
                                                  const common::Logger& log) {
  if (!opts.use_cgroups) {
    log->info("trial isolation: process groups (--no-cgroups)");
    return nullptr;
  }
  launcher::CgroupTree::Options cgroup_options{state_dir, log};
  cgroup_options.resource_accounting = opts.resource_accounting;
  auto tree = launcher::CgroupTree::Open(cgroup_options);
  if (!tree.ok()) {
    log->info("trial isolation: process groups (no cgroups: {})", tree.status().message());
    return nullptr;
  }
  std::unique_ptr<launcher::CgroupTree> cgroups = std::move(tree).value();
  int leftovers = cgroups->CleanLeftovers();
  if (leftovers > 0) {
    log->warn("removed {} trial cgroup(s) left by the previous triald", leftovers);
  }
  log->info("trial isolation: {}", cgroups->Describe());
  return cgroups;
}

// The GPUs given to trials, and NVML when the driver is there (nullptr otherwise).
struct Gpus {
  std::unique_ptr<devices::GpuProbe> nvml;
  std::vector<int> indices;
};

// NVML's inventory where the driver is there, else the configured list, unchecked. A library
// named explicitly must load; a configured GPU NVML does not report is an error.
common::Result<Gpus> FindGpus(const DaemonOptions& opts, const common::Logger& log) {
  Gpus out;
  out.indices = opts.gpus.value_or(std::vector<int>{});
  const char* env_lib = std::getenv("TRIALD_NVML_LIBRARY");
  const bool explicit_lib = !opts.nvml_library.empty() || (env_lib && *env_lib);
  const std::string lib = !opts.nvml_library.empty() ? opts.nvml_library
                          : (env_lib && *env_lib)    ? std::string(env_lib)
                                                     : devices::kDefaultNvmlLibrary;
  auto probe = devices::OpenNvml(lib);
  common::Result<std::vector<devices::GpuInfo>> found =
      probe.ok() ? (*probe)->Gpus() : common::Result<std::vector<devices::GpuInfo>>(probe.status());
  if (found.ok()) {
    out.nvml = std::move(probe).value();
    for (const devices::GpuInfo& g : *found) {
      log->info("GPU {}: {} {} ({} MiB)", g.index, g.name, g.uuid, g.memory_total >> 20);
    }
    if (!opts.gpus) {
      for (const devices::GpuInfo& g : *found) out.indices.push_back(g.index);
    }
    for (int g : out.indices) {
      if (g >= static_cast<int>(found->size())) {
        return common::FailedPrecondition("GPU " + std::to_string(g) + " is configured but " +
                                          out.nvml->Describe() + " reports " +
                                          std::to_string(found->size()) + " GPU(s)");
      }
    }
  } else if (explicit_lib || probe.status().code() != common::Code::kNotFound) {
    return common::Status(found.status().code(), "NVML: " + found.status().message());
  } else if (!out.indices.empty()) {
    log->warn(
        "no NVML ({}): using the configured GPUs unchecked; their slots are given out "
        "again as soon as a trial's processes are gone",
        probe.status().message());
  }
  return out;
}

// What systemd hears from the daemon (sd_notify; a no-op without NOTIFY_SOCKET): READY=1 once
// recovery is done and the socket listens; STATUS= with the running and queued counts whenever
// they change, at most one line per 500 ms (a change within that time is sent when it ends);
// STOPPING=1 on shutdown; WATCHDOG=1 from the event loop at half the watchdog interval, so a
// stuck loop gets the daemon restarted. Event-loop thread only.
class SystemdNotifier {
 public:
  SystemdNotifier(asio::io_context& io, common::Logger log)
      : io_(io), log_(std::move(log)), status_timer_(io) {}

  // The scheduler's counts changed.
  void OnChange() {
    if (status_pending_ || scheduler_ == nullptr) return;  // no STATUS= before READY=1
    const auto next = last_status_at_ + std::chrono::milliseconds(500);
    if (std::chrono::steady_clock::now() >= next) {
      SendStatus();
      return;
    }
    status_pending_ = true;
    status_timer_.expires_at(next);
    status_timer_.async_wait([this](const boost::system::error_code& ec) {
      status_pending_ = false;
      if (!ec) SendStatus();
    });
  }

  // READY=1 with the first STATUS=; from now on changes of `scheduler`'s counts are sent.
  void Ready(Scheduler* scheduler) {
    scheduler_ = scheduler;
    last_status_ = StatusLine();
    last_status_at_ = std::chrono::steady_clock::now();
    sd_notify(0, ("READY=1\n" + last_status_).c_str());
  }

  void Stopping(int running) {
    sd_notify(
        0,
        ("STOPPING=1\nSTATUS=stopping: " + std::to_string(running) + " running trial(s)").c_str());
  }

  // Starts petting systemd's watchdog when the unit enables one.
  void StartWatchdog() {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) return;
    log_->info("systemd watchdog: every {} ms", usec / 2000);
    sd_notify(0, "WATCHDOG=1");
    watchdog_.emplace(io_, std::chrono::microseconds(usec / 2), [] { sd_notify(0, "WATCHDOG=1"); });
    watchdog_->Start();
  }

 private:
  std::string StatusLine() const {
    return "STATUS=" + std::to_string(scheduler_->running_count()) + " running, " +
           std::to_string(scheduler_->queued_count()) + " queued, " +
           std::to_string(scheduler_->active_study_count()) + " active studies";
  }

  void SendStatus() {
    std::string line = StatusLine();
    if (line == last_status_) return;
    sd_notify(0, line.c_str());
    last_status_ = line;
    last_status_at_ = std::chrono::steady_clock::now();
  }

  asio::io_context& io_;
  common::Logger log_;
  Scheduler* scheduler_ = nullptr;  // set by Ready()
  asio::steady_timer status_timer_;
  bool status_pending_ = false;
  std::string last_status_;
  std::chrono::steady_clock::time_point last_status_at_{};
  std::optional<PeriodicTimer> watchdog_;
};

// The control server's options: the socket (default state_dir/triald.sock) and who may use it
// (root, the daemon's uid and --socket-group, default the daemon's primary group).
common::Result<ControlServerOptions> ControlOptions(const DaemonOptions& opts,
                                                    const std::string& state_dir) {
  ControlServerOptions co;
  co.socket_path = opts.socket_path.empty() ? state_dir + "/triald.sock" : opts.socket_path;
  co.state_dir = state_dir;
  co.access.daemon_uid = ::geteuid();
  co.access.allowed_gid = ::getegid();
  co.access.runs_as_submitter = ::geteuid() == 0;
  co.access.read_open = opts.socket_read_open;
  co.request_timeout_s = opts.request_timeout_s;
  co.max_connections = opts.max_connections;
  co.max_connections_per_uid = opts.max_user_connections;
  co.node_timeout_s = opts.node_timeout_s;
  if (!opts.socket_group.empty()) {
    common::Result<gid_t> gid = ResolveGroup(opts.socket_group);
    if (!gid.ok()) {
      return common::Status(gid.status().code(), "--socket-group: " + gid.status().message());
    }
    co.access.allowed_gid = *gid;
  }
  if (!opts.trust_group.empty()) {
    common::Result<gid_t> gid = ResolveGroup(opts.trust_group);
    if (!gid.ok()) {
      return common::Status(gid.status().code(), "--trust-group: " + gid.status().message());
    }
    co.access.trust_gid = *gid;
    // Trusted users must be able to connect: the socket's group is theirs unless given.
    if (opts.socket_group.empty()) co.access.allowed_gid = *gid;
  }
  return co;
}

// Starts the control server on the socket systemd passed (socket activation: triald.socket,
// fd 3), else on a socket of its own.
Status StartControlServer(ControlServer& server, const common::Logger& log) {
  const int passed = sd_listen_fds(/*unset_environment=*/1);
  if (passed > 1) {
    return common::InvalidArgument("systemd passed " + std::to_string(passed) +
                                   " sockets; expected one (the control socket)");
  }
  if (passed == 0 || passed < 0) return server.Start();
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0) <= 0) {
    return common::InvalidArgument("the socket systemd passed (fd " + std::to_string(fd) +
                                   ") is not a listening unix stream socket");
  }
  log->info("control socket passed by systemd (socket activation)");
  return server.Start(common::UniqueFd(fd));
}

// SIGTERM/SIGINT: stop accepting requests, stop every running trial (Scheduler::BeginShutdown)
// and stop the event loop once they have ended, or after shutdown_timeout_s anyway (clean()
// is then false). Event-loop thread only.
class ShutdownOnSignal {
 public:
  struct Options {
    asio::io_context* io = nullptr;
    Scheduler* scheduler = nullptr;
    ControlServer* server = nullptr;
    http::HttpServer* dashboard = nullptr;  // null without --http
    SystemdNotifier* notifier = nullptr;
    common::Logger logger;
    double timeout_s = 120;
  };

  explicit ShutdownOnSignal(Options options)
      : o_(std::move(options)), signals_(*o_.io, SIGTERM, SIGINT), deadline_(*o_.io) {}

  void Arm() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (!ec) Begin(sig == SIGINT ? "SIGINT received" : "SIGTERM received");
    });
  }

  // --exit-when-idle: the same stop, for want of work.
  void BeginIdle(double idle_s) {
    if (begun_) return;
    Begin("no work for " + std::to_string(static_cast<int>(idle_s)) + " s (--exit-when-idle)");
  }

  // False when trials were still running at the deadline.
  bool clean() const { return clean_; }

 private:
  void Begin(const std::string& why) {
    if (begun_) return;
    begun_ = true;
    o_.logger->info("{}: stopping {} running trial(s)", why, o_.scheduler->running_count());
    o_.notifier->Stopping(o_.scheduler->running_count());
    o_.server->Stop();
    if (o_.dashboard != nullptr) o_.dashboard->Stop();
    deadline_.expires_after(Seconds(o_.timeout_s));
    deadline_.async_wait([this](const boost::system::error_code& e) {
      if (e) return;
      o_.logger->error("trials still running {} s after shutdown began; exiting anyway",
                       o_.timeout_s);
      clean_ = false;
      o_.io->stop();
    });
    o_.scheduler->BeginShutdown([this]() {
      deadline_.cancel();
      o_.io->stop();
    });
  }

  Options o_;
  asio::signal_set signals_;
  asio::steady_timer deadline_;
  bool clean_ = true;
  bool begun_ = false;
};

}  // namespace

int RunDaemon(const DaemonOptions& opts) {
  common::Logger log = opts.logger ? opts.logger : common::MakeNullLogger();
  SanitizeDescriptors();
  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the daemon
  // Trials and clients each hold descriptors: the soft limit (often 1024) goes up to the hard.
  if (auto limit = RaiseDescriptorLimit(log); !limit.ok())
    log->warn("{}", limit.status().message());

  common::Result<StateDir> dir = LockStateDir(opts.state_dir);
  if (!dir.ok()) {
    log->critical("{}", dir.status().message());
    return 1;
  }
  const std::string state_dir = dir->path;
  {
    StateDirAccess access;
    if (!opts.socket_group.empty()) {
      common::Result<gid_t> gid = ResolveGroup(opts.socket_group);
      if (!gid.ok()) {
        log->critical("--socket-group: {}", gid.status().message());
        return 1;
      }
      access.group = *gid;
    }
    access.others_traverse = opts.socket_read_open && opts.socket_path.empty();
    // A root daemon runs trials as their submitters (run_as_submitter below).
    access.trials_as_users = ::geteuid() == 0;
    access.sqlite = opts.storage_url.empty();
    Status secured = SecureStateDir(state_dir, access, log);
    if (!secured.ok()) {
      log->critical("state directory {}: {}", state_dir, secured.message());
      return 1;
    }
  }
  auto storage = OpenStorage(opts, state_dir, log);
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
  std::unique_ptr<launcher::CgroupTree> cgroups = OpenCgroups(opts, state_dir, log);
  // A root daemon runs each trial as its submitter (daemon/launcher/run_as.h).
  const bool run_as_submitter = ::geteuid() == 0;
  launcher::ProcessLauncher process_launcher(
      {&io, &reaper, log, cgroups.get(), run_as_submitter, state_dir, opts.resource_accounting});
  if (!opts.resource_accounting) log->info("resource accounting: off (wall time only)");
  // Studies with [executor] kind = "slurm" run their trials as Slurm jobs, through srun and the
  // relay next to this executable (daemon/slurm/); every other trial through process_launcher.
  std::string path_env;
  if (const char* p = std::getenv("PATH")) path_env = p;
  const std::string srun = slurm::FindSrun(path_env);
  const std::string relay =
      (std::filesystem::path(DefaultTrialWorkerPath()).parent_path() / "triald-slurm-relay")
          .string();
  slurm::SlurmLauncher slurm_launcher(
      {&process_launcher, relay, srun, 2, opts.slurm_defaults, slurm::SlurmMarker(state_dir)});
  // Studies of [objective] kind = "client" run their trials in the program that asked for them
  // (the control verb `ask`): no process; every other trial as above.
  launcher::ClientLauncher client_launcher({&io, &slurm_launcher, log});
  slurm::SlurmCluster::Options slurm_cluster_options;
  slurm_cluster_options.srun = srun;
  slurm_cluster_options.relay = relay;
  slurm_cluster_options.defaults = opts.slurm_defaults;
  slurm::SlurmCluster slurm_cluster(slurm_cluster_options);
  // Only a state directory that has submitted jobs asks Slurm at start (a daemon that never ran
  // a Slurm trial neither waits for nor depends on a cluster).
  if (!srun.empty() && ::access(slurm::SlurmMarker(state_dir).c_str(), F_OK) == 0) {
    // Jobs this node submitted before it stopped: their trials are recorded lost at recovery
    // (and retried as retry_on says), so their jobs must not run on.
    common::Result<std::vector<std::string>> left =
        slurm_cluster.CancelLeftovers(storage->get()->node());
    if (!left.ok()) {
      log->warn("Slurm: cannot look for jobs an earlier run left: {}", left.status().message());
    } else if (!left->empty()) {
      std::string ids;
      for (const std::string& id : *left) ids += (ids.empty() ? "" : ", ") + id;
      log->warn("Slurm: cancelled {} job(s) an earlier run of this node left: {}", left->size(),
                ids);
    }
  }
  common::SystemClock clock;

  common::Result<Gpus> found_gpus = FindGpus(opts, log);
  if (!found_gpus.ok()) {
    log->critical("{}", found_gpus.status().message());
    return 1;
  }
  std::unique_ptr<devices::GpuProbe> nvml = std::move(found_gpus->nvml);
  const std::vector<int> gpus = found_gpus->indices;
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

  SystemdNotifier notifier(io, log);

  SchedulerOptions so;
  so.gpus = &gpu_pool;
  // What `ping` answers on the control socket's own thread (control/ping_board.h).
  PingBoard ping_board(state_dir, (*storage)->node(), (*storage)->shared());
  const Scheduler* published = nullptr;  // set once the scheduler exists
  so.on_change = [&notifier, &ping_board, &published]() {
    notifier.OnChange();
    if (published != nullptr) ping_board.Publish(*published);
  };
  so.storage = storage->get();
  so.node_timeout_s = opts.node_timeout_s;
  so.fence_after_s = FenceAfterSeconds(opts.node_timeout_s, opts.heartbeat_interval_s,
                                       opts.node_timeout_s / 3);  // PostgreSQL's call timeout
  so.launcher = &client_launcher;
  so.check_executor = [&slurm_cluster](const config::SweepSpec& spec, const std::string& where) {
    return slurm_cluster.Check(spec, where);
  };
  so.clock = &clock;
  so.logger = log;
  so.state_dir = state_dir;
  so.max_workers = opts.max_workers > 0
                       ? opts.max_workers
                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  common::Result<ControlServerOptions> co = ControlOptions(opts, state_dir);
  if (!co.ok()) {
    log->critical("{}", co.status().message());
    return 1;
  }
  // Variables a worker inherits from the daemon; everything else it gets is explicit. And where
  // this daemon listens (TRIALD_SOCKET): the Python runner's trial.study reads the study there.
  so.base_env = InheritedVariables();
  so.base_env.push_back("TRIALD_SOCKET=" + co->socket_path);
  so.trial_worker = DefaultTrialWorkerPath();
  so.trials_as_submitters = run_as_submitter;
  so.seed_source = []() {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  };
  // A study waiting after a failed start is pumped again once its wait is over
  // (daemon/scheduler/spawn_backoff.h); each request replaces the previous one.
  asio::steady_timer spawn_retry(io);
  Scheduler* pump_target = nullptr;  // set once the scheduler exists
  so.wake_after = [&spawn_retry, &pump_target](double delay_s) {
    spawn_retry.expires_after(Seconds(delay_s));
    spawn_retry.async_wait([&pump_target](const boost::system::error_code& ec) {
      if (!ec && pump_target != nullptr) pump_target->Pump();
    });
  };
  so.post = [&io](std::function<void()> fn) { asio::post(io, std::move(fn)); };
  if ((*storage)->shared()) {
    // The trials' reports go to the database on a connection and a thread of their own
    // (daemon/scheduler/lazy_writer.h): the event loop never waits for those round trips.
    auto writes = OpenStorage(opts, state_dir, log, "the trials' reports", storage->get());
    if (!writes.ok()) {
      log->critical("{}", writes.status().message());
      return 1;
    }
    so.trial_write_storage = std::move(writes).value();
    // So are the multi-node protocol's reads (the heartbeat tick's, the pruning decisions'
    // re-reads of other nodes' trials: daemon/scheduler/storage_reads.h).
    auto reads =
        OpenStorage(opts, state_dir, log, "the reads of other nodes' work", storage->get());
    if (!reads.ok()) {
      log->critical("{}", reads.status().message());
      return 1;
    }
    ThreadedStorageReads::Options ro;
    ro.storage = std::move(reads).value();
    ro.post = so.post;
    ro.logger = log;
    so.storage_reads = std::make_shared<ThreadedStorageReads>(std::move(ro));
  }
  // And the servers' reads: the read verbs but `ping`, the dashboard's GETs
  // (control/read_thread.h).
  std::shared_ptr<ReadThread> server_reads;
  if ((*storage)->shared()) {
    auto reads = OpenStorage(opts, state_dir, log, "the read verbs", storage->get());
    if (!reads.ok()) {
      log->critical("{}", reads.status().message());
      return 1;
    }
    server_reads = std::make_shared<ReadThread>(std::move(reads).value());
  }
  Scheduler scheduler(so);
  so.storage_reads.reset();  // the scheduler's alone: gone with it (its completions too)
  pump_target = &scheduler;
  published = &scheduler;
  st = scheduler.Recover();
  if (!st.ok()) {
    log->critical("recovery failed: {}", st.message());
    return 1;
  }

  co->io = &io;
  // The socket is served on a thread of its own, the verbs on this loop: `ping` answers while
  // the loop waits on storage (control/server.h).
  ping_board.Publish(scheduler);
  co->ping_board = &ping_board;
  co->storage_wait = (*storage)->wait_gauge();
  co->scheduler = &scheduler;
  co->storage = storage->get();
  co->reads = server_reads;
  // A submission's checks (as the submitter: a child of a root daemon; a Slurm partition's)
  // wait there, not on the loop.
  co->admissions = std::make_shared<TaskThread>();
  co->logger = log;
  ControlServer server(*co);
  st = StartControlServer(server, log);
  if (!st.ok()) {
    log->critical("{}", st.message());
    return 1;
  }
  log->info(
      "control socket {}: group {}; submit for root, uid {}{}{}; changes to a study for its "
      "submitter, root and uid {}; read verbs for {}; trials run as {}",
      co->socket_path, GroupLabel(co->access.allowed_gid), co->access.daemon_uid,
      co->access.runs_as_submitter ? ", the socket group" : "",
      co->access.trust_gid ? ", --trust-group " + GroupLabel(*co->access.trust_gid) : "",
      co->access.daemon_uid, co->access.read_open ? "anyone" : "the socket group",
      run_as_submitter ? "their submitters" : "uid " + std::to_string(co->access.daemon_uid));
  std::unique_ptr<http::HttpServer> dashboard;
  if (!opts.http.empty()) {
    auto started = http::StartDashboard({&io, &scheduler, storage->get(), log, state_dir, opts.http,
                                         opts.socket_read_open, opts.node_timeout_s, server_reads});
    if (!started.ok()) {
      log->critical("{}", started.status().message());
      return 1;
    }
    dashboard = std::move(started).value();
  }
  (void)(*storage)->AppendEvent({}, {}, "daemon_started", "pid " + std::to_string(::getpid()),
                                clock.WallSeconds());
  log->info("triald ready: state {}, socket {}, {} worker slot(s)", state_dir, co->socket_path,
            so.max_workers);
  // Recovery is done and the socket listens: only now is triald ready.
  notifier.Ready(&scheduler);
  scheduler.Pump();
  notifier.StartWatchdog();

  // GPU slots drain and running GPU trials' processes (and the GPU memory they hold) are
  // tracked by polling the driver every --gpu-sample-interval.
  PeriodicTimer gpu_poll(io, Seconds(opts.gpu_sample_interval_s), [&scheduler]() {
    if (scheduler.gpu_work()) scheduler.PollDevices();
  });
  if (!gpus.empty()) gpu_poll.Start();
  // Shared storage: this node's heartbeat, and what the other nodes did (daemon/scheduler.h).
  PeriodicTimer shared_tick(io, Seconds(opts.heartbeat_interval_s),
                            [&scheduler]() { scheduler.SharedTick(); });
  if ((*storage)->shared()) shared_tick.Start();

  ShutdownOnSignal shutdown(
      {&io, &scheduler, &server, dashboard.get(), &notifier, log, opts.shutdown_timeout_s});
  shutdown.Arm();
  // Pilot mode: leave once there has been no work here for --exit-when-idle seconds.
  double idle_since = clock.MonotonicSeconds();
  PeriodicTimer idle_check(io, Seconds(std::min(1.0, opts.exit_when_idle_s / 4)), [&]() {
    const double now = clock.MonotonicSeconds();
    if (scheduler.HasWork()) {
      idle_since = now;
    } else if (now - idle_since >= opts.exit_when_idle_s) {
      shutdown.BeginIdle(now - idle_since);
    }
  });
  if (opts.exit_when_idle_s > 0) idle_check.Start();

  io.run();
  reaper.ReapNow();
  (void)(*storage)->AppendEvent({}, {}, "daemon_stopped", shutdown.clean() ? "clean" : "timed out",
                                clock.WallSeconds());
  log->info("triald stopped");
  return 0;
}

}  // namespace triald::daemon
