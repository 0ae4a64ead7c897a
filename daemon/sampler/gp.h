#pragma once
// The Gaussian-process model of GpSampler (gp_sampler.h): a zero-mean GP with a Matérn-5/2
// kernel, one length scale per dimension, fitted by maximum a posteriori, and the log expected
// improvement it is searched with. The model is Optuna's GPSampler's (optuna/_gp), written here
// with Eigen; the optimiser is LBFGSpp's L-BFGS-B.
//
// Inputs live in the unit cube, except categorical dimensions, which hold the index of their
// choice. The kernel between points a and b:
//   k(a, b) = c * h(s),  s = sum_j l_j * d_j(a, b)^2,  h(s) = (1 + t + t^2/3) exp(-t), t = sqrt(5s)
// with d_j = a_j - b_j on numeric dimensions and d_j = [a_j != b_j] on categorical ones; l_j is
// the inverse squared length scale of dimension j and c the kernel scale. Observations carry
// Gaussian noise of variance `noise_var` (at least kMinimumNoiseVar).
//
// Priors (Optuna's default_log_prior, constants dropped):
//   log p(l_j) = -(0.1 / l_j + 0.1 * l_j)           (keeps length scales away from 0 and infinity)
//   c          ~ Gamma(shape 2, rate 1)
//   noise_var  ~ Gamma(shape 1.1, rate 30)           (favours small noise; outputs standardised)
// The fit maximises log marginal likelihood + log prior over raw parameters
// (log l_1..d, log c, log(noise_var - kMinimumNoiseVar)), the noise left out for a deterministic
// objective (noise_var = kMinimumNoiseVar), by L-BFGS-B from `initial` (default all ones, noise
// 1), within [-kRawBound, kRawBound] per raw parameter. The outputs are expected standardised
// (mean 0, standard deviation 1); the sampler does that.
//
// Thread-safety: plain values and pure functions; a Regressor is immutable once built, except
// AddBelieved().

#include <Eigen/Core>
#include <atomic>
#include <vector>

#include "common/status.h"

namespace triald::sampler::gp {

inline constexpr double kMinimumNoiseVar = 1e-6;
inline constexpr double kRawBound = 15;  // |log parameter| at most (e^15 ~ 3.3e6)

struct KernelParams {
  Eigen::VectorXd inverse_squared_lengthscales;  // one per dimension, > 0
  double kernel_scale = 1;
  double noise_var = 1;
};

// The data a GP is fitted on: n points of d dimensions, one output each.
struct Data {
  Eigen::MatrixXd x;                 // n x d
  Eigen::VectorXd y;                 // n
  std::vector<bool> is_categorical;  // d
};

// h(s) of the file comment, and dh/ds.
double Matern52(double s);
double Matern52Derivative(double s);

// The kernel matrix between the rows of a and of b (without noise).
Eigen::MatrixXd KernelMatrix(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                             const std::vector<bool>& is_categorical, const KernelParams& p);

// The raw parameter vector of `p` and back (deterministic: no noise entry).
Eigen::VectorXd ToRaw(const KernelParams& p, bool deterministic);
KernelParams FromRaw(const Eigen::VectorXd& raw, int dims, bool deterministic);

// log p(y | x, params): the log marginal likelihood.
double LogMarginalLikelihood(const Data& data, const KernelParams& p);
// The log prior of `p` (constants dropped).
double LogPrior(const KernelParams& p);
// log marginal likelihood + log prior at raw parameters, and its gradient with respect to them
// (when grad is not null). kInvalidArgument-free: a kernel matrix that is not positive definite
// gives -infinity.
double LogPosteriorRaw(const Data& data, const Eigen::VectorXd& raw, bool deterministic,
                       Eigen::VectorXd* grad);

struct FitOptions {
  bool deterministic = false;
  // Where L-BFGS-B starts; unset: all ones (noise 1), Optuna's default.
  const KernelParams* initial = nullptr;
  double gtol = 1e-2;  // Optuna's: tighter makes the fit unstable
  int max_iterations = 200;
  // Checked at every evaluation; once set, the fit ends with kFailedPrecondition ("cancelled").
  const std::atomic<bool>* cancel = nullptr;
};

// A GP conditioned on data: posterior mean and variance of the latent function.
class Regressor {
 public:
  // Fits the kernel parameters (MAP, above) and conditions on the data. A fit that fails from
  // `initial` is tried again from the default start, as Optuna does; kInternal if both fail.
  static common::Result<Regressor> Fit(Data data, const FitOptions& options);
  // Conditions on the data with the given parameters, no fit. kInternal when the kernel matrix
  // is not positive definite.
  static common::Result<Regressor> WithParams(Data data, const KernelParams& params);

  // Posterior mean and variance of f(x); with gradients with respect to x when the pointers are
  // set (zero on categorical dimensions).
  void Posterior(const Eigen::VectorXd& x, double* mean, double* var,
                 Eigen::VectorXd* dmean = nullptr, Eigen::VectorXd* dvar = nullptr) const;
  // Kriging believer: adds the rows of `pending` as observations at their posterior mean, with
  // the parameters kept and the minimum noise (kMinimumNoiseVar: the believed value is taken as
  // exact), so the variance at points being evaluated collapses and parallel suggestions spread
  // out. The believed values go to `believed` when set.
  common::Status AddBelieved(const Eigen::MatrixXd& pending, Eigen::VectorXd* believed = nullptr);

  const KernelParams& params() const { return params_; }
  const Data& data() const { return data_; }
  double log_posterior() const { return log_posterior_; }

 private:
  common::Status Condition();
  Data data_;
  KernelParams params_;
  Eigen::VectorXd noise_;  // per row: noise_var, or kMinimumNoiseVar for believed rows
  Eigen::MatrixXd chol_;   // lower Cholesky factor of K + diag(noise_)
  Eigen::VectorXd alpha_;  // (K + noise I)^-1 y
  double log_posterior_ = 0;
};

// Optuna's standard log expected improvement: log E[max(Z + z, 0)] for Z ~ N(0, 1), i.e.
// log(phi(z) + z * Phi(z)), accurate for every finite z (no underflow far in the tail), and its
// derivative phi... : d/dz = Phi(z) / (phi(z) + z Phi(z)).
double StandardLogEi(double z, double* dz = nullptr);
// log Phi(z), accurate far in the lower tail, and its derivative phi(z) / Phi(z).
double LogNormalCdf(double z, double* dz = nullptr);
// erfcx(x) = exp(x^2) erfc(x), for x >= 0 without overflow.
double Erfcx(double x);

}  // namespace triald::sampler::gp
