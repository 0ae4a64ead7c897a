#include "daemon/sampler/grid_sampler.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>

#include "daemon/sampler/random_sampler.h"

namespace triald::sampler {
namespace {

std::string FormatCount(double n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f", n);
  return buf;
}

}  // namespace

common::Result<std::unique_ptr<GridSampler>> GridSampler::Create(const config::SearchSpace& space,
                                                                 uint64_t seed) {
  std::vector<uint64_t> counts;
  double size = 1;
  std::string breakdown;
  for (const config::ParamSpec& param : space) {
    const config::Distribution& dist = param.dist;
    if (dist.type == config::ParamType::kFloat && dist.step <= 0) {
      return common::InvalidArgument("grid sampler: parameter \"" + param.name +
                                     "\" is a continuous float; expected a step or a categorical");
    }
    const double count = DiscreteCount(dist);
    if (!(count >= 1)) {
      return common::InvalidArgument("grid sampler: parameter \"" + param.name +
                                     "\" has no values; expected at least one");
    }
    size *= count;
    if (!breakdown.empty()) breakdown += " x ";
    breakdown += param.name + ": " + FormatCount(count);
    // Only converted once the whole product is known to be small; a single count may not fit.
    counts.push_back(count <= kMaxPoints ? static_cast<uint64_t>(count) : 0);
  }
  if (size > kMaxPoints) {
    return common::InvalidArgument("grid sampler: the grid has " + FormatCount(size) + " points (" +
                                   breakdown + "); expected at most " + FormatCount(kMaxPoints) +
                                   ": use coarser steps, fewer choices or another sampler");
  }
  return std::unique_ptr<GridSampler>(
      new GridSampler(space, std::move(counts), static_cast<uint64_t>(size), seed));
}

GridSampler::GridSampler(config::SearchSpace space, std::vector<uint64_t> counts, uint64_t size,
                         uint64_t seed)
    : space_(std::move(space)), counts_(std::move(counts)), size_(size), seed_(seed) {}

config::SearchSpace GridSampler::InferRelativeSearchSpace(const StudyView& study,
                                                          int trial_number) {
  (void)study, (void)trial_number;
  return space_;
}

common::Result<config::ParamValues> GridSampler::SampleRelative(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  if (relative_space.empty()) return config::ParamValues{};
  const std::vector<uint64_t> taken = TakenIndices(study, trial_number);
  if (taken.size() >= size_) {
    return common::FailedPrecondition("grid sampler: grid exhausted: all " + std::to_string(size_) +
                                      " points are taken");
  }
  std::mt19937_64 rng = TrialRng(seed_, trial_number, "grid");
  // The r-th untaken index: start at r and step past every taken index at or below the
  // candidate. `taken` is sorted, so one pass suffices and the grid itself is never walked.
  uint64_t index = UniformIndex(rng, size_ - taken.size());
  for (uint64_t t : taken) {
    if (t > index) break;
    ++index;
  }

  config::ParamValues values;
  for (size_t d = space_.size(); d-- > 0;) {
    values[space_[d].name] = DiscreteValue(space_[d].dist, index % counts_[d]);
    index /= counts_[d];
  }
  return values;
}

common::Result<double> GridSampler::SampleIndependent(const StudyView& study, int trial_number,
                                                      const config::ParamSpec& param) {
  (void)study, (void)trial_number;
  return common::InvalidArgument("grid sampler: parameter \"" + param.name +
                                 "\" is not in the grid; expected only the parameters the grid "
                                 "was built from");
}

bool GridSampler::Exhausted(const StudyView& study) const {
  return TakenIndices(study, std::nullopt).size() >= size_;
}

std::optional<uint64_t> GridSampler::IndexOf(const model::ParamMap& params) const {
  uint64_t index = 0;
  for (size_t d = 0; d < space_.size(); ++d) {
    auto it = params.find(space_[d].name);
    if (it == params.end()) return std::nullopt;
    // Matched against the grid's own distribution, not the one stored with the trial, so a
    // point means the same values whatever the trial recorded.
    const int64_t k = DiscreteIndexOf(space_[d].dist, it->second.internal);
    if (k < 0 || static_cast<uint64_t>(k) >= counts_[d]) return std::nullopt;
    index = index * counts_[d] + static_cast<uint64_t>(k);
  }
  return index;
}

std::vector<uint64_t> GridSampler::TakenIndices(const StudyView& study,
                                                std::optional<int> exclude_number) const {
  std::vector<uint64_t> taken;
  if (study.trials == nullptr) return taken;
  taken.reserve(study.trials->size());
  for (const model::TrialRecord& trial : *study.trials) {
    if (exclude_number && trial.number == *exclude_number) continue;
    if (std::optional<uint64_t> index = IndexOf(trial.params)) taken.push_back(*index);
  }
  std::sort(taken.begin(), taken.end());
  taken.erase(std::unique(taken.begin(), taken.end()), taken.end());
  return taken;
}

}  // namespace triald::sampler
