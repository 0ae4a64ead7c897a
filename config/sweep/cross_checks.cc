// The checks that involve more than one table, in one place: each reads what the tables'
// rows produced (a SweepSpec) and points at the key that has to change.

#include <algorithm>

#include "config/lm_fields.h"
#include "config/sweep/tables.h"

namespace triald::config::sweep {

using common::InvalidArgument;
using common::Status;

Status CheckLmDevice(const SweepReader& r, const toml::table& objective, const SweepSpec& spec) {
  // A CUDA trial sees only the GPUs the scheduler gives it (CUDA_VISIBLE_DEVICES), so asking for
  // CUDA without asking for a GPU would fail every trial at start-up: refuse it here instead.
  if (spec.objective.kind != "lm" || spec.objective.lm.device != "cuda" ||
      spec.study.gpus_per_trial != 0) {
    return Status::Ok();
  }
  const toml::node* device = objective.get("device");
  return InvalidArgument(r.Where(device != nullptr ? device->source() : objective.source()) +
                         ": [objective] device = \"cuda\" needs [study] gpus_per_trial >= 1: "
                         "each trial sees only the GPUs triald gives it (CUDA_VISIBLE_DEVICES); "
                         "use device = \"auto\" to fall back to the CPU");
}

Status CheckClientObjective(const SweepReader& r, const toml::table& root, const SweepSpec& spec) {
  if (spec.objective.kind != "client") return Status::Ok();
  const toml::table* objective = root.get_as<toml::table>("objective");
  const std::string where = r.Where(objective->get("kind")->source());
  const std::string why =
      ": [objective] kind = \"client\": each trial runs in the program that asked for it, not "
      "in a process triald starts, so ";
  if (spec.executor.kind != "local") {
    return InvalidArgument(where + why + "[executor] kind = " + Quoted(spec.executor.kind) +
                           " has nothing to run; remove [executor]");
  }
  if (spec.study.gpus_per_trial != 0) {
    return InvalidArgument(where + why +
                           "triald gives it no GPU slots; remove [study] gpus_per_trial (the "
                           "client picks its own devices)");
  }
  if (!spec.study.resource_constraints.empty() ||
      std::any_of(spec.study.objectives.begin(), spec.study.objectives.end(),
                  [](const std::string& o) { return o != "value"; })) {
    return InvalidArgument(where + why +
                           "triald measures none of its resources; remove [study] "
                           "resource_constraints and the measured metrics of objectives");
  }
  return Status::Ok();
}

Status CheckLmObjectives(const SweepReader& r, const toml::table& objective,
                         const SweepSpec& spec) {
  if (spec.objective.kind != "lm") return Status::Ok();
  // One metric per direction, in their order; with [study] objectives, measured metrics are not
  // the worker's to send.
  const size_t n_directions = spec.study.worker_objectives();
  const std::vector<std::string>& objectives = spec.objective.lm.objectives;
  if (!objectives.empty() && objectives.size() != n_directions) {
    const toml::node* n = objective.get("objectives");
    return InvalidArgument(
        r.Where(n->source()) + ": [objective] objectives names " +
        std::to_string(objectives.size()) + " metric" + (objectives.size() == 1 ? "" : "s") +
        " but [study] has " + std::to_string(n_directions) +
        (spec.study.objectives.empty() ? std::string(" direction") + (n_directions == 1 ? "" : "s")
                                       : std::string(" \"value\" objective") +
                                             (n_directions == 1 ? "" : "s") + " in objectives") +
        "; expected one metric per direction, in the same order");
  }
  if (objectives.empty() && n_directions > 1) {
    return r.MissingKey("[objective]", objective, "objectives",
                        "one metric per [study] directions entry (" + std::to_string(n_directions) +
                            "), e.g. objectives = [\"eval_loss\", \"planned_memory_bytes\"]; "
                            "metrics: " +
                            JoinList(LmObjectiveMetrics()));
  }
  return Status::Ok();
}

Status CheckCmaesX0(const SweepReader& r, const toml::table& sampler, const SweepSpec& spec) {
  if (spec.sampler.kind != "cmaes") return Status::Ok();
  const toml::table* x0 = sampler.get_as<toml::table>("x0");
  if (x0 == nullptr) return Status::Ok();
  const std::string tn = "[sampler]";
  std::string known;
  for (const ParamSpec& p : spec.space) {
    if (p.dist.type != ParamType::kCategorical) known += (known.empty() ? "" : ", ") + p.name;
  }
  for (const TomlEntry& e : InFileOrder(*x0)) {
    const std::string name(e.key->str());
    const Field f{tn, "x0." + KeyText(name), e.node};
    auto p = std::find_if(spec.space.begin(), spec.space.end(),
                          [&](const ParamSpec& s) { return s.name == name; });
    if (p == spec.space.end()) {
      // A python objective may suggest the parameter at run time.
      if (spec.objective.define_by_run()) continue;
      return r.ValueError(f, "no numeric parameter " + Quoted(name) + " in [space]",
                          "one of: " + (known.empty() ? std::string("(none)") : known));
    }
    if (p->dist.type == ParamType::kCategorical) {
      return r.ValueError(f, Quoted(name) + " is categorical, which CMA-ES samples independently",
                          "x0 for float and int parameters only");
    }
    const double v = spec.sampler.cmaes.x0.at(name);
    if (v < p->dist.low || v > p->dist.high) {
      return r.ValueError(f, "outside the range of " + Quoted(name),
                          "a value in " + DistributionText(p->dist));
    }
  }
  return Status::Ok();
}

Status CheckMultiObjective(const SweepReader& r, const toml::table& root, const SweepSpec& spec) {
  if (spec.study.directions.size() < 2) return Status::Ok();
  const std::string count = std::to_string(spec.study.directions.size()) + " objectives";
  const toml::table* sampler = root.get_as<toml::table>("sampler");
  if (!Contains(MultiObjectiveSamplerKinds(), spec.sampler.kind)) {
    const toml::node* kind = sampler != nullptr ? sampler->get("kind") : nullptr;
    return InvalidArgument(r.Where(kind != nullptr ? kind->source() : root.source()) +
                           ": [sampler] kind = " + Quoted(spec.sampler.kind) +
                           ": does not handle several objectives ([study] directions has " + count +
                           "); expected one of " + JoinList(MultiObjectiveSamplerKinds()));
  }
  const toml::table* pruner = root.get_as<toml::table>("pruner");
  if (pruner != nullptr && spec.pruner.kind != "nop") {
    const toml::node* kind = pruner->get("kind");
    return InvalidArgument(r.Where(kind != nullptr ? kind->source() : pruner->source()) +
                           ": [pruner] kind = " + Quoted(spec.pruner.kind) +
                           ": pruning is not supported for a study with several "
                           "objectives ([study] directions has " +
                           count +
                           "), as in Optuna; expected no [pruner] "
                           "table (or kind = \"nop\")");
  }
  return Status::Ok();
}

}  // namespace triald::config::sweep
