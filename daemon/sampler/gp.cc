#include "daemon/sampler/gp.h"

#include <LBFGSB.h>

#include <Eigen/Cholesky>
#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace triald::sampler::gp {

namespace {

constexpr double kLog2Pi = 1.8378770664093453;  // log(2 pi)
constexpr double kSqrt5 = 2.23606797749979;
constexpr double kSqrtPi = 1.7724538509055159;
constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

// Thrown from inside L-BFGS-B's callback to stop it when the fit is cancelled.
struct FitCancelled {};

// Weighted squared distances between the rows of a and of b.
Eigen::MatrixXd SquaredDistances(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                                 const std::vector<bool>& is_categorical,
                                 const Eigen::VectorXd& l) {
  Eigen::MatrixXd s = Eigen::MatrixXd::Zero(a.rows(), b.rows());
  for (Eigen::Index j = 0; j < a.cols(); ++j) {
    const double lj = l(j);
    for (Eigen::Index q = 0; q < b.rows(); ++q) {
      const double bj = b(q, j);
      if (is_categorical[j]) {
        for (Eigen::Index p = 0; p < a.rows(); ++p) s(p, q) += a(p, j) != bj ? lj : 0.0;
      } else {
        for (Eigen::Index p = 0; p < a.rows(); ++p) {
          const double d = a(p, j) - bj;
          s(p, q) += lj * d * d;
        }
      }
    }
  }
  return s;
}

double Finite(double v) { return std::isfinite(v) ? v : -std::numeric_limits<double>::infinity(); }

}  // namespace

double Matern52(double s) {
  const double t = std::sqrt(5 * std::max(s, 0.0));
  return (1 + t + t * t / 3) * std::exp(-t);
}

double Matern52Derivative(double s) {
  const double t = std::sqrt(5 * std::max(s, 0.0));
  return -(5.0 / 6.0) * (1 + t) * std::exp(-t);
}

Eigen::MatrixXd KernelMatrix(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                             const std::vector<bool>& is_categorical, const KernelParams& p) {
  Eigen::MatrixXd s = SquaredDistances(a, b, is_categorical, p.inverse_squared_lengthscales);
  return p.kernel_scale * s.unaryExpr([](double v) { return Matern52(v); });
}

Eigen::VectorXd ToRaw(const KernelParams& p, bool deterministic) {
  const Eigen::Index d = p.inverse_squared_lengthscales.size();
  Eigen::VectorXd raw(d + (deterministic ? 1 : 2));
  raw.head(d) = p.inverse_squared_lengthscales.array().log().matrix();
  raw(d) = std::log(p.kernel_scale);
  if (!deterministic) raw(d + 1) = std::log(std::max(p.noise_var - kMinimumNoiseVar, 1e-300));
  return raw.cwiseMax(-kRawBound).cwiseMin(kRawBound);
}

KernelParams FromRaw(const Eigen::VectorXd& raw, int dims, bool deterministic) {
  KernelParams p;
  p.inverse_squared_lengthscales = raw.head(dims).array().exp().matrix();
  p.kernel_scale = std::exp(raw(dims));
  p.noise_var = deterministic ? kMinimumNoiseVar : kMinimumNoiseVar + std::exp(raw(dims + 1));
  return p;
}

double LogPrior(const KernelParams& p) {
  const Eigen::ArrayXd l = p.inverse_squared_lengthscales.array();
  return -(0.1 / l + 0.1 * l).sum() + (std::log(p.kernel_scale) - p.kernel_scale) +
         (0.1 * std::log(p.noise_var) - 30 * p.noise_var);
}

double LogMarginalLikelihood(const Data& data, const KernelParams& p) {
  const Eigen::Index n = data.x.rows();
  Eigen::MatrixXd k = KernelMatrix(data.x, data.x, data.is_categorical, p);
  k.diagonal().array() += p.noise_var;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  const Eigen::VectorXd alpha = llt.solve(data.y);
  const Eigen::MatrixXd l = llt.matrixL();
  return Finite(-0.5 * data.y.dot(alpha) - l.diagonal().array().log().sum() -
                0.5 * static_cast<double>(n) * kLog2Pi);
}

