// Tests of the language-model objective: GPT-2 in LibTorch, checkpoint loading through the meta
// device, memory planning, device selection, training, and trial-worker --objective lm end to
// end on the tiny fixture checkpoint.
//
// LibTorch's headers come first: they define glog's CHECK macro, which Catch's CHECK replaces.
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "worker/device.h"
#include "worker/gpt2.h"
#include "worker/lm_checkpoint.h"
#include "worker/lm_objective.h"
#undef CHECK

#include <algorithm>
#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "config/sweep.h"
#include "tests/worker/child_run.h"
#include "tests/worker/fixtures.h"
#include "tests/worker/safetensors_writer.h"
#include "worker/safetensors.h"

namespace triald::worker {
namespace {

namespace json = boost::json;
using testing::EncodeSafetensors;
using testing::SafetensorsEntry;
using testing::TempDir;
using testing::WriteBytes;

// vocab 64, 16 positions, 16 wide, 2 heads, 2 layers: small enough to check by hand.
Gpt2Config TinyConfig() {
  Gpt2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 16;
  config.n_positions = 16;
  config.vocab_size = 64;
  config.n_inner = 64;
  config.layer_norm_epsilon = 1e-5;
  return config;
}

const char kTinyConfigJson[] =
    R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 16,
        "vocab_size": 64, "n_inner": null, "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new"})";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A model on the CPU with seeded random weights; LayerNorm scales around 1 so that every
// parameter shapes the output.
std::shared_ptr<Gpt2Model> RandomModel(const Gpt2Config& config, uint64_t seed, double std) {
  auto model =
      std::make_shared<Gpt2Model>(config, 0.0, torch::TensorOptions().dtype(torch::kFloat32));
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& item : model->named_parameters()) {
    const bool layer_norm_scale = EndsWith(item.key(), "ln_1.weight") ||
                                  EndsWith(item.key(), "ln_2.weight") ||
                                  EndsWith(item.key(), "ln_f.weight");
    if (layer_norm_scale) {
      item.value().normal_(1.0, 0.1);
    } else {
      item.value().normal_(0.0, std);
    }
  }
  return model;
}

std::string TensorBytes(const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

std::vector<int64_t> Shape(const torch::Tensor& t) { return t.sizes().vec(); }

struct CheckpointOptions {
  torch::Dtype dtype = torch::kFloat32;
  std::string prefix;        // "transformer." for GPT2LMHeadModel-style names
  std::string skip;          // a parameter to leave out
  bool mask_buffers = true;  // h.{i}.attn.bias / masked_bias, as published checkpoints have
  std::vector<SafetensorsEntry> extra;
};

CheckpointOptions WithPrefix(std::string prefix) {
  CheckpointOptions options;
  options.prefix = std::move(prefix);
  return options;
}
CheckpointOptions Skipping(std::string name) {
  CheckpointOptions options;
  options.skip = std::move(name);
  return options;
}
CheckpointOptions WithExtra(SafetensorsEntry entry, std::string skip = "") {
  CheckpointOptions options;
  options.extra.push_back(std::move(entry));
  options.skip = std::move(skip);
  return options;
}
CheckpointOptions AsDtype(torch::Dtype dtype) {
  CheckpointOptions options;
  options.dtype = dtype;
  return options;
}

const char* DtypeName(torch::Dtype dtype) {
  if (dtype == torch::kFloat16) return "F16";
  if (dtype == torch::kBFloat16) return "BF16";
  return "F32";
}

// The model's parameters laid out as a Hugging Face GPT-2 checkpoint.
std::string Checkpoint(const Gpt2Model& model, const CheckpointOptions& options = {}) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& item : model.named_parameters()) {
    if (item.key() == options.skip) continue;
    entries.push_back({options.prefix + item.key(), DtypeName(options.dtype), Shape(item.value()),
                       TensorBytes(item.value().to(options.dtype))});
  }
  const int64_t n = model.config().n_positions;
  for (int64_t i = 0; options.mask_buffers && i < model.config().n_layer; ++i) {
    torch::Tensor mask = torch::ones({1, 1, n, n}).tril();
    entries.push_back({options.prefix + "h." + std::to_string(i) + ".attn.bias", "F32", Shape(mask),
                       TensorBytes(mask)});
    entries.push_back({options.prefix + "h." + std::to_string(i) + ".attn.masked_bias",
                       "F32",
                       {},
                       TensorBytes(torch::full({}, -1e4))});
  }
  for (const SafetensorsEntry& entry : options.extra) entries.push_back(entry);
  return EncodeSafetensors(entries, {{"format", "pt"}});
}

// Loads `bytes` (a checkpoint) into a fresh skeleton on the CPU.
struct Loaded {
  std::shared_ptr<Gpt2Model> model;
  common::Status status;
};
Loaded LoadBytes(const TempDir& dir, const std::string& bytes, const Gpt2Config& config) {
  std::string path = dir / "model.safetensors";
  WriteBytes(path, bytes);
  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  Loaded loaded{BuildGpt2Skeleton(config, 0.0), common::Status::Ok()};
  loaded.status = LoadGpt2Weights(*loaded.model, *file, torch::kCPU);
  return loaded;
}

torch::Tensor Ids(const std::vector<int64_t>& ids) {
  return torch::tensor(ids, torch::kLong).unsqueeze(0);
}

class RecordingContext : public ObjectiveContext {
 public:
  common::Status OnStep(int64_t step, double value) override {
    steps.push_back(step);
    values.push_back(value);
    return common::Status::Ok();
  }
  common::Status OnAttr(std::string_view key, const json::value& value) override {
    attrs[std::string(key)] = value;
    return common::Status::Ok();
  }
  bool StopRequested() const override {
    return stop_after >= 0 && static_cast<int64_t>(steps.size()) >= stop_after;
  }
  std::vector<int64_t> steps;
  std::vector<double> values;
  std::map<std::string, json::value> attrs;
  int64_t stop_after = -1;
};

// ---- the model ---------------------------------------------------------------------------

TEST_CASE("GPT-2 loads an HF-layout checkpoint and gives logits of the right shape",
          "[worker][lm]") {
  TempDir dir;
  auto original = RandomModel(TinyConfig(), 1, 0.2);
  Loaded loaded = LoadBytes(dir, Checkpoint(*original), TinyConfig());
  INFO(loaded.status.message());
  REQUIRE(loaded.status.ok());
  CHECK(MetaTensorNames(*loaded.model).empty());

  auto originals = original->named_parameters();
  for (const auto& item : loaded.model->named_parameters()) {
    INFO(item.key());
    CHECK(item.value().device().is_cpu());
    CHECK(item.value().requires_grad());
    CHECK(torch::equal(item.value(), originals[item.key()]));
  }

  loaded.model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor ids = torch::tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, torch::kLong).view({2, 5});
  torch::Tensor logits = loaded.model->forward(ids);
  CHECK(logits.sizes().vec() == std::vector<int64_t>{2, 5, 64});
  CHECK(torch::allclose(logits, original->forward(ids)));
  CHECK(logits.isfinite().all().item<bool>());

  // Longer than n_positions is refused, not silently wrapped.
  CHECK_THROWS_WITH(loaded.model->forward(torch::zeros({1, 17}, torch::kLong)),
                    Catch::Contains("longer than the model's n_positions 16"));
}

