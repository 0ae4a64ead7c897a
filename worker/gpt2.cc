#include "worker/gpt2.h"

#include <torch/nn/functional/activation.h>
#include <torch/utils.h>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/json.h"

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

constexpr std::string_view kPrefix = "transformer.";

// A positive integer field of config.json; `fallback` is used when it is absent (-1: required).
// An int64_t that remembers overflow (__builtin_*_overflow) through a chain of operations.
class CheckedInt64 {
 public:
  CheckedInt64() = default;
  explicit CheckedInt64(int64_t v) : value_(v) {}
  CheckedInt64& Add(int64_t x) {
    overflow_ |= __builtin_add_overflow(value_, x, &value_);
    return *this;
  }
  CheckedInt64& Add(const CheckedInt64& x) {
    overflow_ |= x.overflow_;
    return Add(x.value_);
  }
  CheckedInt64 Mul(int64_t x) const {
    CheckedInt64 r = *this;
    r.overflow_ |= __builtin_mul_overflow(value_, x, &r.value_);
    return r;
  }
  bool overflow() const { return overflow_; }
  int64_t value() const { return value_; }

 private:
  int64_t value_ = 0;
  bool overflow_ = false;
};

// The parameter count of a GPT-2 of `c`'s shape times 16 bytes (weights, gradients, AdamW's
// moments), with every shape product checked.
CheckedInt64 Gpt2ShapeCheck(const Gpt2Config& c) {
  const int64_t e = c.n_embd;
  CheckedInt64 layer = CheckedInt64(e).Mul(3).Mul(e);              // c_attn weight
  layer.Add(CheckedInt64(e).Mul(e));                               // attn c_proj weight
  layer.Add(CheckedInt64(e).Mul(c.n_inner).Mul(2));                // mlp c_fc, c_proj weights
  layer.Add(CheckedInt64(e).Mul(9)).Add(CheckedInt64(c.n_inner));  // biases and layer norms
  CheckedInt64 total = layer.Mul(c.n_layer);
  total.Add(CheckedInt64(c.vocab_size).Mul(e)).Add(CheckedInt64(c.n_positions).Mul(e));
  total.Add(CheckedInt64(e).Mul(2));
  return total.Mul(16);
}

Result<int64_t> PositiveInt(const boost::json::object& object, const char* key, int64_t fallback,
                            const std::string& source) {
  const boost::json::value* value = object.if_contains(key);
  if (value == nullptr || value->is_null()) {
    if (fallback >= 0) return fallback;
    return Status(InvalidArgument(source + ": missing \"" + key + "\" (a positive integer)"));
  }
  if (value->is_int64() && value->get_int64() > 0) return value->get_int64();
  if (value->is_uint64() && value->get_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(value->get_uint64());
  }
  return Status(InvalidArgument(source + ": \"" + key + "\" must be a positive integer, got " +
                                boost::json::serialize(*value)));
}

// Fails when `key` is present with a value other than `supported`.
Status RequireBool(const boost::json::object& object, const char* key, bool supported,
                   const std::string& source) {
  const boost::json::value* value = object.if_contains(key);
  if (value == nullptr || value->is_null()) return Status::Ok();
  if (!value->is_bool()) {
    return InvalidArgument(source + ": \"" + key + "\" must be true or false, got " +
                           boost::json::serialize(*value));
  }
  if (value->get_bool() != supported) {
    return InvalidArgument(source + ": \"" + key + "\": " + (value->get_bool() ? "true" : "false") +
                           " is not supported by trial-worker's GPT-2 (only " +
                           (supported ? "true" : "false") + ")");
  }
  return Status::Ok();
}

// The same full name a parameter has in model.named_parameters().
std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

c10::optional<torch::Dtype> TorchDtype(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kBool:
      return torch::kBool;
    case SafetensorsDtype::kU8:
      return torch::kUInt8;
    case SafetensorsDtype::kI8:
      return torch::kInt8;
    case SafetensorsDtype::kI16:
      return torch::kInt16;
    case SafetensorsDtype::kF16:
      return torch::kFloat16;
    case SafetensorsDtype::kBF16:
      return torch::kBFloat16;
    case SafetensorsDtype::kI32:
      return torch::kInt32;
    case SafetensorsDtype::kF32:
      return torch::kFloat32;
    case SafetensorsDtype::kF64:
      return torch::kFloat64;
    case SafetensorsDtype::kI64:
      return torch::kInt64;
    default:
      return c10::nullopt;
  }
}

