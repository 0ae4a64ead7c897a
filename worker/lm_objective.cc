#include "worker/lm_objective.h"

#include <malloc.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <random>
#include <sstream>
#include <type_traits>
#include <variant>

#include "worker/device.h"
#include "worker/lm_checkpoint.h"
#include "worker/safetensors.h"
#include "worker/tokenizer.h"
#include "worker/torch_status.h"

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

constexpr double kBytesPerGb = 1024.0 * 1024.0 * 1024.0;

std::string FormatDouble(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

Status OutOfRange(std::string_view name, const std::string& expected, const std::string& got) {
  return InvalidArgument("lm: hyperparameter '" + std::string(name) + "' must be " + expected +
                         ", got " + got);
}

Result<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::ErrnoError(std::string("cannot read ") + what + " " + path, errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return common::ErrnoError(std::string("error reading ") + what + " " + path, errno);
  return text.str();
}

// True for a line that holds nothing but whitespace.
bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f'; });
}

// A batch of `rows` windows of `width` tokens starting at `starts`, as int64 on the CPU.
torch::Tensor Windows(const std::vector<int32_t>& tokens, const std::vector<int64_t>& starts,
                      int64_t width) {
  torch::Tensor batch = torch::empty({static_cast<int64_t>(starts.size()), width}, torch::kLong);
  int64_t* out = batch.data_ptr<int64_t>();
  for (size_t row = 0; row < starts.size(); ++row) {
    for (int64_t i = 0; i < width; ++i) out[row * width + i] = tokens[starts[row] + i];
  }
  return batch;
}

// Mean (or summed) next-token loss of a batch of windows: inputs are all but the last token,
// targets all but the first.
torch::Tensor WindowLoss(Gpt2Model& model, const torch::Tensor& windows, bool sum) {
  const int64_t seq = windows.size(1) - 1;
  torch::Tensor inputs = windows.narrow(1, 0, seq);
  torch::Tensor targets = windows.narrow(1, 1, seq).reshape({-1});
  torch::Tensor logits = model.forward(inputs);
  torch::Tensor log_probs = torch::log_softmax(logits.reshape({-1, logits.size(-1)}), -1);
  return torch::nll_loss(log_probs, targets, /*weight=*/{},
                         sum ? at::Reduction::Sum : at::Reduction::Mean);
}

// On the CPU every training step allocates and frees the same large tensors (the logits and
// their gradients are batch x seq x vocab floats: 100 MB for 8 x 64 x 50257). glibc hands
// blocks over 32 MiB back to the kernel at once and trims the heap eagerly, so each step pays
// for faulting all of that memory in again; on the 2-core test VM that was half the step time
// (20 s instead of 39 s for 6 steps of the tiny fixture, 4x with OpenBLAS). Keeping freed
// memory in the heap costs resident memory (up to about twice the peak of one step), which a
// trial process, alone with its model, can afford; it is returned when the trial exits.
void KeepFreedMemory() {
  constexpr int kOneGiB = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
}

// Sends every (key, value) to the context, stopping at the first failure.
Status SendAttrs(ObjectiveContext& ctx,
                 const std::vector<std::pair<std::string, boost::json::value>>& attrs) {
  for (const auto& [key, value] : attrs) TRIALD_RETURN_IF_ERROR(ctx.OnAttr(key, value));
  return Status::Ok();
}

Result<std::vector<int32_t>> TokenizeFile(const std::string& path, const char* what,
                                          const Gpt2Tokenizer& tokenizer) {
  TRIALD_ASSIGN_OR_RETURN(std::string text, ReadFile(path, what));
  return TokenizeDocuments(
      text, [&](std::string_view doc) { return tokenizer.Encode(doc); }, tokenizer.eos_id());
}

// The checkpoint folder of `config`, ending in '/' (or empty for the working folder).
std::string ModelDir(const config::LmObjectiveConfig& config) {
  return config.model.empty() || config.model.back() == '/' ? config.model : config.model + "/";
}