double LogPosteriorRaw(const Data& data, const Eigen::VectorXd& raw, bool deterministic,
                       Eigen::VectorXd* grad) {
  const int d = static_cast<int>(data.x.cols());
  const Eigen::Index n = data.x.rows();
  const KernelParams p = FromRaw(raw, d, deterministic);
  const Eigen::MatrixXd s =
      SquaredDistances(data.x, data.x, data.is_categorical, p.inverse_squared_lengthscales);
  const Eigen::MatrixXd h = s.unaryExpr([](double v) { return Matern52(v); });
  Eigen::MatrixXd k = p.kernel_scale * h;
  k.diagonal().array() += p.noise_var;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) {
    if (grad != nullptr) *grad = Eigen::VectorXd::Zero(raw.size());
    return -std::numeric_limits<double>::infinity();
  }
  const Eigen::VectorXd alpha = llt.solve(data.y);
  const Eigen::MatrixXd lower = llt.matrixL();
  const double mll = -0.5 * data.y.dot(alpha) - lower.diagonal().array().log().sum() -
                     0.5 * static_cast<double>(n) * kLog2Pi;
  const double value = Finite(mll + LogPrior(p));
  if (grad == nullptr) return value;

  // d mll / d theta = 0.5 tr(W dK/dtheta), W = alpha alpha^T - K^-1.
  const Eigen::MatrixXd kinv = llt.solve(Eigen::MatrixXd::Identity(n, n));
  const Eigen::MatrixXd w = alpha * alpha.transpose() - kinv;
  const Eigen::MatrixXd dh = s.unaryExpr([](double v) { return Matern52Derivative(v); });
  const Eigen::MatrixXd m = w.cwiseProduct(dh);  // symmetric
  grad->resize(raw.size());
  const Eigen::VectorXd row_sums = m.rowwise().sum();
  for (int j = 0; j < d; ++j) {
    const Eigen::VectorXd xj = data.x.col(j);
    double sum = 0;  // sum_ab m_ab d_j(a, b)^2
    if (data.is_categorical[j]) {
      for (Eigen::Index b = 0; b < n; ++b) {
        for (Eigen::Index a = 0; a < n; ++a) sum += xj(a) != xj(b) ? m(a, b) : 0.0;
      }
    } else {
      sum = 2 * xj.cwiseProduct(xj).dot(row_sums) - 2 * xj.dot(m * xj);
    }
    const double lj = p.inverse_squared_lengthscales(j);
    (*grad)(j) = 0.5 * p.kernel_scale * lj * sum + (0.1 / lj - 0.1 * lj);
  }
  (*grad)(d) = 0.5 * p.kernel_scale * w.cwiseProduct(h).sum() + (1 - p.kernel_scale);
  if (!deterministic) {
    const double excess = p.noise_var - kMinimumNoiseVar;
    (*grad)(d + 1) = 0.5 * w.trace() * excess + excess * (0.1 / p.noise_var - 30);
  }
  if (!grad->allFinite()) grad->setZero();
  return value;
}

// ---------------------------------------------------------------------------------------------

common::Result<Regressor> Regressor::WithParams(Data data, const KernelParams& params) {
  Regressor r;
  r.data_ = std::move(data);
  r.params_ = params;
  TRIALD_RETURN_IF_ERROR(r.Condition());
  r.log_posterior_ = LogMarginalLikelihood(r.data_, r.params_) + LogPrior(r.params_);
  return r;
}

