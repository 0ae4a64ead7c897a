#include "daemon/sampler/sampler.h"

#include <cstdio>
#include <string>
#include <utility>

#include "daemon/sampler/grid_sampler.h"
#include "daemon/sampler/qmc_sampler.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/tpe_sampler.h"

namespace triald::sampler {
namespace {

std::string FormatValue(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

common::Result<config::ParamValues> SampleParams(Sampler& sampler, const StudyView& study,
                                                 int trial_number) {
  if (study.space == nullptr) return common::Internal("SampleParams: study view has no space");
  const config::SearchSpace relative_space = sampler.InferRelativeSearchSpace(study);
  TRIALD_ASSIGN_OR_RETURN(config::ParamValues values,
                          sampler.SampleRelative(study, trial_number, relative_space));
  for (const config::ParamSpec& param : *study.space) {
    if (values.count(param.name) > 0) continue;
    TRIALD_ASSIGN_OR_RETURN(double v, sampler.SampleIndependent(study, trial_number, param));
    values[param.name] = v;
  }

  // A value outside its distribution would reach the worker and the database as if it were
  // valid, so it is a sampler bug caught here rather than a user error.
  config::ParamValues checked;
  for (const config::ParamSpec& param : *study.space) {
    const double v = values.at(param.name);
    if (!param.dist.Contains(v)) {
      return common::Internal("sampler produced " + FormatValue(v) + " for parameter \"" +
                              param.name + "\", which is outside its distribution " +
                              param.dist.ToJson());
    }
    checked[param.name] = v;
  }
  // Relative samplers may cover parameters the study no longer declares; those are dropped so
  // the trial carries exactly the study's parameters.
  return checked;
}

common::Result<std::unique_ptr<Sampler>> MakeSampler(const config::SamplerConfig& config,
                                                     const config::SearchSpace& space) {
  if (config.kind == "random") return std::unique_ptr<Sampler>(new RandomSampler(config.seed));
  if (config.kind == "grid") {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<GridSampler> grid,
                            GridSampler::Create(space, config.seed));
    return std::unique_ptr<Sampler>(std::move(grid));
  }
  if (config.kind == "tpe") {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<TpeSampler> tpe,
                            TpeSampler::Create(space, config.seed, config.tpe));
    return std::unique_ptr<Sampler>(std::move(tpe));
  }
  if (config.kind == "qmc") {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<QmcSampler> qmc,
                            QmcSampler::Create(space, config.seed, config.qmc));
    return std::unique_ptr<Sampler>(std::move(qmc));
  }
  return common::InvalidArgument("sampler: unknown kind \"" + config.kind +
                                 "\"; expected one of: random, grid, tpe, qmc");
}

}  // namespace triald::sampler