bool IsLoadableFloat(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::kF32 || dtype == SafetensorsDtype::kF16 ||
         dtype == SafetensorsDtype::kBF16 || dtype == SafetensorsDtype::kF64;
}

// h.{i}.attn.bias and h.{i}.attn.masked_bias for i < n_layer: HF's causal-mask buffers, which
// every published GPT-2 checkpoint carries and this implementation computes instead.
bool IsIgnoredMaskBuffer(const std::string& name, int64_t n_layer) {
  if (name.compare(0, 2, "h.") != 0) return false;
  size_t i = 2;
  int64_t layer = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && layer < n_layer) {
    layer = layer * 10 + (name[i++] - '0');
  }
  if (i == 2 || layer >= n_layer) return false;
  std::string_view rest(name.c_str() + i);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

std::vector<int64_t> ShapeOf(const torch::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

}  // namespace

// ---- config.json -------------------------------------------------------------------------

Result<Gpt2Config> ParseGpt2Config(std::string_view json_text, const std::string& source) {
  Result<boost::json::value> parsed = common::ParseJsonExact(json_text);
  if (!parsed.ok()) {
    return InvalidArgument(source + ": not valid JSON: " + parsed.status().message());
  }
  if (!parsed->is_object()) return InvalidArgument(source + ": expected a JSON object");
  const boost::json::object& object = parsed->get_object();

  if (const boost::json::value* type = object.if_contains("model_type")) {
    if (!type->is_string() || type->get_string() != "gpt2") {
      return InvalidArgument(source + ": \"model_type\" is " + boost::json::serialize(*type) +
                             "; trial-worker fine-tunes GPT-2 models (\"gpt2\")");
    }
  }
  if (const boost::json::value* act = object.if_contains("activation_function")) {
    // gelu_new and gelu_pytorch_tanh are the same function (the tanh approximation).
    if (!act->is_string() ||
        (act->get_string() != "gelu_new" && act->get_string() != "gelu_pytorch_tanh")) {
      return InvalidArgument(source + ": \"activation_function\" " + boost::json::serialize(*act) +
                             " is not supported (expected \"gelu_new\")");
    }
  }
  TRIALD_RETURN_IF_ERROR(RequireBool(object, "tie_word_embeddings", true, source));
  TRIALD_RETURN_IF_ERROR(RequireBool(object, "add_cross_attention", false, source));
  TRIALD_RETURN_IF_ERROR(RequireBool(object, "scale_attn_weights", true, source));
  TRIALD_RETURN_IF_ERROR(RequireBool(object, "scale_attn_by_inverse_layer_idx", false, source));
  TRIALD_RETURN_IF_ERROR(RequireBool(object, "reorder_and_upcast_attn", false, source));

  Gpt2Config config;
  TRIALD_ASSIGN_OR_RETURN(config.n_layer, PositiveInt(object, "n_layer", -1, source));
  TRIALD_ASSIGN_OR_RETURN(config.n_head, PositiveInt(object, "n_head", -1, source));
  TRIALD_ASSIGN_OR_RETURN(config.n_embd, PositiveInt(object, "n_embd", -1, source));
  TRIALD_ASSIGN_OR_RETURN(config.vocab_size, PositiveInt(object, "vocab_size", -1, source));
  // Very old configs call the context length n_ctx.
  TRIALD_ASSIGN_OR_RETURN(int64_t n_ctx, PositiveInt(object, "n_ctx", 0, source));
  TRIALD_ASSIGN_OR_RETURN(config.n_positions,
                          PositiveInt(object, "n_positions", n_ctx > 0 ? n_ctx : -1, source));
  // 4 * n_embd by default; an n_embd so large that this overflows is refused below.
  const int64_t default_inner = config.n_embd <= INT64_MAX / 4 ? 4 * config.n_embd : INT64_MAX;
  TRIALD_ASSIGN_OR_RETURN(config.n_inner, PositiveInt(object, "n_inner", default_inner, source));
  if (const boost::json::value* eps = object.if_contains("layer_norm_epsilon")) {
    if (!eps->is_number() || !(eps->to_number<double>() > 0)) {
      return InvalidArgument(source + ": \"layer_norm_epsilon\" must be a positive number, got " +
                             boost::json::serialize(*eps));
    }
    config.layer_norm_epsilon = eps->to_number<double>();
  }
  // Every tensor's shape product, and the parameter count times 16 bytes (weights, gradients,
  // AdamW's two moments), must fit in 64 bits, so that building the model and planning its
  // memory never overflow.
  const auto sizes = Gpt2ShapeCheck(config);
  if (sizes.overflow()) {
    return InvalidArgument(
        source + ": the model's dimensions (n_layer " + std::to_string(config.n_layer) +
        ", n_embd " + std::to_string(config.n_embd) + ", n_inner " +
        std::to_string(config.n_inner) + ", vocab_size " + std::to_string(config.vocab_size) +
        ", n_positions " + std::to_string(config.n_positions) +
        ") give more parameters than 64-bit byte counts hold");
  }
  if (config.n_embd % config.n_head != 0) {
    return InvalidArgument(source + ": \"n_embd\" " + std::to_string(config.n_embd) +
                           " is not divisible by \"n_head\" " + std::to_string(config.n_head));
  }
  return config;
}