common::Result<Regressor> Regressor::Fit(Data data, const FitOptions& options) {
  const int d = static_cast<int>(data.x.cols());
  KernelParams defaults;
  defaults.inverse_squared_lengthscales = Eigen::VectorXd::Ones(d);
  defaults.kernel_scale = 1;
  defaults.noise_var = options.deterministic ? kMinimumNoiseVar : 1;

  LBFGSpp::LBFGSBParam<double> param;
  param.epsilon = options.gtol;
  param.epsilon_rel = 0;
  param.max_iterations = options.max_iterations;
  param.max_linesearch = 30;

  std::string why;
  std::vector<const KernelParams*> starts;
  if (options.initial != nullptr) starts.push_back(options.initial);
  starts.push_back(&defaults);
  for (const KernelParams* start : starts) {
    Eigen::VectorXd raw = ToRaw(*start, options.deterministic);
    const Eigen::VectorXd lb = Eigen::VectorXd::Constant(raw.size(), -kRawBound);
    const Eigen::VectorXd ub = Eigen::VectorXd::Constant(raw.size(), kRawBound);
    // The best point seen: L-BFGS-B may give up in a line search (it throws) after progress.
    Eigen::VectorXd best = raw;
    double best_loss = std::numeric_limits<double>::infinity();
    auto loss = [&](const Eigen::VectorXd& r, Eigen::VectorXd& g) {
      if (options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)) {
        throw FitCancelled{};
      }
      const double v = LogPosteriorRaw(data, r, options.deterministic, &g);
      g = -g;
      const double f = std::isfinite(v) ? -v : std::numeric_limits<double>::max();
      if (f < best_loss) {
        best_loss = f;
        best = r;
      }
      return f;
    };
    LBFGSpp::LBFGSBSolver<double> solver(param);
    double fx = 0;
    try {
      solver.minimize(loss, raw, fx, lb, ub);
    } catch (const FitCancelled&) {
      return common::FailedPrecondition("the fit was cancelled");
    } catch (const std::exception& e) {
      why = e.what();  // keep the best point seen so far
    }
    if (!std::isfinite(best_loss) || best_loss >= std::numeric_limits<double>::max()) {
      why = "no kernel parameters gave a positive definite kernel matrix";
      continue;
    }
    common::Result<Regressor> r = WithParams(data, FromRaw(best, d, options.deterministic));
    if (r.ok()) return r;
    why = r.status().message();
  }
  return common::Internal("fitting the Gaussian process failed: " + why);
}

common::Status Regressor::Condition() {
  Eigen::MatrixXd k = KernelMatrix(data_.x, data_.x, data_.is_categorical, params_);
  // Observed rows have the fitted noise; believed ones (AddBelieved) the minimum.
  const Eigen::Index n = data_.x.rows();
  if (noise_.size() != n) {
    const Eigen::Index old = noise_.size();
    noise_.conservativeResize(n);
    noise_.tail(n - old).setConstant(old == 0 ? params_.noise_var : kMinimumNoiseVar);
  }
  k.diagonal() += noise_;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) {
    return common::Internal("the Gaussian process's kernel matrix is not positive definite");
  }
  chol_ = llt.matrixL();
  alpha_ = llt.solve(data_.y);
  return common::Status::Ok();
}

void Regressor::Posterior(const Eigen::VectorXd& x, double* mean, double* var,
                          Eigen::VectorXd* dmean, Eigen::VectorXd* dvar) const {
  const Eigen::Index n = data_.x.rows();
  const Eigen::Index d = data_.x.cols();
  const Eigen::VectorXd& l = params_.inverse_squared_lengthscales;
  const double c = params_.kernel_scale;
  Eigen::VectorXd s = Eigen::VectorXd::Zero(n);
  for (Eigen::Index j = 0; j < d; ++j) {
    for (Eigen::Index i = 0; i < n; ++i) {
      const double diff = x(j) - data_.x(i, j);
      s(i) += data_.is_categorical[j] ? (diff != 0 ? l(j) : 0.0) : l(j) * diff * diff;
    }
  }
  const Eigen::VectorXd k = c * s.unaryExpr([](double v) { return Matern52(v); });
  *mean = k.dot(alpha_);
  const Eigen::VectorXd v = chol_.triangularView<Eigen::Lower>().solve(k);
  *var = std::max(c - v.squaredNorm(), 0.0);
  if (dmean == nullptr && dvar == nullptr) return;
  const Eigen::VectorXd beta = chol_.transpose().triangularView<Eigen::Upper>().solve(v);
  // dk_i / dx_j = c h'(s_i) 2 l_j (x_j - X_ij)
  const Eigen::VectorXd w = 2 * c * s.unaryExpr([](double u) { return Matern52Derivative(u); });
  const Eigen::VectorXd wa = w.cwiseProduct(alpha_);
  const Eigen::VectorXd wb = w.cwiseProduct(beta);
  if (dmean != nullptr) dmean->setZero(d);
  if (dvar != nullptr) dvar->setZero(d);
  for (Eigen::Index j = 0; j < d; ++j) {
    if (data_.is_categorical[j]) continue;
    double sa = 0;
    double sb = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double diff = x(j) - data_.x(i, j);
      sa += wa(i) * diff;
      sb += wb(i) * diff;
    }
    if (dmean != nullptr) (*dmean)(j) = l(j) * sa;
    if (dvar != nullptr) (*dvar)(j) = -2 * l(j) * sb;
  }
}

