#include "common/logging.h"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>

namespace triald::common {

Result<spdlog::level::level_enum> ParseLogLevel(const std::string& text) {
  static const char* kNames[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (int i = 0; i < 7; ++i) {
    if (text == kNames[i]) return static_cast<spdlog::level::level_enum>(i);
  }
  return InvalidArgument("log level \"" + text +
                         "\"; expected one of trace, debug, info, warn, error, critical, off");
}

double WallMillis() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Logger MakeStderrLogger(const std::string& name, spdlog::level::level_enum level) {
  auto logger =
      std::make_shared<spdlog::logger>(name, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_level(level);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  logger->flush_on(spdlog::level::warn);
  return logger;
}

Logger MakeNullLogger() {
  return std::make_shared<spdlog::logger>("null", std::make_shared<spdlog::sinks::null_sink_mt>());
}

}  // namespace triald::common
