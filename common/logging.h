#pragma once
// Logger construction. Loggers are created in main() and passed down; there is no global
// logger in the libraries.
//
// Thread-safety: the returned logger uses a mutex-protected sink (spdlog's _mt sinks).

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <utility>

#include "common/status.h"

namespace triald::common {

using Logger = std::shared_ptr<spdlog::logger>;

// "trace", "debug", "info", "warn", "error", "critical", "off".
Result<spdlog::level::level_enum> ParseLogLevel(const std::string& text);

// A logger writing to stderr (journald picks it up under systemd).
Logger MakeStderrLogger(const std::string& name, spdlog::level::level_enum level);

// A logger that drops everything (for tests and library defaults).
Logger MakeNullLogger();

// The steps of a trial's life, at `--log-level trace`: one line per step,
//   span STEP KEY=VALUE ... t=MS
// MS the wall clock in milliseconds with microseconds (the clock a trial's time.time() reads),
// keys naming what joins the steps (trial=N, req=ID, pid=P). scripts/bench_start.py --trace
// reads them back into a breakdown of where a forked start's time goes, and
// scripts/bench_throughput.py --trace into where the event loop's time goes per trial. Nothing
// is formatted unless the logger logs traces.
template <typename... Args>
void Span(const Logger& logger, double wall_ms, fmt::format_string<Args...> keys, Args&&... args) {
  if (!logger || !logger->should_log(spdlog::level::trace)) return;
  logger->trace("span {} t={:.3f}", fmt::format(keys, std::forward<Args>(args)...), wall_ms);
}
// The wall clock in milliseconds, for Span() where no injected clock is at hand.
double WallMillis();

}  // namespace triald::common