TEST_CASE("GPT-2 is causal: a later token never changes earlier logits", "[worker][lm]") {
  auto model = RandomModel(TinyConfig(), 2, 0.2);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor a = model->forward(Ids({7, 8, 9, 10, 11, 12}));
  torch::Tensor b = model->forward(Ids({7, 8, 9, 40, 41, 42}));
  CHECK(torch::allclose(a.narrow(1, 0, 3), b.narrow(1, 0, 3), 0, 1e-6));
  CHECK(!torch::allclose(a.narrow(1, 3, 1), b.narrow(1, 3, 1), 1e-3, 1e-3));
  // The prefix alone gives the same logits too.
  torch::Tensor prefix = model->forward(Ids({7, 8, 9}));
  CHECK(torch::allclose(prefix, a.narrow(1, 0, 3), 1e-5, 1e-5));
}

TEST_CASE("GPT-2's LM head is the token embedding, transposed", "[worker][lm]") {
  auto model = RandomModel(TinyConfig(), 3, 0.2);
  model->eval();
  torch::NoGradGuard no_grad;
  for (const auto& item : model->named_parameters()) {
    CHECK(item.key().find("lm_head") == std::string::npos);
  }
  torch::Tensor ids = Ids({1, 2, 3, 4});
  torch::Tensor x = model->wte->forward(ids) + model->wpe->forward(torch::arange(4));
  for (auto& block : model->h) x = block->forward(x);
  x = model->ln_f->forward(x);
  CHECK(torch::allclose(model->forward(ids), torch::matmul(x, model->wte->weight.t()), 1e-5, 1e-5));
  // Changing the embedding changes the head: one tensor, not a copy.
  model->wte->weight.mul_(2);
  CHECK(!torch::allclose(model->forward(ids), torch::matmul(x, model->wte->weight.t()) / 2, 1e-3,
                         1e-3));
}

// One block computed by hand in double precision from the checkpoint's raw tensors, whose
// projections are stored [in, out]: a loader that transposed them (or a Linear that expected
// [out, in]) would give other numbers, even for the square c_proj.
TEST_CASE(
    "A block loaded from a checkpoint matches a hand computation with the raw [in, out] "
    "weights",
    "[worker][lm]") {
  TempDir dir;
  const Gpt2Config config = TinyConfig();
  auto original = RandomModel(config, 4, 0.3);
  Loaded loaded = LoadBytes(dir, Checkpoint(*original, WithPrefix("transformer.")), config);
  INFO(loaded.status.message());
  REQUIRE(loaded.status.ok());
  auto file = SafetensorsFile::Open(dir / "model.safetensors");
  REQUIRE(file.ok());
  auto raw = [&](const std::string& name) {
    const TensorView* view = file->Find("transformer.h.0." + name);
    REQUIRE(view != nullptr);
    auto tensor = TensorFromView(*view);
    REQUIRE(tensor.ok());
    return tensor->to(torch::kFloat64);
  };
  const int64_t C = config.n_embd, H = config.n_head, D = C / H, T = 5;
  using Matrix = std::vector<std::vector<double>>;
  auto matrix = [](const torch::Tensor& t) {  // [rows, cols] as nested vectors
    torch::Tensor c = t.to(torch::kFloat64).contiguous();
    auto a = c.accessor<double, 2>();
    Matrix m(c.size(0), std::vector<double>(c.size(1)));
    for (int64_t i = 0; i < c.size(0); ++i) {
      for (int64_t j = 0; j < c.size(1); ++j) m[i][j] = a[i][j];
    }
    return m;
  };
  auto vec = [&](const std::string& name) { return matrix(raw(name).unsqueeze(0))[0]; };
  torch::manual_seed(5);
  torch::Tensor x_tensor = torch::randn({T, C}, torch::kFloat64);
  const Matrix x = matrix(x_tensor);

  auto layer_norm = [&](const Matrix& in, const std::vector<double>& w,
                        const std::vector<double>& b) {
    Matrix out = in;
    for (size_t t = 0; t < in.size(); ++t) {
      double mean = 0, var = 0;
      for (double v : in[t]) mean += v / C;
      for (double v : in[t]) var += (v - mean) * (v - mean) / C;
      for (int64_t i = 0; i < C; ++i) {
        out[t][i] = (in[t][i] - mean) / std::sqrt(var + config.layer_norm_epsilon) * w[i] + b[i];
      }
    }
    return out;
  };
  // y[t][j] = sum_i x[t][i] W[i][j] + b[j], with W indexed [in][out] as stored.
  auto conv1d = [&](const Matrix& in, const std::string& name) {
    const Matrix w = matrix(raw(name + ".weight"));
    const std::vector<double> b = vec(name + ".bias");
    Matrix out(in.size(), std::vector<double>(b.size()));
    for (size_t t = 0; t < in.size(); ++t) {
      for (size_t j = 0; j < b.size(); ++j) {
        double sum = b[j];
        for (size_t i = 0; i < w.size(); ++i) sum += in[t][i] * w[i][j];
        out[t][j] = sum;
      }
    }
    return out;
  };
  auto add = [](Matrix a, const Matrix& b) {
    for (size_t t = 0; t < a.size(); ++t) {
      for (size_t j = 0; j < a[t].size(); ++j) a[t][j] += b[t][j];
    }
    return a;
  };

  const Matrix qkv = conv1d(layer_norm(x, vec("ln_1.weight"), vec("ln_1.bias")), "attn.c_attn");
  Matrix context(T, std::vector<double>(C, 0.0));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> scores;
      for (int64_t u = 0; u <= t; ++u) {  // causal: keys up to t
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qkv[t][h * D + d] * qkv[u][C + h * D + d];
        scores.push_back(s / std::sqrt(double(D)));
      }
      double top = *std::max_element(scores.begin(), scores.end()), total = 0;
      for (double& s : scores) total += (s = std::exp(s - top));
      for (int64_t d = 0; d < D; ++d) {
        double sum = 0;
        for (int64_t u = 0; u <= t; ++u) sum += scores[u] / total * qkv[u][2 * C + h * D + d];
        context[t][h * D + d] = sum;
      }
    }
  }
  const Matrix h1 = add(x, conv1d(context, "attn.c_proj"));
  Matrix fc = conv1d(layer_norm(h1, vec("ln_2.weight"), vec("ln_2.bias")), "mlp.c_fc");
  for (auto& row : fc) {
    for (double& v : row)
      v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  const Matrix expected_rows = add(h1, conv1d(fc, "mlp.c_proj"));
  torch::Tensor expected = torch::empty({T, C}, torch::kFloat64);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < C; ++j) expected.accessor<double, 2>()[t][j] = expected_rows[t][j];
  }
  torch::Tensor x_input = x_tensor;

  loaded.model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor actual = loaded.model->h[0]
                             ->forward(x_input.to(torch::kFloat32).unsqueeze(0))
                             .squeeze(0)
                             .to(torch::kFloat64);
  INFO("max difference " << (actual - expected).abs().max().item<double>());
  CHECK(torch::allclose(actual, expected, 1e-4, 1e-4));
}

TEST_CASE("Dropout acts in training mode only", "[worker][lm]") {
  auto model = std::make_shared<Gpt2Model>(TinyConfig(), 0.5, torch::TensorOptions());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0, 0.2);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor ids = Ids({1, 2, 3, 4});
  model->eval();
  CHECK(torch::equal(model->forward(ids), model->forward(ids)));
  model->train();
  CHECK(!torch::allclose(model->forward(ids), model->forward(ids)));
}

// ---- planning on the meta device ---------------------------------------------------------

