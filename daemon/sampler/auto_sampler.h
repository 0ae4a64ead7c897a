#pragma once
// [sampler] kind = "auto": picks the sampler for a study from its sweep, as OptunaHub's
// AutoSampler does: Gaussian-process optimisation (gp_sampler.h) while it is the better search,
// TPE otherwise. GP when all of these hold:
//   - one objective (TPE handles several);
//   - a [space] is declared (a define-by-run objective whose parameters come only from its
//     suggests has a space that grows and branches as it runs: TPE models that);
//   - at most kMaxGpParams parameters, none categorical (the GP's kernel treats a choice as
//     equal or not, which TPE's categorical estimator models better), so the space is small
//     and continuous-ish;
//   - n_trials at most kMaxGpTrials (each suggestion refits on every finished trial, O(n^3)).
// The choice depends on the sweep alone, so a restarted daemon picks the same one; the scheduler
// records it (event sampler_chosen) and `status` shows it.
//
// Thread-safety: pure.

#include <string>

#include "config/sweep.h"

namespace triald::sampler {

inline constexpr int kMaxGpParams = 16;
inline constexpr int kMaxGpTrials = 200;

struct AutoChoice {
  std::string kind;  // "gp" or "tpe"
  std::string why;   // "gp: 3 numeric parameters, 40 trials, one objective"
};

AutoChoice ChooseAutoSampler(const config::SweepSpec& spec);

// `sampler` with kind "auto" replaced by the choice for `spec` (options of the chosen kind at
// their defaults, the seed kept); any other kind unchanged.
config::SamplerConfig ResolveAutoSampler(const config::SamplerConfig& sampler,
                                         const config::SweepSpec& spec);

}  // namespace triald::sampler
