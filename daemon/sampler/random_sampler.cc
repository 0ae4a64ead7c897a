#include "daemon/sampler/random_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace triald::sampler {
namespace {

using config::Distribution;
using config::ParamType;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Past 2^53 neighbouring grid values are no longer distinct doubles, so a finer grid is sampled
// as if it had 2^53 points.
constexpr double kMaxDrawCount = 9007199254740992.0;
// A value within this fraction of a step of a grid point is that grid point: tolerates the
// last-bit differences between 0.1 * 3 and a parsed "0.3" while never confusing two points.
constexpr double kStepTolerance = 1e-9;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a rather than std::hash, whose values are allowed to differ between builds.
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The index of the grid value nearest to `internal`, clamped into [0, count - 1].
double NearestStep(const Distribution& dist, double internal) {
  double count = std::min(DiscreteCount(dist), kMaxDrawCount);
  double k = std::round((internal - dist.low) / EffectiveStep(dist));
  return std::clamp(k, 0.0, count - 1);
}

double LogUniform(double low, double high, double u) {
  double log_low = std::log(low);
  return std::exp(log_low + u * (std::log(high) - log_low));
}

}  // namespace

std::mt19937_64 TrialRng(uint64_t seed, int trial_number, std::string_view stream) {
  uint64_t h = SplitMix64(seed);
  h = SplitMix64(h ^ static_cast<uint64_t>(static_cast<int64_t>(trial_number)));
  h = SplitMix64(h ^ Fnv1a(stream));
  return std::mt19937_64(h);
}

double UniformUnit(std::mt19937_64& rng) {
  // The top 53 bits fill a double's mantissa exactly: every result is k / 2^53.
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

uint64_t UniformIndex(std::mt19937_64& rng, uint64_t n) {
  if (n <= 1) return 0;
  // Rejecting the lowest (2^64 mod n) raw values leaves a range that is a multiple of n, so the
  // modulo below is unbiased.
  const uint64_t threshold = (0 - n) % n;
  uint64_t x = rng();
  while (x < threshold) x = rng();
  return x % n;
}

double EffectiveStep(const Distribution& dist) {
  switch (dist.type) {
    case ParamType::kCategorical:
      return 1;
    case ParamType::kInt:
      // As Distribution::Contains reads it: a hand-built int without a step steps by 1.
      return dist.step >= 1 ? dist.step : 1;
    case ParamType::kFloat:
      break;
  }
  return dist.step > 0 ? dist.step : 0;
}

double DiscreteCount(const Distribution& dist) {
  if (dist.type == ParamType::kCategorical) return static_cast<double>(dist.choices.size());
  const double step = EffectiveStep(dist);
  if (step <= 0 || !(dist.high >= dist.low)) return 0;
  const double ratio = (dist.high - dist.low) / step;
  // (1.0 - 0.1) / 0.1 is 8.999999999999998: a ratio that is an integer but for rounding counts
  // as that integer, so high itself stays on the grid.
  const double nearest = std::round(ratio);
  const double steps = std::abs(ratio - nearest) <= kStepTolerance * std::max(1.0, nearest)
                           ? nearest
                           : std::floor(ratio);
  return steps + 1;
}

double DiscreteValue(const Distribution& dist, uint64_t k) {
  if (dist.type == ParamType::kCategorical) return static_cast<double>(k);
  const double step = EffectiveStep(dist);
  double v = dist.low + static_cast<double>(k) * step;
  // low + k * step can overshoot high by an ulp, or miss it by one when high is the last point;
  // either way the point is high itself.
  if (v > dist.high || std::abs(v - dist.high) <= kStepTolerance * step) v = dist.high;
  return v;
}

bool SingleValued(const config::Distribution& dist) {
  if (dist.type == config::ParamType::kCategorical) return dist.choices.size() <= 1;
  if (EffectiveStep(dist) > 0) return DiscreteCount(dist) <= 1;
  return dist.low == dist.high;
}

int64_t DiscreteIndexOf(const Distribution& dist, double internal) {
  if (!std::isfinite(internal)) return -1;
  const double count = DiscreteCount(dist);
  const double step = EffectiveStep(dist);
  if (!(count >= 1) || step <= 0) return -1;
  const double k = std::round((internal - dist.low) / step);
  if (k < 0 || k >= count || k > kMaxDrawCount) return -1;
  const auto index = static_cast<uint64_t>(k);
  if (std::abs(DiscreteValue(dist, index) - internal) > kStepTolerance * step) return -1;
  return static_cast<int64_t>(index);
}

double DrawUniform(const Distribution& dist, std::mt19937_64& rng) {
  if (dist.type == ParamType::kCategorical) {
    if (dist.choices.empty()) return kNaN;
    return static_cast<double>(UniformIndex(rng, dist.choices.size()));
  }
  const double step = EffectiveStep(dist);
  if (step <= 0) {  // continuous float
    if (dist.log && !(dist.low > 0)) return kNaN;
    const double u = UniformUnit(rng);
    const double v =
        dist.log ? LogUniform(dist.low, dist.high, u) : dist.low + u * (dist.high - dist.low);
    // exp(log(x)) and low + u * (high - low) may land an ulp outside the range.
    return std::clamp(v, dist.low, dist.high);
  }
  const double count = std::min(DiscreteCount(dist), kMaxDrawCount);
  if (!(count >= 1)) return kNaN;
  if (dist.log) {
    // Optuna's log int: log-uniform over [low - 0.5, high + 0.5] then rounded, so each integer
    // gets the log-mass of its rounding interval. A stepped log value (Validate normally
    // forbids it) is drawn log-uniform over [low, high] and snapped to the grid.
    const bool int_unit = dist.type == ParamType::kInt && step == 1;
    const double half = int_unit ? 0.5 : 0;
    if (!(dist.low - half > 0)) return kNaN;
    const double v = LogUniform(dist.low - half, dist.high + half, UniformUnit(rng));
    return DiscreteValue(dist, static_cast<uint64_t>(NearestStep(dist, v)));
  }
  return DiscreteValue(dist, UniformIndex(rng, static_cast<uint64_t>(count)));
}

common::Result<double> RandomSampler::SampleIndependent(const StudyView& study, int trial_number,
                                                        const config::ParamSpec& param) {
  (void)study;  // independent of history by design
  std::mt19937_64 rng = TrialRng(seed_, trial_number, param.name);
  return DrawUniform(param.dist, rng);
}

}  // namespace triald::sampler
