#pragma once
// Nsga2Sampler: NSGA-II, as Optuna 3.1's NSGAIISampler defines it (optuna/samplers/nsgaii), with
// its defaults: population 50, uniform crossover with probability 0.9, each parameter swapped
// with probability 0.5, each parameter mutated (redrawn uniformly) with probability
// 1 / (number of parameters). Works for any number of objectives, one included.
//
// Generations. Optuna stores each trial's generation in a system attribute when it samples the
// trial. triald samplers keep nothing, so the generations are rebuilt from the trials alone:
//   - A trial is a member of the population when it is COMPLETE with one value per objective
//     ("complete" below). Failed, pruned, running and waiting trials take part in no selection.
//   - Generation g is the g-th run of population_size complete trials in trial-number order:
//     the complete trials numbered below N, sorted by number, are cut into consecutive blocks of
//     population_size; every full block is a generation, and trial N belongs to the generation
//     after the last full block (floor(C / population_size), C the complete trials below N).
//   - Trial N of generation 0 is drawn uniformly (RandomSampler's draws, as Optuna's first
//     generation). Trial N of generation G >= 1 is a child of the parent population P(G):
//     P(1) is the elite of block 0 and P(G) the elite of block G-1 together with P(G-1)
//     (Optuna's _select_elite_population: non-dominated ranks, fronts taken whole while they fit,
//     the front that overflows sorted by crowding distance, largest first, ties in population
//     order: the block's trials by number, then P(G-1) in its own order).
// With one trial at a time and no failures, generation g is trials [g * P, (g + 1) * P), exactly
// Optuna's. With failures Optuna adds trials to a generation until it has P complete ones, which
// is the rule above. With parallel trials the rule depends only on which trials below N have
// completed when N is sampled, as Optuna's does; a trial that completes late (after trials
// numbered above it) joins the block its number places it in, which may move later trials one
// block on. Every result is a function of the study's trials alone: the same after a daemon
// restart, on any node, whatever order the calls come in.
//
// A child (Optuna's sample_relative), from an RNG seeded by (seed, trial number, "nsga2"):
//   - with probability crossover_prob, two parents by binary tournament (two members of P(G)
//     drawn uniformly with replacement; the first when it dominates the second, else the second;
//     the second parent is drawn from P(G) without the first), then uniform crossover: each
//     parameter (categoricals included) comes from the second parent when a uniform draw is
//     >= swapping_prob, else from the first (Optuna's masks);
//   - otherwise a copy of one member of P(G) drawn uniformly;
//   - then each parameter is dropped with probability mutation_prob (default
//     1 / max(1, number of parameters)); a dropped parameter is drawn uniformly by
//     SampleIndependent, as Optuna mutates.
// Domination is Optuna's constrained domination (pareto::ConstrainedDominates) in ranks and
// tournaments: trials that report no constraints compare by plain Pareto dominance; a feasible
// trial dominates an infeasible one; of two infeasible ones the smaller total violation wins; a
// trial that reports constraints dominates one that does not.
//
// Search space: Optuna's intersection search space of the finished trials below N
// (IntersectionSearchSpace in sampler.h), less parameters with a single possible value; so the
// [space] parameters and, in define-by-run studies, the parameters every finished trial holds
// with one distribution. Everything else (single-valued parameters, parameters some trials lack,
// parameters suggested at run time outside it) is drawn uniformly, as Optuna falls back to its
// RandomSampler. Int, log, stepped and categorical parameters need nothing special: a child
// takes its parents' stored values, each a value of its distribution.
//
// Cost per suggestion: O(trials) to sort and block the history, plus the elite selections of
// the generations not yet cached (each O((2 * population_size)^2 * objectives)); the elites are
// cached per block and reused while the block's trials are unchanged.
//
// Thread-safety: one thread at a time (the cache is mutable), as the Sampler contract asks.

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "config/space.h"
#include "config/sweep.h"
#include "daemon/sampler/pareto.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/sampler/sampler.h"

namespace triald::sampler {

class Nsga2Sampler final : public Sampler {
 public:
  // Fails with kInvalidArgument naming the option when population_size < 2 or a probability is
  // outside [0, 1] (the sweep parser reports the same with line:col first).
  static common::Result<std::unique_ptr<Nsga2Sampler>> Create(uint64_t seed,
                                                              const config::Nsga2Config& config);

  config::SearchSpace InferRelativeSearchSpace(const StudyView& study, int trial_number) override;
  common::Result<config::ParamValues> SampleRelative(
      const StudyView& study, int trial_number, const config::SearchSpace& relative_space) override;
  // Uniform, exactly as RandomSampler with the same seed draws it.
  common::Result<double> SampleIndependent(const StudyView& study, int trial_number,
                                           const config::ParamSpec& param) override;

  // Trial `trial_number`'s generation and the trial numbers of its parent population P(G), in
  // the elite's order (empty for generation 0). For tests and the file comment's rule.
  struct Parents {
    int generation = 0;
    std::vector<int> numbers;
  };
  Parents ParentPopulation(const StudyView& study, int trial_number);

 private:
  Nsga2Sampler(uint64_t seed, const config::Nsga2Config& config)
      : seed_(seed), config_(config), random_(seed) {}

  // A complete trial as the selection sees it.
  struct Member {
    const model::TrialRecord* trial = nullptr;
    pareto::Point point;  // minimised values
  };
  // The elite of a block: the block's members and the previous parent population in, the
  // selected members out.
  struct CachedElite {
    std::vector<int> block;                        // trial numbers of the block
    std::vector<pareto::Point> points;             // their minimised values
    std::vector<std::vector<double>> constraints;  // and constraints
    std::vector<int> elite;                        // trial numbers, in the elite's order
  };

  // The complete trials numbered below `trial_number`, by number.
  std::vector<Member> Complete(const StudyView& study, int trial_number) const;
  std::vector<Member> SelectElite(std::vector<Member> population) const;
  // P(G) for G = floor(members / population_size), with the cache.
  std::vector<Member> ParentMembers(const std::vector<Member>& members, int* generation);

  uint64_t seed_;
  config::Nsga2Config config_;
  RandomSampler random_;
  std::vector<CachedElite> cache_;  // cache_[g]: the elite of block g (P(g + 1))
};

}  // namespace triald::sampler