// Step 3 of a trial: the checkpoint mapped and validated, the tokenizer loaded, the texts
// tokenized and checked against the model and seq_len.
Status LoadLmFiles(const config::LmObjectiveConfig& config, const std::string& dir,
                   LmInputs& inputs) {
  TRIALD_ASSIGN_OR_RETURN(SafetensorsFile weights,
                          SafetensorsFile::Open(dir + "model.safetensors"));
  TRIALD_ASSIGN_OR_RETURN(Gpt2Tokenizer tokenizer,
                          Gpt2Tokenizer::Load(dir + "vocab.json", dir + "merges.txt"));
  if (tokenizer.vocab_size() > inputs.model_config.vocab_size) {
    return InvalidArgument("lm: the tokenizer (" + dir + "vocab.json) has " +
                           std::to_string(tokenizer.vocab_size()) +
                           " tokens, more than the model's vocab_size " +
                           std::to_string(inputs.model_config.vocab_size));
  }
  if (tokenizer.eos_id() < 0) {
    return InvalidArgument("lm: " + dir +
                           "vocab.json has no <|endoftext|> token to separate documents with");
  }
  TRIALD_ASSIGN_OR_RETURN(std::vector<int32_t> train,
                          TokenizeFile(config.train_file, "train_file", tokenizer));
  TRIALD_ASSIGN_OR_RETURN(std::vector<int32_t> eval,
                          TokenizeFile(config.eval_file, "eval_file", tokenizer));
  if (static_cast<int64_t>(train.size()) < config.seq_len + 1) {
    return InvalidArgument("lm: train_file " + config.train_file + " has " +
                           std::to_string(train.size()) + " tokens; seq_len " +
                           std::to_string(config.seq_len) + " needs at least " +
                           std::to_string(config.seq_len + 1));
  }
  if (eval.size() < 2) {
    return InvalidArgument("lm: eval_file " + config.eval_file + " has " +
                           std::to_string(eval.size()) + " tokens; evaluation needs at least 2");
  }
  inputs.weights.emplace(std::move(weights));
  inputs.train = std::move(train);
  inputs.eval = std::move(eval);
  return Status::Ok();
}

