#pragma once
// RandomSampler: independent uniform sampling of every parameter, plus the deterministic
// random-number and step-grid helpers that every sampler in this folder shares.
//
// Reproducibility: each draw comes from an RNG seeded from (seed, trial number, parameter name)
// alone, so a value never depends on which trials or parameters were sampled before it, on the
// order of calls, or on a daemon restart.
//
// Thread-safety: RandomSampler holds only its seed and is stateless between calls; the free
// functions are pure.

#include <cstdint>
#include <random>
#include <string_view>

#include "common/status.h"
#include "config/space.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

// An RNG for one draw site: the sampler's seed, the trial number and a stream name (a parameter
// name, or e.g. "grid") are mixed with splitmix64 so that neighbouring seeds and trial numbers
// give unrelated streams.
std::mt19937_64 TrialRng(uint64_t seed, int trial_number, std::string_view stream);

// Uniform double in [0, 1) and uniform integer in [0, n) (n >= 1). Written out rather than taken
// from <random>'s distributions, whose algorithms differ between standard libraries: a study's
// suggestions must not change when the daemon is rebuilt against another one.
double UniformUnit(std::mt19937_64& rng);
uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n);

// The step between neighbouring values: 0 for a continuous float, 1 for a categorical (the
// index) and for an int without an explicit step.
double EffectiveStep(const config::Distribution& dist);

// How many values a discrete distribution (stepped float, int, categorical) has: low, low + step,
// ... up to high. A double because a fine float grid can exceed any integer type; callers bound
// it before converting. 0 for a continuous float.
double DiscreteCount(const config::Distribution& dist);

// The k-th value (0-based) of a discrete distribution, k < DiscreteCount(dist). Computed as
// low + k * step and clamped to high, so rounding never leaves the range.
double DiscreteValue(const config::Distribution& dist, uint64_t k);

// The index k with DiscreteValue(dist, k) == internal (up to a small fraction of a step, so a
// hand-typed 0.3 matches 0.1 * 3); -1 when `internal` is no value of the distribution.
int64_t DiscreteIndexOf(const config::Distribution& dist, double internal);
// Whether the distribution has a single value (low == high, a one-value grid, one choice):
// nothing to search, so the relative samplers leave it to independent sampling.
bool SingleValued(const config::Distribution& dist);

class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(uint64_t seed) : seed_(seed) {}

  // Float: uniform (log-uniform when log) over [low, high], or a uniform grid index when
  // stepped. Int: uniform over the step grid; log int as Optuna does it (log-uniform over
  // [low - 0.5, high + 0.5], rounded). Categorical: a uniform choice index.
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;

 private:
  uint64_t seed_;
};

// One draw of `dist` from `rng`, as RandomSampler::SampleIndependent makes it. Degenerate
// distributions that Distribution::Validate rejects (no choices, log with low <= 0) give NaN,
// which SampleParams then reports as a broken invariant.
double DrawUniform(const config::Distribution& dist, std::mt19937_64& rng);

}  // namespace triald::sampler
