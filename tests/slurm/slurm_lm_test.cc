// kind = "lm" as Slurm jobs: the built-in LibTorch trial-worker runs on the node through the
// relay, unchanged, on the tiny GPT-2 fixture (built only with the worker, TRIALD_BUILD_WORKER).
// The cluster is the `slurm` fixture's; see slurm_executor_test.cc.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "tests/integration/harness.h"
#include "tests/support/skip.h"
#include "tests/worker/fixtures.h"

namespace triald::testing {
namespace json = boost::json;

TEST_CASE("slurm: a kind = \"lm\" study fine-tunes the tiny GPT-2 in Slurm jobs", "[slurm][lm]") {
  if (::geteuid() != 0) TRIALD_SKIP("the test Slurm cluster needs root");
  REQUIRE(std::getenv("SLURM_CONF") != nullptr);
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  const std::string toml =
      worker::testing::TinyLmSweep("lm-slurm", 2, 2) + "\n[executor]\nkind = \"slurm\"\n";
  d.Submit(toml, dir.Write("lm.toml", toml));
  json::object status = d.WaitStudy("lm-slurm", 300);
  INFO(d.log());
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("lm-slurm");
  REQUIRE(trials.size() == 2);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
    const double loss = t.at("value").to_number<double>();
    CHECK(loss > 0);
    CHECK(loss < 20);
    // Its evaluations crossed srun as intermediate values, its attributes as attributes.
    CHECK(t.at("intermediate").as_array().size() == 2);
    CHECK(t.at("attrs").at("device").as_string() == "cpu");
    CHECK(t.at("attrs").at("triald.slurm").at("node").as_string() == "triald-node");
  }
}

}  // namespace triald::testing
