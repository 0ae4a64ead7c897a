// The main of every Catch2 test executable: Catch2's own, plus the skip exit code of
// tests/support/skip.h.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/support/skip.h"

namespace triald::testing {
namespace {

std::vector<std::string>& Skips() {
  static std::vector<std::string> skips;
  return skips;
}

}  // namespace

void RecordSkip(const std::string& reason) {
  Skips().push_back(Catch::getResultCapture().getCurrentTestName() + ": " + reason);
}

}  // namespace triald::testing

int main(int argc, char* argv[]) {
  int failed = Catch::Session().run(argc, argv);  // failed test cases, at most 255
  // 77 failures must not read as a skip.
  if (failed == triald::testing::kSkipExitCode) ++failed;
  const std::vector<std::string>& skips = triald::testing::Skips();
  if (failed != 0 || skips.empty()) return failed;
  for (const std::string& s : skips) std::fprintf(stderr, "SKIPPED %s\n", s.c_str());
  std::fprintf(stderr, "%zu skip(s), no failure: exit code %d (skipped)\n", skips.size(),
               triald::testing::kSkipExitCode);
  return triald::testing::kSkipExitCode;
}
