#pragma once
// Logger construction. Loggers are created in main() and passed down; there is no global
// logger in the libraries.
//
// Thread-safety: the returned logger uses a mutex-protected sink (spdlog's _mt sinks).

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace triald::common {

using Logger = std::shared_ptr<spdlog::logger>;

// "trace", "debug", "info", "warn", "error", "critical", "off".
Result<spdlog::level::level_enum> ParseLogLevel(const std::string& text);

// A logger writing to stderr (journald picks it up under systemd).
Logger MakeStderrLogger(const std::string& name, spdlog::level::level_enum level);

// A logger that drops everything (for tests and library defaults).
Logger MakeNullLogger();

}  // namespace triald::common