common::Status Regressor::AddBelieved(const Eigen::MatrixXd& pending, Eigen::VectorXd* believed) {
  if (believed != nullptr) believed->resize(0);
  if (pending.rows() == 0) return common::Status::Ok();
  const Eigen::Index n = data_.x.rows();
  Eigen::VectorXd means(pending.rows());
  for (Eigen::Index i = 0; i < pending.rows(); ++i) {
    double var = 0;
    Posterior(pending.row(i).transpose(), &means(i), &var);
  }
  data_.x.conservativeResize(n + pending.rows(), Eigen::NoChange);
  data_.x.bottomRows(pending.rows()) = pending;
  data_.y.conservativeResize(n + pending.rows());
  data_.y.tail(pending.rows()) = means;
  if (believed != nullptr) *believed = means;
  return Condition();
}

// ---------------------------------------------------------------------------------------------

double Erfcx(double x) {
  if (x < 26) return std::exp(x * x) * std::erfc(x);
  const double inv2 = 1 / (x * x);
  return (1 - inv2 / 2 + 0.75 * inv2 * inv2 - 1.875 * inv2 * inv2 * inv2 +
          6.5625 * inv2 * inv2 * inv2 * inv2) /
         (x * kSqrtPi);
}

double StandardLogEi(double z, double* dz) {
  if (z >= -1) {
    const double cdf = 0.5 * std::erfc(-z / kSqrt2);
    const double h = kInvSqrt2Pi * std::exp(-0.5 * z * z) + z * cdf;
    if (dz != nullptr) *dz = cdf / h;
    return std::log(h);
  }
  // h(z) = phi(z) * r, r = 1 - sqrt(pi) u erfcx(u), u = -z / sqrt(2): no underflow of phi * r.
  const double u = -z / kSqrt2;
  const double e = Erfcx(u);
  double r = 0;
  if (u <= 20) {
    r = 1 - kSqrtPi * u * e;
  } else {  // the asymptotic series of 1 - sqrt(pi) u erfcx(u), without cancellation
    const double inv2 = 1 / (u * u);
    r = inv2 * (0.5 - inv2 * (0.75 - inv2 * (1.875 - inv2 * (6.5625 - inv2 * 29.53125))));
  }
  if (dz != nullptr) *dz = 0.5 * std::sqrt(2 * M_PI) * e / r;
  return -u * u - 0.5 * kLog2Pi + std::log(r);
}

double LogNormalCdf(double z, double* dz) {
  if (z >= 0) {
    const double tail = 0.5 * std::erfc(z / kSqrt2);  // 1 - Phi(z)
    const double cdf = 1 - tail;
    if (dz != nullptr) *dz = kInvSqrt2Pi * std::exp(-0.5 * z * z) / cdf;
    return std::log1p(-tail);
  }
  const double u = -z / kSqrt2;
  const double e = Erfcx(u);
  if (dz != nullptr) *dz = std::sqrt(2 / M_PI) / e;
  return std::log(0.5 * e) - u * u;
}

}  // namespace triald::sampler::gp
