#pragma once
// Cma: the CMA-ES optimizer (Hansen, "The CMA Evolution Strategy: A Tutorial", 2016) as the cmaes
// library (0.9, python3-cmaes) implements its `CMA` class, which Optuna's CmaEsSampler drives:
// the same defaults (population 4 + floor(3 ln n), the weights with negative ones for the worse
// half, the learning rates c1, cmu, c_sigma, d_sigma, cc), the same box handling (a point outside
// the bounds is redrawn up to n_max_resampling times, then clipped) and the same stopping tests
// (used by the IPOP restart strategy).
//
// Ask-and-tell: Ask() draws one point of N(mean, sigma^2 C); Tell() takes exactly
// population_size() evaluated points (minimisation) and updates mean, sigma and C, advancing
// generation() by one. The eigen decomposition of C (needed by both) comes from a cyclic Jacobi
// solver, recomputed once per Tell().
//
// Randomness comes only from the generator handed to Ask(), so the optimizer's state is a pure
// function of its construction and of what it was told.
//
// Thread-safety: a plain value; one thread at a time (Ask() caches the decomposition).

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/status.h"

namespace triald::sampler {

// Eigen decomposition of the symmetric n x n matrix `a` (row-major; only symmetric input is
// meaningful) by cyclic Jacobi rotations. `values` gets the n eigenvalues in ascending order and
// `vectors` the matching unit eigenvectors as columns (row-major n x n), so that
// a = vectors * diag(values) * vectors^T up to rounding.
void SymmetricEigen(const std::vector<double>& a, int n, std::vector<double>* values,
                    std::vector<double>* vectors);

// One draw of N(0, 1) from `rng` (Box-Muller over UniformUnit, so the value does not depend on
// the standard library's distributions).
double StandardNormal(std::mt19937_64& rng);

class Cma {
 public:
  struct Options {
    std::vector<double> mean;  // initial mean, inside the bounds; two or more dimensions
    double sigma = 1;          // initial step size, > 0
    // Per dimension [low, high]; empty: unbounded.
    std::vector<std::pair<double, double>> bounds;
    int population_size = 0;   // 0: 4 + floor(3 ln n)
    int n_max_resampling = 0;  // 0: 10 * n (Optuna's setting)
  };

  // kInvalidArgument for fewer than two dimensions, a sigma that is not > 0, bounds of another
  // length, a mean outside its bounds or a population size < 1.
  static common::Result<Cma> Create(const Options& options);

  int dim() const { return n_; }
  int population_size() const { return popsize_; }
  int generation() const { return g_; }
  const std::vector<double>& mean() const { return mean_; }
  double sigma() const { return sigma_; }
  // Row-major n x n.
  const std::vector<double>& covariance() const { return c_; }

  // A point of N(mean, sigma^2 C): redrawn while outside the bounds, up to n_max_resampling
  // times, then clipped into them.
  std::vector<double> Ask(std::mt19937_64& rng);

  // One generation: `solutions` holds exactly population_size() (point, value) pairs, lower
  // values better. kInvalidArgument when the count or a point's length is wrong, or a value is
  // not finite.
  common::Status Tell(std::vector<std::pair<std::vector<double>, double>> solutions);

  // The cmaes library's termination tests: flat function values over recent generations, a
  // step size negligible in every coordinate, divergence, no effect of a coordinate or of a
  // principal axis on the mean, or a condition number of C above 1e14.
  bool ShouldStop();

 private:
  Cma() = default;
  // Fills b_ and d_ from c_ (symmetrised, negative eigenvalues floored) unless already current.
  void Decompose();

  int n_ = 0;
  int popsize_ = 0;
  int mu_ = 0;
  double mu_eff_ = 0;
  double cc_ = 0, c1_ = 0, cmu_ = 0, c_sigma_ = 0, d_sigma_ = 0, cm_ = 1;
  double chi_n_ = 0;
  std::vector<double> weights_;
  std::vector<double> p_sigma_, pc_, mean_;
  std::vector<double> c_;  // covariance, row-major
  double sigma_ = 0;
  bool decomposed_ = false;
  std::vector<double> b_;  // eigenvectors (columns), row-major
  std::vector<double> d_;  // square roots of the eigenvalues
  std::vector<std::pair<double, double>> bounds_;
  int n_max_resampling_ = 0;
  int g_ = 0;
  // Termination criteria.
  double tolx_ = 0, tolxup_ = 1e4, tolfun_ = 1e-12, tolconditioncov_ = 1e14;
  int funhist_term_ = 0;
  std::vector<double> funhist_values_;
};

}  // namespace triald::sampler
