// A short kind = "lm" sweep end to end through a real triald: the daemon runs the built-in
// LibTorch trial-worker, one process per trial, on the tiny GPT-2 fixture.
#include <catch2/catch.hpp>
#include <sstream>

#include "daemon/ctl/client.h"
#include "tests/integration/harness.h"
#include "tests/worker/fixtures.h"

namespace triald::testing {
namespace json = boost::json;

TEST_CASE("a kind = \"lm\" sweep fine-tunes the tiny GPT-2 in isolated trials",
          "[lm][integration]") {
  const std::string fixtures = worker::testing::FixtureDir();
  const std::string corpus = worker::testing::TinyCorpusDir();
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  std::ostringstream toml;
  toml << "[study]\nname = \"lm-e2e\"\nn_trials = 4\nparallelism = 2\n\n"
       << "[objective]\nkind = \"lm\"\nmodel = \"" << fixtures << "/tiny-gpt2\"\n"
       << "train_file = \"" << corpus << "/train.txt\"\neval_file = \"" << corpus
       << "/eval.txt\"\nmax_steps = 6\nseq_len = 32\neval_every = 3\ndevice = \"cpu\"\n"
       << "batch_size = 4\n\n"
       << "[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\nhigh = 1e-2\nlog = true\n\n"
       << "[sampler]\nkind = \"random\"\nseed = 3\n";
  d.Submit(toml.str(), dir.Write("lm.toml", toml.str()));
  json::object status = d.WaitStudy("lm-e2e", 300);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("lm-e2e");
  REQUIRE(trials.size() == 4);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK(t.at("state").as_string() == "COMPLETE");
    double loss = t.at("value").to_number<double>();
    CHECK(loss > 0);
    CHECK(loss < 20);
    // Evaluations at steps 3 and 6 arrive as intermediate values; the final is the last one.
    CHECK(t.at("intermediate").as_array().size() == 2);
    CHECK(t.at("attrs").as_object().contains("params"));
    CHECK(t.at("attrs").at("device").as_string() == "cpu");
  }
  CHECK(WaitNoProcessesOfStudy("lm-e2e").empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

TEST_CASE("a kind = \"lm\" sweep naming a missing model folder is refused at submit",
          "[lm][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 1);
  d.Start();
  std::string toml =
      "[study]\nname = \"lm-bad\"\nn_trials = 1\n\n[objective]\nkind = \"lm\"\n"
      "model = \"no-such-model\"\ntrain_file = \"t.txt\"\neval_file = \"e.txt\"\n\n"
      "[space.learning_rate]\ntype = \"float\"\nlow = 1e-4\nhigh = 1e-2\n";
  std::string path = dir.Write("bad.toml", toml);
  auto c = ctl::Client::Connect(d.socket());
  REQUIRE(c.ok());
  auto r = c->Call("submit", {{"sweep", toml}, {"path", path}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains(path + ": [objective] model = \""));
  CHECK_THAT(r.status().message(), Catch::Contains("no-such-model"));
  CHECK(d.Call("studies").as_array().empty());
}

}  // namespace triald::testing
