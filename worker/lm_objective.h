#pragma once
// The "lm" objective: fine-tune a GPT-2-family checkpoint on a text file and return the loss on
// an evaluation text.
//
// One trial, start to end (RunLmObjective):
//   1. the hyperparameters: LmObjectiveConfig's defaults, overridden by TRIALD_PARAMS;
//   2. config.json -> a skeleton on the meta device -> parameter count and memory plan, sent as
//      the attributes params and planned_memory_bytes; a plan over memory_budget_gb ends the
//      trial here, before anything is allocated;
//   3. model.safetensors is mapped and validated, vocab.json/merges.txt loaded, the train and
//      eval files tokenized (see TokenizeDocuments);
//   4. the device is chosen (worker/device.h), the seed set, the weights loaded straight onto the
//      device, and no meta tensor may remain;
//   5. training (TrainLm): the evaluation loss before the first step as the attribute
//      initial_eval_loss, then as an intermediate value every eval_every steps and at the end.
//      With checkpoint_every, a checkpoint every that many steps in the trial's folder
//      (ctx.TrialDir(); worker/lm_checkpoint.h), and a retry resumes from the failed attempt's
//      (ctx.ResumeDir(), TRIALD_RESUME_DIR).
//      The final value is the last evaluation loss; the attributes device, tokens_seen,
//      train_seconds, tokens_per_second and perplexity (exp of that loss) go with it. With
//      [objective] objectives (several objectives), the values are those metrics, in that order.
//
// Thread-safety: RunLmObjective and TrainLm set process-wide LibTorch state (the seed, the CUDA
// allocator's fraction); run one per process, as trial-worker does.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/lm_fields.h"
#include "config/sweep.h"
#include "worker/builtin_objectives.h"
#include "worker/gpt2.h"
#include "worker/params.h"
#include "worker/safetensors.h"