TEST_CASE("The skeleton lives on the meta device and the plan matches a hand count",
          "[worker][lm]") {
  auto skeleton = BuildGpt2Skeleton(TinyConfig(), 0.0);
  for (const auto& p : skeleton->parameters()) CHECK(p.device().is_meta());
  CHECK(MetaTensorNames(*skeleton).size() == skeleton->parameters().size());

  // wte 64*16, wpe 16*16; per layer ln_1 2*16, c_attn 16*48+48, c_proj 16*16+16, ln_2 2*16,
  // c_fc 16*64+64, mlp.c_proj 64*16+16; ln_f 2*16. The tied head adds nothing.
  const int64_t per_layer = 32 + (768 + 48) + (256 + 16) + 32 + (1024 + 64) + (1024 + 16);
  const int64_t params = 1024 + 256 + 2 * per_layer + 32;
  CHECK(params == 7872);
  Gpt2MemoryPlan plan = PlanGpt2Memory(*skeleton, /*batch_size=*/2, /*seq_len=*/8).value();
  CHECK(plan.params == params);
  CHECK(plan.parameter_bytes == 4 * params);
  CHECK(plan.gradient_bytes == 4 * params);
  CHECK(plan.optimizer_bytes == 8 * params);
  // 4 bytes * B*T tokens * (L (10 C + 2 I + 3 H T) + 2 C + 3 V)
  CHECK(plan.activation_bytes == 4 * 2 * 8 * (2 * (160 + 128 + 3 * 2 * 8) + 32 + 3 * 64));
  CHECK(plan.total_bytes == 16 * params + plan.activation_bytes);

  // GPT-2 small, planned without allocating its half a gigabyte: the well-known 124,439,808.
  Gpt2Config small;
  auto gpt2_small = BuildGpt2Skeleton(small, 0.1);
  Gpt2MemoryPlan small_plan = PlanGpt2Memory(*gpt2_small, 8, 1024).value();
  CHECK(small_plan.params == 124439808);
  CHECK(small_plan.parameter_bytes == 4 * 124439808LL);
  CHECK(MetaTensorNames(*gpt2_small).size() == gpt2_small->parameters().size());
}

TEST_CASE("config.json is parsed with its defaults and checked", "[worker][lm]") {
  auto config = ParseGpt2Config(kTinyConfigJson, "config.json");
  REQUIRE(config.ok());
  CHECK(config->n_layer == 2);
  CHECK(config->n_inner == 64);  // null: 4 * n_embd
  CHECK(config->n_positions == 16);
  CHECK(config->layer_norm_epsilon == 1e-5);

  auto old_style = ParseGpt2Config(
      R"({"n_layer": 1, "n_head": 1, "n_embd": 8, "n_ctx": 32, "vocab_size": 10})", "c.json");
  REQUIRE(old_style.ok());
  CHECK(old_style->n_positions == 32);
  CHECK(old_style->n_inner == 32);

  auto error = [](const char* text) {
    auto parsed = ParseGpt2Config(text, "/m/config.json");
    REQUIRE(!parsed.ok());
    return parsed.status().message();
  };
  CHECK(error(R"({"n_head": 2, "n_embd": 16, "n_positions": 16, "vocab_size": 64})") ==
        "/m/config.json: missing \"n_layer\" (a positive integer)");
  CHECK(
      error(R"({"n_layer": 0, "n_head": 2, "n_embd": 16, "n_positions": 16, "vocab_size": 64})") ==
      "/m/config.json: \"n_layer\" must be a positive integer, got 0");
  CHECK(
      error(R"({"n_layer": 1, "n_head": 3, "n_embd": 16, "n_positions": 16, "vocab_size": 64})") ==
      "/m/config.json: \"n_embd\" 16 is not divisible by \"n_head\" 3");
  CHECK(error(R"({"model_type": "llama"})").find("\"model_type\" is \"llama\"") !=
        std::string::npos);
  CHECK(error(R"({"activation_function": "relu"})")
            .find("\"activation_function\" \"relu\" is not supported") != std::string::npos);
  CHECK(error(R"({"tie_word_embeddings": false})")
            .find("\"tie_word_embeddings\": false is not supported") != std::string::npos);
  CHECK(error("{").find("/m/config.json: not valid JSON") == 0);
}

TEST_CASE("config.json dimensions whose products overflow 64 bits are refused", "[worker][lm]") {
  // Each would overflow a shape product (building the skeleton) or the 16 bytes per parameter
  // of the memory plan.
  const char* const overflowing[] = {
      R"({"n_layer": 1, "n_head": 1, "n_embd": 4294967296, "n_positions": 16, "vocab_size": 64})",
      R"({"n_layer": 1, "n_head": 1, "n_embd": 4611686018427387904, "n_positions": 16,
          "vocab_size": 64})",
      R"({"n_layer": 1, "n_head": 1, "n_embd": 16, "n_positions": 16,
          "vocab_size": 1152921504606846976})",
      R"({"n_layer": 9223372036854775807, "n_head": 1, "n_embd": 16, "n_positions": 16,
          "vocab_size": 64})",
  };
  for (const char* text : overflowing) {
    INFO(text);
    auto parsed = ParseGpt2Config(text, "/m/config.json");
    REQUIRE_FALSE(parsed.ok());
    CHECK_THAT(parsed.status().message(),
               Catch::StartsWith("/m/config.json: the model's dimensions (n_layer ") &&
                   Catch::EndsWith("give more parameters than 64-bit byte counts hold"));
  }
}

TEST_CASE("the memory plan refuses a batch whose byte counts overflow 64 bits", "[worker][lm]") {
  auto config = ParseGpt2Config(kTinyConfigJson, "config.json");
  REQUIRE(config.ok());
  auto skeleton = BuildGpt2Skeleton(*config, 0.0);
  // batch_size can be any int the sweep allows; times seq_len and the activations per token it
  // wrapped around to a small or negative plan before.
  auto plan = PlanGpt2Memory(*skeleton, int64_t{1} << 50, 16);
  REQUIRE_FALSE(plan.ok());
  CHECK_THAT(
      plan.status().message(),
      Catch::StartsWith("lm: the memory plan for batch_size 1125899906842624 x seq_len 16") &&
          Catch::Contains("does not fit 64-bit byte counts"));
  CHECK_FALSE(PlanGpt2Memory(*skeleton, 0, 16).ok());
  CHECK_FALSE(PlanGpt2Memory(*skeleton, 2, -1).ok());
  // The largest batch the sweep allows (INT_MAX) plans without overflow on a tiny model.
  auto big = PlanGpt2Memory(*skeleton, INT32_MAX, 16);
  REQUIRE(big.ok());
  CHECK(big->activation_bytes > 0);
  CHECK(big->total_bytes > big->activation_bytes);
}

// ---- loading errors ----------------------------------------------------------------------

