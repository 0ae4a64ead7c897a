// trial-worker's model tools (tokenize, inspect, check) as a user runs them.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "tests/worker/child_run.h"
#include "tests/worker/fixtures.h"
#include "worker/gpt2.h"
#include "worker/tokenizer.h"

namespace triald::worker::testing {
namespace {

namespace fs = std::filesystem;

std::string Worker() { return std::string(TRIALD_BIN_DIR) + "/trial-worker"; }

ChildResult Run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {Worker()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunChild(argv, {"PATH=/usr/bin:/bin"});
}

}  // namespace

TEST_CASE("trial-worker tokenize prints the tokenizer's ids for stdin", "[worker][tools]") {
  const std::string model = FixtureDir() + "/tiny-gpt2";
  triald::testing::TempDir dir;
  const std::string text = "Hello world, it's 2024!\n  Zürich\tcafé 中文 😀";
  std::string input = dir.Write("in.txt", text);
  ChildResult r =
      RunChild({"/bin/sh", "-c", "\"$0\" tokenize \"$1\" < \"$2\"", Worker(), model, input},
               {"PATH=/usr/bin:/bin"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto tok = Gpt2Tokenizer::Load(model + "/vocab.json", model + "/merges.txt");
  REQUIRE(tok.ok());
  boost::json::array expected;
  for (int32_t id : tok->Encode(text)) expected.push_back(id);
  CHECK(r.out == boost::json::serialize(expected) + "\n");
}

TEST_CASE("trial-worker inspect plans memory from config.json alone", "[worker][tools]") {
  const std::string model = FixtureDir() + "/tiny-gpt2";
  ChildResult r = Run({"inspect", model, "--batch-size", "4", "--seq-len", "32"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  boost::json::object o = boost::json::parse(r.out).as_object();
  auto config = LoadGpt2Config(model + "/config.json");
  REQUIRE(config.ok());
  Gpt2MemoryPlan plan = PlanGpt2Memory(*BuildGpt2Skeleton(*config, 0.0), 4, 32);
  CHECK(o.at("params").as_int64() == plan.params);
  CHECK(o.at("planned_memory_bytes").as_int64() == plan.total_bytes);
  // 2 layers x 32 wide, GPT-2's 50257-token vocabulary, 128 positions.
  CHECK(plan.params == 50257 * 32 + 128 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32);
  CHECK(o.at("meta_tensors").as_int64() > 0);  // nothing was allocated

  ChildResult too_long = Run({"inspect", model, "--seq-len", "999"});
  CHECK(too_long.exit_code == 1);
  CHECK_THAT(too_long.err, Catch::Contains("n_positions 128"));
  CHECK(Run({"inspect", model, "--batch-size", "zero"}).exit_code == 2);
}

TEST_CASE("trial-worker check loads the checkpoint and names what is missing", "[worker][tools]") {
  const std::string model = FixtureDir() + "/tiny-gpt2";
  ChildResult ok = Run({"check", model});
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Catch::StartsWith("ok: 30 tensors"));

  // The same weights under a config that asks for a third layer: h.2.* is missing.
  triald::testing::TempDir dir;
  for (const char* f : {"model.safetensors", "vocab.json", "merges.txt"}) {
    fs::copy_file(model + "/" + f, dir.File(f));
  }
  std::ifstream in(model + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  boost::json::object config = boost::json::parse(ss.str()).as_object();
  config["n_layer"] = 3;
  dir.Write("config.json", boost::json::serialize(config));
  ChildResult missing = Run({"check", dir.path()});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("h.2.attn.c_attn.weight"));
}

}  // namespace triald::worker::testing