Result<PreparedLm> Prepare(const config::LmObjectiveConfig& config, const Params& params,
                           ObjectiveContext& ctx, LmInputs* preloaded) {
  TRIALD_ASSIGN_OR_RETURN(LmHyperparams hp, LmHyperparamsFrom(config, params));
  if (config.max_steps < 1) {
    return InvalidArgument("lm: max_steps must be >= 1, got " + std::to_string(config.max_steps));
  }
  if (config.seq_len < 1) {
    return InvalidArgument("lm: seq_len must be >= 1, got " + std::to_string(config.seq_len));
  }
  if (config.eval_every < 0) {
    return InvalidArgument("lm: eval_every must be >= 0, got " + std::to_string(config.eval_every));
  }
  const std::string dir = ModelDir(config);

  if (preloaded != nullptr) {
    // A trial takes the texts' tokens over; a second trial from the same inputs would train on
    // nothing.
    if (preloaded->taken) {
      return common::FailedPrecondition("lm: the preloaded inputs were already used by a trial");
    }
    preloaded->taken = true;
  }

  // Plan on the meta device: nothing is allocated until the plan fits.
  LmInputs own;
  LmInputs& inputs = preloaded != nullptr ? *preloaded : own;
  if (preloaded == nullptr) {
    TRIALD_ASSIGN_OR_RETURN(own.model_config, LoadGpt2Config(dir + "config.json"));
  }
  const Gpt2Config& model_config = inputs.model_config;
  if (config.seq_len > model_config.n_positions) {
    return InvalidArgument("lm: seq_len " + std::to_string(config.seq_len) +
                           " exceeds the model's n_positions " +
                           std::to_string(model_config.n_positions) + " (" + dir + "config.json)");
  }
  std::shared_ptr<Gpt2Model> model = BuildGpt2Skeleton(model_config, hp.dropout);
  TRIALD_ASSIGN_OR_RETURN(Gpt2MemoryPlan plan,
                          PlanGpt2Memory(*model, hp.batch_size, config.seq_len));
  TRIALD_RETURN_IF_ERROR(ctx.OnAttr("params", plan.params));
  TRIALD_RETURN_IF_ERROR(ctx.OnAttr("planned_memory_bytes", plan.total_bytes));
  if (config.memory_budget_gb > 0 && plan.total_bytes > config.memory_budget_gb * kBytesPerGb) {
    return common::FailedPrecondition(
        "lm: the trial needs an estimated " + FormatDouble(plan.total_bytes / kBytesPerGb) +
        " GiB (parameters " + FormatDouble(plan.parameter_bytes / kBytesPerGb) + ", gradients " +
        FormatDouble(plan.gradient_bytes / kBytesPerGb) + ", AdamW state " +
        FormatDouble(plan.optimizer_bytes / kBytesPerGb) + ", activations " +
        FormatDouble(plan.activation_bytes / kBytesPerGb) + " for batch_size " +
        std::to_string(hp.batch_size) + " x seq_len " + std::to_string(config.seq_len) +
        "), more than memory_budget_gb = " + FormatDouble(config.memory_budget_gb) +
        "; refused before allocating anything");
  }

  // Every input is read and checked before the device is touched (a fork server has done it
  // once for all its trials).
  if (preloaded == nullptr) TRIALD_RETURN_IF_ERROR(LoadLmFiles(config, dir, own));
  const SafetensorsFile& weights = *inputs.weights;
  std::vector<int32_t> train = std::move(inputs.train);
  std::vector<int32_t> eval = std::move(inputs.eval);

  // Reading and tokenizing can take a while on large inputs; a stop that came meanwhile ends
  // the trial before the device is touched.
  if (ctx.StopRequested()) return StoppedStatus();
  DeviceOptions device_options;
  device_options.name = config.device;
  device_options.gpu_memory_fraction = config.gpu_memory_fraction;
  device_options.cuda_visible_devices = CudaVisibleDevicesFromEnv();
  TRIALD_ASSIGN_OR_RETURN(DeviceChoice device, SelectDevice(device_options));
  TRIALD_RETURN_IF_ERROR(SendAttrs(ctx, device.attrs));
  if (device.device.is_cpu()) KeepFreedMemory();
  // After the device is chosen: seeding touches every CUDA generator.
  torch::manual_seed(static_cast<uint64_t>(hp.seed));

  TRIALD_RETURN_IF_ERROR(LoadGpt2Weights(*model, weights, device.device));
  // The guarantee training relies on, checked where it is relied on.
  TRIALD_RETURN_IF_ERROR(CheckNoMetaTensors(*model, weights.path()));
  if (ctx.StopRequested()) return StoppedStatus();

  PreparedLm prepared;
  prepared.hyperparams = hp;
  prepared.model = std::move(model);
  prepared.train = std::move(train);
  prepared.eval = std::move(eval);
  prepared.device = device.device;
  prepared.planned_memory_bytes = static_cast<double>(plan.total_bytes);
  return prepared;
}