TEST_CASE(
    "A checkpoint without a tensor fails naming it, nothing stays on the meta device "
    "unnoticed",
    "[worker][lm]") {
  TempDir dir;
  auto original = RandomModel(TinyConfig(), 6, 0.02);
  Loaded loaded =
      LoadBytes(dir, Checkpoint(*original, Skipping("h.1.mlp.c_fc.weight")), TinyConfig());
  REQUIRE(!loaded.status.ok());
  const std::string& message = loaded.status.message();
  CHECK(message.find(dir / "model.safetensors") == 0);
  CHECK(message.find("does not provide parameter 'h.1.mlp.c_fc.weight' [16, 64]") !=
        std::string::npos);
  CHECK(message.find("meta device") != std::string::npos);
  CHECK(message.find("item()") == std::string::npos);
  // Exactly that tensor is left without data, and the check before training names it too.
  CHECK(MetaTensorNames(*loaded.model) ==
        std::vector<std::string>{"parameter 'h.1.mlp.c_fc.weight' [16, 64]"});
  common::Status before_training = CheckNoMetaTensors(*loaded.model, "model.safetensors");
  CHECK(!before_training.ok());
  CHECK(before_training.message().find("h.1.mlp.c_fc.weight") != std::string::npos);
  // And training refuses such a model instead of failing inside LibTorch.
  RecordingContext ctx;
  LmTrainOptions options;
  options.max_steps = 1;
  options.seq_len = 4;
  std::vector<int32_t> tokens(32, 1);
  auto trained = TrainLm(*loaded.model, tokens, tokens, options, torch::kCPU, ctx);
  REQUIRE(!trained.ok());
  CHECK(trained.status().message().find("h.1.mlp.c_fc.weight") != std::string::npos);
}

TEST_CASE("Shape, dtype and unexpected-key mismatches name the tensor", "[worker][lm]") {
  TempDir dir;
  auto original = RandomModel(TinyConfig(), 7, 0.02);
  Gpt2Config config = TinyConfig();

  SECTION("a shape mismatch shows expected and found shapes") {
    Gpt2Config longer = config;
    longer.n_positions = 8;
    auto other = RandomModel(longer, 7, 0.02);  // wpe is [8, 16]
    Loaded loaded = LoadBytes(dir, Checkpoint(*other), config);
    REQUIRE(!loaded.status.ok());
    CHECK(loaded.status.message() ==
          dir / "model.safetensors" +
              ": tensor 'wpe.weight' has shape [8, 16], expected [16, 16] (from config.json)");
    // Nothing was allocated: the check runs before any parameter gets storage.
    CHECK(MetaTensorNames(*loaded.model).size() == loaded.model->parameters().size());
  }
  SECTION("a key the model does not have is unexpected") {
    Loaded loaded = LoadBytes(
        dir,
        Checkpoint(*original,
                   WithExtra({"h.2.attn.c_attn.weight", "F32", {1}, std::string(4, '\0')})),
        config);
    REQUIRE(!loaded.status.ok());
    CHECK(loaded.status.message().find("tensor 'h.2.attn.c_attn.weight' is not a parameter of a "
                                       "GPT-2 with n_layer=2 (unexpected key") !=
          std::string::npos);
    // A mask buffer of a layer the model lacks is unexpected too.
    Loaded extra_mask = LoadBytes(
        dir, Checkpoint(*original, WithExtra({"h.2.attn.bias", "F32", {1}, std::string(4, '\0')})),
        config);
    CHECK(extra_mask.status.message().find("tensor 'h.2.attn.bias'") != std::string::npos);
  }
  SECTION("an integer tensor is refused") {
    torch::Tensor ints = torch::zeros({16}, torch::kInt32);
    std::string bytes = Checkpoint(
        *original, WithExtra({"ln_f.bias", "I32", {16}, TensorBytes(ints)}, "ln_f.bias"));
    Loaded loaded = LoadBytes(dir, bytes, config);
    REQUIRE(!loaded.status.ok());
    CHECK(loaded.status.message().find("tensor 'ln_f.bias' has dtype I32, expected a floating "
                                       "type") != std::string::npos);
  }
  SECTION("the same parameter with and without the prefix") {
    Loaded loaded = LoadBytes(
        dir,
        Checkpoint(
            *original,
            WithExtra({"transformer.ln_f.bias", "F32", {16}, TensorBytes(torch::zeros({16}))})),
        config);
    REQUIRE(!loaded.status.ok());
    CHECK(loaded.status.message().find("duplicates") != std::string::npos);
  }
  SECTION("lm_head.weight must equal wte.weight") {
    Loaded same = LoadBytes(
        dir,
        Checkpoint(
            *original,
            WithExtra({"lm_head.weight", "F32", {64, 16}, TensorBytes(original->wte->weight)})),
        config);
    INFO(same.status.message());
    CHECK(same.status.ok());
    Loaded different = LoadBytes(
        dir,
        Checkpoint(
            *original,
            WithExtra({"lm_head.weight", "F32", {64, 16}, TensorBytes(original->wte->weight + 1)})),
        config);
    REQUIRE(!different.status.ok());
    CHECK(different.status.message().find("tensor 'lm_head.weight' differs from wte.weight") !=
          std::string::npos);
  }
  SECTION("checkpoints without mask buffers load too") {
    CheckpointOptions no_masks;
    no_masks.mask_buffers = false;
    Loaded loaded = LoadBytes(dir, Checkpoint(*original, no_masks), config);
    CHECK(loaded.status.ok());
  }
}

TEST_CASE("F16 and BF16 checkpoints load as F32 within their precision", "[worker][lm]") {
  TempDir dir;
  auto original = RandomModel(TinyConfig(), 8, 0.2);
  original->eval();
  torch::Tensor ids = Ids({5, 6, 7, 8, 9});
  torch::NoGradGuard no_grad;
  torch::Tensor reference = original->forward(ids);
  for (auto [dtype, tolerance] :
       {std::pair{torch::kFloat16, 2e-3}, std::pair{torch::kBFloat16, 1e-2}}) {
    INFO(DtypeName(dtype));
    Loaded loaded = LoadBytes(dir, Checkpoint(*original, AsDtype(dtype)), TinyConfig());
    REQUIRE(loaded.status.ok());
    auto originals = original->named_parameters();
    for (const auto& item : loaded.model->named_parameters()) {
      INFO(item.key());
      CHECK(item.value().scalar_type() == torch::kFloat32);
      CHECK(torch::allclose(item.value(), originals[item.key()], tolerance, tolerance));
      // Exactly the rounded values, converted once.
      CHECK(torch::equal(item.value(), originals[item.key()].to(dtype).to(torch::kFloat32)));
    }
    loaded.model->eval();
    CHECK(torch::allclose(loaded.model->forward(ids), reference, 5 * tolerance, 5 * tolerance));
  }
}

TEST_CASE("Unaligned tensor data is read correctly", "[worker][lm]") {
  TempDir dir;
  std::vector<float> values = {1.0f, -2.5f, 3.75f};
  // A one-byte tensor first puts the F32 data at an odd offset.
  WriteBytes(dir / "u.safetensors",
             EncodeSafetensors({{"pad", "U8", {1}, std::string(1, '\x07')},
                                {"w", "F32", {3}, testing::F32Bytes(values)}}));
  auto file = SafetensorsFile::Open(dir / "u.safetensors");
  REQUIRE(file.ok());
  auto tensor = TensorFromView(*file->Find("w"));
  REQUIRE(tensor.ok());
  CHECK(torch::equal(*tensor, torch::tensor({1.0f, -2.5f, 3.75f})));
  auto f8 = TensorFromView({"f8", SafetensorsDtype::kF8E4M3, {1}, "x", 1});
  REQUIRE(!f8.ok());
  CHECK(f8.status().message() == "tensor 'f8' has dtype F8_E4M3, which LibTorch cannot represent");
}

// ---- devices -----------------------------------------------------------------------------

