#include "config/lm_fields.h"

#include <climits>
#include <limits>
#include <utility>

#include "config/toml_diag.h"

namespace triald::config {

int64_t LmField::int_max() const {
  return std::holds_alternative<int LmObjectiveConfig::*>(member)
             ? INT_MAX
             : std::numeric_limits<int64_t>::max();
}

bool LmField::AcceptsString(const std::string& s) const {
  if (choices.empty()) return s.find('\0') == std::string::npos;
  return Contains(choices, s);
}

const std::vector<LmField>& LmFields() {
  using C = LmObjectiveConfig;
  using H = LmHyperparams;
  using Hyperparam = LmField::Hyperparam;
  const Hyperparam fixed;  // not tunable
  auto path = [](const char* name, std::string C::*m, const char* expected) {
    LmField f;
    f.name = name;
    f.member = m;
    f.expected = expected;
    return f;
  };
  auto choice = [](const char* name, std::string C::*m, std::vector<const char*> choices,
                   Hyperparam hyperparam) {
    LmField f;
    f.name = name;
    f.member = m;
    f.hyperparam = hyperparam;
    f.bound = QuotedAlternatives(choices);
    f.expected = f.bound;
    f.choices = std::move(choices);
    return f;
  };
  auto integer = [](const char* name, auto C::*m, int64_t min, const char* note,
                    Hyperparam hyperparam) {
    LmField f;
    f.name = name;
    f.member = m;
    f.hyperparam = hyperparam;
    f.int_min = min;
    f.bound = ">= " + std::to_string(min) + note;
    f.expected = "an integer " + f.bound;
    return f;
  };
  auto number = [](const char* name, double C::*m, NumberRule rule, const char* bound,
                   Hyperparam hyperparam) {
    LmField f;
    f.name = name;
    f.member = m;
    f.hyperparam = hyperparam;
    f.number = rule;
    f.bound = bound;
    f.expected = std::string("a number ") + bound;
    return f;
  };
  static const std::vector<LmField> kFields = {
      path("model", &C::model,
           "a path to a GPT-2 model folder (config.json, model.safetensors, vocab.json, "
           "merges.txt)"),
      path("train_file", &C::train_file, "a path to a plain-text training file"),
      path("eval_file", &C::eval_file, "a path to a plain-text evaluation file"),
      integer("max_steps", &C::max_steps, 1, "", fixed),
      integer("seq_len", &C::seq_len, 8, "", fixed),
      integer("eval_every", &C::eval_every, 0, " (0 = evaluate only at the end)", fixed),
      integer("checkpoint_every", &C::checkpoint_every, 0, " (0 = no checkpoints)", fixed),
      choice("device", &C::device, {"auto", "cpu", "cuda"}, fixed),
      number("memory_budget_gb", &C::memory_budget_gb, AtLeast(0), ">= 0 (0 = no budget)", fixed),
      number("gpu_memory_fraction", &C::gpu_memory_fraction, Within(0, false, 1, false),
             "in [0, 1] (0 = unlimited)", fixed),
      // The tunable hyperparameters: a [space] parameter or TRIALD_PARAMS may override them.
      number("learning_rate", &C::learning_rate, Above(0), "> 0", &H::learning_rate),
      number("weight_decay", &C::weight_decay, AtLeast(0), ">= 0", &H::weight_decay),
      integer("warmup_steps", &C::warmup_steps, 0, "", &H::warmup_steps),
      integer("batch_size", &C::batch_size, 1, "", &H::batch_size),
      number("dropout", &C::dropout, Within(0, false, 1, true), "in [0, 1)", &H::dropout),
      number("adam_beta1", &C::adam_beta1, Within(0, false, 1, true), "in [0, 1)", &H::adam_beta1),
      number("adam_beta2", &C::adam_beta2, Within(0, false, 1, true), "in [0, 1)", &H::adam_beta2),
      number("grad_clip", &C::grad_clip, AtLeast(0), ">= 0 (0 = no clipping)", &H::grad_clip),
      // The choices in LrSchedule's order.
      choice("lr_schedule", &C::lr_schedule, {"constant", "linear", "cosine"}, &H::lr_schedule),
      integer("seed", &C::seed, 0, "", &H::seed),
  };
  return kFields;
}

const LmField* FindLmField(std::string_view name) {
  for (const LmField& f : LmFields()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

std::vector<const char*> LmFieldNames(bool tunable_only) {
  std::vector<const char*> names;
  for (const LmField& f : LmFields()) {
    if (!tunable_only || f.tunable()) names.push_back(f.name);
  }
  return names;
}

const std::vector<const char*>& LmObjectiveMetrics() {
  static const std::vector<const char*> kMetrics = {
      "eval_loss", "perplexity", "planned_memory_bytes", "train_seconds", "tokens_per_second"};
  return kMetrics;
}

}  // namespace triald::config
