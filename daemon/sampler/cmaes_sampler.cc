#include "daemon/sampler/cmaes_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "daemon/sampler/cma.h"

namespace triald::sampler {
namespace {

// Optuna's floor on sigma0 ("Avoid ZeroDivisionError in cmaes").
constexpr double kMinSigma0 = 1e-10;

common::Status CheckSingleObjective(const StudyView& study) {
  if (study.directions.size() <= 1) return common::Status::Ok();
  return common::InvalidArgument(
      "cmaes sampler: the study has " + std::to_string(study.directions.size()) +
      " objectives; CMA-ES optimises one (as Optuna's CmaEsSampler): expected a single "
      "direction, or a sampler for several objectives");
}

// One dimension of the transformed space (Optuna's _SearchSpaceTransform with transform_log and
// transform_step).
struct Dim {
  const config::ParamSpec* param;
  double low;
  double high;
};

std::vector<Dim> Dims(const config::SearchSpace& space) {
  std::vector<Dim> dims;
  for (const config::ParamSpec& p : space) {
    const config::Distribution& d = p.dist;
    const double step = EffectiveStep(d);
    double lo, hi;
    if (d.log) {
      const double half = step > 0 ? step / 2 : 0;
      lo = std::log(d.low - half);
      hi = std::log(d.high + half);
    } else {
      const double half = step > 0 ? step / 2 : 0;
      lo = d.low - half;
      hi = d.high + half;
    }
    dims.push_back({&p, lo, hi});
  }
  return dims;
}

double TransformValue(const Dim& dim, double v) { return dim.param->dist.log ? std::log(v) : v; }

double Untransform(const Dim& dim, double x) {
  const config::Distribution& d = dim.param->dist;
  const double v = d.log ? std::exp(x) : x;
  const double step = EffectiveStep(d);
  if (step <= 0) return std::clamp(v, d.low, d.high);
  const double count = DiscreteCount(d);
  const double k = std::clamp(std::round((v - d.low) / step), 0.0, std::max(count - 1, 0.0));
  return DiscreteValue(d, static_cast<uint64_t>(k));
}

bool SameSpace(const config::SearchSpace& a, const config::SearchSpace& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dist != b[i].dist) return false;
  }
  return true;
}

// The trial's point in the transformed space; nothing when it lacks a dimension or holds it with
// another distribution.
std::optional<std::vector<double>> Transform(const std::vector<Dim>& dims,
                                             const model::TrialRecord& t) {
  std::vector<double> x;
  x.reserve(dims.size());
  for (const Dim& dim : dims) {
    auto it = t.params.find(dim.param->name);
    if (it == t.params.end() || it->second.dist != dim.param->dist) return std::nullopt;
    const double v = TransformValue(dim, it->second.internal);
    if (!std::isfinite(v)) return std::nullopt;
    x.push_back(v);
  }
  return x;
}

}  // namespace

// The replay's state between trials.
struct CmaesSampler::Progress {
  std::optional<Cma> cma;
  int restarts = 0;
  int usable = 0;  // usable finished trials seen so far
  // Usable finished trials seen that were asked from the current generation: (number, point,
  // loss). Trials of earlier generations are never told, so only the current one is kept.
  std::vector<std::pair<int, std::pair<std::vector<double>, double>>> current;
  std::vector<std::pair<int, int>> tags;  // by trial number; (-1, -1): not from CMA-ES
};

struct CmaesSampler::Cache {
  bool valid = false;
  config::SearchSpace space;
  bool maximize = false;
  int steps = 0;              // trials replayed: 0 .. steps-1
  std::vector<int> arrive;    // by trial: the step it arrived at (see Replay)
  std::vector<char> present;  // by trial: whether it existed
  Progress progress;          // the state after them
};

struct CmaesSampler::Intersection {
  int trial_number = 0;                                // the call it was computed for
  std::vector<char> counted;                           // by trial number: intersected already
  bool any = false;                                    // some trial was
  std::map<std::string, config::Distribution> common;  // the intersection so far
};

CmaesSampler::CmaesSampler(uint64_t seed, config::CmaesConfig config)
    : seed_(seed),
      config_(std::move(config)),
      random_(seed),
      cache_(std::make_unique<Cache>()),
      intersection_(std::make_unique<Intersection>()) {}

CmaesSampler::~CmaesSampler() = default;

common::Result<std::unique_ptr<CmaesSampler>> CmaesSampler::Create(
    const config::SearchSpace& space, uint64_t seed, const config::CmaesConfig& config) {
  (void)space;
  if (config.restart_strategy != "" && config.restart_strategy != "ipop") {
    return common::InvalidArgument("cmaes sampler: restart_strategy \"" + config.restart_strategy +
                                   "\"; expected \"ipop\" or none");
  }
  if (config.inc_popsize < 1) {
    return common::InvalidArgument("cmaes sampler: inc_popsize " +
                                   std::to_string(config.inc_popsize) + "; expected >= 1");
  }
  if (config.popsize == 1 || config.popsize < 0) {
    return common::InvalidArgument("cmaes sampler: popsize " + std::to_string(config.popsize) +
                                   "; expected >= 2");
  }
  if (!(config.sigma0 >= 0) || !std::isfinite(config.sigma0)) {
    return common::InvalidArgument("cmaes sampler: sigma0 " + std::to_string(config.sigma0) +
                                   "; expected a number > 0");
  }
  if (config.n_startup_trials < 0) {
    return common::InvalidArgument("cmaes sampler: n_startup_trials " +
                                   std::to_string(config.n_startup_trials) + "; expected >= 0");
  }
  return std::unique_ptr<CmaesSampler>(new CmaesSampler(seed, config));
}