TEST_CASE("Device selection is explicit and never surprises", "[worker][lm]") {
  auto select = [](const char* name, std::optional<std::string> visible, double fraction = 0) {
    DeviceOptions options;
    options.name = name;
    options.cuda_visible_devices = std::move(visible);
    options.gpu_memory_fraction = fraction;
    return SelectDevice(options);
  };
  auto cpu = select("cpu", std::nullopt);
  REQUIRE(cpu.ok());
  CHECK(cpu->device.is_cpu());
  REQUIRE(cpu->attrs.size() == 1);
  CHECK(cpu->attrs[0].first == "device");
  CHECK(cpu->attrs[0].second.as_string() == "cpu");

  // An empty CUDA_VISIBLE_DEVICES is a CPU slot: auto takes the CPU, cuda refuses.
  auto slot = select("auto", std::string(), 0.5);
  REQUIRE(slot.ok());
  CHECK(slot->device.is_cpu());
  REQUIRE(slot->attrs.size() == 2);
  CHECK(slot->attrs[1].first == "gpu_memory_fraction_ignored");
  CHECK(std::string(slot->attrs[1].second.as_string()).find("had no effect") != std::string::npos);
  auto refused = select("cuda", std::string());
  REQUIRE(!refused.ok());
  CHECK(refused.status().message().find("CUDA_VISIBLE_DEVICES is empty") != std::string::npos);

  auto automatic = select("auto", std::nullopt);
  REQUIRE(automatic.ok());
  CHECK(automatic->device.is_cuda() == torch::cuda::is_available());
  if (!torch::cuda::is_available()) {
    auto cuda = select("cuda", std::nullopt);
    REQUIRE(!cuda.ok());
    CHECK(cuda.status().message().find("CUDA is not available") != std::string::npos);
  }

  auto bogus = select("tpu", std::nullopt);
  REQUIRE(!bogus.ok());
  CHECK(bogus.status().message() == "device \"tpu\" is not one of \"auto\", \"cpu\", \"cuda\"");
  CHECK(!select("cpu", std::nullopt, 1.5).ok());
}

// ---- training ----------------------------------------------------------------------------

TEST_CASE("Learning-rate schedules: warmup, then constant, linear or cosine decay to 0",
          "[worker][lm]") {
  // 4 warmup updates rise to the base rate.
  CHECK(LearningRateAt(0, 20, 4, 1.0, LrSchedule::kLinear) == Approx(0.25));
  CHECK(LearningRateAt(3, 20, 4, 1.0, LrSchedule::kLinear) == Approx(1.0));
  // Then 16 decay updates.
  CHECK(LearningRateAt(4, 20, 4, 1.0, LrSchedule::kLinear) == Approx(1.0));
  CHECK(LearningRateAt(12, 20, 4, 1.0, LrSchedule::kLinear) == Approx(0.5));
  CHECK(LearningRateAt(19, 20, 4, 1.0, LrSchedule::kLinear) == Approx(1.0 / 16));
  CHECK(LearningRateAt(20, 20, 4, 1.0, LrSchedule::kLinear) == Approx(0.0).margin(1e-12));
  CHECK(LearningRateAt(12, 20, 4, 1.0, LrSchedule::kCosine) == Approx(0.5));
  CHECK(LearningRateAt(8, 20, 4, 1.0, LrSchedule::kCosine) ==
        Approx(0.5 * (1 + std::cos(M_PI / 4))));
  CHECK(LearningRateAt(20, 20, 4, 1.0, LrSchedule::kCosine) == Approx(0.0).margin(1e-12));
  CHECK(LearningRateAt(19, 20, 0, 2.0, LrSchedule::kConstant) == 2.0);
  CHECK(LearningRateAt(1, 20, 4, 2.0, LrSchedule::kConstant) == Approx(1.0));
}

TEST_CASE("Documents are split at blank lines and separated by eos", "[worker][lm]") {
  // Each byte is its own token; eos is 0.
  auto encode = [](std::string_view text) {
    return std::vector<int32_t>(text.begin(), text.end());
  };
  auto ids = TokenizeDocuments("ab\ncd\n\n  \n\nef\n", encode, 0);
  CHECK(ids == std::vector<int32_t>{'a', 'b', '\n', 'c', 'd', 0, 'e', 'f', 0});
  CHECK(TokenizeDocuments("", encode, 0).empty());
  CHECK(TokenizeDocuments("\n\n", encode, 0).empty());
  CHECK(TokenizeDocuments("x", encode, 0) == std::vector<int32_t>{'x', 0});
  CHECK(TokenizeDocuments("x\r\n\r\ny", encode, 0) == std::vector<int32_t>{'x', '\r', 0, 'y', 0});
}

TEST_CASE("TRIALD_PARAMS override the config's hyperparameters, checked by name", "[worker][lm]") {
  config::LmObjectiveConfig config;
  config.learning_rate = 1e-3;
  config.batch_size = 4;
  auto params = Params::Parse(R"({"learning_rate": 0.01, "lr_schedule": "cosine", "seed": 9,
                                  "dropout": 0.1, "warmup_steps": 5.0})");
  REQUIRE(params.ok());
  auto hp = LmHyperparamsFrom(config, *params);
  REQUIRE(hp.ok());
  CHECK(hp->learning_rate == 0.01);
  CHECK(hp->batch_size == 4);
  CHECK(hp->lr_schedule == LrSchedule::kCosine);
  CHECK(hp->seed == 9);
  CHECK(hp->dropout == 0.1);
  CHECK(hp->warmup_steps == 5);

  auto error = [&](const char* text) {
    auto p = Params::Parse(text);
    REQUIRE(p.ok());
    auto result = LmHyperparamsFrom(config, *p);
    REQUIRE(!result.ok());
    return result.status().message();
  };
  CHECK(
      error(R"({"learning_rat": 0.1})").find("unknown parameter 'learning_rat' for objective lm") !=
      std::string::npos);
  CHECK(error(R"({"learning_rate": 0})") ==
        "lm: hyperparameter 'learning_rate' must be > 0, got 0");
  CHECK(error(R"({"dropout": 1})") == "lm: hyperparameter 'dropout' must be in [0, 1), got 1");
  CHECK(error(R"({"batch_size": 0})") == "lm: hyperparameter 'batch_size' must be >= 1, got 0");
  CHECK(error(R"({"adam_beta2": 1.0})").find("'adam_beta2' must be in [0, 1)") !=
        std::string::npos);
  CHECK(error(R"({"lr_schedule": "step"})") ==
        "lm: hyperparameter 'lr_schedule' must be \"constant\", \"linear\" or \"cosine\", got "
        "\"step\"");
  CHECK(error(R"({"batch_size": "big"})").find("'batch_size' must be an integer") !=
        std::string::npos);
}

// A token stream with structure a tiny model can learn: a fixed 8-token cycle.
std::vector<int32_t> Cycle(int repeats) {
  const std::vector<int32_t> cycle = {3, 1, 4, 15, 9, 2, 6, 53};
  std::vector<int32_t> tokens;
  for (int i = 0; i < repeats; ++i) tokens.insert(tokens.end(), cycle.begin(), cycle.end());
  return tokens;
}

TEST_CASE("Evaluation over one window is the mean next-token loss", "[worker][lm]") {
  auto model = RandomModel(TinyConfig(), 9, 0.2);
  std::vector<int32_t> tokens = {5, 9, 13, 2, 2, 40, 7, 1};
  RecordingContext ctx;
  auto loss = EvaluateLm(*model, tokens, /*seq_len=*/7, /*batch_size=*/4, torch::kCPU, ctx);
  REQUIRE(loss.ok());
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor logits = model->forward(Ids({5, 9, 13, 2, 2, 40, 7})).squeeze(0);
  torch::Tensor log_probs = torch::log_softmax(logits, -1);
  double expected = 0;
  for (int i = 0; i < 7; ++i) expected -= log_probs[i][tokens[i + 1]].item<double>() / 7;
  CHECK(*loss == Approx(expected).epsilon(1e-5));
  // Shorter windows still predict every token once; the value differs but is a mean loss.
  auto windowed = EvaluateLm(*model, tokens, 3, 2, torch::kCPU, ctx);
  REQUIRE(windowed.ok());
  CHECK(std::isfinite(*windowed));
  CHECK(*windowed > 0);
  CHECK(!EvaluateLm(*model, {1}, 3, 2, torch::kCPU, ctx).ok());
}