Result<Gpt2Config> LoadGpt2Config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::ErrnoError("cannot read model config " + path, errno);
  std::ostringstream text;
  text << in.rdbuf();
  return ParseGpt2Config(text.str(), path);
}

// ---- modules -----------------------------------------------------------------------------

void ReplaceableModule::AddParameter(const std::string& name, torch::Tensor tensor,
                                     torch::Tensor* member) {
  *member = register_parameter(name, std::move(tensor));
  members_.emplace_back(name, member);
}

void ReplaceableModule::ReplaceParameter(const std::string& name, torch::Tensor tensor) {
  for (auto& [member_name, member] : members_) {
    if (member_name == name) {
      parameters_[name] = tensor;
      *member = std::move(tensor);
      return;
    }
  }
  TORCH_CHECK(false, "ReplaceParameter: no parameter '", name, "'");
}

Gpt2Conv1D::Gpt2Conv1D(int64_t in, int64_t out, const torch::TensorOptions& options) {
  AddParameter("weight", torch::empty({in, out}, options), &weight);
  AddParameter("bias", torch::empty({out}, options), &bias);
}

torch::Tensor Gpt2Conv1D::forward(const torch::Tensor& x) {
  // addmm on the flattened batch is what HF's Conv1D does; one GEMM with the bias fused.
  auto out_shape = x.sizes().vec();
  out_shape.back() = weight.size(1);
  return torch::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(out_shape);
}

Gpt2LayerNorm::Gpt2LayerNorm(int64_t width, double epsilon, const torch::TensorOptions& options)
    : width_(width), epsilon_(epsilon) {
  AddParameter("weight", torch::empty({width}, options), &weight);
  AddParameter("bias", torch::empty({width}, options), &bias);
}

torch::Tensor Gpt2LayerNorm::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {width_}, weight, bias, epsilon_);
}

Gpt2Embedding::Gpt2Embedding(int64_t count, int64_t width, const torch::TensorOptions& options) {
  AddParameter("weight", torch::empty({count, width}, options), &weight);
}

torch::Tensor Gpt2Embedding::forward(const torch::Tensor& ids) {
  return torch::embedding(weight, ids);
}

Gpt2Attention::Gpt2Attention(const Gpt2Config& config, double dropout,
                             const torch::TensorOptions& options)
    : n_head_(config.n_head), dropout_(dropout) {
  c_attn = register_module("c_attn",
                           std::make_shared<Gpt2Conv1D>(config.n_embd, 3 * config.n_embd, options));
  c_proj = register_module("c_proj",
                           std::make_shared<Gpt2Conv1D>(config.n_embd, config.n_embd, options));
}

torch::Tensor Gpt2Attention::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), seq = x.size(1), width = x.size(2);
  const int64_t head_dim = width / n_head_;
  std::vector<torch::Tensor> qkv = c_attn->forward(x).split(width, /*dim=*/2);
  auto heads = [&](const torch::Tensor& t) {
    return t.view({batch, seq, n_head_, head_dim}).transpose(1, 2);  // [B, H, T, D]
  };
  torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(head_dim));
  // True above the diagonal: position i may not attend to a later position j > i.
  torch::Tensor future =
      torch::ones({seq, seq}, torch::TensorOptions().dtype(torch::kBool).device(x.device()))
          .triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  torch::Tensor probs = torch::softmax(scores, -1);
  probs = torch::dropout(probs, dropout_, is_training());
  torch::Tensor context = torch::matmul(probs, v).transpose(1, 2).reshape({batch, seq, width});
  return torch::dropout(c_proj->forward(context), dropout_, is_training());
}

