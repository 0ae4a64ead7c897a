#include "daemon/sampler/auto_sampler.h"

#include <algorithm>

namespace triald::sampler {

AutoChoice ChooseAutoSampler(const config::SweepSpec& spec) {
  const int n_trials = spec.study.n_trials;
  const std::string trials = std::to_string(n_trials) + " trials";
  if (spec.study.directions.size() > 1) {
    return {"tpe", "tpe: " + std::to_string(spec.study.directions.size()) + " objectives"};
  }
  if (spec.space.empty()) {
    return {"tpe", "tpe: no [space], the objective suggests its parameters as it runs"};
  }
  const auto categorical = std::find_if(
      spec.space.begin(), spec.space.end(),
      [](const config::ParamSpec& p) { return p.dist.type == config::ParamType::kCategorical; });
  if (categorical != spec.space.end()) {
    return {"tpe", "tpe: categorical parameter \"" + categorical->name + "\""};
  }
  const int params = static_cast<int>(spec.space.size());
  if (params > kMaxGpParams) {
    return {"tpe", "tpe: " + std::to_string(params) + " parameters (gp up to " +
                       std::to_string(kMaxGpParams) + ")"};
  }
  if (n_trials > kMaxGpTrials) {
    return {"tpe", "tpe: " + trials + " (gp up to " + std::to_string(kMaxGpTrials) + ")"};
  }
  return {"gp", "gp: " + std::to_string(params) + " numeric parameter" + (params == 1 ? "" : "s") +
                    ", " + trials + ", one objective"};
}

config::SamplerConfig ResolveAutoSampler(const config::SamplerConfig& sampler,
                                         const config::SweepSpec& spec) {
  if (sampler.kind != "auto") return sampler;
  config::SamplerConfig resolved;
  resolved.kind = ChooseAutoSampler(spec).kind;
  resolved.seed = sampler.seed;
  resolved.seed_given = sampler.seed_given;
  return resolved;
}

}  // namespace triald::sampler
