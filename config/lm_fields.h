#pragma once
// The settings of [objective] kind = "lm" in one table: name, type (the member of
// LmObjectiveConfig it fills), default (that member's initial value), what values it accepts,
// and, for the tunable hyperparameters, the member of LmHyperparams that one trial's value goes
// to. The sweep parser (config/sweep/objective_lm.cc, one sweep-file key per row), the [space]
// check (config/sweep/space.cc), the JSON codec (LmObjectiveToJson/FromJson, in lm_fields.cc)
// and trial-worker (worker::LmHyperparamsFrom) all read this table, so a value one accepts the
// others accept too, and a new setting is one line in LmFields() (plus the members it fills).
//
// Thread-safety: the table is built once (thread-safe static initialisation) and never changed.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/number_rule.h"
#include "config/sweep.h"

namespace triald::config {

// The learning-rate schedules, in the order of lr_schedule's choices in LmFields().
enum class LrSchedule { kConstant, kLinear, kCosine };

// The tunable hyperparameters of one trial: LmObjectiveConfig's values with TRIALD_PARAMS on
// top (worker::LmHyperparamsFrom). The defaults equal LmObjectiveConfig's.
struct LmHyperparams {
  double learning_rate = 5e-4;
  double weight_decay = 0.0;
  int64_t warmup_steps = 0;
  int64_t batch_size = 8;
  double dropout = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double grad_clip = 1.0;  // max global gradient norm; 0 = no clipping
  LrSchedule lr_schedule = LrSchedule::kLinear;
  int64_t seed = 0;
};

// One setting of [objective] kind = "lm".
struct LmField {
  using Member = std::variant<std::string LmObjectiveConfig::*, int LmObjectiveConfig::*,
                              int64_t LmObjectiveConfig::*, double LmObjectiveConfig::*>;
  // Where a trial's value goes; std::monostate for a setting that is not tunable.
  using Hyperparam = std::variant<std::monostate, double LmHyperparams::*, int64_t LmHyperparams::*,
                                  LrSchedule LmHyperparams::*>;

  const char* name = "";
  Member member;
  Hyperparam hyperparam;
  // What a value must be, as trial-worker says it: "> 0", ">= 1", "in [0, 1)", or the quoted
  // choices. Empty for a path.
  std::string bound;
  // The same as the sweep parser says it: "a number > 0", "an integer >= 1", the quoted
  // choices, or what a path must name.
  std::string expected;
  int64_t int_min = 0;               // integer members
  NumberRule number;                 // double members
  std::vector<const char*> choices;  // string members: the values allowed; empty: a file path

  bool tunable() const { return !std::holds_alternative<std::monostate>(hyperparam); }
  bool is_path() const {
    return std::holds_alternative<std::string LmObjectiveConfig::*>(member) && choices.empty();
  }
  // The largest value the member holds: INT_MAX for int members, else INT64_MAX.
  int64_t int_max() const;
  bool AcceptsInt(int64_t v) const { return v >= int_min && v <= int_max(); }
  // A choice for choice settings; a path without NUL characters (exec() and open() take
  // NUL-terminated strings: an embedded NUL would silently cut a path) for paths.
  bool AcceptsString(const std::string& s) const;
};

// Every setting, in the order messages list them and the JSON codec writes them.
const std::vector<LmField>& LmFields();

// The setting called `name`, or nullptr.
const LmField* FindLmField(std::string_view name);

// The settings' names (only the tunable ones when tunable_only), in LmFields() order.
std::vector<const char*> LmFieldNames(bool tunable_only);

// The metrics an lm trial measures, which [objective] objectives may name (worker/lm_objective.h
// says how each is measured): "eval_loss" (the last evaluation loss, the single objective's
// value), "perplexity" (its exp), "planned_memory_bytes" (the memory plan of parameters,
// gradients, AdamW state and activations), "train_seconds" (the training loop's wall time) and
// "tokens_per_second" (training tokens over train_seconds).
const std::vector<const char*>& LmObjectiveMetrics();

}  // namespace triald::config