Gpt2Mlp::Gpt2Mlp(const Gpt2Config& config, double dropout, const torch::TensorOptions& options)
    : dropout_(dropout) {
  c_fc =
      register_module("c_fc", std::make_shared<Gpt2Conv1D>(config.n_embd, config.n_inner, options));
  c_proj = register_module("c_proj",
                           std::make_shared<Gpt2Conv1D>(config.n_inner, config.n_embd, options));
}

torch::Tensor Gpt2Mlp::forward(const torch::Tensor& x) {
  // "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  torch::Tensor hidden = torch::gelu(c_fc->forward(x), "tanh");
  return torch::dropout(c_proj->forward(hidden), dropout_, is_training());
}

Gpt2Block::Gpt2Block(const Gpt2Config& config, double dropout,
                     const torch::TensorOptions& options) {
  ln_1 = register_module(
      "ln_1", std::make_shared<Gpt2LayerNorm>(config.n_embd, config.layer_norm_epsilon, options));
  attn = register_module("attn", std::make_shared<Gpt2Attention>(config, dropout, options));
  ln_2 = register_module(
      "ln_2", std::make_shared<Gpt2LayerNorm>(config.n_embd, config.layer_norm_epsilon, options));
  mlp = register_module("mlp", std::make_shared<Gpt2Mlp>(config, dropout, options));
}

torch::Tensor Gpt2Block::forward(const torch::Tensor& x) {
  torch::Tensor h = x + attn->forward(ln_1->forward(x));
  return h + mlp->forward(ln_2->forward(h));
}

Gpt2Model::Gpt2Model(const Gpt2Config& config, double dropout, const torch::TensorOptions& options)
    : config_(config), dropout_(dropout) {
  if (config_.n_inner <= 0) config_.n_inner = 4 * config_.n_embd;
  wte = register_module(
      "wte", std::make_shared<Gpt2Embedding>(config_.vocab_size, config_.n_embd, options));
  wpe = register_module(
      "wpe", std::make_shared<Gpt2Embedding>(config_.n_positions, config_.n_embd, options));
  // Registered as "h" with children "0", "1", ... so the names match the checkpoints'.
  auto blocks = register_module("h", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    h.push_back(blocks->register_module(std::to_string(i),
                                        std::make_shared<Gpt2Block>(config_, dropout, options)));
  }
  ln_f = register_module(
      "ln_f", std::make_shared<Gpt2LayerNorm>(config_.n_embd, config_.layer_norm_epsilon, options));
}

torch::Tensor Gpt2Model::forward(const torch::Tensor& ids) {
  TORCH_CHECK(ids.dim() == 2, "GPT-2 input must be [batch, seq] token ids, got ", ids.sizes());
  const int64_t seq = ids.size(1);
  TORCH_CHECK(seq <= config_.n_positions, "sequence of ", seq,
              " tokens is longer than the model's n_positions ", config_.n_positions);
  torch::Tensor positions =
      torch::arange(seq, torch::TensorOptions().dtype(torch::kLong).device(ids.device()));
  torch::Tensor x = wte->forward(ids) + wpe->forward(positions);
  x = torch::dropout(x, dropout_, is_training());
  for (const auto& block : h) x = block->forward(x);
  x = ln_f->forward(x);
  // The tied head: logits = x @ wte^T.
  return torch::matmul(x, wte->weight.t());
}

std::shared_ptr<Gpt2Model> BuildGpt2Skeleton(const Gpt2Config& config, double dropout) {
  return std::make_shared<Gpt2Model>(
      config, dropout, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta));
}

// ---- planning ----------------------------------------------------------------------------