TEST_CASE("Training on a tiny text lowers the evaluation loss within 30 steps", "[worker][lm]") {
  auto model = RandomModel(TinyConfig(), 10, 0.02);
  std::vector<int32_t> train = Cycle(64), eval = Cycle(6);
  RecordingContext ctx;
  auto before = EvaluateLm(*model, eval, 8, 8, torch::kCPU, ctx);
  REQUIRE(before.ok());
  CHECK(*before == Approx(std::log(64.0)).epsilon(0.05));  // near-uniform at init

  LmTrainOptions options;
  options.max_steps = 30;
  options.seq_len = 8;
  options.eval_every = 10;
  options.hyperparams.learning_rate = 1e-2;
  options.hyperparams.batch_size = 8;
  options.hyperparams.weight_decay = 0.01;
  options.hyperparams.warmup_steps = 3;
  options.hyperparams.seed = 1;
  auto result = TrainLm(*model, train, eval, options, torch::kCPU, ctx);
  INFO(result.status().message());
  REQUIRE(result.ok());
  CHECK(ctx.steps == std::vector<int64_t>{10, 20, 30});
  CHECK(result->eval_loss == ctx.values.back());
  CHECK(result->eval_loss < 0.5 * *before);
  CHECK(ctx.values[2] < ctx.values[0]);
  CHECK(result->tokens_seen == 30 * 8 * 8);
  CHECK(result->steps == 30);
  CHECK(model->is_training());
  CHECK(MetaTensorNames(*model).empty());
}

TEST_CASE("Training is reproducible for a seed and stops between steps", "[worker][lm]") {
  LmTrainOptions options;
  options.max_steps = 4;
  options.seq_len = 8;
  options.eval_every = 1;
  options.hyperparams.learning_rate = 1e-2;
  options.hyperparams.batch_size = 2;
  options.hyperparams.dropout = 0.1;
  options.hyperparams.seed = 3;
  std::vector<int32_t> train = Cycle(16), eval = Cycle(2);
  auto run = [&](int64_t stop_after) {
    auto model = RandomModel(TinyConfig(), 11, 0.02);
    torch::manual_seed(options.hyperparams.seed);
    RecordingContext ctx;
    ctx.stop_after = stop_after;
    auto result = TrainLm(*model, train, eval, options, torch::kCPU, ctx);
    return std::make_pair(result.ok() ? common::Status::Ok() : result.status(), ctx.values);
  };
  auto [status_a, values_a] = run(-1);
  auto [status_b, values_b] = run(-1);
  REQUIRE(status_a.ok());
  CHECK(values_a.size() == 4);
  CHECK(values_a == values_b);

  auto [stopped, partial] = run(2);
  CHECK(stopped.message() == StoppedStatus().message());
  CHECK(partial.size() == 2);
}

// ---- checkpoints and resuming ------------------------------------------------------------

// A checkpointed training of the tiny model (dropout on, so LibTorch's generator matters too):
// 6 steps, an evaluation after each, a checkpoint every 2 steps into `checkpoint_dir`.
struct CheckpointRun {
  common::Status status;
  LmTrainResult result;
  std::vector<int64_t> steps;
  std::vector<double> values;
  std::map<std::string, json::value> attrs;
  std::shared_ptr<Gpt2Model> model;
};

CheckpointRun TrainCheckpointed(const std::string& checkpoint_dir, const std::string& resume_dir,
                                int64_t stop_after, const std::string& fingerprint = "f-1") {
  LmTrainOptions options;
  options.max_steps = 6;
  options.seq_len = 8;
  options.eval_every = 1;
  options.hyperparams.learning_rate = 1e-2;
  options.hyperparams.batch_size = 2;
  options.hyperparams.dropout = 0.1;
  options.hyperparams.weight_decay = 0.01;
  options.hyperparams.warmup_steps = 2;
  options.hyperparams.seed = 5;
  options.checkpoint_every = 2;
  options.checkpoint_dir = checkpoint_dir;
  options.resume_dir = resume_dir;
  options.fingerprint = fingerprint;
  CheckpointRun run;
  run.model = RandomModel(TinyConfig(), 12, 0.02);
  torch::manual_seed(options.hyperparams.seed);
  RecordingContext ctx;
  ctx.stop_after = stop_after;
  auto result = TrainLm(*run.model, Cycle(40), Cycle(6), options, torch::kCPU, ctx);
  run.status = result.ok() ? common::Status::Ok() : result.status();
  if (result.ok()) run.result = *result;
  run.steps = ctx.steps;
  run.values = ctx.values;
  run.attrs = ctx.attrs;
  return run;
}

bool SameParameters(Gpt2Model& a, Gpt2Model& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.size() != pb.size()) return false;
  for (const auto& item : pa) {
    if (!torch::equal(item.value(), pb[item.key()])) return false;
  }
  return true;
}

