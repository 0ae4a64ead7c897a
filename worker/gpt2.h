#pragma once
// GPT-2 (the Hugging Face GPT2LMHeadModel architecture) in LibTorch, and the loading path that
// keeps the meta-tensor bugs of lazy loading out by construction:
//
//   1. Gpt2Model is built with every parameter on the meta device: shapes only, no storage.
//   2. PlanGpt2Memory counts parameters and the memory a training run will need from that
//      skeleton, before a byte is allocated, so an oversized trial is refused up front.
//   3. LoadGpt2Weights checks every checkpoint tensor against the skeleton (names, shapes,
//      dtypes), then gives each parameter real storage on the target device and fills it from
//      the memory-mapped checkpoint in one copy, converting F16/BF16/F64 to F32.
//   4. CheckNoMetaTensors proves no parameter or buffer was left on the meta device, naming any
//      that was, so a checkpoint lacking a tensor fails with that tensor's name instead of
//      "Tensor.item() cannot be called on meta tensors" somewhere in training.
//
// Weight names are those of HF GPT-2 checkpoints ("h.0.attn.c_attn.weight"), with or without a
// "transformer." prefix. GPT-2's projections are Conv1D modules whose weights are stored
// [in, out]; Gpt2Conv1D keeps that layout and computes x @ W + b, so checkpoints load without
// transposing and a transposed load cannot happen by mistake.
//
// Thread-safety: a model is a torch::nn::Module: not safe to use from several threads at once
// (forward reads parameters that training and loading write). The free functions are safe to
// call concurrently on different models.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/safetensors.h"

namespace triald::worker {

// The architecture, from a checkpoint's config.json.
struct Gpt2Config {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t n_positions = 1024;  // longest sequence (context window)
  int64_t vocab_size = 50257;
  int64_t n_inner = 0;  // MLP width; 0 in config.json (null) means 4 * n_embd
  double layer_norm_epsilon = 1e-5;
};

// Parses config.json text. `source` names the file in messages. Unsupported variants
// (activation other than the tanh-approximated GELU, untied embeddings, cross-attention,
// per-layer attention scaling) are refused by name rather than loaded wrongly.
common::Result<Gpt2Config> ParseGpt2Config(std::string_view json_text, const std::string& source);
// Reads and parses `path`.
common::Result<Gpt2Config> LoadGpt2Config(const std::string& path);

// A torch::nn::Module whose parameters can be replaced by other tensors after construction.
// torch::nn::Module offers no way to do that, and Tensor::set_data refuses to turn a meta tensor
// into a CPU or CUDA one, so the layers of the model derive from this and register their
// parameters through AddParameter.
class ReplaceableModule : public torch::nn::Module {
 public:
  // Replaces this module's own parameter `name` (no dots: not a child's). The registry entry and
  // the member the layer computes with are updated together.
  void ReplaceParameter(const std::string& name, torch::Tensor tensor);

 protected:
  // Registers `tensor` as parameter `name` and binds `*member` to it; `member` must live as long
  // as the module (a field of it).
  void AddParameter(const std::string& name, torch::Tensor tensor, torch::Tensor* member);

 private:
  std::vector<std::pair<std::string, torch::Tensor*>> members_;
};

// GPT-2's Conv1D: y = x @ weight + bias with weight stored [in, out], as in the checkpoints.
class Gpt2Conv1D : public ReplaceableModule {
 public:
  Gpt2Conv1D(int64_t in, int64_t out, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};

class Gpt2LayerNorm : public ReplaceableModule {
 public:
  Gpt2LayerNorm(int64_t width, double epsilon, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  int64_t width_;
  double epsilon_;
};

class Gpt2Embedding : public ReplaceableModule {
 public:
  Gpt2Embedding(int64_t count, int64_t width, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
};

// Causal multi-head self-attention. The causal mask is computed per call (a boolean upper
// triangle), not kept as a buffer: the checkpoints' h.{i}.attn.bias buffers are the same mask
// and are ignored when loading.
class Gpt2Attention : public torch::nn::Module {
 public:
  Gpt2Attention(const Gpt2Config& config, double dropout, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<Gpt2Conv1D> c_attn, c_proj;

 private:
  int64_t n_head_;
  double dropout_;
};

class Gpt2Mlp : public torch::nn::Module {
 public:
  Gpt2Mlp(const Gpt2Config& config, double dropout, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<Gpt2Conv1D> c_fc, c_proj;

 private:
  double dropout_;
};

// Pre-LayerNorm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x)).
class Gpt2Block : public torch::nn::Module {
 public:
  Gpt2Block(const Gpt2Config& config, double dropout, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  std::shared_ptr<Gpt2LayerNorm> ln_1, ln_2;
  std::shared_ptr<Gpt2Attention> attn;
  std::shared_ptr<Gpt2Mlp> mlp;
};

// The language model: token and position embeddings, n_layer blocks, a final LayerNorm and an
// LM head tied to the token embedding (the head has no parameter of its own; it multiplies by
// wte's weight). Parameter names match the checkpoints without the "transformer." prefix.
//
// `dropout` is GPT-2's embd_pdrop, attn_pdrop and resid_pdrop at once; it acts only in training
// mode (train()), so evaluation under eval() is deterministic.
class Gpt2Model : public torch::nn::Module {
 public:
  // Every parameter is created uninitialised with `options` (dtype F32 and a device); on the
  // meta device that allocates nothing.
  Gpt2Model(const Gpt2Config& config, double dropout, const torch::TensorOptions& options);

