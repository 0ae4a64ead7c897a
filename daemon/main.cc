// triald: the trial supervisor daemon. See daemon/README.md and daemon/app/daemon.h.
//
// The command line is declared once with CLI11: the parser, `triald --help` and the errors
// ("triald: --OPTION: what was wrong", then the help, exit 2) all come from the declarations
// below. `--opt value` and `--opt=value` both work; an option given twice keeps the last value.
// A --config file is read first, wherever --config stands; the options given here override it.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "config/daemon_config.h"
#include "daemon/app/daemon.h"
#include "daemon/cli/validators.h"
#include "daemon/http/address.h"
#include "proto/socket_paths.h"

namespace {

using triald::daemon::DaemonOptions;

constexpr int kExitUsage = 2;

int Usage(const CLI::App& app, const std::string& error) {
  std::cerr << "triald: " << error << "\n" << app.help();
  return kExitUsage;
}

// The config file's settings (those it sets) over the defaults.
void ApplyConfig(const triald::config::DaemonConfig& cfg, DaemonOptions* opts, std::string* level) {
  if (!cfg.state_dir.empty()) opts->state_dir = cfg.state_dir;
  if (!cfg.socket.empty()) opts->socket_path = cfg.socket;
  if (!cfg.log_level.empty()) *level = cfg.log_level;
  if (cfg.shutdown_timeout > 0) opts->shutdown_timeout_s = cfg.shutdown_timeout;
  opts->max_workers = cfg.devices.cpu;
  opts->gpus = cfg.devices.gpus;
  opts->slots_per_gpu = cfg.devices.slots_per_gpu;
  opts->nvml_library = cfg.devices.nvml_library;
  opts->gpu_release_timeout_s = cfg.devices.gpu_release_timeout;
  opts->gpu_sample_interval_s = cfg.devices.gpu_sample_interval;
  if (!cfg.storage.empty()) opts->storage_url = cfg.storage;
  if (!cfg.node_name.empty()) opts->node_name = cfg.node_name;
  if (cfg.heartbeat_interval > 0) opts->heartbeat_interval_s = cfg.heartbeat_interval;
  if (cfg.node_timeout > 0) opts->node_timeout_s = cfg.node_timeout;
  if (cfg.resource_accounting) opts->resource_accounting = *cfg.resource_accounting;
  if (!cfg.http.empty()) opts->http = cfg.http;
  opts->slurm_defaults = cfg.slurm;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = triald::cli;
  CLI::App app("Runs the triald supervisor in the foreground.", "triald");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  // What the command line says; copied over the config file's settings for each option given.
  DaemonOptions given;
  std::vector<std::pair<const CLI::Option*, std::function<void(DaemonOptions&)>>> overrides;
  auto overriding = [&](CLI::Option* option, auto field) {
    overrides.emplace_back(option, [&given, field](DaemonOptions& o) { o.*field = given.*field; });
    return option;
  };
  std::string config_file, level, gpus;
  bool no_cgroups = false;
  bool no_accounting = false;

  overriding(app.add_option("--state-dir", given.state_dir,
                            "where the database, trial folders and logs live\n"
                            "(default: /var/lib/triald for root, else\n"
                            "$XDG_STATE_HOME/triald or ~/.local/state/triald)"),
             &DaemonOptions::state_dir)
      ->type_name("DIR");
  overriding(app.add_option("--socket", given.socket_path,
                            "control socket, mode 0660 (default: DIR/triald.sock\n"
                            "with --state-dir; else /run/triald/triald.sock for\n"
                            "root, $XDG_RUNTIME_DIR/triald/triald.sock for a\n"
                            "user, where trialctl looks)"),
             &DaemonOptions::socket_path)
      ->type_name("PATH");
  overriding(app.add_option("--socket-group", given.socket_group,
                            "group (name or gid) whose members may connect; they\n"
                            "may also submit when triald runs as root (trials\n"
                            "run as their submitters), else only read\n"
                            "(default: triald's primary group)"),
             &DaemonOptions::socket_group)
      ->type_name("GROUP")
      ->check(cli::NotEmpty("a group name or gid"));
  overriding(app.add_option("--trust-group", given.trust_group,
                            "group (name or gid) whose members may submit and\n"
                            "change their own studies; on a non-root triald\n"
                            "their trials run as triald's user, with all its\n"
                            "rights (daemon/README.md, Security)"),
             &DaemonOptions::trust_group)
      ->type_name("GROUP")
      ->check(cli::NotEmpty("a group name or gid"));
  overriding(app.add_flag("--socket-read-open", given.socket_read_open,
                          "socket mode 0666: anyone may use the read verbs"),
             &DaemonOptions::socket_read_open);
  overriding(app.add_option("--request-timeout", given.request_timeout_s,
                            "a client's time to send a complete request (from\n"
                            "connecting or its previous reply) or to read a\n"
                            "reply (seconds, default 5)"),
             &DaemonOptions::request_timeout_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds(86400));
  overriding(app.add_option("--max-connections", given.max_connections,
                            "control connections open at once, 32 of them kept\n"
                            "for root and triald's user (default 512)"),
             &DaemonOptions::max_connections)
      ->type_name("N")
      ->check(cli::IntegerFrom(64, 1048576));
  overriding(app.add_option("--max-user-connections", given.max_user_connections,
                            "control connections one user other than root and\n"
                            "triald's own may hold at once (default 32)"),
             &DaemonOptions::max_user_connections)
      ->type_name("N")
      ->check(cli::IntegerFrom(1, 1048576));
  overriding(app.add_option("--max-workers", given.max_workers,
                            "trials running at once, all studies together\n"
                            "(default: CPUs)"),
             &DaemonOptions::max_workers)
      ->type_name("N")
      ->check(cli::IntegerFrom(1, 4096));
  CLI::Option* no_cgroups_flag = app.add_flag("--no-cgroups", no_cgroups,
                                              "isolate trials by process group only, even where\n"
                                              "cgroups are writable");
  CLI::Option* no_accounting_flag =
      app.add_flag("--no-resource-accounting", no_accounting,
                   "measure no trial's peak memory or CPU time (only\n"
                   "its wall time); saves a v1 memory cgroup per trial\n"
                   "on hybrid hosts");
  CLI::Option* level_option =
      app.add_option("--log-level", level,
                     "trace|debug|info|warn|error|critical|off (default info)")
          ->type_name("LEVEL");
  overriding(app.add_option("--shutdown-timeout", given.shutdown_timeout_s,
                            "longest wait for trials to end on SIGTERM\n"
                            "(seconds, default 120)"),
             &DaemonOptions::shutdown_timeout_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds());
  app.add_option("--config", config_file,
                 "daemon config (TOML: [daemon], [devices]); the\n"
                 "options given here override it")
      ->type_name("FILE");
  CLI::Option* gpus_option = app.add_option("--gpus", gpus,
                                            "GPU indices given to trials, e.g. 0,1, or none\n"
                                            "(default: every GPU NVML reports)")
                                 ->type_name("LIST");
  overriding(app.add_option("--slots-per-gpu", given.slots_per_gpu,
                            "trials that may share one GPU at once (default 1)"),
             &DaemonOptions::slots_per_gpu)
      ->type_name("N")
      ->check(cli::IntegerFrom(1, 64));
  overriding(app.add_option("--nvml-library", given.nvml_library,
                            "NVML library to load (default\n"
                            "$TRIALD_NVML_LIBRARY, else libnvidia-ml.so.1)"),
             &DaemonOptions::nvml_library)
      ->type_name("PATH")
      ->check(cli::NotEmpty("a library path"));
  overriding(app.add_option("--gpu-release-timeout", given.gpu_release_timeout_s,
                            "longest wait for an ended trial's GPU memory to be\n"
                            "freed before its slot is given out anyway\n"
                            "(seconds, default 60)"),
             &DaemonOptions::gpu_release_timeout_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds());
  overriding(app.add_option("--gpu-sample-interval", given.gpu_sample_interval_s,
                            "seconds between the samples of running GPU\n"
                            "trials' memory (peak_gpu_memory) and of\n"
                            "draining slots (default 0.5, at most 60)"),
             &DaemonOptions::gpu_sample_interval_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds(triald::config::kMaxGpuSampleInterval));
  overriding(app.add_option("--storage", given.storage_url,
                            "postgresql://USER@HOST:PORT/DB: share studies\n"
                            "with every triald using that database (default:\n"
                            "SQLite in the state directory)"),
             &DaemonOptions::storage_url)
      ->type_name("URL")
      ->check(cli::NotEmpty("a postgresql:// URL"));
  overriding(app.add_option("--node-name", given.node_name,
                            "this daemon's name among those sharing the\n"
                            "database (default: the host name; unique per\n"
                            "daemon)"),
             &DaemonOptions::node_name)
      ->type_name("NAME")
      ->check(cli::NotEmpty("a name"));
  overriding(app.add_option("--heartbeat-interval", given.heartbeat_interval_s,
                            "how often this node beats and reads the others'\n"
                            "changes (seconds, default 2)"),
             &DaemonOptions::heartbeat_interval_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds(86400));
  overriding(app.add_option("--node-timeout", given.node_timeout_s,
                            "a node silent this long is dead: its running\n"
                            "trials end FAIL(lost) and are retried per policy\n"
                            "(seconds, default 30)"),
             &DaemonOptions::node_timeout_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds(86400));
  overriding(app.add_option("--exit-when-idle", given.exit_when_idle_s,
                            "stop once this node has had no work for this\n"
                            "long: no trial running and none any study could\n"
                            "start here (pilot mode inside a Slurm allocation,\n"
                            "scripts/slurm_pilot.sh; seconds, default: never)"),
             &DaemonOptions::exit_when_idle_s)
      ->type_name("S")
      ->check(cli::PositiveSeconds(86400));

  CLI::Option* http_option =
      overriding(app.add_option("--http", given.http,
                                "serve the dashboard and its JSON API at HOST:PORT\n"
                                "(e.g. 127.0.0.1:8080; a port alone: 127.0.0.1);\n"
                                "off by default; actions need the token triald\n"
                                "writes to DIR/http.token (daemon/README.md,\n"
                                "Dashboard)"),
                 &DaemonOptions::http)
          ->type_name("ADDRESS")
          ->check([](const std::string& text) {
            auto parsed = triald::daemon::http::ParseListenAddress(text);
            return parsed.ok() ? std::string() : parsed.status().message();
          });

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {  // --help
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return Usage(app, e.what());
  }

  DaemonOptions opts;
  std::string log_level = "info";
  if (!config_file.empty()) {
    auto cfg = triald::config::ParseDaemonConfigFile(config_file);
    if (!cfg.ok()) {
      std::cerr << "triald: " << cfg.status().message() << "\n";
      return kExitUsage;
    }
    ApplyConfig(*cfg, &opts, &log_level);
  }
  for (const auto& [option, apply] : overrides) {
    if (option->count() > 0) apply(opts);
  }
  if (no_cgroups_flag->count() > 0) opts.use_cgroups = false;
  if (no_accounting_flag->count() > 0) opts.resource_accounting = false;
  if (level_option->count() > 0) log_level = level;
  if (gpus_option->count() > 0) {
    auto list = triald::config::ParseGpuList(gpus);
    if (!list.ok()) return Usage(app, list.status().message());
    opts.gpus = *list;
  }

  if (opts.state_dir.empty()) {
    // Neither --state-dir nor the config file's state_dir: the defaults trialctl finds without
    // being told (proto/socket_paths.h).
    auto defaults = triald::proto::DefaultDaemonPaths(triald::proto::SocketEnv::FromProcess());
    if (!defaults.ok()) return Usage(app, defaults.status().message());
    opts.state_dir = defaults->state_dir;
    if (opts.socket_path.empty() && !defaults->socket.empty()) {
      // Binding would take the path over from whatever listens there (another triald, or
      // systemd's triald.socket while the service is stopped): refuse instead. A socket systemd
      // passed to this very process (socket activation) is the one listening there.
      const char* listen_pid = std::getenv("LISTEN_PID");
      const bool activated =
          listen_pid != nullptr && std::to_string(::getpid()) == std::string(listen_pid);
      if (!activated && triald::proto::ProbeSocket(defaults->socket) == 0) {
        std::cerr << "triald: a triald already answers at " << defaults->socket
                  << " (trialctl ping shows which); give --state-dir and --socket to run "
                     "another\n";
        return 1;
      }
      if (::mkdir(defaults->socket_dir.c_str(), defaults->socket_dir_mode) != 0 &&
          errno != EEXIST) {
        const std::string why = std::strerror(errno);
        std::cerr << "triald: cannot create the socket's folder " << defaults->socket_dir << ": "
                  << why << " (give --socket PATH)\n";
        return 1;
      }
      opts.socket_path = defaults->socket;
    }
  }
  if (opts.node_timeout_s < 2 * opts.heartbeat_interval_s) {
    return Usage(app, "--node-timeout (" + std::to_string(opts.node_timeout_s) +
                          " s) must be at least twice --heartbeat-interval (" +
                          std::to_string(opts.heartbeat_interval_s) +
                          " s), or live nodes would be taken for dead");
  }
  if (!opts.http.empty()) {
    // Checked here too for the config file's value (the option's own check covers --http).
    auto parsed = triald::daemon::http::ParseListenAddress(opts.http);
    if (!parsed.ok()) {
      return Usage(app, (http_option->count() > 0 ? "" : config_file + ": [daemon] http: ") +
                            parsed.status().message());
    }
  }
  auto lvl = triald::common::ParseLogLevel(log_level);
  if (!lvl.ok()) return Usage(app, lvl.status().message());
  opts.logger = triald::common::MakeStderrLogger("triald", *lvl);
  return triald::daemon::RunDaemon(opts);
}