std::vector<std::string> FolderEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("A run resumed from its checkpoint ends bit for bit where the uninterrupted run ends",
          "[worker][lm][checkpoint]") {
  TempDir whole_dir, cut_dir, resumed_dir;
  const CheckpointRun whole = TrainCheckpointed(whole_dir.path(), "", -1);
  INFO(whole.status.message());
  REQUIRE(whole.status.ok());
  CHECK(whole.steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(whole.attrs.count("resumed_from_step") == 0);  // nothing to resume from: no attribute
  // Checkpoints at steps 2 and 4, none after the last step; the temporary files are gone.
  CHECK(FolderEntries(whole_dir.path()) == std::vector<std::string>{kLmCheckpointFile});
  auto header = ReadLmCheckpointHeader(whole_dir / kLmCheckpointFile);
  REQUIRE(header.ok());
  CHECK(header->step == 4);
  CHECK(header->fingerprint == "f-1");

  // Killed after step 5 (the 6th step never starts): its last checkpoint is step 4's.
  const CheckpointRun cut = TrainCheckpointed(cut_dir.path(), "", 5);
  CHECK(cut.status.message() == StoppedStatus().message());
  CHECK(cut.steps == std::vector<int64_t>{1, 2, 3, 4, 5});
  header = ReadLmCheckpointHeader(cut_dir / kLmCheckpointFile);
  REQUIRE(header.ok());
  CHECK(header->step == 4);

  // The retry starts from fresh weights and the seed, as a new process does, and resumes.
  const CheckpointRun resumed = TrainCheckpointed(resumed_dir.path(), cut_dir.path(), -1);
  INFO(resumed.status.message());
  REQUIRE(resumed.status.ok());
  CHECK(resumed.attrs.at("resumed_from_step").as_int64() == 4);
  CHECK(resumed.attrs.count("resume_refused") == 0);
  CHECK(resumed.attrs.count("initial_eval_loss") == 0);
  CHECK(resumed.steps == std::vector<int64_t>{5, 6});  // nothing before the resume point again
  CHECK(resumed.result.resumed_from_step == 4);
  CHECK(resumed.result.steps == 6);
  CHECK(resumed.result.tokens_seen == whole.result.tokens_seen);
  // The same path: the same losses at steps 5 and 6, and the same weights, to the bit.
  CHECK(resumed.values == std::vector<double>(whole.values.begin() + 4, whole.values.end()));
  CHECK(resumed.result.eval_loss == whole.result.eval_loss);
  CHECK(SameParameters(*resumed.model, *whole.model));
  // Without the checkpoint's generators and moments the path differs: the test can tell.
  const CheckpointRun fresh = TrainCheckpointed(resumed_dir.path(), "", -1);
  REQUIRE(fresh.status.ok());
  CHECK(fresh.values == whole.values);  // reproducible from the start as well
}

TEST_CASE("A damaged, cut or mismatched checkpoint is refused and training starts from step 0",
          "[worker][lm][checkpoint]") {
  TempDir source, out;
  const CheckpointRun whole = TrainCheckpointed(source.path(), "", -1);
  REQUIRE(whole.status.ok());
  const std::string path = source / kLmCheckpointFile;
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  REQUIRE(bytes.size() > 1000);

  auto refused = [&](const std::string& fingerprint) {
    const CheckpointRun run = TrainCheckpointed(out.path(), source.path(), -1, fingerprint);
    INFO(run.status.message());
    REQUIRE(run.status.ok());
    CHECK(run.attrs.at("resumed_from_step").as_int64() == 0);
    // A fresh start: every step reported, and the uninterrupted run's result.
    CHECK(run.steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
    CHECK(run.values == whole.values);
    return std::string(run.attrs.at("resume_refused").as_string());
  };

  SECTION("another run's checkpoint") {
    CHECK_THAT(refused("f-2"), Catch::Contains("other parameters or settings") &&
                                   Catch::Contains("f-1") && Catch::Contains("f-2"));
  }
  SECTION("a byte changed in the payload") {
    std::string damaged = bytes;
    damaged[damaged.size() / 2] ^= 0x20;
    WriteBytes(path, damaged);
    CHECK_THAT(refused("f-1"), Catch::Contains("damaged"));
  }
  SECTION("cut short") {
    WriteBytes(path, bytes.substr(0, bytes.size() - 100));
    CHECK_THAT(refused("f-1"), Catch::Contains("cut short"));
  }
  SECTION("not a checkpoint") {
    WriteBytes(path, "step 4\n");
    CHECK_THAT(refused("f-1"), Catch::Contains("not a triald lm checkpoint"));
  }
  SECTION("a link instead of the file") {
    const std::string elsewhere = out / "elsewhere";
    WriteBytes(elsewhere, bytes);
    std::filesystem::remove(path);
    std::filesystem::create_symlink(elsewhere, path);
    CHECK_THAT(refused("f-1"), Catch::Contains(path));
  }
  SECTION("none at all") {
    std::filesystem::remove(path);
    CHECK_THAT(refused("f-1"), Catch::Contains("no checkpoint in " + source.path()));
  }
}

TEST_CASE("The checkpoint fingerprint follows what shapes the training path",
          "[worker][lm][checkpoint]") {
  config::LmObjectiveConfig config;
  config.model = "/m";
  config.train_file = "/t";
  config.eval_file = "/e";
  LmHyperparams hp;
  const std::vector<int32_t> train = Cycle(20), eval = Cycle(4);
  const std::string base = LmCheckpointFingerprint(config, hp, train, eval, torch::kCPU);
  CHECK(base.size() == 16);
  CHECK(LmCheckpointFingerprint(config, hp, train, eval, torch::kCPU) == base);
  LmHyperparams other_lr = hp;
  other_lr.learning_rate = std::nextafter(hp.learning_rate, 1.0);
  CHECK(LmCheckpointFingerprint(config, other_lr, train, eval, torch::kCPU) != base);
  LmHyperparams other_seed = hp;
  other_seed.seed = 1;
  CHECK(LmCheckpointFingerprint(config, other_seed, train, eval, torch::kCPU) != base);
  config::LmObjectiveConfig longer = config;
  longer.max_steps = 101;
  CHECK(LmCheckpointFingerprint(longer, hp, train, eval, torch::kCPU) != base);
  std::vector<int32_t> edited = train;
  edited[3] += 1;
  CHECK(LmCheckpointFingerprint(config, hp, edited, eval, torch::kCPU) != base);
  // What does not change the path does not change the fingerprint.
  config::LmObjectiveConfig reporting = config;
  reporting.eval_every = 7;
  reporting.checkpoint_every = 3;
  CHECK(LmCheckpointFingerprint(reporting, hp, train, eval, torch::kCPU) == base);
}

TEST_CASE("A trial whose plan exceeds memory_budget_gb is refused before loading anything",
          "[worker][lm]") {
  TempDir dir;
  WriteBytes(dir / "config.json", kTinyConfigJson);  // no weights, no tokenizer: never read
  config::LmObjectiveConfig config;
  config.model = dir.path();
  config.train_file = dir / "missing-train.txt";
  config.eval_file = dir / "missing-eval.txt";
  config.seq_len = 8;
  config.batch_size = 2;
  config.memory_budget_gb = 1e-6;  // about 1 KiB
  RecordingContext ctx;
  auto result = RunLmObjective(config, Params(), ctx);
  REQUIRE(!result.ok());
  CHECK(result.status().message().find("more than memory_budget_gb = 1e-06; refused before "
                                       "allocating anything") != std::string::npos);
  REQUIRE(ctx.attrs.count("params") == 1);
  CHECK(ctx.attrs["params"].as_int64() == 7872);
  CHECK(ctx.attrs["planned_memory_bytes"].as_int64() ==
        16 * 7872 + 4 * 2 * 8 * (2 * (160 + 128 + 3 * 2 * 8) + 32 + 3 * 64));
  CHECK(ctx.steps.empty());

  // Within budget, the next missing input is named.
  config.memory_budget_gb = 1;
  auto missing = RunLmObjective(config, Params(), ctx);
  REQUIRE(!missing.ok());
  CHECK(missing.status().message().find(dir / "model.safetensors") != std::string::npos);

  config.seq_len = 17;
  auto too_long = RunLmObjective(config, Params(), ctx);
  REQUIRE(!too_long.ok());
  CHECK(too_long.status().message().find("seq_len 17 exceeds the model's n_positions 16") !=
        std::string::npos);
}

// ---- trial-worker --objective lm, end to end -----------------------------------------------

const std::string kWorker = std::string(TRIALD_BIN_DIR) + "/trial-worker";

std::vector<json::object> ParseLines(const std::string& data) {
  std::vector<json::object> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    REQUIRE(end != std::string::npos);
    json::value value = json::parse(data.substr(start, end - start));
    REQUIRE(value.is_object());
    lines.push_back(value.as_object());
    start = end + 1;
  }
  return lines;
}

TEST_CASE("trial-worker --objective lm reports eval losses, attributes and a final value",
          "[worker][lm][integration]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  testing::ChildResult run = testing::RunChild(
      {kWorker, "--objective", "lm", "--config", config::LmObjectiveToJson(config)},
      {R"(TRIALD_PARAMS={"learning_rate": 0.003, "seed": 4, "lr_schedule": "cosine"})",
       "TRIALD_STUDY=lm", "TRIALD_TRIAL=0"});
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  std::vector<json::object> lines = ParseLines(run.report);
  std::vector<int64_t> steps;
  std::vector<double> values;
  std::map<std::string, json::value> attrs;
  double final_value = -1;
  for (const json::object& line : lines) {
    std::string type(line.at("type").as_string());
    if (type == "report") {
      steps.push_back(line.at("step").as_int64());
      values.push_back(line.at("value").to_number<double>());
    } else if (type == "attr") {
      attrs[std::string(line.at("key").as_string())] = line.at("value");
    } else {
      REQUIRE(type == "final");
      final_value = line.at("value").to_number<double>();
    }
  }
  CHECK(steps == std::vector<int64_t>{2, 4, 6});
  REQUIRE(values.size() == 3);
  CHECK(final_value == values.back());
  CHECK(std::string(lines.back().at("type").as_string()) == "final");
  // Random weights over GPT-2's 50257 tokens: the loss starts near ln(50257) = 10.8 and the
  // first steps already bring it down.
  CHECK(values.front() < 11.5);
  CHECK(values.back() < values.front());
  CHECK(attrs.at("device").as_string() == "cpu");
  // 2 layers of 32 wide over a 50257 x 32 embedding and 128 positions.
  CHECK(attrs.at("params").to_number<int64_t>() == 50257 * 32 + 128 * 32 + 2 * 12704 + 64);
  CHECK(attrs.at("planned_memory_bytes").to_number<int64_t>() >
        16 * attrs.at("params").to_number<int64_t>());
  CHECK(attrs.at("tokens_seen").to_number<int64_t>() == 6 * 2 * 32);
  CHECK(attrs.at("train_seconds").to_number<double>() > 0);
  CHECK(attrs.at("perplexity").to_number<double>() == Approx(std::exp(final_value)));
}

