// Numerics cross-check: trial-worker's C++ GPT-2 against an independent forward pass and training
// loop written with Python PyTorch 1.13 (scripts/reference_gpt2.py, Debian's python3-torch), both
// reading the same fixture checkpoint.
#include <torch/torch.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "tests/support/temp_dir.h"
#include "tests/worker/child_run.h"
#include "tests/worker/fixtures.h"
#include "worker/gpt2.h"
#include "worker/safetensors.h"
#include "worker/tokenizer.h"

namespace triald::worker::testing {

TEST_CASE("the C++ GPT-2 gives the same logits as a Python PyTorch reference",
          "[worker][lm][reference]") {
  const std::string variant = GENERATE(std::string("tiny-gpt2"), std::string("tiny-gpt2-bf16"));
  const std::string model_dir = FixtureDir() + "/" + variant;
  auto config = LoadGpt2Config(model_dir + "/config.json");
  REQUIRE(config.ok());
  auto file = SafetensorsFile::Open(model_dir + "/model.safetensors");
  REQUIRE(file.ok());
  std::shared_ptr<Gpt2Model> model = BuildGpt2Skeleton(*config, 0.0);
  REQUIRE(LoadGpt2Weights(*model, *file, torch::Device(torch::kCPU)).ok());
  model->eval();

  auto tok = Gpt2Tokenizer::Load(model_dir + "/vocab.json", model_dir + "/merges.txt");
  REQUIRE(tok.ok());
  std::vector<int32_t> ids = tok->Encode(
      "The kettle sang on the stove while rain drummed on the window, and we'll "
      "count 1, 2, 3... before it's done.");
  REQUIRE(ids.size() > 16);
  torch::Tensor input =
      torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kLong).unsqueeze(0);
  torch::Tensor ours;
  {
    torch::NoGradGuard no_grad;
    ours = model->forward(input).squeeze(0).contiguous();
  }

  triald::testing::TempDir dir;
  boost::json::array arr;
  for (int32_t id : ids) arr.push_back(id);
  std::string ids_path = dir.Write("ids.json", boost::json::serialize(arr));
  std::string out_path = dir.File("logits.f32");
  ChildResult r =
      RunChild({"/usr/bin/python3", std::string(TRIALD_SOURCE_DIR) + "/scripts/reference_gpt2.py",
                model_dir, ids_path, out_path},
               {"PATH=/usr/bin:/bin"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(out_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() == static_cast<size_t>(ours.numel()) * sizeof(float));
  torch::Tensor theirs = torch::empty_like(ours);
  std::memcpy(theirs.data_ptr<float>(), bytes.data(), bytes.size());
  double max_diff = (ours - theirs).abs().max().item<double>();
  INFO(variant << ": max |C++ - Python| = " << max_diff);
  CHECK(max_diff <= 1e-4);
  // Not trivially equal: the logits vary across positions and vocabulary.
  CHECK(ours.std().item<double>() > 1e-3);
}

// Five AdamW steps through the trial's own training code (trial-worker train: PrepareLm, TrainLm),
// replayed in Python on the same batches with torch.optim.AdamW: warmup and a cosine schedule,
// decoupled weight decay on the matrices only, gradient clipping that bites, dropout 0.
TEST_CASE("five AdamW steps give the same losses in C++ and in Python PyTorch",
          "[worker][lm][reference]") {
  const std::string fixtures = FixtureDir();
  const std::string model_dir = fixtures + "/tiny-gpt2";
  triald::testing::TempDir dir;
  const std::string params =
      R"({"learning_rate":0.01,"weight_decay":0.1,"warmup_steps":2,"batch_size":4,)"
      R"("lr_schedule":"cosine","grad_clip":0.5,"adam_beta2":0.99,"seed":5})";
  ChildResult ours = RunChild(
      {std::string(TRIALD_BIN_DIR) + "/trial-worker", "train", model_dir,
       fixtures + "/licenses/train.txt", fixtures + "/licenses/eval.txt", "--steps", "5",
       "--seq-len", "32", "--device", "cpu", "--params", params, "--batches", "--no-initial-eval"},
      {"PATH=/usr/bin:/bin"});
  INFO(ours.err);
  REQUIRE(ours.exit_code == 0);
  const std::string run_path = dir.Write("run.jsonl", ours.out);
  std::vector<double> lrs, losses;
  double eval_loss = -1;
  {
    std::ifstream in(run_path);
    std::string line;
    while (std::getline(in, line)) {
      boost::json::object o = boost::json::parse(line).as_object();
      if (o.at("type") == "step") {
        lrs.push_back(o.at("lr").to_number<double>());
        losses.push_back(o.at("loss").to_number<double>());
      } else if (o.at("type") == "summary") {
        eval_loss = o.at("eval_loss").to_number<double>();
        CHECK(o.at("hyperparams").at("weight_decay").to_number<double>() == 0.1);
      }
    }
  }
  REQUIRE(losses.size() == 5);

  const std::string out_path = dir.File("reference.json");
  ChildResult r =
      RunChild({"/usr/bin/python3", std::string(TRIALD_SOURCE_DIR) + "/scripts/reference_gpt2.py",
                "train", model_dir, run_path, out_path},
               {"PATH=/usr/bin:/bin"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(out_path);
  boost::json::object theirs =
      boost::json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
  const boost::json::array& their_losses = theirs.at("loss").as_array();
  const boost::json::array& their_lrs = theirs.at("lr").as_array();
  REQUIRE(their_losses.size() == 5);
  std::ostringstream table;
  for (size_t i = 0; i < 5; ++i) {
    table << "step " << i + 1 << ": lr " << lrs[i] << " / " << their_lrs[i] << ", loss "
          << losses[i] << " / " << their_losses[i] << "\n";
  }
  table << "eval loss after 5 steps: " << eval_loss << " / " << theirs.at("eval_loss");
  INFO(table.str());
  for (size_t i = 0; i < 5; ++i) {
    CHECK(lrs[i] == Approx(their_lrs[i].to_number<double>()).epsilon(1e-12));
    CHECK(losses[i] == Approx(their_losses[i].to_number<double>()).epsilon(1e-4));
  }
  CHECK(eval_loss == Approx(theirs.at("eval_loss").to_number<double>()).epsilon(1e-4));
  // The steps did something: the loss fell well beyond the tolerance.
  CHECK(losses[4] < losses[0] - 0.2);
}

}  // namespace triald::worker::testing
