#pragma once
// Sampler: proposes parameter values for a new trial from the study's history.
//
// Follows Optuna's split: a sampler may sample a relative (joint) search space and falls back
// to independent sampling, parameter by parameter, for whatever the relative step left out.
// SampleParams() drives that split; the daemon and the benchmarks call only SampleParams().
//
// Reproducibility: a sampler derives every random draw from (seed, trial number), so the same
// seed and the same history give the same suggestion, whatever the order of calls and across
// daemon restarts.
//
// Thread-safety: a Sampler instance is used from one thread at a time.

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"

namespace triald::sampler {

// What a sampler sees of a study. `trials` holds every trial of the study so far, finished or
// not (running ones included, so a sampler can avoid their points).
struct StudyView {
  config::Direction direction = config::Direction::kMinimize;
  const config::SearchSpace* space = nullptr;
  const std::vector<model::TrialRecord>* trials = nullptr;
};

class Sampler {
 public:
  virtual ~Sampler() = default;

  // The part of the space this sampler samples jointly. Default: nothing (independent only).
  virtual config::SearchSpace InferRelativeSearchSpace(const StudyView& study) {
    (void)study;
    return {};
  }
  // Joint sample over `relative_space`; may return a subset (the rest is sampled independently).
  virtual common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
    (void)study, (void)trial_number, (void)relative_space;
    return config::ParamValues{};
  }
  // One parameter, independently.
  virtual common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                                   const config::ParamSpec& param) = 0;

  // True when the sampler has nothing new to propose (a grid fully taken). The study then ends
  // once its running trials finish, even short of n_trials.
  virtual bool Exhausted(const StudyView& study) const {
    (void)study;
    return false;
  }
};

// Relative sampling, then independent sampling for the parameters it left out. Every returned
// value lies in its distribution (checked; a violation is kInternal).
common::Result<config::ParamValues> SampleParams(Sampler& sampler, const StudyView& study,
                                                 int trial_number);

// Builds the sampler a sweep asks for. Errors (e.g. grid over a continuous float) name the
// parameter and what was expected.
common::Result<std::unique_ptr<Sampler>> MakeSampler(const config::SamplerConfig& config,
                                                     const config::SearchSpace& space);

}  // namespace triald::sampler