  // ids: [batch, seq] integer token ids, seq <= n_positions. Returns logits [batch, seq, vocab].
  torch::Tensor forward(const torch::Tensor& ids);

  const Gpt2Config& config() const { return config_; }

  std::shared_ptr<Gpt2Embedding> wte, wpe;
  std::vector<std::shared_ptr<Gpt2Block>> h;
  std::shared_ptr<Gpt2LayerNorm> ln_f;

 private:
  Gpt2Config config_;
  double dropout_;
};

// A skeleton: the model with every parameter on the meta device.
std::shared_ptr<Gpt2Model> BuildGpt2Skeleton(const Gpt2Config& config, double dropout);

// What a training run of the model needs, counted on the skeleton before allocating anything.
// Every figure is in bytes for F32 training with AdamW:
//   parameter_bytes  = 4 * params
//   gradient_bytes   = 4 * params
//   optimizer_bytes  = 8 * params                (AdamW's exp_avg and exp_avg_sq)
//   activation_bytes = 4 * B * T * (L * (10 C + 2 I + 3 H T) + 2 C + 3 V)
// with B = batch size, T = sequence length, L = n_layer, C = n_embd, I = n_inner, H = n_head,
// V = vocab size. The activation term counts what autograd keeps per token for the backward
// pass of this implementation: per block, the inputs and outputs of both LayerNorms (4 C),
// q/k/v (3 C), the attention context and projection (2 C), the residual sum (C), the MLP's
// hidden layer before and after GELU (2 I), and the attention scores, probabilities and dropout
// mask (3 H T); after the blocks, the final LayerNorm (2 C), the logits, their log-softmax and
// their gradient (3 V). It is an estimate: allocator rounding, workspace and the CUDA context
// come on top.
struct Gpt2MemoryPlan {
  int64_t params = 0;
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t total_bytes = 0;
};

// `model` may be a skeleton; only shapes are read. batch_size and seq_len must be >= 1; every
// product is overflow-checked, and a plan whose byte counts do not fit in 64 bits is an
// InvalidArgument naming the batch, the sequence length and the model's dimensions.
common::Result<Gpt2MemoryPlan> PlanGpt2Memory(const Gpt2Model& model, int64_t batch_size,
                                              int64_t seq_len);

// Names (with shapes) of every parameter and buffer of `module` still on the meta device.
std::vector<std::string> MetaTensorNames(const torch::nn::Module& module);

// OK when no parameter or buffer of `module` is on the meta device; otherwise a
// FailedPrecondition naming every such tensor and saying that `source` (the checkpoint) did not
// provide it.
common::Status CheckNoMetaTensors(const torch::nn::Module& module, const std::string& source);

// Fills the skeleton `model` from `file` on `device`. Before anything is allocated, every tensor
// of the file is checked: after removing an optional "transformer." prefix it must be a
// parameter of the model with the same shape and a floating dtype (F32, F16, BF16, F64), or one
// of the expected-and-ignored keys (h.{i}.attn.bias, h.{i}.attn.masked_bias), or lm_head.weight,
// which must equal wte.weight because the head is tied. Then each parameter found in the file is
// replaced by a new F32 tensor on `device` holding the file's values. Errors name the file and
// the tensor (with expected and found shapes). A parameter the file lacks stays on the meta
// device and fails the final CheckNoMetaTensors with its name.
common::Status LoadGpt2Weights(Gpt2Model& model, const SafetensorsFile& file,
                               const torch::Device& device);

// Writes every parameter of `model` (which must hold no meta tensor) to `path` as F32 in the
// layout LoadGpt2Weights reads and published checkpoints use: the names without a prefix,
// Conv1D weights [in, out], no lm_head.weight (the head is tied) and no mask buffers.
common::Status SaveGpt2Weights(const Gpt2Model& model, const std::string& path);

// A CPU tensor with the view's dtype and shape holding its bytes: a zero-copy alias of the
// mapping when the data is aligned for its element type, else a copy. Used for reading only.
// Fails for dtypes LibTorch cannot represent (unsigned wider than a byte, F8).
common::Result<torch::Tensor> TensorFromView(const TensorView& view);

}  // namespace triald::worker