namespace triald::worker {

// The tunable hyperparameters of one trial and the schedules; defined beside the table of lm
// settings (config/lm_fields.h) that fills them.
using LrSchedule = config::LrSchedule;
using LmHyperparams = config::LmHyperparams;

// The names TRIALD_PARAMS may hold for "lm": the tunable settings of config::LmFields(), in its
// order.
const std::vector<std::string_view>& LmParamNames();

// `config`'s defaults with `params` on top, for every tunable setting of config::LmFields().
// Every value is range-checked against that table (learning_rate > 0, dropout in [0, 1), betas
// in [0, 1), ...) and an unknown parameter name is an error, so a typo in a sweep's [space] does
// not silently train with a default.
common::Result<LmHyperparams> LmHyperparamsFrom(const config::LmObjectiveConfig& config,
                                                const Params& params);

// The learning rate of the update with 0-based index `step` out of `max_steps`: a linear warmup
// from base/warmup_steps to base over the first warmup_steps updates, then constant, or a
// linear or cosine decay that reaches 0 at max_steps (the last update uses a small positive
// rate, never exactly 0, so no step is wasted).
double LearningRateAt(int64_t step, int64_t max_steps, int64_t warmup_steps, double base,
                      LrSchedule schedule);

// A text file's token stream. The text is split into documents at blank lines (lines that are
// empty or hold only whitespace); each document is encoded separately, without its final
// newline, and followed by `eos`, as GPT-2's training data separates documents with
// <|endoftext|>. So a line-per-sentence file trains across lines, and the model also learns
// where a paragraph ends; a file with no blank lines is one document.
std::vector<int32_t> TokenizeDocuments(
    std::string_view text, const std::function<std::vector<int32_t>(std::string_view)>& encode,
    int32_t eos);

// One optimizer step as TrainLm took it, for the tools that record or cross-check training
// (trial-worker train).
struct LmStepRecord {
  int64_t step = 0;            // 1-based
  double learning_rate = 0;    // the rate this step's update used
  double loss = 0;             // the batch's training loss, computed before the update
  torch::Tensor windows;       // the batch: CPU int64 [batch_size, seq_len + 1] token ids
  double elapsed_seconds = 0;  // since TrainLm began, after this step's update
};

struct LmTrainOptions {
  int64_t max_steps = 100;
  int64_t seq_len = 128;
  int64_t eval_every = 0;  // 0 = evaluate only at the end
  LmHyperparams hyperparams;
  // Evaluate once before the first step and send it as the attribute initial_eval_loss: where
  // fine-tuning started from, so a trial's gain (or a bad learning rate's damage) is visible.
  bool eval_before_training = true;
  // Called after every step; a non-OK status ends training with that status. May be empty.
  std::function<common::Status(const LmStepRecord&)> on_train_step;
  // Checkpoints (worker/lm_checkpoint.h): every checkpoint_every steps (0: never; never after
  // the last step) into checkpoint_dir (empty: none), stamped with `fingerprint`
  // (LmCheckpointFingerprint of this run). A non-empty resume_dir is where training starts
  // from: its checkpoint, when it is valid for this run, else step 0 (the reason on stderr).
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  std::string resume_dir;
  std::string fingerprint;
};

struct LmTrainResult {
  double initial_eval_loss = 0;  // before the first step (0 when not evaluated)
  double eval_loss = 0;          // the last evaluation's mean loss per token (nats)
  int64_t tokens_seen = 0;       // training tokens fed forward (batch_size * seq_len per step)
  int64_t steps = 0;
  double train_seconds = 0;  // the training loop alone, evaluations included
  // The step the run resumed from (0: it started afresh); tokens_seen counts the steps before
  // it too, train_seconds only this run's.
  int64_t resumed_from_step = 0;
};

// Mean next-token loss over `tokens` under model.eval() and no grad. The text is cut into
// consecutive windows of seq_len + 1 tokens overlapping by one token, so every token but the
// first is predicted exactly once; the last window may be shorter. Needs at least 2 tokens.
// Returns StoppedStatus() if ctx asks to stop between batches.
common::Result<double> EvaluateLm(Gpt2Model& model, const std::vector<int32_t>& tokens,
                                  int64_t seq_len, int64_t batch_size, const c10::Device& device,
                                  ObjectiveContext& ctx);

// Trains `model` (already on `device`) with AdamW: weight decay on every weight matrix and
// embedding, none on biases and LayerNorm weights. Each step draws batch_size windows of
// seq_len + 1 tokens at random positions of `train` (seeded by hyperparams.seed, so a trial
// is reproducible), then clips the gradient norm to grad_clip. Reports the eval loss through
// ctx.OnStep(step, loss) every eval_every steps and after the last step; with a checkpoint to
// resume from (options.resume_dir), it continues after that checkpoint's step, reporting only
// the later steps, skips initial_eval_loss and sends the attribute resumed_from_step (0 when the
// checkpoint was missing or refused, with resume_refused saying why). Fails when a loss is
// not finite (naming the step and learning rate), when `train` is shorter than seq_len + 1
// tokens, or with StoppedStatus() when ctx asks to stop (checked between steps).
common::Result<LmTrainResult> TrainLm(Gpt2Model& model, const std::vector<int32_t>& train,
                                      const std::vector<int32_t>& eval,
                                      const LmTrainOptions& options, const c10::Device& device,
                                      ObjectiveContext& ctx);

// Steps 1 to 4 of a trial (see the top): the hyperparameters, the plan (sent as attributes and
// checked against memory_budget_gb), the checkpoint, tokenizer and texts read and checked, the
// device chosen (its attributes sent), the seed set, and the model loaded onto the device with no
// meta tensor left. What TrainLm needs next.
struct PreparedLm {
  LmHyperparams hyperparams;
  std::shared_ptr<Gpt2Model> model;
  std::vector<int32_t> train, eval;
  c10::Device device = c10::Device(c10::kCPU);
  double planned_memory_bytes = 0;  // the memory plan's total (the attribute of that name)
};
common::Result<PreparedLm> PrepareLm(const config::LmObjectiveConfig& config, const Params& params,
                                     ObjectiveContext& ctx);

// The options TrainLm takes for a trial of `config` with hyperparameters `hp`.
LmTrainOptions LmTrainOptionsFor(const config::LmObjectiveConfig& config, const LmHyperparams& hp);

// What every trial of one [objective] reads from files, steps 2 (config.json) and 3 of the top:
// loaded once by the fork server (worker/fork_server.h) and inherited, copy-on-write, by the
// trials it forks. The texts depend on the tokenizer and the files alone, not on a trial's
// hyperparameters, so they are tokenized once too.
struct LmInputs {
  Gpt2Config model_config;
  std::optional<SafetensorsFile> weights;  // mapped read-only and validated
  std::vector<int32_t> train, eval;        // train_file and eval_file, tokenized
  bool taken = false;                      // a trial has taken the texts over
};

// Reads and checks config.json, the checkpoint, the tokenizer and the texts with exactly the
// checks (and messages) a trial makes at steps 2 and 3. LibTorch exceptions become a Status.
common::Result<LmInputs> LoadLmInputs(const config::LmObjectiveConfig& config);

// The whole trial as described at the top. LibTorch exceptions are converted to Status here.
// The value is the last evaluation loss (with config.objectives: the first metric's value).
common::Result<double> RunLmObjective(const config::LmObjectiveConfig& config, const Params& params,
                                      ObjectiveContext& ctx);

// The same, returning the trial's values: config.objectives' metrics in their order
// (config::LmObjectiveMetrics()), or the evaluation loss alone when it is empty. The metrics:
// eval_loss, perplexity (its exp; a loss too large for a finite perplexity fails the trial
// rather than send infinity), planned_memory_bytes (as sent before training), train_seconds and
// tokens_per_second (tokens_seen / train_seconds, also sent as an attribute).
//
// With `preloaded` (from LoadLmInputs for this same `config`, in a fork server's trial), steps 2
// and 3 use those inputs instead of reading the files, and the trial takes the texts over: it is
// the only trial of that process. The report lines are the same either way.
common::Result<std::vector<double>> RunLmObjectiveValues(const config::LmObjectiveConfig& config,
                                                         const Params& params,
                                                         ObjectiveContext& ctx,
                                                         LmInputs* preloaded = nullptr);

}  // namespace triald::worker
