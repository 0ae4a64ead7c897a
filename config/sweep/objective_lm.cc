// [objective] kind = "lm": fine-tune a GPT-2-family model with the built-in trial-worker. Its
// settings are the rows of LmFields() (config/lm_fields.h), which trial-worker reads too; this
// file turns each into a sweep-file key, and adds the keys that are not the worker's settings
// (objectives, fork_server).

#include <algorithm>
#include <type_traits>
#include <variant>

#include "config/lm_fields.h"
#include "config/space.h"
#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::Status;
using O = ObjectiveConfig;

// The reference text of a setting: what it takes and its default.
std::string LmDoc(const LmField& field) {
  if (field.is_path())
    return "required: " + field.expected + ", relative to the sweep file's folder";
  const LmObjectiveConfig defaults;
  std::string value = std::visit(
      [&](auto member) -> std::string {
        const auto& v = defaults.*member;
        using T = std::remove_cv_t<std::remove_reference_t<decltype(v)>>;
        if constexpr (std::is_same_v<T, std::string>) {
          return Quoted(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return DoubleRepr(v);
        } else {
          return std::to_string(v);
        }
      },
      field.member);
  return field.expected + " (default " + value + ")" +
         (field.tunable() ? "; tunable: may be a [space] parameter instead" : "");
}

Key<O> LmFieldKey(const LmField& field) {
  Key<O> k;
  k.name = field.name;
  k.doc = LmDoc(field);
  k.read = [&field](const TableContext& ctx, const Field& f, O* out) {
    const SweepReader& r = ctx.reader;
    auto read = [&](auto member) -> Status {
      auto& dst = out->lm.*member;
      using T = std::remove_reference_t<decltype(dst)>;
      if constexpr (std::is_same_v<T, std::string>) {
        if (field.is_path()) return r.ResolvePath(&f, field.expected, &dst);
        TRIALD_RETURN_IF_ERROR(r.ReadString(f, field.expected, &dst));
        return field.AcceptsString(dst) ? Status::Ok() : r.ValueError(f, "", field.expected);
      } else if constexpr (std::is_same_v<T, double>) {
        return r.ReadNumber(f, field.number, field.expected, &dst);
      } else {
        int64_t v = 0;
        TRIALD_RETURN_IF_ERROR(r.ReadInt(f, field.int_min, field.int_max(), field.expected, &v));
        dst = static_cast<T>(v);
        return Status::Ok();
      }
    };
    return std::visit(read, field.member);
  };
  if (field.is_path()) {
    k = Required(std::move(k), field.expected);
  }
  return k;
}

// objectives = ["eval_loss", "planned_memory_bytes"]: the metrics sent as the trial's values.
Status ReadLmObjectives(const TableContext& ctx, const Field& f, O* out) {
  const SweepReader& r = ctx.reader;
  const std::string metrics = JoinList(LmObjectiveMetrics());
  const std::string expected =
      "an array of the metrics the worker measures, one per [study] directions entry, e.g. "
      "[\"eval_loss\", \"planned_memory_bytes\"]; metrics: " +
      metrics;
  const toml::array* a = f.node->as_array();
  if (a == nullptr || a->empty()) return r.ValueError(f, "", expected);
  std::vector<std::string>& objectives = out->lm.objectives;
  for (size_t i = 0; i < a->size(); ++i) {
    const Field ef{f.table, "objectives[" + std::to_string(i) + "]", a->get(i)};
    std::string name;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, "one of " + metrics, &name));
    if (!Contains(LmObjectiveMetrics(), name)) {
      return r.ValueError(ef, "not a metric the lm worker measures", "one of " + metrics);
    }
    if (std::find(objectives.begin(), objectives.end(), name) != objectives.end()) {
      return r.ValueError(ef, Quoted(name) + " is already in objectives",
                          "each metric once (its direction is in [study] directions)");
    }
    objectives.push_back(name);
  }
  return Status::Ok();
}

}  // namespace

std::vector<Key<ObjectiveConfig>> LmObjectiveKeys() {
  std::vector<Key<O>> keys = {ObjectiveKindKey()};
  for (const LmField& field : LmFields()) keys.push_back(LmFieldKey(field));
  keys.push_back(EnvKey());
  keys.push_back(WorkdirKey());
  keys.push_back(CustomKey<O>("objectives",
                              "the metrics the worker sends as the trial's values, one per "
                              "[study] direction, from " +
                                  JoinList(LmObjectiveMetrics()) +
                                  " (default: the evaluation loss alone)",
                              ReadLmObjectives));
  keys.push_back(BoolKey("fork_server", Of(&O::fork_server),
                         "start trials as forks of a server that loaded the model and data "
                         "once (default false)"));
  keys.push_back(ForkTwiceKey());
  return keys;
}

}  // namespace triald::config::sweep