TEST_CASE("trial-worker --objective lm with objectives sends those metrics as its values",
          "[worker][lm][integration]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  config.objectives = {"planned_memory_bytes", "eval_loss", "tokens_per_second", "perplexity"};
  testing::ChildResult run = testing::RunChild(
      {kWorker, "--objective", "lm", "--config", config::LmObjectiveToJson(config)},
      {R"(TRIALD_PARAMS={"learning_rate": 0.003, "seed": 4})", "TRIALD_STUDY=lm",
       "TRIALD_TRIAL=0"});
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 0);
  std::vector<json::object> lines = ParseLines(run.report);
  std::map<std::string, json::value> attrs;
  double last_report = -1;
  for (const json::object& line : lines) {
    const std::string type(line.at("type").as_string());
    if (type == "attr") attrs[std::string(line.at("key").as_string())] = line.at("value");
    if (type == "report") last_report = line.at("value").to_number<double>();
  }
  const json::object& final_line = lines.back();
  REQUIRE(final_line.at("type").as_string() == "final");
  REQUIRE_FALSE(final_line.contains("value"));
  const json::array& values = final_line.at("values").as_array();
  REQUIRE(values.size() == 4);
  CHECK(values[0].to_number<double>() == attrs.at("planned_memory_bytes").to_number<double>());
  CHECK(values[1].to_number<double>() == last_report);  // the last evaluation loss
  const double tokens_per_second =
      attrs.at("tokens_seen").to_number<double>() / attrs.at("train_seconds").to_number<double>();
  CHECK(attrs.at("tokens_per_second").to_number<double>() == Approx(tokens_per_second));
  CHECK(values[2].to_number<double>() == attrs.at("tokens_per_second").to_number<double>());
  CHECK(values[3].to_number<double>() == attrs.at("perplexity").to_number<double>());
  CHECK(values[3].to_number<double>() == Approx(std::exp(last_report)));
  CHECK(run.out.find("final value ") != std::string::npos);

  // One metric: a single value, sent as "value" as without objectives.
  config.objectives = {"train_seconds"};
  run = testing::RunChild(
      {kWorker, "--objective", "lm", "--config", config::LmObjectiveToJson(config)},
      {R"(TRIALD_PARAMS={"seed": 4})", "TRIALD_STUDY=lm", "TRIALD_TRIAL=0"});
  CHECK(run.exit_code == 0);
  lines = ParseLines(run.report);
  attrs.clear();
  for (const json::object& line : lines) {
    if (line.at("type").as_string() == "attr") {
      attrs[std::string(line.at("key").as_string())] = line.at("value");
    }
  }
  REQUIRE(lines.back().contains("value"));
  CHECK(lines.back().at("value").to_number<double>() ==
        attrs.at("train_seconds").to_number<double>());
}

TEST_CASE("trial-worker --objective lm fails cleanly on a bad checkpoint or config",
          "[worker][lm][integration]") {
  TempDir dir;
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  // A model folder whose checkpoint lacks a tensor.
  const std::string fixture = config.model;
  for (const char* name : {"config.json", "vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(fixture + "/" + name, dir / name);
  }
  auto original = SafetensorsFile::Open(fixture + "/model.safetensors");
  REQUIRE(original.ok());
  std::vector<SafetensorsEntry> entries;
  for (const TensorView& t : original->tensors()) {
    if (t.name.find("h.1.ln_2.bias") != std::string::npos) continue;
    entries.push_back({t.name, SafetensorsDtypeName(t.dtype), t.shape,
                       std::string(static_cast<const char*>(t.data), t.bytes)});
  }
  WriteBytes(dir / "model.safetensors", EncodeSafetensors(entries));
  config.model = dir.path();
  testing::ChildResult run = testing::RunChild(
      {kWorker, "--objective", "lm", "--config", config::LmObjectiveToJson(config)}, {});
  CHECK(run.exit_code == 1);
  std::vector<json::object> lines = ParseLines(run.report);
  REQUIRE(!lines.empty());
  CHECK(std::string(lines.back().at("type").as_string()) == "error");
  std::string message(lines.back().at("message").as_string());
  CHECK(message.find("h.1.ln_2.bias") != std::string::npos);
  CHECK(message.find("meta device") != std::string::npos);
  CHECK(run.err.find(message) != std::string::npos);

  testing::ChildResult no_config =
      testing::RunChild({kWorker, "--objective", "lm"}, {"TRIALD_PARAMS={}"});
  CHECK(no_config.exit_code == 1);
  CHECK(no_config.report.find("objective lm needs --config") != std::string::npos);

  testing::ChildResult bad_param =
      testing::RunChild({kWorker, "--objective", "lm", "--config",
                         config::LmObjectiveToJson(testing::TinyLmConfig())},
                        {R"(TRIALD_PARAMS={"learning_rate": -1})"});
  CHECK(bad_param.exit_code == 1);
  CHECK(bad_param.report.find("'learning_rate' must be > 0, got -1") != std::string::npos);
}

TEST_CASE("trial-worker --objective lm stops promptly on SIGTERM", "[worker][lm][integration]") {
  config::LmObjectiveConfig config = testing::TinyLmConfig();
  config.max_steps = 100000;  // hours of training; SIGTERM must cut it short
  config.eval_every = 1;
  testing::ChildResult run = testing::RunChild(
      {kWorker, "--objective", "lm", "--config", config::LmObjectiveToJson(config)}, {},
      /*sigterm_after_reports=*/2);
  INFO("stderr: " << run.err);
  CHECK(run.exit_code == 143);
  CHECK(run.seconds_after_sigterm >= 0);
  CHECK(run.seconds_after_sigterm < 10.0);
  std::vector<json::object> lines = ParseLines(run.report);
  REQUIRE(!lines.empty());
  CHECK(std::string(lines.back().at("type").as_string()) == "error");
  CHECK(lines.back().at("message").as_string() == "stopped by SIGTERM");
  for (const json::object& line : lines) CHECK(line.at("type").as_string() != "final");
}

}  // namespace
}  // namespace triald::worker
