#pragma once
// Skipping a test case visibly. Catch2 2.13 has no SKIP, and a case that returns early passes
// without asserting anything. TRIALD_SKIP(reason) in a TEST_CASE body (or a SECTION) prints the
// reason as a Catch2 warning, records the skip and returns from the case; when the run had no
// failure, the executable then exits with kSkipExitCode (tests/catch_main.cc), which CTest counts
// as "Not Run (Skipped)" (every discovered test has SKIP_RETURN_CODE 77: triald_discover_tests
// in tests/CMakeLists.txt). A case with GENERATE that skips one of its runs is reported skipped
// as a whole; its other runs still assert, and a failure in them still fails it.
//
// Skip only for what a developer's machine may lack (e.g. root); what CI's machine always has
// is required instead, so that a missing piece fails there. Not thread-safe: call from the
// thread that runs the test case, as Catch2's own macros.

#include <catch2/catch.hpp>
#include <sstream>
#include <string>

namespace triald::testing {

// The exit code of a test executable whose run skipped a case and failed none.
inline constexpr int kSkipExitCode = 77;

// Records one skip (tests/catch_main.cc reports it when the run ends).
void RecordSkip(const std::string& reason);

}  // namespace triald::testing

// `message` is streamed, as in Catch2's INFO: TRIALD_SKIP("no pids controller: " << line).
// Returns from the enclosing function, which must return void (a TEST_CASE body does).
#define TRIALD_SKIP(message)                                 \
  do {                                                       \
    std::ostringstream triald_skip_reason;                   \
    triald_skip_reason << message;                           \
    ::triald::testing::RecordSkip(triald_skip_reason.str()); \
    WARN("SKIPPED: " << triald_skip_reason.str());           \
    return;                                                  \
  } while (false)
