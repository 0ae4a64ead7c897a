// A short kind = "lm" sweep end to end through a real triald: the daemon runs the built-in
// LibTorch trial-worker, one process per trial, on the tiny GPT-2 fixture.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "daemon/ctl/client.h"
#include "tests/integration/harness.h"
#include "tests/worker/fixtures.h"

namespace triald::testing {
namespace json = boost::json;

TEST_CASE("a kind = \"lm\" sweep fine-tunes the tiny GPT-2 in isolated trials",
          "[lm][integration]") {
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  const std::string toml = worker::testing::TinyLmSweep("lm-e2e", 4, 2);
  d.Submit(toml, dir.Write("lm.toml", toml));
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
    // Planned against measured: the worker's plan beside the peak triald measured. On the CPU
    // the trial holds at least what the plan counts (parameters, gradients, AdamW's moments
    // and activations all live in its memory), plus LibTorch itself.
    const json::object& resources = t.at("resources").as_object();
    const double planned = resources.at("planned_memory_bytes").to_number<double>();
    CHECK(planned == t.at("attrs").at("planned_memory_bytes").to_number<double>());
    CHECK(planned > 0);
    CHECK(resources.at("peak_memory_bytes").to_number<double>() > planned);
    CHECK(resources.at("cpu_time_s").to_number<double>() > 0);
  }
  CHECK(WaitNoProcessesOfStudy("lm-e2e").empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Replaces the one line of `toml` that is exactly `from` by `to`; fails the test if there is
// none, so an override cannot silently stop applying when the example changes.
void Override(std::string& toml, const std::string& from, const std::string& to) {
  const size_t at = toml.find("\n" + from + "\n");
  INFO("line '" << from << "' in the example");
  REQUIRE(at != std::string::npos);
  toml.replace(at + 1, from.size(), to);
}

}  // namespace

// The real effect a learning-rate sweep is for: from a briefly pretrained checkpoint, fine-tuning
// on unseen licenses with a tiny learning rate leaves the evaluation loss where it started, a
// moderate one lowers it clearly, and a huge one does worse than the moderate one. One study
// per learning rate (the rates are fixed: a sampler would pick others), all through one daemon
// running two trials at a time.
TEST_CASE("fine-tuning the pretrained tiny GPT-2: good learning rates beat bad ones",
          "[lm][integration]") {
  const std::string fixtures = worker::testing::FixtureDir();
  TempDir dir;
  TestDaemon d(dir.File("state"), 2);
  d.Start();
  const std::vector<std::string> rates = {"1e-5", "1e-3", "3e-2", "0.3"};
  for (const std::string& lr : rates) {
    std::ostringstream toml;
    toml << "[study]\nname = \"lr-" << lr << "\"\nn_trials = 1\n\n"
         << "[objective]\nkind = \"lm\"\nmodel = \"" << fixtures << "/tiny-gpt2-pretrained\"\n"
         << "train_file = \"" << fixtures << "/licenses/train.txt\"\n"
         << "eval_file = \"" << fixtures << "/licenses/eval.txt\"\n"
         << "max_steps = 30\nseq_len = 32\neval_every = 10\ndevice = \"cpu\"\n"
         << "batch_size = 8\nwarmup_steps = 3\nlr_schedule = \"constant\"\n\n"
         << "[space.learning_rate]\ntype = \"float\"\nlow = " << lr << "\nhigh = " << lr << "\n";
    d.Submit(toml.str(), dir.Write("lr-" + lr + ".toml", toml.str()));
  }
  std::map<std::string, double> loss, initial;
  for (const std::string& lr : rates) {
    json::object status = d.WaitStudy("lr-" + lr, 600);
    CHECK(status.at("state").as_string() == "COMPLETE");
    json::array trials = d.Trials("lr-" + lr);
    REQUIRE(trials.size() == 1);
    const json::object& t = trials[0].as_object();
    INFO(json::serialize(t));
    REQUIRE(t.at("state").as_string() == "COMPLETE");
    loss[lr] = t.at("value").to_number<double>();
    initial[lr] = t.at("attrs").at("initial_eval_loss").to_number<double>();
  }
  std::ostringstream table;
  for (const std::string& lr : rates) {
    table << "lr " << lr << ": eval loss " << initial[lr] << " -> " << loss[lr] << "\n";
  }
  INFO(table.str());
  // Every trial starts from the same checkpoint and so the same loss, which pretraining has
  // brought well below a random model's ln(50257) = 10.8.
  for (const std::string& lr : rates) CHECK(initial[lr] == Approx(initial["1e-5"]).epsilon(1e-9));
  CHECK(initial["1e-5"] < 8.0);
  // 1e-5 for 30 steps barely moves the model.
  CHECK(std::abs(loss["1e-5"] - initial["1e-5"]) < 0.05);
  // A good rate gains clearly; the best is neither extreme.
  const double best = std::min({loss["1e-3"], loss["3e-2"]});
  CHECK(best < initial["1e-5"] - 0.4);
  CHECK(loss["3e-2"] < loss["1e-3"]);
  CHECK(loss["0.3"] > best + 0.4);
  CHECK(WaitNoProcessesOfStudy("lr-0.3").empty());
  CHECK(ZombieChildren(d.pid()).empty());
}

// config/examples/lm-finetune.toml, the demo's sweep, run as it is written except for a
// shorter budget, so the example cannot rot. Its relative paths (../../tests/fixtures/...)
// resolve against the path the sweep is submitted under, which here is a copy of the layout
// pointing at the fixtures this build made.
TEST_CASE("the lm-finetune example sweep runs end to end", "[lm][integration][examples]") {
  namespace fs = std::filesystem;
  const std::string fixtures = worker::testing::FixtureDir();
  TempDir dir;
  fs::create_directories(dir.File("root/config/examples"));
  fs::create_directories(dir.File("root/tests"));
  fs::create_directory_symlink(fixtures, dir.File("root/tests/fixtures"));
  std::string toml = ReadText(std::string(TRIALD_SOURCE_DIR) + "/config/examples/lm-finetune.toml");
  Override(toml, "n_trials = 12", "n_trials = 4");
  Override(toml, "max_steps = 30", "max_steps = 4");
  Override(toml,
           "eval_every = 10  # the evaluation loss at steps 10, 20, 30 is what the pruner sees",
           "eval_every = 2");
  Override(toml, "n_startup_trials = 6", "n_startup_trials = 2");
  Override(toml, "n_warmup_steps = 10", "n_warmup_steps = 2");
  const std::string path = dir.Write("root/config/examples/lm-finetune.toml", toml);

  TestDaemon d(dir.File("state"), 2);
  d.Start();
  REQUIRE(d.Submit(toml, path) == "lm-finetune");
  json::object status = d.WaitStudy("lm-finetune", 600);
  CHECK(status.at("state").as_string() == "COMPLETE");
  json::array trials = d.Trials("lm-finetune");
  REQUIRE(trials.size() == 4);
  for (const json::value& v : trials) {
    const json::object& t = v.as_object();
    INFO(json::serialize(t));
    CHECK((t.at("state").as_string() == "COMPLETE" || t.at("state").as_string() == "PRUNED"));
    CHECK(t.at("params").as_object().contains("learning_rate"));
    CHECK(t.at("params").as_object().contains("lr_schedule"));
  }
  json::value best = d.Call("best", {{"study", "lm-finetune"}});
  INFO(json::serialize(best));
  const double value = best.at("value").to_number<double>();
  CHECK(value > 0);
  CHECK(value < best.at("attrs").at("initial_eval_loss").to_number<double>() + 1.0);
  CHECK(WaitNoProcessesOfStudy("lm-finetune").empty());
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
