// trial-worker's command line: both option forms (--opt value and --opt=value), its help, and
// errors that name the option (exit 1, as every trial-worker error).
#include <catch2/catch.hpp>

#include "tests/integration/harness.h"
#include "tests/worker/child_run.h"

namespace triald::testing {
namespace {

using worker::testing::RunChild;

const char kParams[] = R"(TRIALD_PARAMS={"value":4.5})";
const char kFinal[] = "{\"type\":\"final\",\"value\":4.5E0}\n";

}  // namespace

TEST_CASE("trial-worker takes --opt=value as well as --opt value", "[cli][worker]") {
  const std::string worker = BinDir() + "/trial-worker";
  auto spaced = RunChild({worker, "--objective", "echo"}, {kParams});
  CHECK(spaced.exit_code == 0);
  CHECK(spaced.report == kFinal);
  auto joined = RunChild({worker, "--objective=echo"}, {kParams});
  CHECK(joined.exit_code == 0);
  CHECK(joined.report == kFinal);
  // --config reaches the objective in both forms (echo refuses settings it does not take).
  for (std::vector<std::string> config :
       {std::vector<std::string>{"--config", "{}"}, std::vector<std::string>{"--config={}"}}) {
    std::vector<std::string> argv = {worker, "--objective=echo"};
    argv.insert(argv.end(), config.begin(), config.end());
    auto refused = RunChild(argv, {kParams});
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.report, Catch::Contains("objective echo takes no --config"));
  }
}

TEST_CASE("trial-worker's command-line errors name the option, exit 1", "[cli][worker]") {
  const std::string worker = BinDir() + "/trial-worker";
  auto unknown = RunChild({worker, "--bogus"}, {kParams});
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.err, Catch::StartsWith("trial-worker: ") && Catch::Contains("--bogus"));
  CHECK(unknown.report.empty());  // nothing ran
  auto missing = RunChild({worker, "--objective"}, {kParams});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::StartsWith("trial-worker: --objective"));
  auto help = RunChild({worker, "--help"}, {});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("--objective NAME") && Catch::Contains("--config JSON") &&
                           Catch::Contains("quadratic-sgd") &&
                           Catch::Contains("trial-worker inspect MODEL_DIR"));
}

}  // namespace triald::testing