Result<std::vector<double>> RunLm(const config::LmObjectiveConfig& config, const Params& params,
                                  ObjectiveContext& ctx, LmInputs* preloaded) {
  TRIALD_ASSIGN_OR_RETURN(PreparedLm run, Prepare(config, params, ctx, preloaded));
  LmTrainOptions options = LmTrainOptionsFor(config, run.hyperparams);
  // Without checkpoints the failed attempt left none to resume from either (same settings).
  if (config.checkpoint_every > 0) {
    options.fingerprint =
        LmCheckpointFingerprint(config, run.hyperparams, run.train, run.eval, run.device);
    options.resume_dir = ctx.ResumeDir();
    options.checkpoint_dir = ctx.TrialDir();
    if (options.checkpoint_dir.empty()) {
      std::fprintf(stderr,
                   "trial-worker: lm: no trial folder (TRIALD_TRIAL_DIR), so no checkpoints\n");
    }
  }
  TRIALD_ASSIGN_OR_RETURN(LmTrainResult result,
                          TrainLm(*run.model, run.train, run.eval, options, run.device, ctx));
  TRIALD_RETURN_IF_ERROR(ctx.OnAttr("tokens_seen", result.tokens_seen));
  TRIALD_RETURN_IF_ERROR(ctx.OnAttr("train_seconds", result.train_seconds));
  // This run's own rate: the steps before a resume point were another process's.
  const int64_t tokens_this_run =
      result.tokens_seen - result.resumed_from_step * run.hyperparams.batch_size * config.seq_len;
  const double tokens_per_second =
      result.train_seconds > 0 ? static_cast<double>(tokens_this_run) / result.train_seconds : 0;
  TRIALD_RETURN_IF_ERROR(ctx.OnAttr("tokens_per_second", tokens_per_second));
  // exp overflows to infinity for a hopeless loss; JSON cannot carry that.
  double perplexity = std::exp(result.eval_loss);
  if (std::isfinite(perplexity)) TRIALD_RETURN_IF_ERROR(ctx.OnAttr("perplexity", perplexity));
  if (config.objectives.empty()) return std::vector<double>{result.eval_loss};
  std::vector<double> values;
  for (const std::string& metric : config.objectives) {
    if (metric == "eval_loss") {
      values.push_back(result.eval_loss);
    } else if (metric == "perplexity") {
      if (!std::isfinite(perplexity)) {
        return InvalidArgument("lm: the perplexity exp(" + FormatDouble(result.eval_loss) +
                               ") is not finite; it cannot be an objective value");
      }
      values.push_back(perplexity);
    } else if (metric == "planned_memory_bytes") {
      values.push_back(run.planned_memory_bytes);
    } else if (metric == "train_seconds") {
      values.push_back(result.train_seconds);
    } else if (metric == "tokens_per_second") {
      values.push_back(tokens_per_second);
    } else {
      return InvalidArgument("lm: unknown objective metric \"" + metric + "\"");
    }
  }
  return values;
}

}  // namespace

Result<PreparedLm> PrepareLm(const config::LmObjectiveConfig& config, const Params& params,
                             ObjectiveContext& ctx) {
  return TorchCall("lm", [&] { return Prepare(config, params, ctx, nullptr); });
}

Result<LmInputs> LoadLmInputs(const config::LmObjectiveConfig& config) {
  return TorchCall("lm", [&]() -> Result<LmInputs> {
    const std::string dir = ModelDir(config);
    LmInputs inputs;
    TRIALD_ASSIGN_OR_RETURN(inputs.model_config, LoadGpt2Config(dir + "config.json"));
    TRIALD_RETURN_IF_ERROR(LoadLmFiles(config, dir, inputs));
    return inputs;
  });
}

LmTrainOptions LmTrainOptionsFor(const config::LmObjectiveConfig& config, const LmHyperparams& hp) {
  LmTrainOptions options;
  options.max_steps = config.max_steps;
  options.seq_len = config.seq_len;
  options.eval_every = config.eval_every;
  options.checkpoint_every = config.checkpoint_every;
  options.hyperparams = hp;
  return options;
}

const std::vector<std::string_view>& LmParamNames() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names;
    for (const char* name : config::LmFieldNames(/*tunable_only=*/true)) names.push_back(name);
    return names;
  }();
  return kNames;
}

