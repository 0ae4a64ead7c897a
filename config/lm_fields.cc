#include "config/lm_fields.h"

#include <algorithm>
#include <boost/json.hpp>
#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/json.h"
#include "common/json_text.h"
#include "config/space.h"
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

// The JSON codec of LmObjectiveConfig (config/sweep.h), which the daemon hands to trial-worker:
// one field per row of LmFields(), checked as the sweep parser checks it.

using common::InvalidArgument;
using common::Result;
using common::Status;

namespace {

std::string JsonString(std::string_view s) { return common::JsonQuote(s); }

// Doubles as DoubleRepr writes them (exact, and always a JSON float: "1.0" rather than "1", and
// "-0.0", which a JSON integer could not keep); JSON has no spelling for the non-finite ones.
std::string JsonDouble(double d) { return common::JsonDoubleText(d); }

// A JSON value for messages, cut like TOML values are.
std::string JsonRepr(const boost::json::value& v) {
  // Boost writes 1.5 as "1.5E0"; show a number as it would be written.
  std::string text = v.is_double() ? JsonDouble(v.get_double()) : boost::json::serialize(v);
  return CutForMessage(std::move(text));
}

}  // namespace

std::string LmObjectiveToJson(const LmObjectiveConfig& config) {
  std::string out = "{";
  for (const LmField& field : LmFields()) {
    if (out.size() > 1) out += ",";
    out += JsonString(field.name) + ":";
    std::visit(
        [&](auto member) {
          const auto& v = config.*member;
          using T = std::remove_cv_t<std::remove_reference_t<decltype(v)>>;
          if constexpr (std::is_same_v<T, std::string>) {
            out += JsonString(v);
          } else if constexpr (std::is_same_v<T, double>) {
            out += JsonDouble(v);
          } else {
            out += std::to_string(v);
          }
        },
        field.member);
  }
  if (!config.objectives.empty()) {
    out += ",\"objectives\":[";
    for (size_t i = 0; i < config.objectives.size(); ++i) {
      out += (i ? "," : "") + JsonString(config.objectives[i]);
    }
    out += "]";
  }
  return out + "}";
}

Result<LmObjectiveConfig> LmObjectiveFromJson(std::string_view json) {
  auto fail = [](const std::string& problem) {
    return InvalidArgument("invalid LM objective JSON: " + problem);
  };
  const std::string all_fields = JoinList(LmFieldNames(false));
  Result<boost::json::value> parsed = common::ParseJsonExact(json);
  if (!parsed.ok()) return fail(parsed.status().message());
  if (!parsed->is_object()) {
    return fail(JsonRepr(*parsed) + ": expected an object with the fields " + all_fields);
  }
  const boost::json::object& obj = parsed->get_object();
  for (const auto& kv : obj) {
    if (FindLmField(kv.key()) == nullptr && kv.key() != "objectives") {
      return fail("unknown field " + JsonString(kv.key()) + "; expected one of " + all_fields);
    }
  }
  LmObjectiveConfig config;
  // Optional (absent: the evaluation loss alone): the metrics sent as the trial's values.
  if (const boost::json::value* v = obj.if_contains("objectives")) {
    const std::string expected = "a non-empty array of " + JoinList(LmObjectiveMetrics());
    if (!v->is_array() || v->get_array().empty()) {
      return fail("\"objectives\" = " + JsonRepr(*v) + ": expected " + expected);
    }
    const auto& known = LmObjectiveMetrics();
    for (const boost::json::value& e : v->get_array()) {
      if (!e.is_string() || std::none_of(known.begin(), known.end(),
                                         [&](const char* m) { return e.get_string() == m; })) {
        return fail("\"objectives\" holds " + JsonRepr(e) + ": expected " + expected);
      }
      config.objectives.emplace_back(e.get_string());
    }
  }
  for (const LmField& field : LmFields()) {
    const boost::json::value* v = obj.if_contains(field.name);
    if (v == nullptr) {
      return fail("missing field " + JsonString(field.name) + "; expected " + field.expected);
    }
    const std::string bad = JsonString(field.name) + " = " + JsonRepr(*v) + ": expected ";
    auto read = [&](auto member) -> Status {
      auto& dst = config.*member;
      using T = std::remove_reference_t<decltype(dst)>;
      if constexpr (std::is_same_v<T, std::string>) {
        if (!v->is_string()) return fail(bad + field.expected);
        dst = std::string(v->get_string());
        if (field.AcceptsString(dst)) return Status::Ok();
        const std::string problem = field.is_path()
                                        ? JsonString(field.name) + " = " + JsonRepr(*v) +
                                              ": contains a NUL character; expected "
                                        : bad;
        return fail(problem + field.expected);
      } else if constexpr (std::is_same_v<T, double>) {
        // A whole number is a fine double: a person writing the JSON may well omit the ".0".
        if (v->is_double()) {
          dst = v->get_double();
        } else if (v->is_int64()) {
          dst = static_cast<double>(v->get_int64());
        } else if (v->is_uint64()) {
          dst = static_cast<double>(v->get_uint64());
        } else {
          return fail(bad + field.expected);
        }
        return field.number.Accepts(dst) ? Status::Ok() : fail(bad + field.expected);
      } else {
        if (!v->is_int64() || !field.AcceptsInt(v->get_int64())) {
          return fail(bad + field.expected + " and <= " + std::to_string(field.int_max()));
        }
        dst = static_cast<T>(v->get_int64());
        return Status::Ok();
      }
    };
    TRIALD_RETURN_IF_ERROR(std::visit(read, field.member));
  }
  return config;
}

}  // namespace triald::config
