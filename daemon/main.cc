// triald: the trial supervisor daemon. See README.md and daemon/daemon.h.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "common/logging.h"
#include "daemon/daemon.h"

namespace {

const char kUsage[] =
    "usage: triald --state-dir DIR [--socket PATH] [--max-workers N] [--log-level LEVEL]\n"
    "\n"
    "Runs the triald supervisor in the foreground.\n"
    "  --state-dir DIR     where the database, trial folders and logs live (required)\n"
    "  --socket PATH       control socket (default DIR/triald.sock, mode 0660)\n"
    "  --max-workers N     trials running at once, all studies together (default: CPUs)\n"
    "  --log-level LEVEL   trace|debug|info|warn|error|critical|off (default info)\n"
    "  --shutdown-timeout S  longest wait for trials to end on SIGTERM (default 120)\n";

int Usage(const std::string& error) {
  std::cerr << "triald: " << error << "\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  triald::daemon::DaemonOptions opts;
  std::string level = "info";
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
  auto lvl = triald::common::ParseLogLevel(level);
  if (!lvl.ok()) return Usage(lvl.status().message());
  opts.logger = triald::common::MakeStderrLogger("triald", *lvl);
  return triald::daemon::RunDaemon(opts);
}
