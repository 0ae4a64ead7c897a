// trial-worker's model tools (tokenize, inspect, check) as a user runs them.
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "tests/worker/child_run.h"
#include "tests/worker/fixtures.h"
#include "worker/gpt2.h"
#include "worker/safetensors.h"
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
  Gpt2MemoryPlan plan = PlanGpt2Memory(*BuildGpt2Skeleton(*config, 0.0), 4, 32).value();
  CHECK(o.at("params").as_int64() == plan.params);
  CHECK(o.at("planned_memory_bytes").as_int64() == plan.total_bytes);
  // 2 layers x 32 wide, GPT-2's 50257-token vocabulary, 128 positions.
  CHECK(plan.params == 50257 * 32 + 128 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32);
  CHECK(o.at("meta_tensors").as_int64() > 0);  // nothing was allocated

  ChildResult too_long = Run({"inspect", model, "--seq-len", "999"});
  CHECK(too_long.exit_code == 1);
  CHECK_THAT(too_long.err, Catch::Contains("n_positions 128"));
  ChildResult zero = Run({"inspect", model, "--batch-size", "zero"});
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.err, Catch::StartsWith("trial-worker: --batch-size: \"zero\": expected a "
                                         "positive integer"));
}

TEST_CASE("trial-worker inspect takes --opt=value as well as --opt value", "[worker][tools]") {
  const std::string model = FixtureDir() + "/tiny-gpt2";
  ChildResult spaced = Run({"inspect", model, "--batch-size", "4", "--seq-len", "32"});
  ChildResult joined = Run({"inspect", model, "--batch-size=4", "--seq-len=32"});
  INFO(joined.err);
  REQUIRE(spaced.exit_code == 0);
  REQUIRE(joined.exit_code == 0);
  CHECK(joined.out == spaced.out);
  boost::json::object o = boost::json::parse(joined.out).as_object();
  CHECK(o.at("batch_size").as_int64() == 4);
  CHECK(o.at("seq_len").as_int64() == 32);
  // Given twice, an option keeps its last value.
  ChildResult twice = Run({"inspect", model, "--seq-len=999", "--batch-size", "4", "--seq-len=32"});
  CHECK(twice.out == spaced.out);

  ChildResult bad = Run({"inspect", model, "--seq-len=0"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::StartsWith("trial-worker: --seq-len: \"0\": expected a positive "
                                        "integer"));
  CHECK(bad.out.empty());
  ChildResult no_value = Run({"inspect", model, "--batch-size"});
  CHECK(no_value.exit_code == 2);
  CHECK_THAT(no_value.err, Catch::StartsWith("trial-worker: --batch-size"));
}

TEST_CASE("trial-worker's tools refuse what they do not declare, naming it", "[worker][tools]") {
  const std::string model = FixtureDir() + "/tiny-gpt2";
  for (const char* tool : {"tokenize", "inspect", "check"}) {
    INFO(tool);
    ChildResult unknown = Run({tool, model, "--bogus=1"});
    CHECK(unknown.exit_code == 2);
    CHECK_THAT(unknown.err, Catch::StartsWith("trial-worker: ") && Catch::Contains("--bogus"));
    ChildResult extra = Run({tool, model, "surplus"});
    CHECK(extra.exit_code == 2);
    CHECK_THAT(extra.err, Catch::StartsWith("trial-worker: ") && Catch::Contains("surplus"));
    ChildResult no_model = Run({tool});
    CHECK(no_model.exit_code == 2);
    CHECK_THAT(no_model.err, Catch::StartsWith("trial-worker: ") && Catch::Contains("MODEL_DIR"));
  }
}

TEST_CASE("trial-worker TOOL --help comes from the tool's declarations", "[worker][tools]") {
  std::map<std::string, std::vector<std::string>> expected = {
      {"tokenize", {"trial-worker tokenize", "MODEL_DIR"}},
      {"inspect", {"trial-worker inspect", "MODEL_DIR", "--batch-size B", "--seq-len L"}},
      {"check", {"trial-worker check", "MODEL_DIR"}},
      {"train",
       {"trial-worker train", "MODEL_DIR", "TRAIN_FILE", "EVAL_FILE", "--steps N", "--seq-len L",
        "--eval-every N", "--device D", "--params JSON", "--save OUT_DIR", "--batches",
        "--no-initial-eval"}},
  };
  for (const auto& [tool, parts] : expected) {
    INFO(tool);
    for (const char* flag : {"--help", "-h"}) {
      ChildResult help = Run({tool, flag});
      CHECK(help.exit_code == 0);
      CHECK(help.err.empty());
      for (const std::string& part : parts) CHECK_THAT(help.out, Catch::Contains(part));
    }
  }
  // trial-worker --help lists each tool's synopsis, made from the same declarations.
  ChildResult top = Run({"--help"});
  CHECK(top.exit_code == 0);
  CHECK_THAT(top.out, Catch::Contains("trial-worker inspect MODEL_DIR [--batch-size B] "
                                      "[--seq-len L]") &&
                          Catch::Contains("trial-worker train MODEL_DIR TRAIN_FILE EVAL_FILE "
                                          "[--steps N]") &&
                          Catch::Contains("[--no-initial-eval]") &&
                          Catch::Contains("trial-worker tokenize MODEL_DIR < text"));
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

// Every JSON line of a `train` run, by type.
std::map<std::string, std::vector<boost::json::object>> TrainLines(const std::string& out) {
  std::map<std::string, std::vector<boost::json::object>> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    boost::json::object o = boost::json::parse(line).as_object();
    lines[std::string(o.at("type").as_string())].push_back(o);
  }
  return lines;
}

TEST_CASE("trial-worker train trains as a trial would and saves a model that loads",
          "[worker][tools]") {
  const std::string fixtures = FixtureDir();
  const std::string model = fixtures + "/tiny-gpt2";
  const std::string train = fixtures + "/licenses/train.txt";
  const std::string eval = fixtures + "/licenses/eval.txt";
  triald::testing::TempDir dir;
  const std::string out = dir.File("trained");
  ChildResult r = Run({"train", model, train, eval, "--steps", "3", "--seq-len", "16",
                       "--eval-every", "2", "--device", "cpu", "--params",
                       R"({"learning_rate":0.01,"batch_size":2})", "--save", out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto lines = TrainLines(r.out);
  REQUIRE(lines["step"].size() == 3);
  CHECK(lines["step"][2].at("step").as_int64() == 3);
  CHECK(lines["step"][0].at("lr").to_number<double>() == 0.01);  // no warmup, linear decay
  CHECK(lines["step"][0].at("loss").to_number<double>() > 5);
  CHECK_FALSE(lines["step"][0].contains("windows"));  // only with --batches
  REQUIRE(lines["eval"].size() == 2);                 // steps 2 and 3
  REQUIRE(lines["summary"].size() == 1);
  const boost::json::object& summary = lines["summary"][0];
  const double trained_loss = summary.at("eval_loss").to_number<double>();
  CHECK(trained_loss == lines["eval"][1].at("loss").to_number<double>());
  CHECK(summary.at("tokens_seen").as_int64() == 3 * 2 * 16);
  CHECK(summary.at("saved").as_string() == out + "/");
  bool initial = false;
  for (const auto& attr : lines["attr"]) initial |= attr.at("key") == "initial_eval_loss";
  CHECK(initial);

  // The saved folder is a complete model: the checker accepts it, its weights are the trained
  // ones, and evaluating it afresh gives the loss training ended with.
  ChildResult check = Run({"check", out});
  INFO(check.err);
  CHECK(check.exit_code == 0);
  auto before = SafetensorsFile::Open(model + "/model.safetensors");
  auto after = SafetensorsFile::Open(out + "/model.safetensors");
  REQUIRE(before.ok());
  REQUIRE(after.ok());
  const TensorView* w0 = before->Find("h.0.attn.c_attn.weight");
  const TensorView* w1 = after->Find("h.0.attn.c_attn.weight");
  REQUIRE(w0 != nullptr);
  REQUIRE(w1 != nullptr);
  CHECK(w0->shape == w1->shape);
  CHECK(std::memcmp(w0->data, w1->data, w0->bytes) != 0);
  ChildResult again = Run({"train", out, train, eval, "--steps", "1", "--seq-len", "16", "--device",
                           "cpu", "--params", R"({"batch_size":2})"});
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  auto again_lines = TrainLines(again.out);
  double reloaded = -1;
  for (const auto& attr : again_lines["attr"]) {
    if (attr.at("key") == "initial_eval_loss") reloaded = attr.at("value").to_number<double>();
  }
  CHECK(reloaded == Approx(trained_loss).epsilon(1e-6));
}

TEST_CASE("trial-worker train refuses bad arguments by name", "[worker][tools]") {
  const std::string fixtures = FixtureDir();
  const std::string model = fixtures + "/tiny-gpt2";
  const std::string train = fixtures + "/licenses/train.txt";
  const std::string eval = fixtures + "/licenses/eval.txt";
  ChildResult positionals = Run({"train", model});
  CHECK(positionals.exit_code == 2);
  CHECK_THAT(positionals.err, Catch::StartsWith("trial-worker: ") && Catch::Contains("TRAIN_FILE"));
  // A bad value names its option, in both forms; the numbers are 1 to 2147483647.
  const std::vector<std::vector<std::string>> bad = {
      {"--steps", "0"},       {"--steps=0"},
      {"--steps=2147483648"}, {"--seq-len", "x"},
      {"--seq-len=-1"},       {"--eval-every=1.5"},
      {"--eval-every", ""},   {"--steps=99999999999999999999"}};
  for (const std::vector<std::string>& option : bad) {
    std::vector<std::string> argv = {"train", model, train, eval};
    argv.insert(argv.end(), option.begin(), option.end());
    const std::string name = option[0].substr(0, option[0].find('='));
    INFO(option[0]);
    ChildResult r = Run(argv);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("trial-worker: " + name + ": ") &&
                          Catch::Contains("expected a positive integer (at most 2147483647)"));
    CHECK(r.out.empty());  // nothing ran
  }
  ChildResult no_value = Run({"train", model, train, eval, "--save"});
  CHECK(no_value.exit_code == 2);
  CHECK_THAT(no_value.err, Catch::StartsWith("trial-worker: --save"));
  ChildResult unknown = Run({"train", model, train, eval, "--step=3"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::StartsWith("trial-worker: ") && Catch::Contains("--step"));
  ChildResult typo = Run({"train", model, train, eval, "--params", R"({"learning_rat":1})"});
  CHECK(typo.exit_code == 1);
  CHECK_THAT(typo.err, Catch::Contains("learning_rat"));
  ChildResult onto_itself = Run({"train", model, train, eval, "--steps", "1", "--save", model});
  CHECK(onto_itself.exit_code == 1);
  CHECK_THAT(onto_itself.err, Catch::Contains("is the model folder itself"));
}

TEST_CASE("trial-worker train takes --opt=value as well as --opt value", "[worker][tools]") {
  const std::string fixtures = FixtureDir();
  const std::string model = fixtures + "/tiny-gpt2";
  const std::string train = fixtures + "/licenses/train.txt";
  const std::string eval = fixtures + "/licenses/eval.txt";
  triald::testing::TempDir dir;
  const std::string out = dir.File("trained");
  // Options before, between and after the positional arguments.
  ChildResult r = Run({"train", "--steps=2", model, "--seq-len=16", train, "--eval-every=1", eval,
                       "--device=cpu", R"(--params={"learning_rate":0.01,"batch_size":2})",
                       "--save=" + out, "--batches", "--no-initial-eval"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto lines = TrainLines(r.out);
  REQUIRE(lines["step"].size() == 2);                            // --steps=2
  CHECK(lines["step"][0].at("lr").to_number<double>() == 0.01);  // --params=
  REQUIRE(lines["step"][0].contains("windows"));                 // --batches
  const boost::json::array& rows = lines["step"][0].at("windows").as_array();
  REQUIRE(rows.size() == 2);               // batch_size 2
  CHECK(rows[0].as_array().size() == 17);  // --seq-len=16, + 1 target
  CHECK(lines["eval"].size() == 2);        // --eval-every=1
  REQUIRE(lines["summary"].size() == 1);
  const boost::json::object& summary = lines["summary"][0];
  CHECK(summary.at("seq_len").as_int64() == 16);
  CHECK(summary.at("tokens_seen").as_int64() == 2 * 2 * 16);
  CHECK_FALSE(summary.contains("initial_eval_loss"));  // --no-initial-eval
  CHECK(summary.contains("eval_tokens"));
  CHECK(summary.at("saved").as_string() == out + "/");  // --save=
  CHECK(fs::exists(out + "/model.safetensors"));
  for (const auto& attr : lines["attr"]) CHECK(attr.at("key") != "initial_eval_loss");
  // --device= reaches the trial's device selection: a device it does not know is refused.
  ChildResult device = Run({"train", model, train, eval, "--steps=1", "--device=tpu"});
  CHECK(device.exit_code == 1);
  CHECK_THAT(device.err, Catch::Contains("tpu"));
}

}  // namespace triald::worker::testing
