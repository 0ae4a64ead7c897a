#include "daemon/sampler/sampler.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "common/json_text.h"
#include "daemon/sampler/cmaes_sampler.h"
#include "daemon/sampler/gp_sampler.h"
#include "daemon/sampler/grid_sampler.h"
#include "daemon/sampler/nsga2_sampler.h"
#include "daemon/sampler/qmc_sampler.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/tpe_sampler.h"

namespace triald::sampler {
namespace {

// The relative sample's value for `param`, or null when the sample lacks the name or drew it
// from another distribution (the objective's own distribution decides, as in Optuna).
const double* RelativeValue(const TrialSample& trial, const config::ParamSpec& param) {
  auto it = trial.relative.find(param.name);
  if (it == trial.relative.end()) return nullptr;
  for (const config::ParamSpec& p : trial.relative_space) {
    if (p.name == param.name) return p.dist == param.dist ? &it->second : nullptr;
  }
  return nullptr;
}

common::Status CheckValue(const config::ParamSpec& param, double v) {
  if (param.dist.Contains(v)) return common::Status::Ok();
  return common::Internal("sampler produced " + common::DoubleRepr(v) + " for parameter \"" +
                          param.name + "\", which is outside its distribution " +
                          param.dist.ToJson());
}

}  // namespace

common::Result<config::ParamValues> SampleParams(Sampler& sampler, const StudyView& study,
                                                 int trial_number) {
  if (study.space == nullptr) return common::Internal("SampleParams: study view has no space");
  TRIALD_ASSIGN_OR_RETURN(TrialSample trial, StartTrial(sampler, study, trial_number));
  return std::move(trial.fixed);
}

common::Result<TrialSample> StartRelative(Sampler& sampler, const StudyView& study,
                                          int trial_number) {
  TrialSample trial;
  trial.trial_number = trial_number;
  trial.relative_space = sampler.InferRelativeSearchSpace(study, trial_number);
  TRIALD_ASSIGN_OR_RETURN(trial.relative,
                          sampler.SampleRelative(study, trial_number, trial.relative_space));
  return trial;
}

void Hold(TrialSample& trial, const std::string& name, double internal,
          const config::Distribution& dist) {
  trial.fixed[name] = internal;
  trial.answered[name] = TrialSample::Answer{internal, dist, /*from_space=*/true};
}

common::Result<TrialSample> StartTrial(Sampler& sampler, const StudyView& study, int trial_number) {
  static const config::SearchSpace kNoSpace;
  const config::SearchSpace& space = study.space != nullptr ? *study.space : kNoSpace;
  TRIALD_ASSIGN_OR_RETURN(TrialSample trial, StartRelative(sampler, study, trial_number));

  for (const config::ParamSpec& param : space) {
    double v;
    if (const double* relative = RelativeValue(trial, param)) {
      v = *relative;
    } else {
      TRIALD_ASSIGN_OR_RETURN(v, sampler.SampleIndependent(study, trial_number, param));
    }
    // A value outside its distribution would reach the worker and the database as if it were
    // valid, so it is a sampler bug caught here rather than a user error.
    TRIALD_RETURN_IF_ERROR(CheckValue(param, v));
    // Relative samplers may cover parameters the study no longer declares; those stay out of
    // `fixed`, so the trial carries exactly the study's parameters.
    Hold(trial, param.name, v, param.dist);
  }
  return trial;
}

common::Result<double> Suggest(Sampler& sampler, const StudyView& study, TrialSample& trial,
                               const config::ParamSpec& param) {
  if (common::Status st = param.dist.Validate(); !st.ok()) {
    return common::InvalidArgument("parameter \"" + param.name + "\": " + st.message());
  }
  if (auto it = trial.answered.find(param.name); it != trial.answered.end()) {
    const TrialSample::Answer& answer = it->second;
    if (answer.dist == param.dist) return answer.internal;
    return common::InvalidArgument(
        "parameter \"" + param.name + "\" " +
        (answer.from_space ? "is declared in [space] as " : "was suggested as ") +
        answer.dist.ToJson() + " and is now asked for as " + param.dist.ToJson() +
        "; expected the same distribution every time");
  }
  double v;
  if (const double* relative = RelativeValue(trial, param)) {
    v = *relative;
  } else {
    TRIALD_ASSIGN_OR_RETURN(v, sampler.SampleIndependent(study, trial.trial_number, param));
  }
  TRIALD_RETURN_IF_ERROR(CheckValue(param, v));
  trial.answered[param.name] = TrialSample::Answer{v, param.dist, /*from_space=*/false};
  return v;
}

namespace {

// The finished trials numbered below `trial_number`, by number.
std::vector<const model::TrialRecord*> FinishedBefore(const std::vector<model::TrialRecord>& trials,
                                                      int trial_number) {
  std::vector<const model::TrialRecord*> out;
  for (const model::TrialRecord& t : trials) {
    if (t.number >= trial_number) continue;
    if (t.state == model::TrialState::kComplete || t.state == model::TrialState::kPruned) {
      out.push_back(&t);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const model::TrialRecord* a, const model::TrialRecord* b) {
                     return a->number < b->number;
                   });
  return out;
}

}  // namespace

bool SameNames(const model::ParamMap& a, const model::ParamMap& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
    if (i->first != j->first) return false;
  }
  return true;
}