Result<LmHyperparams> LmHyperparamsFrom(const config::LmObjectiveConfig& config,
                                        const Params& params) {
  // Every value is read first (a value of the wrong type is reported before an unknown name),
  // then the names are checked, then the ranges, in the table's order.
  using Value = std::variant<double, int64_t, std::string>;
  std::vector<std::pair<const config::LmField*, Value>> values;
  for (const config::LmField& field : config::LmFields()) {
    if (!field.tunable()) continue;
    auto read = [&](auto member) -> Result<Value> {
      const auto& fallback = config.*member;
      using T = std::remove_cv_t<std::remove_reference_t<decltype(fallback)>>;
      if constexpr (std::is_same_v<T, std::string>) {
        TRIALD_ASSIGN_OR_RETURN(std::string v, params.GetString(field.name, fallback));
        return Value(std::move(v));
      } else if constexpr (std::is_same_v<T, double>) {
        TRIALD_ASSIGN_OR_RETURN(double v, params.GetDouble(field.name, fallback));
        return Value(v);
      } else {
        TRIALD_ASSIGN_OR_RETURN(int64_t v, params.GetInt(field.name, fallback));
        return Value(v);
      }
    };
    TRIALD_ASSIGN_OR_RETURN(Value value, std::visit(read, field.member));
    values.emplace_back(&field, std::move(value));
  }
  TRIALD_RETURN_IF_ERROR(CheckNoUnknownParams("lm", params, LmParamNames()));

  LmHyperparams hp;
  for (const auto& [field, value] : values) {
    const config::LmField& f = *field;
    if (const auto* x = std::get_if<double>(&value)) {
      // InRange, not Accepts: TRIALD_PARAMS is JSON, which has no non-finite numbers.
      if (!f.number.InRange(*x)) return OutOfRange(f.name, f.bound, FormatDouble(*x));
      hp.*std::get<double LmHyperparams::*>(f.hyperparam) = *x;
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      // No upper bound: the table's int_max is what LmObjectiveConfig's member holds, and a
      // trial's value is an int64_t.
      if (*i < f.int_min) return OutOfRange(f.name, f.bound, std::to_string(*i));
      hp.*std::get<int64_t LmHyperparams::*>(f.hyperparam) = *i;
    } else {
      const std::string& s = std::get<std::string>(value);
      const auto choice = std::find(f.choices.begin(), f.choices.end(), s);
      if (choice == f.choices.end()) return OutOfRange(f.name, f.bound, "\"" + s + "\"");
      // The only tunable choice is lr_schedule, whose choices follow LrSchedule's order.
      hp.*std::get<LrSchedule LmHyperparams::*>(f.hyperparam) =
          static_cast<LrSchedule>(choice - f.choices.begin());
    }
  }
  return hp;
}

double LearningRateAt(int64_t step, int64_t max_steps, int64_t warmup_steps, double base,
                      LrSchedule schedule) {
  if (step < warmup_steps) return base * static_cast<double>(step + 1) / warmup_steps;
  if (schedule == LrSchedule::kConstant) return base;
  const int64_t decay_steps = std::max<int64_t>(1, max_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
  if (schedule == LrSchedule::kLinear) return base * (1.0 - progress);
  return base * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::vector<int32_t> TokenizeDocuments(
    std::string_view text, const std::function<std::vector<int32_t>(std::string_view)>& encode,
    int32_t eos) {
  std::vector<int32_t> tokens;
  size_t doc_begin = std::string_view::npos;  // start of the current document, if any
  size_t doc_end = 0;                         // end of its last non-blank line
  auto flush = [&] {
    if (doc_begin == std::string_view::npos) return;
    std::vector<int32_t> ids = encode(text.substr(doc_begin, doc_end - doc_begin));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(eos);
    doc_begin = std::string_view::npos;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t newline = text.find('\n', pos);
    size_t line_end = newline == std::string_view::npos ? text.size() : newline;
    if (IsBlank(text.substr(pos, line_end - pos))) {
      flush();
    } else {
      if (doc_begin == std::string_view::npos) doc_begin = pos;
      doc_end = line_end;
    }
    pos = newline == std::string_view::npos ? text.size() : newline + 1;
  }
  flush();
  return tokens;
}

Result<double> EvaluateLm(Gpt2Model& model, const std::vector<int32_t>& tokens, int64_t seq_len,
                          int64_t batch_size, const c10::Device& device, ObjectiveContext& ctx) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) return InvalidArgument("evaluation needs at least 2 tokens, got " + std::to_string(n));
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double total = 0;
  int64_t predicted = 0;
  // Full windows, batched; then the shorter tail window alone.
  std::vector<int64_t> starts;
  int64_t start = 0;
  for (; start + seq_len + 1 <= n; start += seq_len) starts.push_back(start);
  for (size_t i = 0; i < starts.size(); i += batch_size) {
    if (ctx.StopRequested()) return StoppedStatus();
    std::vector<int64_t> chunk(starts.begin() + i,
                               starts.begin() + std::min(starts.size(), i + batch_size));
    total += WindowLoss(model, Windows(tokens, chunk, seq_len + 1).to(device), true).item<double>();
    predicted += static_cast<int64_t>(chunk.size()) * seq_len;
  }
  if (n - start >= 2) {
    total += WindowLoss(model, Windows(tokens, {start}, n - start).to(device), true).item<double>();
    predicted += n - start - 1;
  }
  model.train(was_training);
  return total / static_cast<double>(predicted);
}

