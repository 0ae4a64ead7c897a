// kind = "lm" as Slurm jobs: the built-in LibTorch trial-worker runs on the node through the
// relay, unchanged, on the tiny GPT-2 fixture (built only with the worker, TRIALD_BUILD_WORKER).
// The cluster is the `slurm` fixture's; see slurm_executor_test.cc.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <string>

#include "tests/integration/harness.h"
#include "tests/support/skip.h"
#include "tests/worker/fixtures.h"

namespace triald::testing {
namespace json = boost::json;

TEST_CASE("slurm: a kind = \"lm\" study fine-tunes the tiny GPT-2 in Slurm jobs", "[slurm][lm]") {
  if (::geteuid() != 0) TRIALD_SKIP("the test Slurm cluster needs root");
  REQUIRE(std::getenv("SLURM_CONF") != nullptr);
  const std::string fixtures = worker::testing::FixtureDir();
  const std::string corpus = worker::testing::TinyCorpusDir();
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  std::ostringstream toml;
  toml << "[study]\nname = \"lm-slurm\"\nn_trials = 2\nparallelism = 2\n\n"
       << "[objective]\nkind = \"lm\"\nmodel = \"" << fixtures << "/tiny-gpt2\"\n"
       << "train_file = \"" << corpus << "/train.txt\"\neval_file = \"" << corpus
       << "/eval.txt\"\nmax_steps = 6\nseq_len = 32\neval_every = 3\ndevice = \"cpu\"\n"
       << "batch_size = 4\n\n"
       << "[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n\n"
       << "[sampler]\nkind = \"random\"\nseed = 3\n\n[executor]\nkind = \"slurm\"\n";
  d.Submit(toml.str(), dir.Write("lm.toml", toml.str()));
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