config::SearchSpace CmaesSampler::InferRelativeSearchSpace(const StudyView& study,
                                                           int trial_number) {
  config::SearchSpace space;
  if (study.trials == nullptr) return space;
  // Optuna's IntersectionSearchSpace (COMPLETE trials only, its default). Finished trials do not
  // change and the intersection only shrinks, so it is kept between calls and narrowed by the
  // trials that completed since; a call for an earlier trial number starts again.
  Intersection& in = *intersection_;
  if (trial_number < in.trial_number) in = Intersection{};
  in.trial_number = trial_number;
  for (const model::TrialRecord& t : *study.trials) {
    if (t.number < 0 || t.number >= trial_number || t.state != model::TrialState::kComplete) {
      continue;
    }
    if (in.counted.size() <= static_cast<size_t>(t.number)) in.counted.resize(t.number + 1, 0);
    if (in.counted[t.number]) continue;
    in.counted[t.number] = 1;
    if (!in.any) {
      for (const auto& [name, value] : t.params) in.common[name] = value.dist;
      in.any = true;
      continue;
    }
    for (auto it = in.common.begin(); it != in.common.end();) {
      auto p = t.params.find(it->first);
      it =
          p == t.params.end() || p->second.dist != it->second ? in.common.erase(it) : std::next(it);
    }
  }
  for (const auto& [name, dist] : in.common) {
    // CMA-ES covers numeric parameters with a range; the rest is sampled independently.
    if (dist.type == config::ParamType::kCategorical || SingleValued(dist)) continue;
    if (!dist.Validate().ok()) continue;
    space.push_back({name, dist});
  }
  return space;
}