Result<LmTrainResult> TrainLm(Gpt2Model& model, const std::vector<int32_t>& train,
                              const std::vector<int32_t>& eval, const LmTrainOptions& options,
                              const c10::Device& device, ObjectiveContext& ctx) {
  const LmHyperparams& hp = options.hyperparams;
  const int64_t seq_len = options.seq_len;
  const int64_t n = static_cast<int64_t>(train.size());
  if (n < seq_len + 1) {
    return InvalidArgument("training needs at least seq_len + 1 = " + std::to_string(seq_len + 1) +
                           " tokens, got " + std::to_string(n));
  }
  TRIALD_RETURN_IF_ERROR(CheckNoMetaTensors(model, "the model"));

  // The usual split: biases and LayerNorm weights (all 1-D parameters of GPT-2) are not
  // decayed; weight matrices and embeddings are.
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : model.named_parameters()) {
    (item.value().dim() < 2 ? no_decay : decay).push_back(item.value());
  }
  auto adamw = [&](double weight_decay) {
    return torch::optim::AdamWOptions(hp.learning_rate)
        .betas(std::make_tuple(hp.adam_beta1, hp.adam_beta2))
        .weight_decay(weight_decay);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(adamw(hp.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(adamw(0.0)));
  torch::optim::AdamW optimizer(std::move(groups), adamw(0.0));
  std::vector<torch::Tensor> all_params = model.parameters();

  std::mt19937_64 rng(static_cast<uint64_t>(hp.seed));
  std::uniform_int_distribution<int64_t> pick_start(0, n - seq_len - 1);
  std::vector<int64_t> starts(static_cast<size_t>(hp.batch_size));

  LmTrainResult result;
  int64_t first_step = 0;
  if (!options.resume_dir.empty()) {
    Result<int64_t> resumed = LoadLmCheckpoint(options.resume_dir, options.fingerprint,
                                               options.max_steps, model, optimizer, &rng, device);
    if (resumed.ok()) {
      first_step = *resumed;
      std::fprintf(stderr, "trial-worker: lm: resuming from %s/%s at step %lld\n",
                   options.resume_dir.c_str(), kLmCheckpointFile,
                   static_cast<long long>(first_step));
    } else {
      std::fprintf(stderr, "trial-worker: lm: not resuming (%s); starting from step 0\n",
                   resumed.status().message().c_str());
      TRIALD_RETURN_IF_ERROR(
          ctx.OnAttr("resume_refused",
                     boost::json::value(boost::json::string_view(resumed.status().message()))));
    }
    TRIALD_RETURN_IF_ERROR(ctx.OnAttr("resumed_from_step", first_step));
  }
  result.resumed_from_step = first_step;
  result.steps = first_step;
  result.tokens_seen = first_step * hp.batch_size * seq_len;
  const bool checkpoints = options.checkpoint_every > 0 && !options.checkpoint_dir.empty();
  const auto began = std::chrono::steady_clock::now();
  // A resumed run's starting loss is the failed attempt's business: it sent it.
  if (options.eval_before_training && first_step == 0) {
    TRIALD_ASSIGN_OR_RETURN(result.initial_eval_loss,
                            EvaluateLm(model, eval, seq_len, hp.batch_size, device, ctx));
    // A random or broken checkpoint can start at a huge loss; JSON cannot carry infinity.
    if (std::isfinite(result.initial_eval_loss)) {
      TRIALD_RETURN_IF_ERROR(ctx.OnAttr("initial_eval_loss", result.initial_eval_loss));
    }
  }
  model.train();
  double eval_loss = 0;
  for (int64_t step = first_step; step < options.max_steps; ++step) {
    if (ctx.StopRequested()) return StoppedStatus();
    const double lr =
        LearningRateAt(step, options.max_steps, hp.warmup_steps, hp.learning_rate, hp.lr_schedule);
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    }
    for (int64_t& s : starts) s = pick_start(rng);
    optimizer.zero_grad();
    torch::Tensor windows = Windows(train, starts, seq_len + 1);
    torch::Tensor loss = WindowLoss(model, windows.to(device), false);
    loss.backward();
    if (hp.grad_clip > 0) torch::nn::utils::clip_grad_norm_(all_params, hp.grad_clip);
    optimizer.step();
    const double value = loss.item<double>();
    result.steps = step + 1;
    result.tokens_seen += hp.batch_size * seq_len;
    if (!std::isfinite(value)) {
      return InvalidArgument("lm: training loss became " + FormatDouble(value) + " at step " +
                             std::to_string(step + 1) + " (learning_rate " + FormatDouble(lr) +
                             " at that step; base " + FormatDouble(hp.learning_rate) + ")");
    }
    if (options.on_train_step) {
      LmStepRecord record;
      record.step = step + 1;
      record.learning_rate = lr;
      record.loss = value;
      record.windows = windows;
      record.elapsed_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      TRIALD_RETURN_IF_ERROR(options.on_train_step(record));
    }
    const bool last = step + 1 == options.max_steps;
    const bool evaluate = last || (options.eval_every > 0 && (step + 1) % options.eval_every == 0);
    if (evaluate) {
      TRIALD_ASSIGN_OR_RETURN(eval_loss,
                              EvaluateLm(model, eval, seq_len, hp.batch_size, device, ctx));
      if (!std::isfinite(eval_loss)) {
        return InvalidArgument("lm: evaluation loss became " + FormatDouble(eval_loss) +
                               " at step " + std::to_string(step + 1));
      }
    }
    // The checkpoint before the step's report: a run resumed from it reports only later steps,
    // and no step is reported by both the attempt that wrote it and the one that resumes.
    if (checkpoints && !last && (step + 1) % options.checkpoint_every == 0) {
      Status saved = SaveLmCheckpoint(options.checkpoint_dir, step + 1, options.fingerprint, model,
                                      optimizer, rng, device);
      if (!saved.ok()) {
        return Status(saved.code(), "lm: checkpoint at step " + std::to_string(step + 1) + ": " +
                                        saved.message());
      }
    }
    if (evaluate) TRIALD_RETURN_IF_ERROR(ctx.OnStep(step + 1, eval_loss));
  }
  result.eval_loss = eval_loss;
  result.train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return result;
}

Result<std::vector<double>> RunLmObjectiveValues(const config::LmObjectiveConfig& config,
                                                 const Params& params, ObjectiveContext& ctx,
                                                 LmInputs* preloaded) {
  // LibTorch reports failures (CUDA out of memory included) as exceptions; none leaves here.
  return TorchCall("lm", [&] { return RunLm(config, params, ctx, preloaded); });
}

Result<double> RunLmObjective(const config::LmObjectiveConfig& config, const Params& params,
                              ObjectiveContext& ctx) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<double> values, RunLmObjectiveValues(config, params, ctx));
  return values.front();
}

}  // namespace triald::worker
