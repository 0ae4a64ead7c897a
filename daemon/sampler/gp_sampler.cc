#include "daemon/sampler/gp_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "daemon/sampler/gp.h"
#include "daemon/sampler/gp_acquisition.h"
#include "daemon/sampler/random_sampler.h"

namespace triald::sampler {

namespace {

using model::TrialRecord;
using model::TrialState;

constexpr double kMaxGrid = 4096;            // more values: searched as continuous and rounded
constexpr double kStabilizingNoise = 1e-12;  // added to posterior variances, as Optuna does

// One parameter's coordinate in [0, 1] (or its choice index).
class Coordinate {
 public:
  explicit Coordinate(const config::Distribution& d) : dist_(d) {
    if (d.type == config::ParamType::kCategorical) {
      dim_.kind = gp::Dimension::Kind::kCategorical;
      dim_.choices = static_cast<int>(d.choices.size());
      return;
    }
    discrete_ = d.type == config::ParamType::kInt || d.step > 0;
    const double step = EffectiveStep(d);
    if (d.log) {
      lo_ = std::log(discrete_ ? d.low - 0.5 * step : d.low);
      hi_ = std::log(discrete_ ? d.high + 0.5 * step : d.high);
    } else {
      lo_ = discrete_ ? d.low - 0.5 * step : d.low;
      hi_ = discrete_ ? d.high + 0.5 * step : d.high;
    }
    const double count = discrete_ ? DiscreteCount(d) : 0;
    if (discrete_ && count <= kMaxGrid) {
      dim_.kind = gp::Dimension::Kind::kDiscrete;
      for (uint64_t k = 0; k < static_cast<uint64_t>(count); ++k) {
        dim_.grid.push_back(Encode(DiscreteValue(d, k)));
      }
      std::sort(dim_.grid.begin(), dim_.grid.end());
    }
  }
  const gp::Dimension& dimension() const { return dim_; }
  bool categorical() const { return dim_.kind == gp::Dimension::Kind::kCategorical; }

  double Encode(double internal) const {
    if (categorical()) return internal;
    const double t = dist_.log ? std::log(internal) : internal;
    return std::clamp((t - lo_) / (hi_ - lo_), 0.0, 1.0);
  }
  // The valid internal value nearest to coordinate u.
  double Decode(double u) const {
    if (categorical()) {
      return std::clamp(std::round(u), 0.0, static_cast<double>(dist_.choices.size() - 1));
    }
    const double t = lo_ + std::clamp(u, 0.0, 1.0) * (hi_ - lo_);
    double v = std::clamp(dist_.log ? std::exp(t) : t, dist_.low, dist_.high);
    if (discrete_) {
      const double count = DiscreteCount(dist_);
      const double k = std::clamp(std::round((v - dist_.low) / EffectiveStep(dist_)), 0.0,
                                  std::max(count - 1, 0.0));
      v = DiscreteValue(dist_, static_cast<uint64_t>(k));
    }
    return v;
  }

 private:
  config::Distribution dist_;
  gp::Dimension dim_;
  bool discrete_ = false;
  double lo_ = 0;
  double hi_ = 1;
};

bool Holds(const TrialRecord& t, const config::SearchSpace& space) {
  for (const config::ParamSpec& p : space) {
    auto it = t.params.find(p.name);
    if (it == t.params.end() || it->second.dist != p.dist) return false;
  }
  return true;
}

// Mean 0, standard deviation 1 (a constant vector stays centred).
Eigen::VectorXd Standardize(const Eigen::VectorXd& v, double* mean, double* scale) {
  *mean = v.mean();
  const double var = (v.array() - *mean).square().mean();
  *scale = std::max(std::sqrt(var), 1e-10);
  return ((v.array() - *mean) / *scale).matrix();
}

// Infinite values become the finite extremes (Optuna's warn_and_convert_inf); all infinite: 0.
void ClipInfinite(std::vector<double>* values) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (double v : *values) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) lo = hi = 0;
  for (double& v : *values) {
    if (v == std::numeric_limits<double>::infinity()) v = hi;
    if (v == -std::numeric_limits<double>::infinity()) v = lo;
  }
}

}  // namespace

common::Result<std::unique_ptr<GpSampler>> GpSampler::Create(const config::SearchSpace& space,
                                                             uint64_t seed,
                                                             const config::GpConfig& config) {
  if (config.n_startup_trials < 0) {
    return common::InvalidArgument("[sampler] n_startup_trials must be >= 0");
  }
  config::QmcConfig qmc_config;
  qmc_config.scramble = true;
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<QmcSampler> qmc,
                          QmcSampler::Create(space, seed, qmc_config));
  return std::unique_ptr<GpSampler>(new GpSampler(seed, config, std::move(qmc)));
}