config::SearchSpace IntersectionSearchSpace(const std::vector<model::TrialRecord>& trials,
                                            int trial_number) {
  const std::vector<const model::TrialRecord*> finished = FinishedBefore(trials, trial_number);
  config::SearchSpace space;
  if (finished.empty()) return space;
  std::map<std::string, config::Distribution> common;
  for (const auto& [name, value] : finished.front()->params) common[name] = value.dist;
  for (size_t i = 1; i < finished.size() && !common.empty(); ++i) {
    const model::ParamMap& params = finished[i]->params;
    for (auto it = common.begin(); it != common.end();) {
      auto p = params.find(it->first);
      it = p == params.end() || p->second.dist != it->second ? common.erase(it) : std::next(it);
    }
  }
  for (auto& [name, dist] : common) space.push_back({name, std::move(dist)});
  return space;
}

std::vector<config::SearchSpace> GroupDecomposedSearchSpace(
    const std::vector<model::TrialRecord>& trials, int trial_number) {
  using Group = std::map<std::string, config::Distribution>;
  std::vector<Group> groups;
  // Refining by a set of names already applied changes nothing (every group then lies inside it
  // or outside it, and keeps its place), so the distinct sets seen lately are skipped: most
  // trials repeat a recent one.
  constexpr size_t kRecentSets = 8;
  std::vector<const model::ParamMap*> recent;
  for (const model::TrialRecord* trial : FinishedBefore(trials, trial_number)) {
    const bool seen = std::any_of(recent.begin(), recent.end(), [&](const model::ParamMap* p) {
      return SameNames(*p, trial->params);
    });
    if (seen) continue;
    if (recent.size() == kRecentSets) recent.erase(recent.begin());
    recent.push_back(&trial->params);
    // Refine every group by this trial's names: the part it holds and the part it lacks become
    // two groups; its names no group has yet become one more, last.
    std::map<std::string, const config::Distribution*> rest;
    for (const auto& [name, value] : trial->params) rest[name] = &value.dist;
    std::vector<Group> next;
    for (Group& group : groups) {
      Group held, lacked;
      for (auto& [name, dist] : group) {
        if (rest.erase(name) > 0) {
          held.emplace(name, std::move(dist));
        } else {
          lacked.emplace(name, std::move(dist));
        }
      }
      if (!held.empty()) next.push_back(std::move(held));
      if (!lacked.empty()) next.push_back(std::move(lacked));
    }
    if (!rest.empty()) {
      Group added;
      for (const auto& [name, dist] : rest) added.emplace(name, *dist);
      next.push_back(std::move(added));
    }
    groups = std::move(next);
  }
  std::vector<config::SearchSpace> out;
  for (Group& group : groups) {
    config::SearchSpace space;
    for (auto& [name, dist] : group) space.push_back({name, std::move(dist)});
    out.push_back(std::move(space));
  }
  return out;
}

bool RequiresFixedSpace(const std::string& kind) { return kind == "grid"; }

std::string FixedSpaceRequiredMessage(const std::string& kind) {
  return "sampler: kind = \"" + kind +
         "\" needs every parameter declared in [space] (its points fix every parameter before "
         "the trial starts); expected a [space] table with every parameter, or another sampler "
         "(tpe, random or qmc) for parameters suggested at run time";
}

common::Result<std::unique_ptr<Sampler>> MakeSampler(const config::SamplerConfig& config,
                                                     const config::SearchSpace& space) {
  if (config.kind == "random") return std::unique_ptr<Sampler>(new RandomSampler(config.seed));
  if (config.kind == "grid") {
    if (space.empty()) return common::InvalidArgument(FixedSpaceRequiredMessage(config.kind));
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
  if (config.kind == "nsga2") {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<Nsga2Sampler> nsga2,
                            Nsga2Sampler::Create(config.seed, config.nsga2));
    return std::unique_ptr<Sampler>(std::move(nsga2));
  }
  if (config.kind == "cmaes") {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<CmaesSampler> cmaes,
                            CmaesSampler::Create(space, config.seed, config.cmaes));
    return std::unique_ptr<Sampler>(std::move(cmaes));
  }
  if (config.kind == "gp") {
    TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<GpSampler> gp,
                            GpSampler::Create(space, config.seed, config.gp));
    return std::unique_ptr<Sampler>(std::move(gp));
  }
  return common::InvalidArgument("sampler: unknown kind \"" + config.kind +
                                 "\"; expected one of: random, grid, tpe, qmc, nsga2, cmaes, gp "
                                 "(\"auto\" is resolved before: auto_sampler.h)");
}

}  // namespace triald::sampler
