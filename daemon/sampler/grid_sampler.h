#pragma once
// GridSampler: exhaustive search over the Cartesian product of every parameter's values.
//
// Each parameter contributes its categorical choices, or its values low, low + step, ... up to
// high (ints, and floats with a step). Grid points are numbered in a fixed order (the last
// parameter varies fastest). For trial N the sampler picks, as Optuna does, one point at random
// (the RNG seeded from (seed, N)) among those no other trial of the study holds; a trial of any
// state holds its point, so a point is neither repeated while its trial still runs nor retried
// after it failed. When every point is held the sampler is exhausted.
//
// Cost per suggestion is O(T log T) in the number of trials T and independent of the grid size:
// the held points are a sorted list of grid indices, never a bitmap of the grid.
//
// Thread-safety: immutable after Create(); const and sampling methods may be called from one
// thread at a time (the Sampler contract), and would be safe concurrently.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "daemon/model/records.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

class GridSampler final : public Sampler {
 public:
  // Grids larger than this are refused: a sweep that large is almost certainly a mistake (a
  // fine float step) and would never finish.
  static constexpr double kMaxPoints = 10'000'000;

  // Fails with kInvalidArgument, naming the parameter, when one is a continuous float, and
  // naming the size when the grid has more than kMaxPoints points.
  static common::Result<std::unique_ptr<GridSampler>> Create(const config::SearchSpace& space,
                                                             uint64_t seed);

  // The whole space: a grid point fixes every parameter.
  config::SearchSpace InferRelativeSearchSpace(const StudyView& study) override;
  // An untaken grid point (see the file comment), or kFailedPrecondition "grid exhausted".
  // The trial numbered `trial_number` itself is not counted as taking a point, so sampling a
  // trial again after it was stored with its params gives the same point.
  common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) override;
  // Every grid parameter comes from SampleRelative; any other parameter is not part of the grid
  // and is refused with kInvalidArgument.
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;
  bool Exhausted(const StudyView& study) const override;

  uint64_t size() const { return size_; }

 private:
  GridSampler(config::SearchSpace space, std::vector<uint64_t> counts, uint64_t size,
              uint64_t seed);

  // The grid index of the point a trial holds, or nullopt when its params are not a grid point
  // (a parameter missing or off the grid).
  std::optional<uint64_t> IndexOf(const model::ParamMap& params) const;
  // Sorted, distinct grid indices held by the study's trials, except `exclude_number`'s.
  std::vector<uint64_t> TakenIndices(const StudyView& study,
                                     std::optional<int> exclude_number) const;

  config::SearchSpace space_;
  std::vector<uint64_t> counts_;  // values per parameter, in space_ order
  uint64_t size_;                 // product of counts_
  uint64_t seed_;
};

}  // namespace triald::sampler