config::SearchSpace GpSampler::InferRelativeSearchSpace(const StudyView& study, int trial_number) {
  config::SearchSpace space = IntersectionSearchSpace(*study.trials, trial_number);
  space.erase(std::remove_if(space.begin(), space.end(),
                             [](const config::ParamSpec& p) { return SingleValued(p.dist); }),
              space.end());
  return space;
}

common::Result<double> GpSampler::SampleIndependent(const StudyView& study, int trial_number,
                                                    const config::ParamSpec& param) {
  return qmc_->SampleIndependent(study, trial_number, param);
}

common::Result<config::ParamValues> GpSampler::SampleRelative(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  diagnostics_ = Diagnostics{};
  if (relative_space.empty()) return config::ParamValues{};
  std::vector<Coordinate> coords;
  std::vector<gp::Dimension> dims;
  std::vector<bool> is_categorical;
  for (const config::ParamSpec& p : relative_space) {
    coords.emplace_back(p.dist);
    dims.push_back(coords.back().dimension());
    is_categorical.push_back(coords.back().categorical());
  }
  const int d = static_cast<int>(coords.size());
  auto encode = [&](const TrialRecord& t) {
    Eigen::VectorXd x(d);
    for (int j = 0; j < d; ++j)
      x(j) = coords[j].Encode(t.params.at(relative_space[j].name).internal);
    return x;
  };

  std::vector<const TrialRecord*> observed;
  std::vector<const TrialRecord*> pending;
  std::vector<double> values;
  for (const TrialRecord& t : *study.trials) {
    if (t.number >= trial_number || !Holds(t, relative_space)) continue;
    if (t.state == TrialState::kComplete) {
      const double v = !t.values.empty() ? t.values[0] : t.value.value_or(std::nan(""));
      if (std::isnan(v)) continue;
      observed.push_back(&t);
      values.push_back(study.direction == config::Direction::kMinimize ? -v : v);
    } else if (t.state == TrialState::kRunning || t.state == TrialState::kWaiting) {
      pending.push_back(&t);
    }
  }
  if (observed.empty() || static_cast<int>(observed.size()) < config_.n_startup_trials) {
    return config::ParamValues{};
  }
  ClipInfinite(&values);
  const Eigen::Index n = static_cast<Eigen::Index>(observed.size());
  gp::Data data;
  data.x.resize(n, d);
  for (Eigen::Index i = 0; i < n; ++i) data.x.row(i) = encode(*observed[i]).transpose();
  data.is_categorical = is_categorical;
  double mean = 0;
  double scale = 1;
  data.y = Standardize(Eigen::Map<const Eigen::VectorXd>(values.data(), n), &mean, &scale);

  gp::FitOptions fit;
  fit.deterministic = config_.deterministic_objective;
  fit.cancel = cancel_;
  common::Result<gp::Regressor> objective = gp::Regressor::Fit(data, fit);
  if (!objective.ok()) {
    if (objective.status().code() == common::Code::kFailedPrecondition) return objective.status();
    return config::ParamValues{};  // the QMC sampler takes the trial
  }

  // Constraints: one GP each, on the trials that reported it.
  size_t n_constraints = 0;
  for (const TrialRecord* t : observed)
    n_constraints = std::max(n_constraints, t->constraints.size());
  struct ConstraintModel {
    gp::Regressor gpr;
    double threshold;  // 0 in standardised units
  };
  std::vector<ConstraintModel> constraint_models;
  for (size_t c = 0; c < n_constraints; ++c) {
    std::vector<Eigen::Index> rows;
    std::vector<double> cv;
    for (Eigen::Index i = 0; i < n; ++i) {
      if (observed[i]->constraints.size() > c && !std::isnan(observed[i]->constraints[c])) {
        rows.push_back(i);
        cv.push_back(observed[i]->constraints[c]);
      }
    }
    if (rows.empty()) continue;
    ClipInfinite(&cv);
    gp::Data cd;
    cd.is_categorical = is_categorical;
    cd.x.resize(static_cast<Eigen::Index>(rows.size()), d);
    for (size_t r = 0; r < rows.size(); ++r)
      cd.x.row(static_cast<Eigen::Index>(r)) = data.x.row(rows[r]);
    double cmean = 0;
    double cscale = 1;
    cd.y = Standardize(
        Eigen::Map<const Eigen::VectorXd>(cv.data(), static_cast<Eigen::Index>(cv.size())), &cmean,
        &cscale);
    common::Result<gp::Regressor> cg = gp::Regressor::Fit(std::move(cd), fit);
    if (!cg.ok()) {
      if (cg.status().code() == common::Code::kFailedPrecondition) return cg.status();
      continue;
    }
    constraint_models.push_back({std::move(cg).value(), (0 - cmean) / cscale});
  }

  // The best feasible observation (a constrained study: a trial without constraint values is
  // not feasible).
  const bool constrained = n_constraints > 0;
  double best = -std::numeric_limits<double>::infinity();
  Eigen::Index best_row = -1;
  for (Eigen::Index i = 0; i < n; ++i) {
    const std::vector<double>& cons = observed[i]->constraints;
    const bool feasible =
        !constrained ||
        (!cons.empty() && std::all_of(cons.begin(), cons.end(), [](double v) { return v <= 0; }));
    if (feasible && data.y(i) > best) best = data.y(i), best_row = i;
  }

  // Trials still running: believed at the objective's posterior mean, and counted in the best
  // value when they are predicted feasible (so the acquisition there is spent, not the
  // believed improvement).
  gp::Regressor gpr = std::move(objective).value();
  if (!pending.empty()) {
    Eigen::MatrixXd px(static_cast<Eigen::Index>(pending.size()), d);
    for (size_t i = 0; i < pending.size(); ++i) {
      px.row(static_cast<Eigen::Index>(i)) = encode(*pending[i]).transpose();
    }
    Eigen::VectorXd believed;
    if (gpr.AddBelieved(px, &believed).ok()) {
      diagnostics_.pending = static_cast<int>(pending.size());
      for (Eigen::Index i = 0; i < believed.size(); ++i) {
        bool feasible = true;
        for (const ConstraintModel& c : constraint_models) {
          double m = 0;
          double v = 0;
          c.gpr.Posterior(px.row(i).transpose(), &m, &v);
          feasible = feasible && m <= c.threshold;
        }
        if (feasible && best_row >= 0) best = std::max(best, believed(i));
      }
    }
  }

  const bool has_best = best_row >= 0;
  gp::Acquisition acquisition = [&](const Eigen::VectorXd& x, Eigen::VectorXd* grad) {
    double total = 0;
    Eigen::VectorXd dm;
    Eigen::VectorXd dv;
    if (grad != nullptr) grad->setZero(d);
    auto posterior = [&](const gp::Regressor& r, double* m, double* v) {
      r.Posterior(x, m, v, grad != nullptr ? &dm : nullptr, grad != nullptr ? &dv : nullptr);
      *v += kStabilizingNoise;
    };
    if (has_best) {
      double m = 0;
      double v = 0;
      posterior(gpr, &m, &v);
      const double s = std::sqrt(v);
      const double z = (m - best) / s;
      double dl = 0;
      total += gp::StandardLogEi(z, &dl) + std::log(s);
      if (grad != nullptr) *grad += (dl / s) * dm + ((1 - z * dl) / (2 * v)) * dv;
    }
    for (const ConstraintModel& c : constraint_models) {
      double m = 0;
      double v = 0;
      posterior(c.gpr, &m, &v);
      const double s = std::sqrt(v);
      const double u = (c.threshold - m) / s;
      double g = 0;
      total += gp::LogNormalCdf(u, &g);
      if (grad != nullptr) *grad += (-g / s) * dm + (-u * g / (2 * v)) * dv;
    }
    return total;
  };

  gp::OptimizeOptions search;
  search.seed = TrialRng(seed_, trial_number, "gp")();
  search.cancel = cancel_;
  if (has_best) search.extra_starts.push_back(data.x.row(best_row).transpose());
  TRIALD_ASSIGN_OR_RETURN(gp::Optimum optimum, gp::OptimizeAcquisition(dims, acquisition, search));

  diagnostics_.observations = static_cast<int>(n);
  diagnostics_.constraints = static_cast<int>(constraint_models.size());
  diagnostics_.acquisition = optimum.value;
  diagnostics_.evaluations = optimum.evaluations;
  config::ParamValues out;
  for (int j = 0; j < d; ++j) out[relative_space[j].name] = coords[j].Decode(optimum.x(j));
  return out;
}

}  // namespace triald::sampler
