// triald: the trial supervisor daemon. See README.md and daemon/daemon.h.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "common/logging.h"
#include "config/daemon_config.h"
#include "daemon/daemon.h"

namespace {

const char kUsage[] =
    "usage: triald --state-dir DIR [--socket PATH] [--socket-group GROUP] [--socket-read-open]\n"
    "              [--max-workers N] [--log-level LEVEL] [--shutdown-timeout S]\n"
    "              [--request-timeout S] [--no-cgroups] [--config FILE]\n"
    "              [--gpus LIST] [--slots-per-gpu N] [--nvml-library PATH]\n"
    "              [--gpu-release-timeout S]\n"
    "              [--storage URL] [--node-name NAME] [--heartbeat-interval S]\n"
    "              [--node-timeout S]\n"
    "\n"
    "Runs the triald supervisor in the foreground.\n"
    "  --state-dir DIR     where the database, trial folders and logs live (required)\n"
    "  --socket PATH       control socket (default DIR/triald.sock, mode 0660)\n"
    "  --socket-group GROUP  group (name or gid) whose members may submit, cancel and enqueue\n"
    "                      besides root and triald's user (default: triald's primary group)\n"
    "  --socket-read-open  socket mode 0666: anyone may use the read verbs\n"
    "  --request-timeout S  a client's time to finish a started request or read a reply\n"
    "                      (default 10)\n"
    "  --max-workers N     trials running at once, all studies together (default: CPUs)\n"
    "  --no-cgroups        isolate trials by process group only, even where cgroups are\n"
    "                      writable\n"
    "  --log-level LEVEL   trace|debug|info|warn|error|critical|off (default info)\n"
    "  --shutdown-timeout S  longest wait for trials to end on SIGTERM (default 120)\n"
    "  --config FILE       daemon config (TOML: [daemon], [devices]); options given here\n"
    "                      override it\n"
    "  --gpus LIST         GPU indices given to trials, e.g. 0,1, or none (default: every GPU\n"
    "                      NVML reports)\n"
    "  --slots-per-gpu N   trials that may share one GPU at once (default 1)\n"
    "  --nvml-library PATH NVML library to load (default $TRIALD_NVML_LIBRARY, else\n"
    "                      libnvidia-ml.so.1)\n"
    "  --gpu-release-timeout S  longest wait for an ended trial's GPU memory to be freed\n"
    "                      before its slot is given out anyway (default 60)\n"
    "  --storage URL       postgresql://USER@HOST:PORT/DB: share studies with every triald\n"
    "                      using that database (default: SQLite in the state directory)\n"
    "  --node-name NAME    this daemon's name among those sharing the database (default: the\n"
    "                      host name; unique per daemon)\n"
    "  --heartbeat-interval S  how often this node beats and reads the others' changes\n"
    "                      (default 2)\n"
    "  --node-timeout S    a node silent this long is dead: its running trials end FAIL(lost)\n"
    "                      and are retried per policy (default 30)\n";

int Usage(const std::string& error) {
  std::cerr << "triald: " << error << "\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  triald::daemon::DaemonOptions opts;
  std::string level = "info";
  // The config file first, wherever --config stands: the other options override it.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--config") continue;
    if (i + 1 >= argc) return Usage("--config needs a file");
    auto cfg = triald::config::ParseDaemonConfigFile(argv[i + 1]);
    if (!cfg.ok()) {
      std::cerr << "triald: " << cfg.status().message() << "\n";
      return 2;
    }
    if (!cfg->state_dir.empty()) opts.state_dir = cfg->state_dir;
    if (!cfg->socket.empty()) opts.socket_path = cfg->socket;
    if (!cfg->log_level.empty()) level = cfg->log_level;
    if (cfg->shutdown_timeout > 0) opts.shutdown_timeout_s = cfg->shutdown_timeout;
    opts.max_workers = cfg->devices.cpu;
    opts.gpus = cfg->devices.gpus;
    opts.slots_per_gpu = cfg->devices.slots_per_gpu;
    opts.nvml_library = cfg->devices.nvml_library;
    opts.gpu_release_timeout_s = cfg->devices.gpu_release_timeout;
    if (!cfg->storage.empty()) opts.storage_url = cfg->storage;
    if (!cfg->node_name.empty()) opts.node_name = cfg->node_name;
    if (cfg->heartbeat_interval > 0) opts.heartbeat_interval_s = cfg->heartbeat_interval;
    if (cfg->node_timeout > 0) opts.node_timeout_s = cfg->node_timeout;
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)name;
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--state-dir") {
      const char* v = value("--state-dir");
      if (!v) return Usage("--state-dir needs a directory");
      opts.state_dir = v;
    } else if (a == "--socket") {
      const char* v = value("--socket");
      if (!v) return Usage("--socket needs a path");
      opts.socket_path = v;
    } else if (a == "--socket-group") {
      const char* v = value("--socket-group");
      if (!v || *v == '\0') return Usage("--socket-group needs a group name or gid");
      opts.socket_group = v;
    } else if (a == "--socket-read-open") {
      opts.socket_read_open = true;
    } else if (a == "--request-timeout") {
      const char* v = value("--request-timeout");
      char* end = nullptr;
      double s = v ? std::strtod(v, &end) : -1;
      if (!v || *end != '\0' || !(s > 0) || s > 86400) {
        return Usage("--request-timeout: expected a positive number of seconds (at most 86400)");
      }
      opts.request_timeout_s = s;
    } else if (a == "--config") {
      ++i;  // read above
    } else if (a == "--gpus") {
      const char* v = value("--gpus");
      if (!v) return Usage("--gpus needs a list of GPU indices, e.g. 0,1");
      auto gpus = triald::config::ParseGpuList(v);
      if (!gpus.ok()) return Usage(gpus.status().message());
      opts.gpus = *gpus;
    } else if (a == "--slots-per-gpu") {
      const char* v = value("--slots-per-gpu");
      char* end = nullptr;
      long n = v ? std::strtol(v, &end, 10) : 0;
      if (!v || *end != '\0' || n < 1 || n > 64) {
        return Usage("--slots-per-gpu: expected an integer from 1 to 64");
      }
      opts.slots_per_gpu = static_cast<int>(n);
    } else if (a == "--nvml-library") {
      const char* v = value("--nvml-library");
      if (!v || *v == '\0') return Usage("--nvml-library needs a library path");
      opts.nvml_library = v;
    } else if (a == "--gpu-release-timeout") {
      const char* v = value("--gpu-release-timeout");
      char* end = nullptr;
      double s = v ? std::strtod(v, &end) : -1;
      if (!v || *end != '\0' || !(s > 0)) {
        return Usage("--gpu-release-timeout: expected a positive number of seconds");
      }
      opts.gpu_release_timeout_s = s;
    } else if (a == "--storage") {
      const char* v = value("--storage");
      if (!v || *v == '\0') return Usage("--storage needs a postgresql:// URL");
      opts.storage_url = v;
    } else if (a == "--node-name") {
      const char* v = value("--node-name");
      if (!v || *v == '\0') return Usage("--node-name needs a name");
      opts.node_name = v;
    } else if (a == "--heartbeat-interval" || a == "--node-timeout") {
      const char* v = value(a.c_str());
      char* end = nullptr;
      double s = v ? std::strtod(v, &end) : -1;
      if (!v || *end != '\0' || !(s > 0) || s > 86400) {
        return Usage(a + ": expected a positive number of seconds (at most 86400)");
      }
      (a == "--node-timeout" ? opts.node_timeout_s : opts.heartbeat_interval_s) = s;
    } else if (a == "--no-cgroups") {
      opts.use_cgroups = false;
    } else if (a == "--max-workers") {
      const char* v = value("--max-workers");
      char* end = nullptr;
      long n = v ? std::strtol(v, &end, 10) : 0;
      if (!v || *end != '\0' || n < 1 || n > 4096) {
        return Usage(std::string("--max-workers ") + (v ? v : "") +
                     ": expected an integer from 1 to 4096");
      }
      opts.max_workers = static_cast<int>(n);
    } else if (a == "--log-level") {
      const char* v = value("--log-level");
      if (!v) return Usage("--log-level needs a level");
      level = v;
    } else if (a == "--shutdown-timeout") {
      const char* v = value("--shutdown-timeout");
      char* end = nullptr;
      double s = v ? std::strtod(v, &end) : -1;
      if (!v || *end != '\0' || s <= 0) {
        return Usage("--shutdown-timeout: expected a positive number of seconds");
      }
      opts.shutdown_timeout_s = s;
    } else {
      return Usage("unknown argument \"" + a + "\"");
    }
  }
  if (opts.state_dir.empty()) return Usage("--state-dir is required");
  if (opts.node_timeout_s < 2 * opts.heartbeat_interval_s) {
    return Usage("--node-timeout (" + std::to_string(opts.node_timeout_s) +
                 " s) must be at least twice --heartbeat-interval (" +
                 std::to_string(opts.heartbeat_interval_s) +
                 " s), or live nodes would be taken for dead");
  }
  auto lvl = triald::common::ParseLogLevel(level);
  if (!lvl.ok()) return Usage(lvl.status().message());
  opts.logger = triald::common::MakeStderrLogger("triald", *lvl);
  return triald::daemon::RunDaemon(opts);
}
