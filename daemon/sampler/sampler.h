#pragma once
// Sampler: proposes parameter values for a new trial from the study's history.
//
// Follows Optuna's split: a sampler may sample a relative (joint) search space and falls back
// to independent sampling, parameter by parameter, for whatever the relative step left out.
// Two drivers use that split:
//   - SampleParams(): a trial whose parameters are all known up front (the sweep's [space]).
//   - StartTrial() then Suggest(): define-by-run trials, whose objective asks for parameters
//     while it runs (Optuna's trial.suggest_*). StartTrial() draws the [space] parameters up
//     front, exactly as SampleParams() does, plus the relative sample over the relative search
//     space the sampler infers from the finished trials (TPE: Optuna's intersection search space
//     or its group decomposition). Each Suggest() is then answered at once: from the relative
//     sample when it holds that name with an equal distribution, else by an independent sample
//     of that one parameter. A trial's stored parameters carry their own distributions
//     (model::ParamValue), so trials of one study may hold different parameter sets.
//
// Reproducibility: a sampler derives every random draw from (seed, trial number, stream), the
// stream naming the parameter (or the group of parameters sampled jointly), and reads only the
// trials numbered below the one it samples. So the same seed, history and order of suggests
// give the same values, whatever else was sampled in between and across daemon restarts.
//
// Thread-safety: a Sampler instance is used from one thread at a time.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"

namespace triald::sampler {

// What a sampler sees of a study. `space` is the sweep's [space]: the parameters drawn up front
// for every trial (empty, or null, for a sweep whose parameters all come from the objective's
// suggests). `trials` holds every trial of the study so far, finished or not (running ones
// included, so a sampler can avoid their points), each parameter with the distribution it was
// drawn from.
struct StudyView {
  config::Direction direction = config::Direction::kMinimize;  // directions[0]
  const config::SearchSpace* space = nullptr;
  const std::vector<model::TrialRecord>* trials = nullptr;
  // One per objective; a single-objective study has {direction}. Samplers that handle one
  // objective only refuse a view with several (MakeSampler checks the sweep first).
  std::vector<config::Direction> directions = {config::Direction::kMinimize};
};

class Sampler {
 public:
  virtual ~Sampler() = default;

  // The part of the space this sampler samples jointly for trial `trial_number`, read from the
  // trials numbered below it: the [space] parameters and, for define-by-run studies, parameters
  // the finished trials suggested. Default: nothing (independent only).
  virtual config::SearchSpace InferRelativeSearchSpace(const StudyView& study, int trial_number) {
    (void)study, (void)trial_number;
    return {};
  }
  // Joint sample over `relative_space`; may return a subset (the rest is sampled independently).
  virtual common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
    (void)study, (void)trial_number, (void)relative_space;
    return config::ParamValues{};
  }
  // One parameter, independently: a [space] parameter the relative sample left out, or a
  // parameter an objective asked for at run time. Draws come from (seed, trial_number,
  // param.name), so the value does not depend on which other parameters were sampled.
  virtual common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                                   const config::ParamSpec& param) = 0;

  // Whether the relative sample of trial `trial_number` can be taken now without waiting.
  // A sampler whose relative sample takes long to compute (the GP's fit) runs behind
  // BackgroundSampler (daemon/scheduler/background_sampler.h), which starts computing it here
  // and answers false until it is ready; the scheduler then starts the trial later. Default:
  // true.
  virtual bool RelativeReady(const StudyView& study, int trial_number) {
    (void)study, (void)trial_number;
    return true;
  }
  // A flag that, once set, asks a SampleRelative in progress to end soon (with
  // kFailedPrecondition). Default: ignored (a sampler whose relative sample is quick).
  virtual void SetCancel(const std::atomic<bool>* cancel) { (void)cancel; }

  // True when the sampler has nothing new to propose (a grid fully taken). The study then ends
  // once its running trials finish, even short of n_trials.
  virtual bool Exhausted(const StudyView& study) const {
    (void)study;
    return false;
  }
};

// Relative sampling, then independent sampling for the parameters it left out. Every returned
// value lies in its distribution (checked; a violation is kInternal).
common::Result<config::ParamValues> SampleParams(Sampler& sampler, const StudyView& study,
                                                 int trial_number);

// ---------------------------------------------------------------------------------------------
// Define-by-run sampling.

