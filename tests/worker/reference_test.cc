// Numerics cross-check: trial-worker's C++ GPT-2 against an independent forward pass written
// with Python PyTorch 1.13 (scripts/reference_gpt2.py, Debian's python3-torch), both reading the
// same fixture checkpoint.
#include <torch/torch.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <iterator>

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

}  // namespace triald::worker::testing
