// common/logging.h: the log level parser and the start spans scripts/bench_start.py --trace
// reads back (their format is that script's contract).

#include "common/logging.h"

#include <spdlog/sinks/ostream_sink.h>

#include <catch2/catch.hpp>
#include <memory>
#include <sstream>
#include <string>

namespace triald::common {
namespace {

Logger StreamLogger(std::ostringstream& out, spdlog::level::level_enum level) {
  auto logger =
      std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  logger->set_pattern("%v");
  logger->set_level(level);
  return logger;
}

TEST_CASE("a span is one trace line: its step and keys, then the time in ms", "[common]") {
  std::ostringstream out;
  Span(StreamLogger(out, spdlog::level::trace), 1765036936322.1234, "forked_received req={} pid={}",
       7, 4242);
  CHECK(out.str() == "span forked_received req=7 pid=4242 t=1765036936322.123\n");
}

TEST_CASE("spans are not logged above the trace level, nor without a logger", "[common]") {
  std::ostringstream out;
  Span(StreamLogger(out, spdlog::level::debug), 1.0, "created trial={}", 3);
  CHECK(out.str().empty());
  Span(Logger(), 1.0, "created trial={}", 3);  // no logger: nothing, no crash
  // The wall clock in ms: the epoch's milliseconds of today, not seconds.
  CHECK(WallMillis() > 1e12);
}

TEST_CASE("log levels parse by name, others are refused naming them", "[common]") {
  CHECK(*ParseLogLevel("trace") == spdlog::level::trace);
  CHECK(*ParseLogLevel("off") == spdlog::level::off);
  const Result<spdlog::level::level_enum> bad = ParseLogLevel("verbose");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "log level \"verbose\"; expected one of trace, debug, info, warn, error, critical, off");
}

}  // namespace
}  // namespace triald::common
