#pragma once
// GpSampler: Gaussian-process Bayesian optimisation for small budgets, as Optuna's GPSampler
// (4.x) does it: the model of gp.h, log expected improvement maximised by gp_acquisition.h.
//
// Search space: the parameters every finished trial (COMPLETE or PRUNED) below the sampled one
// holds with one distribution (Optuna's IntersectionSearchSpace), less single-valued ones; for
// a sweep with a [space] that is the [space] once a trial has finished. Parameters outside it
// (define-by-run suggests the others lack) are sampled independently, and so is everything
// until n_startup_trials trials have completed: by the QMC sampler (qmc_sampler.h, scrambled
// Sobol over the [space], uniform draws otherwise), as Optuna's GPSampler starts from its
// independent sampler.
//
// Encoding, as Optuna's: each parameter becomes one coordinate in [0, 1]; a log parameter is
// scaled in log space; an int or stepped float over [low - step/2, high + step/2] (log ints over
// [log(low - 0.5), log(high + 0.5)]), its values a grid the acquisition search keeps to (when a
// parameter has more than 4,096 values it is searched as continuous and rounded); a
// categorical keeps the index of its choice, with the kernel's own distance (equal or not).
//
// Observations: the COMPLETE trials below the sampled one that hold every parameter of the
// space, each value negated when minimising (the GP maximises), infinite values clipped to the
// finite extremes, then standardised (mean 0, standard deviation 1). The kernel parameters are
// fitted for every suggestion from Optuna's default start (all ones), not warm-started from the
// previous fit as Optuna does: so a suggestion depends only on the seed and the trials it reads,
// and a restarted daemon refits the same model from the stored trials and proposes the same
// next point (the cost: gp_sampler's figures in scripts/README.md).
//
// Constraints (a trial's reported constraints and its [study] resource_constraints, feasible
// when every value is <= 0): one GP per constraint on its standardised values; the acquisition
// is Optuna's constrained log EI, log EI over the best feasible value plus, per constraint, the
// log probability that it is <= 0; while no trial is feasible, the log probabilities alone. A
// COMPLETE trial without constraint values in a constrained study counts as infeasible.
//
// Trials still running (RUNNING or WAITING, below the sampled one, holding the whole space): a
// kriging believer. They join the objective's GP as observations at its posterior mean (kernel
// parameters kept), so the variance there collapses and trials sampled while they run go
// elsewhere: parallelism 8 does not propose eight copies of one point.
//
// A fit that fails (no positive definite kernel matrix from either start) leaves the relative
// sample empty: the trial is sampled by the QMC sampler.
//
// Reproducibility: the acquisition search's draws come from (seed, trial number); everything
// else is deterministic, so the same seed and history give the same point.
//
// Cost: O(n^3) per fit evaluation for n observations (a Cholesky factorisation and an inverse),
// tens of evaluations per fit, then the acquisition search (2,048 points and 10 local searches,
// O(n^2) each evaluation). The scheduler runs it off its event loop (BackgroundSampler).
//
// Several objectives: refused at submit ([sampler] kind = "gp" is not in
// MultiObjectiveSamplerKinds()).
//
// Thread-safety: SampleRelative may run on one thread while SampleIndependent and
// InferRelativeSearchSpace run on another: they share only immutable state.

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/sampler/qmc_sampler.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

class GpSampler final : public Sampler {
 public:
  static common::Result<std::unique_ptr<GpSampler>> Create(const config::SearchSpace& space,
                                                           uint64_t seed,
                                                           const config::GpConfig& config);

  config::SearchSpace InferRelativeSearchSpace(const StudyView& study, int trial_number) override;
  common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) override;
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;

  // Once set, a SampleRelative in progress ends soon with kFailedPrecondition ("cancelled").
  void SetCancel(const std::atomic<bool>* cancel) override { cancel_ = cancel; }

  // What the last SampleRelative did, for tests and benchmarks.
  struct Diagnostics {
    int observations = 0;  // COMPLETE trials the GP was fitted on
    int pending = 0;       // running trials believed at their posterior mean
    int constraints = 0;   // constraint GPs
    double acquisition = 0;
    int evaluations = 0;  // of the acquisition
  };
  const Diagnostics& diagnostics() const { return diagnostics_; }

 private:
  GpSampler(uint64_t seed, config::GpConfig config, std::unique_ptr<QmcSampler> qmc)
      : seed_(seed), config_(config), qmc_(std::move(qmc)) {}

  uint64_t seed_;
  config::GpConfig config_;
  std::unique_ptr<QmcSampler> qmc_;
  const std::atomic<bool>* cancel_ = nullptr;
  Diagnostics diagnostics_;
};

}  // namespace triald::sampler
