#pragma once
// Maximises an acquisition function over a mixed space, as Optuna's GPSampler does
// (optuna/_gp/optim_mixed): many quasi-random points first, then a local search from the best
// of them and from points drawn in proportion to exp(value), alternating
//   - L-BFGS-B over the continuous dimensions (the others held), within [0, 1];
//   - a search over each discrete dimension's grid (every value when there are at most 64,
//     otherwise steps of 1, 2, 4, ... away from the current value while they improve);
//   - every choice of each categorical dimension;
// until a round improves the value by less than `tolerance`. The best point seen wins.
//
// Reproducibility: every draw comes from `seed`; the same function and seed give the same
// point.
//
// Thread-safety: pure; the acquisition is called from the calling thread only.

#include <Eigen/Core>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"

namespace triald::sampler::gp {

struct Dimension {
  enum class Kind { kContinuous, kDiscrete, kCategorical };
  Kind kind = Kind::kContinuous;
  std::vector<double> grid;  // kDiscrete: the encoded values allowed, ascending, at least 2
  int choices = 0;           // kCategorical: the values are 0 .. choices - 1
};

// The value to maximise at x and, when grad is set, its gradient over the non-categorical
// dimensions (the categorical entries are ignored).
using Acquisition = std::function<double(const Eigen::VectorXd& x, Eigen::VectorXd* grad)>;

struct OptimizeOptions {
  int n_preliminary = 2048;  // quasi-random points evaluated first
  int n_local_search = 10;   // local searches, from the best of them and drawn ones
  double tolerance = 1e-4;   // a round of the local search must improve by more than this
  uint64_t seed = 0;
  // Starts of further local searches (e.g. the best trial's point), snapped onto the space.
  std::vector<Eigen::VectorXd> extra_starts;
  // Checked at every evaluation; once set, the search ends with kFailedPrecondition.
  const std::atomic<bool>* cancel = nullptr;
};

struct Optimum {
  Eigen::VectorXd x;
  double value = 0;
  int evaluations = 0;
};

// The point of the space (each coordinate a valid value of its dimension) nearest to x.
Eigen::VectorXd Snap(const std::vector<Dimension>& dims, const Eigen::VectorXd& x);

common::Result<Optimum> OptimizeAcquisition(const std::vector<Dimension>& dims,
                                            const Acquisition& acquisition,
                                            const OptimizeOptions& options);

}  // namespace triald::sampler::gp