// One trial's sampling state, from StartTrial() to its last Suggest(). Plain values: the
// scheduler keeps one per running define-by-run trial; nothing of it needs to survive a daemon
// restart (a trial in flight then ends FAIL(lost)).
struct TrialSample {
  int trial_number = 0;
  // The [space] parameters, drawn up front: what SampleParams() returns for this trial.
  config::ParamValues fixed;
  // The relative search space inferred at the trial's start, and the joint sample over it. The
  // sample may cover only part of the space (or nothing, e.g. during TPE's start-up trials).
  config::SearchSpace relative_space;
  config::ParamValues relative;
  // Every parameter answered so far, with its distribution: the [space] parameters (from_space)
  // and each name Suggest() answered. Asking again for a name gives the same value.
  struct Answer {
    double internal = 0;
    config::Distribution dist;
    bool from_space = false;
  };
  std::map<std::string, Answer> answered;
};

// Starts trial `trial_number`: draws the [space] parameters as SampleParams() does (same seed
// and history: the same values; with every parameter in [space] the trial is exactly what
// SampleParams() gives) and the relative sample over the inferred relative search space. A
// value outside its distribution is kInternal, as in SampleParams(); a failure of the sampler
// (e.g. grid exhausted) is returned as it is.
common::Result<TrialSample> StartTrial(Sampler& sampler, const StudyView& study, int trial_number);

// The relative half of StartTrial(): the inferred relative search space and its joint sample,
// nothing drawn for [space]. For a trial whose parameters were drawn when it was created (or
// given by Enqueue): Hold() then adds them.
common::Result<TrialSample> StartRelative(Sampler& sampler, const StudyView& study,
                                          int trial_number);
// Records a parameter the trial already holds: it answers suggests for its name.
void Hold(TrialSample& trial, const std::string& name, double internal,
          const config::Distribution& dist);

// Answers the objective's request for `param` in `trial` (internal value, see config/space.h):
//   - a name already answered with an equal distribution: the same value (Optuna's semantics);
//   - a name already answered, or declared in [space], with another distribution:
//     kInvalidArgument naming the parameter and both distributions;
//   - a name in the relative sample whose relative distribution equals param.dist: that value;
//   - otherwise Sampler::SampleIndependent() for this parameter alone.
// An invalid distribution is kInvalidArgument naming the parameter and the field at fault; a
// value outside its distribution is kInternal. The answer is recorded in trial.answered. The
// view must be the same study's, as it stands now (trials finished since StartTrial() count).
common::Result<double> Suggest(Sampler& sampler, const StudyView& study, TrialSample& trial,
                               const config::ParamSpec& param);

// Optuna's search spaces of a define-by-run study (optuna/samplers/_search_space), read from the
// finished trials (COMPLETE or PRUNED) among `trials` numbered below `trial_number`, taken in
// trial-number order, each parameter with the distribution the trial stored:
//   - IntersectionSearchSpace: the parameters every one of those trials holds with one and the
//     same distribution, sorted by name (Optuna's IntersectionSearchSpace(include_pruned=True)).
//     Empty when no trial has finished.
//   - GroupDecomposedSearchSpace: the parameters of those trials partitioned into groups, two
//     parameters sharing a group when every trial holds both or neither of them; each trial's
//     parameters are then a union of groups. Groups come in Optuna's order (that of
//     _SearchSpaceGroup.add_distributions over the trials), each sorted by name, each parameter
//     with the distribution of the first trial that held it.
config::SearchSpace IntersectionSearchSpace(const std::vector<model::TrialRecord>& trials,
                                            int trial_number);
// True when both hold parameters of the same names.
bool SameNames(const model::ParamMap& a, const model::ParamMap& b);
std::vector<config::SearchSpace> GroupDecomposedSearchSpace(
    const std::vector<model::TrialRecord>& trials, int trial_number);

// True for a sampler kind that needs every parameter in [space] (grid: its points fix every
// parameter up front, and it cannot answer a parameter it was not built from).
bool RequiresFixedSpace(const std::string& kind);
// The message for a sweep whose sampler requires a full [space] but whose objective suggests
// parameters at run time (e.g. `kind = "python"` with an empty [space]), naming the kind.
std::string FixedSpaceRequiredMessage(const std::string& kind);

// Builds the sampler a sweep asks for over its [space], which may be empty when the objective
// suggests every parameter at run time (grid then refuses, with FixedSpaceRequiredMessage()).
// Errors (e.g. grid over a continuous float) name the parameter and what was expected.
common::Result<std::unique_ptr<Sampler>> MakeSampler(const config::SamplerConfig& config,
                                                     const config::SearchSpace& space);

}  // namespace triald::sampler
