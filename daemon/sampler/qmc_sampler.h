#pragma once
// QmcSampler: quasi-Monte Carlo search over a Sobol sequence, as Optuna's QMCSampler does with
// scipy.stats.qmc.Sobol.
//
// Each parameter of the space is one coordinate of the sequence (declaration order). Trial N takes
// point N; an unscrambled sequence skips its point 0 (the origin, every parameter at `low`), so
// trial N takes point N + 1 there, as Optuna does. Scrambling (the default) applies, per
// coordinate, a random lower-triangular linear matrix scramble and a random digital shift
// (Matousek's LMS + shift, scipy's scramble=True), both drawn from the sampler's seed alone; the
// scrambled sequence keeps the Sobol net property, so the first 2^k trials still cover every one
// of 2^k equal bins of each coordinate exactly once.
//
// A coordinate u in [0, 1) becomes a value like this: a float goes linearly onto [low, high]
// (in log space when log); an int, a stepped float and a categorical take grid value
// floor(u * count) of their `count` values; a log int goes log-uniformly onto
// [low - 0.5, high + 0.5] and is rounded, as the random sampler draws log ints.
//
// Direction numbers are Joe & Kuo's (new-joe-kuo-6.21201) for the first 64 dimensions, built in,
// so spaces of at most 64 parameters are accepted.
//
// Define-by-run studies (see sampler.h): the sequence covers the sweep's [space]; a parameter the
// objective suggests outside it is drawn uniformly (RandomSampler's draw), as Optuna's
// QMCSampler falls back to independent sampling. A sweep with no [space] takes, as Optuna does,
// the space of its first finished trial (the lowest-numbered COMPLETE or PRUNED trial below the
// one sampled; categoricals and single-valued parameters left out, sorted by name, at most 64):
// until a trial has finished every parameter is drawn uniformly, and parameters missing from that
// first trial always are.
//
// Reproducibility: point N depends only on (seed, N) — not on the history, the order of calls or
// a daemon restart. Cost per suggestion: O(32 * parameters), independent of the history.
//
// Thread-safety: immutable after Create(); safe to call from several threads at once, though the
// Sampler contract asks only for one at a time.

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

// The raw Sobol sequence: 32-bit points in [0, 1)^dimensions, Gray-code order (scipy's and
// Boost's order). Exposed for tests and benchmarks.
class SobolSequence {
 public:
  static constexpr int kMaxDimensions = 64;
  static constexpr int kBits = 32;

  // Fails with kInvalidArgument when dimensions is not in [1, kMaxDimensions].
  static common::Result<SobolSequence> Create(int dimensions, bool scramble, uint64_t seed);

  int dimensions() const { return static_cast<int>(shift_.size()); }
  // Coordinates of point `index` as 32-bit integers (the value is x / 2^32).
  std::vector<uint32_t> PointBits(uint32_t index) const;
  // Coordinates of point `index` in [0, 1).
  std::vector<double> Point(uint32_t index) const;

 private:
  SobolSequence() = default;

  std::vector<std::array<uint32_t, kBits>> directions_;  // per dimension, MSB-first
  std::vector<uint32_t> shift_;                          // digital shift (0 when unscrambled)
};

class QmcSampler final : public Sampler {
 public:
  // Fails with kInvalidArgument when the space has more than SobolSequence::kMaxDimensions
  // parameters, saying how many it has. An empty space (a define-by-run sweep without [space])
  // is accepted: see the file comment.
  static common::Result<std::unique_ptr<QmcSampler>> Create(const config::SearchSpace& space,
                                                            uint64_t seed,
                                                            const config::QmcConfig& config);

  // The space given to Create(): every parameter is a coordinate of the sequence. When that is
  // empty, the first finished trial's space (see the file comment).
  config::SearchSpace InferRelativeSearchSpace(const StudyView& study, int trial_number) override;
  // Point N of the sequence, coordinate d mapped onto the relative space's parameter d.
  common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) override;
  // A parameter outside the sequence's space (none when the study's space is the one given to
  // Create() and nothing is suggested at run time) is drawn uniformly, as Optuna's QMCSampler falls
  // back to random sampling.
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;

 private:
  QmcSampler(config::SearchSpace space, SobolSequence sequence, bool scramble, uint64_t seed);

  config::SearchSpace space_;
  SobolSequence sequence_;
  bool scramble_;
  uint64_t seed_;
};

// Maps a coordinate u in [0, 1) onto `dist` as QmcSampler does.
double MapUnitToDistribution(const config::Distribution& dist, double u);

}  // namespace triald::sampler
