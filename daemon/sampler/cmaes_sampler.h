#pragma once
// CmaesSampler: CMA-ES over the numeric parameters, as Optuna 3.1's CmaEsSampler drives the
// cmaes library's CMA (daemon/sampler/cma.h), with its defaults.
//
// Search space: the parameters every COMPLETE trial below the sampled one holds with one
// distribution (Optuna's IntersectionSearchSpace), sorted by name, less categoricals and
// single-valued ones. Those are sampled jointly once n_startup_trials trials have finished and
// when there are two or more of them; everything else (categoricals, a one-dimensional space,
// the start-up trials, parameters outside the intersection) is sampled independently by the
// random sampler with the same seed, as Optuna falls back to its independent sampler.
//
// Transform, as Optuna's _SearchSpaceTransform: a log parameter is searched over log(value); an
// int or stepped float over [low - step/2, high + step/2] and rounded to its grid. The initial
// mean is the centre of those bounds (or x0), sigma0 = min over the dimensions of
// (high - low) / 6 unless given, population 4 + floor(3 ln n) unless given.
//
// A trial's generation. Optuna tags each trial it samples with the optimizer's generation (system
// attr "cma:generation", and the restart count under "ipop") and pickles the optimizer into the
// trial that told it. Here nothing is stored: the state is rebuilt, for every sample, by
// replaying the study in trial-number order. Trial k is taken to have seen the trials below it
// that had finished when it was created (finished_at <= created_at(k); the creation times are
// read as their running maximum, so a clock stepping back cannot hide a trial again); the trial
// being sampled sees every finished trial below it. At each trial, as in Optuna:
//   - fewer than n_startup_trials usable finished trials seen: sampled independently, untagged;
//   - otherwise, when population-size usable trials tagged with the current generation (and
//     restart) have been seen, the first population-size of them by number are told, and under
//     "ipop" a stopped optimizer restarts with its population times inc_popsize, at a uniformly
//     drawn mean; the trial is then tagged with the (new) generation.
// Usable: COMPLETE with a finite value, and with consider_pruned_trials PRUNED with a last
// report (its value then). FAIL, lost and unusable PRUNED trials are never told: their
// generation waits for other trials, as in Optuna. Running trials are asked from the current
// generation too, so with trials in parallel a generation is asked for more points than it
// tells; the ones that finish after their generation was told are not used (Optuna's waste).
// One difference from Optuna, where the told state lives only in the telling trial and is lost
// when that trial fails or is still running (a later trial then tells again): here a generation
// is told exactly once, at the first trial that saw enough of it.
//
// With several daemons on one storage, a trial that finished on another node shortly before a
// trial was created here may not have been visible yet; the replay then counts it as seen. That
// moves at most which generation such a trial's result is told in, never the determinism below.
// The same holds for a define-by-run trial, whose joint sample is drawn at its first suggest,
// shortly after its creation.
//
// Reproducibility: the replay depends only on the stored trials (numbers, states, values,
// parameters, creation and finish times) and the seed; a point is drawn from (seed, trial
// number), a restart's mean from (seed, restart). So a restarted daemon continues as it would
// have. Cost per suggestion: O(N log N) for N trials to check the history against the previous
// call's, plus the replay of the trials created since (O(n^3) per told generation); no I/O.
//
// Several objectives: refused (kInvalidArgument), as Optuna's CmaEsSampler refuses them.
//
// Thread-safety: one thread at a time (the Sampler contract): calls share the replay's cache.

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

class CmaesSampler final : public Sampler {
 public:
  // kInvalidArgument for an option out of range (restart_strategy other than "" or "ipop",
  // inc_popsize < 1, popsize == 1, sigma0 < 0, n_startup_trials < 0).
  static common::Result<std::unique_ptr<CmaesSampler>> Create(const config::SearchSpace& space,
                                                              uint64_t seed,
                                                              const config::CmaesConfig& config);

  config::SearchSpace InferRelativeSearchSpace(const StudyView& study, int trial_number) override;
  common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) override;
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;

  // What the replay found for trial `trial_number` over `relative_space`, for tests and
  // diagnostics. generation -1: the trial is sampled independently (start-up or a space of
  // fewer than two dimensions).
  struct ReplayState {
    int generation = -1;
    int restarts = 0;
    int population_size = 0;
    double sigma = 0;
    std::vector<double> mean;  // transformed space
    // By trial number below trial_number: the (generation, restarts) the trial was asked from,
    // or (-1, -1) for a trial sampled independently. Empty when nothing was replayed (a
    // relative space of fewer than two parameters).
    std::vector<std::pair<int, int>> tags;
    std::vector<double> point;  // the transformed point asked for trial_number
  };
  common::Result<ReplayState> Replay(const StudyView& study, int trial_number,
                                     const config::SearchSpace& relative_space);

  ~CmaesSampler() override;

 private:
  struct Progress;
  struct Cache;
  struct Intersection;
  CmaesSampler(uint64_t seed, config::CmaesConfig config);

  uint64_t seed_;
  config::CmaesConfig config_;
  RandomSampler random_;
  // The replay's state after the trials of the previous call, reused when the history it read is
  // unchanged (the next call then replays only the trials created since).
  std::unique_ptr<Cache> cache_;
  // The relative search space's intersection, narrowed as trials complete.
  std::unique_ptr<Intersection> intersection_;
};

}  // namespace triald::sampler