Result<Gpt2MemoryPlan> PlanGpt2Memory(const Gpt2Model& model, int64_t batch_size, int64_t seq_len) {
  if (batch_size < 1 || seq_len < 1) {
    return Status(InvalidArgument("lm: cannot plan batch_size " + std::to_string(batch_size) +
                                  " x seq_len " + std::to_string(seq_len) + "; both must be >= 1"));
  }
  // Every product and sum is checked: batch_size and seq_len come from the sweep, the shapes
  // from the checkpoint's config.json.
  CheckedInt64 params;
  for (const torch::Tensor& p : model.parameters()) params.Add(p.numel());
  const Gpt2Config& c = model.config();
  constexpr int64_t kF32 = 4;
  // Per token: n_layer * (10 C + 2 I + 3 H T) + 2 C + 3 V.
  CheckedInt64 per_layer = CheckedInt64(c.n_head).Mul(3).Mul(seq_len);
  per_layer.Add(CheckedInt64(c.n_embd).Mul(10)).Add(CheckedInt64(c.n_inner).Mul(2));
  CheckedInt64 per_token = per_layer.Mul(c.n_layer);
  per_token.Add(CheckedInt64(c.n_embd).Mul(2)).Add(CheckedInt64(c.vocab_size).Mul(3));
  const CheckedInt64 activation = per_token.Mul(seq_len).Mul(batch_size).Mul(kF32);
  const CheckedInt64 parameter = CheckedInt64(params).Mul(kF32);
  CheckedInt64 total = CheckedInt64(params).Mul(4 * kF32);  // parameters, gradients, AdamW's two
  total.Add(activation);
  if (total.overflow()) {
    return Status(InvalidArgument(
        "lm: the memory plan for batch_size " + std::to_string(batch_size) + " x seq_len " +
        std::to_string(seq_len) + " (n_layer " + std::to_string(c.n_layer) + ", n_embd " +
        std::to_string(c.n_embd) + ", n_inner " + std::to_string(c.n_inner) + ", vocab_size " +
        std::to_string(c.vocab_size) +
        ") does not fit 64-bit byte counts; expected a smaller "
        "batch, sequence or model"));
  }
  Gpt2MemoryPlan plan;
  plan.params = params.value();
  plan.parameter_bytes = parameter.value();
  plan.gradient_bytes = parameter.value();
  plan.optimizer_bytes = 2 * parameter.value();
  plan.activation_bytes = activation.value();
  plan.total_bytes = total.value();
  return plan;
}

// ---- loading -----------------------------------------------------------------------------

std::vector<std::string> MetaTensorNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  auto check = [&](const char* kind, const std::string& name, const torch::Tensor& t) {
    if (t.defined() && t.device().is_meta()) {
      names.push_back(std::string(kind) + " '" + name + "' " + FormatShape(ShapeOf(t)));
    }
  };
  for (const auto& item : module.named_parameters()) check("parameter", item.key(), item.value());
  for (const auto& item : module.named_buffers()) check("buffer", item.key(), item.value());
  return names;
}

Status CheckNoMetaTensors(const torch::nn::Module& module, const std::string& source) {
  std::vector<std::string> names = MetaTensorNames(module);
  if (names.empty()) return Status::Ok();
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return common::FailedPrecondition(
      source + " does not provide " + list + " (" + (names.size() == 1 ? "it is" : "they are") +
      " still on the meta device, with no data); the trial cannot train without " +
      (names.size() == 1 ? "it" : "them"));
}

Result<torch::Tensor> TensorFromView(const TensorView& view) {
  c10::optional<torch::Dtype> dtype = TorchDtype(view.dtype);
  if (!dtype) {
    return Status(InvalidArgument("tensor '" + view.name + "' has dtype " +
                                  SafetensorsDtypeName(view.dtype) +
                                  ", which LibTorch cannot represent"));
  }
  auto options = torch::TensorOptions().dtype(*dtype).device(torch::kCPU);
  const size_t element = SafetensorsDtypeSize(view.dtype);
  if (reinterpret_cast<uintptr_t>(view.data) % element == 0) {
    // Read-only use: the const_cast only satisfies from_blob's signature; the mapping is
    // PROT_READ, so a write would fault rather than corrupt the file.
    return torch::from_blob(const_cast<void*>(view.data), view.shape, options);
  }
  torch::Tensor copy = torch::empty(view.shape, options);
  if (view.bytes > 0) std::memcpy(copy.data_ptr(), view.data, view.bytes);
  return copy;
}

