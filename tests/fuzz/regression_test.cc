// Replays every committed fuzz input — the seed corpus and each crash the fuzzers ever found
// (tests/fuzz/regressions/<target>/) — through the fuzz targets in the normal (gcc) build, so a
// decoder bug that was fixed stays fixed even where the clang fuzz build is not run.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/fuzz/targets.h"

namespace triald::fuzz {
namespace fs = std::filesystem;

namespace {

using Target = common::Status (*)(std::string_view);

// Runs `target` on every file under tests/fuzz/<kind>/<name>/; returns how many it ran.
int Replay(const std::string& kind, const std::string& name, Target target) {
  fs::path dir = fs::path(TRIALD_SOURCE_DIR) / "tests/fuzz" / kind / name;
  int n = 0;
  if (!fs::is_directory(dir)) return 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    common::Status st = target(data);
    INFO(e.path().string());
    CHECK(st.ToString() == "ok");
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("fuzz regressions and seed corpus: report lines", "[fuzz][proto]") {
  CHECK(Replay("corpus", "report", CheckReportStream) > 0);
  Replay("regressions", "report", CheckReportStream);
}

TEST_CASE("fuzz regressions and seed corpus: control requests", "[fuzz][proto]") {
  CHECK(Replay("corpus", "control", CheckControlRequest) > 0);
  Replay("regressions", "control", CheckControlRequest);
}

TEST_CASE("fuzz regressions and seed corpus: sweep files", "[fuzz][config]") {
  CHECK(Replay("corpus", "sweep", CheckSweep) > 0);
  Replay("regressions", "sweep", CheckSweep);
}

}  // namespace triald::fuzz