common::Result<CmaesSampler::ReplayState> CmaesSampler::Replay(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  TRIALD_RETURN_IF_ERROR(CheckSingleObjective(study));
  ReplayState out;
  if (relative_space.size() < 2 || study.trials == nullptr || trial_number < 0) return out;
  const std::vector<Dim> dims = Dims(relative_space);
  const int n_total = trial_number;

  // The trials below trial_number, by number.
  std::vector<const model::TrialRecord*> by_number(n_total, nullptr);
  for (const model::TrialRecord& t : *study.trials) {
    if (t.number >= 0 && t.number < n_total) by_number[t.number] = &t;
  }
  // When each trial was created, as a running maximum (non-decreasing in the number).
  std::vector<double> cut(n_total, 0.0);
  double running = -std::numeric_limits<double>::infinity();
  for (int k = 0; k < n_total; ++k) {
    if (by_number[k] != nullptr) running = std::max(running, by_number[k]->created_at);
    cut[k] = running;
  }
  // The step at which each finished trial becomes visible: the first later trial created after
  // it finished, or the trial being sampled (kNever: not finished).
  constexpr int kNever = std::numeric_limits<int>::max();
  std::vector<int> arrive(n_total, kNever);
  std::vector<int> first(n_total + 2, 0);  // trials arriving at step k: order[first[k], first[k+1])
  for (int j = 0; j < n_total; ++j) {
    const model::TrialRecord* t = by_number[j];
    if (t == nullptr || !model::IsFinished(t->state)) continue;
    arrive[j] = static_cast<int>(std::lower_bound(cut.begin() + j + 1, cut.end(), t->finished_at) -
                                 cut.begin());
    ++first[arrive[j] + 1];
  }
  for (int k = 0; k <= n_total; ++k) first[k + 1] += first[k];
  std::vector<int> order(first[n_total + 1]);
  {
    std::vector<int> fill(first.begin(), first.end() - 1);
    for (int j = 0; j < n_total; ++j) {
      if (arrive[j] != kNever) order[fill[arrive[j]]++] = j;
    }
  }
  const bool maximize = study.direction == config::Direction::kMaximize;
  auto loss = [&](const model::TrialRecord& t) -> std::optional<double> {
    std::optional<double> v;
    if (t.state == model::TrialState::kComplete) {
      if (t.value) {
        v = *t.value;
      } else if (t.values.size() == 1) {
        v = t.values[0];
      }
    } else if (t.state == model::TrialState::kPruned && config_.consider_pruned_trials &&
               !t.intermediate.empty()) {
      v = t.intermediate.rbegin()->second;  // the last step's report
    }
    if (!v || !std::isfinite(*v)) return std::nullopt;
    return maximize ? -*v : *v;
  };

  auto init = [&](Progress& p, int population_size, bool random_mean) -> common::Status {
    Cma::Options o;
    double min_range = std::numeric_limits<double>::infinity();
    std::mt19937_64 rng = TrialRng(seed_, p.restarts, "cmaes/restart");
    for (const Dim& dim : dims) {
      double m = dim.low + (dim.high - dim.low) / 2;
      if (random_mean) {
        m = dim.low + (dim.high - dim.low) * UniformUnit(rng);
      } else if (auto x0 = config_.x0.find(dim.param->name); x0 != config_.x0.end()) {
        const double v = TransformValue(dim, x0->second);
        if (std::isfinite(v)) m = std::clamp(v, dim.low, dim.high);
      }
      o.mean.push_back(m);
      o.bounds.push_back({dim.low, dim.high});
      min_range = std::min(min_range, dim.high - dim.low);
    }
    o.sigma = std::max(config_.sigma0 > 0 ? config_.sigma0 : min_range / 6, kMinSigma0);
    o.population_size = population_size;
    TRIALD_ASSIGN_OR_RETURN(Cma made, Cma::Create(o));
    p.cma = std::move(made);
    p.current.clear();
    return common::Status::Ok();
  };

  // Step k: what trial k saw arrive, a tell when a generation is complete, then k's tag.
  auto step = [&](Progress& p, int k) -> common::Status {
    for (int i = first[k]; i < first[k + 1]; ++i) {
      const int j = order[i];
      std::optional<double> y = loss(*by_number[j]);
      if (!y) continue;
      ++p.usable;
      if (!p.cma || p.tags[j] != std::make_pair(p.cma->generation(), p.restarts)) continue;
      std::optional<std::vector<double>> x = Transform(dims, *by_number[j]);
      if (x) p.current.push_back({j, {std::move(*x), *y}});
    }
    if (k < n_total) p.tags.push_back({-1, -1});
    if (k < n_total && by_number[k] == nullptr) return common::Status::Ok();
    if (p.usable < config_.n_startup_trials) return common::Status::Ok();
    if (!p.cma) TRIALD_RETURN_IF_ERROR(init(p, config_.popsize, false));
    if (static_cast<int>(p.current.size()) >= p.cma->population_size()) {
      std::sort(p.current.begin(), p.current.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<std::pair<std::vector<double>, double>> solutions;
      for (int i = 0; i < p.cma->population_size(); ++i) {
        solutions.push_back(std::move(p.current[i].second));
      }
      p.current.clear();
      TRIALD_RETURN_IF_ERROR(p.cma->Tell(std::move(solutions)));
      if (config_.restart_strategy == "ipop" && p.cma->ShouldStop()) {
        ++p.restarts;
        TRIALD_RETURN_IF_ERROR(init(p, p.cma->population_size() * config_.inc_popsize, true));
      }
    }
    if (k < n_total) p.tags[k] = {p.cma->generation(), p.restarts};
    return common::Status::Ok();
  };

  // Resume from the previous call when every step it replayed saw what it sees now.
  Cache& cache = *cache_;
  Progress p;
  int from = 0;
  if (cache.valid && SameSpace(cache.space, relative_space) && cache.maximize == maximize &&
      cache.steps <= n_total) {
    const int m = cache.steps;
    bool same = true;
    for (int j = 0; j < m && same; ++j)
      same = std::min(cache.arrive[j], m) == std::min(arrive[j], m) &&
             cache.present[j] == (by_number[j] != nullptr);
    if (same) {
      p = cache.progress;
      from = m;
    }
  }
  for (int k = from; k < n_total; ++k) {
    if (common::Status st = step(p, k); !st.ok()) {
      cache.valid = false;
      return st;
    }
  }
  cache.valid = true;
  cache.space = relative_space;
  cache.maximize = maximize;
  cache.steps = n_total;
  cache.arrive = arrive;
  cache.present.resize(n_total);
  for (int j = 0; j < n_total; ++j) cache.present[j] = by_number[j] != nullptr;
  cache.progress = p;
  TRIALD_RETURN_IF_ERROR(step(p, n_total));

  out.tags = std::move(p.tags);
  if (!p.cma) return out;
  out.generation = p.cma->generation();
  out.restarts = p.restarts;
  out.population_size = p.cma->population_size();
  out.sigma = p.cma->sigma();
  out.mean = p.cma->mean();
  std::mt19937_64 rng = TrialRng(seed_, trial_number, "cmaes");
  out.point = p.cma->Ask(rng);
  return out;
}

common::Result<config::ParamValues> CmaesSampler::SampleRelative(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  TRIALD_ASSIGN_OR_RETURN(ReplayState state, Replay(study, trial_number, relative_space));
  config::ParamValues values;
  if (state.point.empty()) return values;
  const std::vector<Dim> dims = Dims(relative_space);
  for (size_t i = 0; i < dims.size(); ++i) {
    values[dims[i].param->name] = Untransform(dims[i], state.point[i]);
  }
  return values;
}

common::Result<double> CmaesSampler::SampleIndependent(const StudyView& study, int trial_number,
                                                       const config::ParamSpec& param) {
  TRIALD_RETURN_IF_ERROR(CheckSingleObjective(study));
  return random_.SampleIndependent(study, trial_number, param);
}

}  // namespace triald::sampler