Status LoadGpt2Weights(Gpt2Model& model, const SafetensorsFile& file, const torch::Device& device) {
  const std::string& path = file.path();
  const Gpt2Config& config = model.config();

  // Pass 1: check every tensor of the file before allocating anything.
  std::map<std::string, torch::Tensor> expected;
  for (const auto& item : model.named_parameters()) expected.emplace(item.key(), item.value());
  std::map<std::string, const TensorView*> found;  // parameter name -> its tensor in the file
  const TensorView* lm_head = nullptr;
  for (const TensorView& view : file.tensors()) {
    std::string name = view.name;
    if (name.compare(0, kPrefix.size(), kPrefix) == 0) name = name.substr(kPrefix.size());
    auto where = [&] { return path + ": tensor '" + view.name + "'"; };

    if (name == "lm_head.weight") {
      lm_head = &view;
      continue;
    }
    if (IsIgnoredMaskBuffer(name, config.n_layer)) continue;
    auto it = expected.find(name);
    if (it == expected.end()) {
      return InvalidArgument(where() + " is not a parameter of a GPT-2 with n_layer=" +
                             std::to_string(config.n_layer) +
                             " (unexpected key; is config.json the checkpoint's?)");
    }
    if (found.count(name) != 0) {
      return InvalidArgument(where() + " duplicates '" + found[name]->name +
                             "' (the file holds the same parameter with and without the '" +
                             std::string(kPrefix) + "' prefix)");
    }
    std::vector<int64_t> want = ShapeOf(it->second);
    if (view.shape != want) {
      return InvalidArgument(where() + " has shape " + FormatShape(view.shape) + ", expected " +
                             FormatShape(want) + " (from config.json)");
    }
    if (!IsLoadableFloat(view.dtype)) {
      return InvalidArgument(where() + " has dtype " + SafetensorsDtypeName(view.dtype) +
                             ", expected a floating type (F32, F16, BF16 or F64)");
    }
    found[name] = &view;
  }
  if (lm_head != nullptr) {
    std::vector<int64_t> want = {config.vocab_size, config.n_embd};
    if (lm_head->shape != want) {
      return InvalidArgument(path + ": tensor '" + lm_head->name + "' has shape " +
                             FormatShape(lm_head->shape) + ", expected " + FormatShape(want) +
                             " (the LM head is tied to wte.weight)");
    }
    if (!IsLoadableFloat(lm_head->dtype)) {
      return InvalidArgument(path + ": tensor '" + lm_head->name + "' has dtype " +
                             SafetensorsDtypeName(lm_head->dtype) +
                             ", expected a floating type (F32, F16, BF16 or F64)");
    }
  }

  // Pass 2: real storage on the target device, filled straight from the mapping.
  torch::NoGradGuard no_grad;
  auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  for (const auto& named : model.named_modules()) {
    auto* module = dynamic_cast<ReplaceableModule*>(named.value().get());
    if (module == nullptr) continue;
    for (const auto& param : module->named_parameters(/*recurse=*/false)) {
      auto it = found.find(Join(named.key(), param.key()));
      if (it == found.end()) continue;  // stays on meta; CheckNoMetaTensors names it
      TRIALD_ASSIGN_OR_RETURN(torch::Tensor source, TensorFromView(*it->second));
      torch::Tensor real = torch::empty(param.value().sizes(), options);
      real.copy_(source);
      real.set_requires_grad(true);
      module->ReplaceParameter(param.key(), real);
    }
  }
  TRIALD_RETURN_IF_ERROR(CheckNoMetaTensors(model, path));

  if (lm_head != nullptr) {
    TRIALD_ASSIGN_OR_RETURN(torch::Tensor head, TensorFromView(*lm_head));
    torch::Tensor wte = model.wte->weight.to(torch::kCPU);
    if (!torch::equal(head.to(torch::kFloat32), wte)) {
      return InvalidArgument(path + ": tensor '" + lm_head->name +
                             "' differs from wte.weight, but GPT-2's LM head is tied to the "
                             "token embedding (untied heads are not supported)");
    }
  }
  return Status::Ok();
}

Status SaveGpt2Weights(const Gpt2Model& model, const std::string& path) {
  TRIALD_RETURN_IF_ERROR(CheckNoMetaTensors(model, "the model to save"));
  std::vector<torch::Tensor> keep;  // owns the CPU copies until the file is written
  std::vector<TensorToWrite> tensors;
  for (const auto& item : model.named_parameters()) {
    torch::Tensor t = item.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    keep.push_back(t);
    tensors.push_back({item.key(), SafetensorsDtype::kF32, ShapeOf(t), t.data_ptr(),
                       static_cast<size_t>(t.numel()) * sizeof(float)});
  }
  return WriteSafetensors(path, std::move(tensors), {{"format", "pt"}});
}

}  // namespace triald::worker
