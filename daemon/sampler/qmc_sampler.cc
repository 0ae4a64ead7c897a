#include "daemon/sampler/qmc_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "daemon/sampler/random_sampler.h"

namespace triald::sampler {
namespace {

constexpr int kBits = SobolSequence::kBits;

// One row of Joe & Kuo's table: the degree s of the primitive polynomial, its inner
// coefficients a (bit k-1 of a is the coefficient of x^(s-k)), and the initial direction
// integers m_1..m_s (m_k odd, m_k < 2^k).
struct JoeKuoRow {
  int s;
  uint32_t a;
  uint32_t m[9];
};

// new-joe-kuo-6.21201, dimensions 2..64 (dimension 1 is the van der Corput sequence, all m = 1).
// S. Joe and F. Y. Kuo, "Constructing Sobol sequences with better two-dimensional projections",
// SIAM J. Sci. Comput. 30, 2635-2654 (2008). Data only; the recurrence is below.
constexpr JoeKuoRow kJoeKuo[SobolSequence::kMaxDimensions - 1] = {
    {1, 0, {1}},                                   // d = 2
    {2, 1, {1, 3}},                                // d = 3
    {3, 1, {1, 3, 1}},                             // d = 4
    {3, 2, {1, 1, 1}},                             // d = 5
    {4, 1, {1, 1, 3, 3}},                          // d = 6
    {4, 4, {1, 3, 5, 13}},                         // d = 7
    {5, 2, {1, 1, 5, 5, 17}},                      // d = 8
    {5, 4, {1, 1, 5, 5, 5}},                       // d = 9
    {5, 7, {1, 1, 7, 11, 19}},                     // d = 10
    {5, 11, {1, 1, 5, 1, 1}},                      // d = 11
    {5, 13, {1, 1, 1, 3, 11}},                     // d = 12
    {5, 14, {1, 3, 5, 5, 31}},                     // d = 13
    {6, 1, {1, 3, 3, 9, 7, 49}},                   // d = 14
    {6, 13, {1, 1, 1, 15, 21, 21}},                // d = 15
    {6, 16, {1, 3, 1, 13, 27, 49}},                // d = 16
    {6, 19, {1, 1, 1, 15, 7, 5}},                  // d = 17
    {6, 22, {1, 3, 1, 15, 13, 25}},                // d = 18
    {6, 25, {1, 1, 5, 5, 19, 61}},                 // d = 19
    {7, 1, {1, 3, 7, 11, 23, 15, 103}},            // d = 20
    {7, 4, {1, 3, 7, 13, 13, 15, 69}},             // d = 21
    {7, 7, {1, 1, 3, 13, 7, 35, 63}},              // d = 22
    {7, 8, {1, 3, 5, 9, 1, 25, 53}},               // d = 23
    {7, 14, {1, 3, 1, 13, 9, 35, 107}},            // d = 24
    {7, 19, {1, 3, 1, 5, 27, 61, 31}},             // d = 25
    {7, 21, {1, 1, 5, 11, 19, 41, 61}},            // d = 26
    {7, 28, {1, 3, 5, 3, 3, 13, 69}},              // d = 27
    {7, 31, {1, 1, 7, 13, 1, 19, 1}},              // d = 28
    {7, 32, {1, 3, 7, 5, 13, 19, 59}},             // d = 29
    {7, 37, {1, 1, 3, 9, 25, 29, 41}},             // d = 30
    {7, 41, {1, 3, 5, 13, 23, 1, 55}},             // d = 31
    {7, 42, {1, 3, 7, 3, 13, 59, 17}},             // d = 32
    {7, 50, {1, 3, 1, 3, 5, 53, 69}},              // d = 33
    {7, 55, {1, 1, 5, 5, 23, 33, 13}},             // d = 34
    {7, 56, {1, 1, 7, 7, 1, 61, 123}},             // d = 35
    {7, 59, {1, 1, 7, 9, 13, 61, 49}},             // d = 36
    {7, 62, {1, 3, 3, 5, 3, 55, 33}},              // d = 37
    {8, 14, {1, 3, 1, 15, 31, 13, 49, 245}},       // d = 38
    {8, 21, {1, 3, 5, 15, 31, 59, 63, 97}},        // d = 39
    {8, 22, {1, 3, 1, 11, 11, 11, 77, 249}},       // d = 40
    {8, 38, {1, 3, 1, 11, 27, 43, 71, 9}},         // d = 41
    {8, 47, {1, 1, 7, 15, 21, 11, 81, 45}},        // d = 42
    {8, 49, {1, 3, 7, 3, 25, 31, 65, 79}},         // d = 43
    {8, 50, {1, 3, 1, 1, 19, 11, 3, 205}},         // d = 44
    {8, 52, {1, 1, 5, 9, 19, 21, 29, 157}},        // d = 45
    {8, 56, {1, 3, 7, 11, 1, 33, 89, 185}},        // d = 46
    {8, 67, {1, 3, 3, 3, 15, 9, 79, 71}},          // d = 47
    {8, 70, {1, 3, 7, 11, 15, 39, 119, 27}},       // d = 48
    {8, 84, {1, 1, 3, 1, 11, 31, 97, 225}},        // d = 49
    {8, 97, {1, 1, 1, 3, 23, 43, 57, 177}},        // d = 50
    {8, 103, {1, 3, 7, 7, 17, 17, 37, 71}},        // d = 51
    {8, 115, {1, 3, 1, 5, 27, 63, 123, 213}},      // d = 52
    {8, 122, {1, 1, 3, 5, 11, 43, 53, 133}},       // d = 53
    {9, 8, {1, 3, 5, 5, 29, 17, 47, 173, 479}},    // d = 54
    {9, 13, {1, 3, 3, 11, 3, 1, 109, 9, 69}},      // d = 55
    {9, 16, {1, 1, 1, 5, 17, 39, 23, 5, 343}},     // d = 56
    {9, 22, {1, 3, 1, 5, 25, 15, 31, 103, 499}},   // d = 57
    {9, 25, {1, 1, 1, 11, 11, 17, 63, 105, 183}},  // d = 58
    {9, 44, {1, 1, 5, 11, 9, 29, 97, 231, 363}},   // d = 59
    {9, 47, {1, 1, 5, 15, 19, 45, 41, 7, 383}},    // d = 60
    {9, 52, {1, 3, 7, 7, 31, 19, 83, 137, 221}},   // d = 61
    {9, 55, {1, 1, 1, 3, 23, 15, 111, 223, 83}},   // d = 62
    {9, 59, {1, 1, 5, 13, 31, 15, 55, 25, 161}},   // d = 63
    {9, 62, {1, 1, 3, 13, 25, 47, 39, 87, 257}},   // d = 64
};

// Direction integers V_1..V_32 of one dimension, as left-aligned 32-bit integers: V_k =
// m_k * 2^(32-k), extended past the table by the Sobol recurrence
//   V_k = V_{k-s} ^ (V_{k-s} >> s) ^ XOR_{i=1..s-1} a_i V_{k-i}.
std::array<uint32_t, kBits> DirectionNumbers(int dimension) {
  std::array<uint32_t, kBits> v{};
  if (dimension == 0) {
    for (int k = 0; k < kBits; ++k) v[k] = 1u << (kBits - 1 - k);
    return v;
  }
  const JoeKuoRow& row = kJoeKuo[dimension - 1];
  const int s = row.s;
  for (int k = 0; k < kBits; ++k) {
    if (k < s) {
      v[k] = row.m[k] << (kBits - 1 - k);
      continue;
    }
    uint32_t x = v[k - s] ^ (v[k - s] >> s);
    for (int i = 1; i < s; ++i) {
      if ((row.a >> (s - 1 - i)) & 1u) x ^= v[k - i];
    }
    v[k] = x;
  }
  return v;
}

// Linear matrix scramble of one dimension: every direction integer is multiplied (over GF(2))
// by a random lower-triangular matrix with a unit diagonal, rows and columns indexed from the
// most significant bit. The unit diagonal keeps the matrix invertible, which is what preserves
// the net property.
void Scramble(std::array<uint32_t, kBits>& v, std::mt19937_64& rng) {
  uint32_t rows[kBits];
  for (int p = 0; p < kBits; ++p) {
    const uint32_t diagonal = 1u << (kBits - 1 - p);
    // Columns q < p are the bits above the diagonal's bit.
    const uint32_t above = p == 0 ? 0 : ~((diagonal << 1) - 1);
    rows[p] = (static_cast<uint32_t>(rng() >> 32) & above) | diagonal;
  }
  for (uint32_t& x : v) {
    uint32_t y = 0;
    for (int p = 0; p < kBits; ++p) {
      if (__builtin_parity(rows[p] & x)) y |= 1u << (kBits - 1 - p);
    }
    x = y;
  }
}

std::string ParamCount(size_t n) {
  return std::to_string(n) + (n == 1 ? " parameter" : " parameters");
}

}  // namespace

common::Result<SobolSequence> SobolSequence::Create(int dimensions, bool scramble, uint64_t seed) {
  if (dimensions < 1 || dimensions > kMaxDimensions) {
    return common::InvalidArgument("Sobol sequence: " + std::to_string(dimensions) +
                                   " dimensions; expected 1 to " + std::to_string(kMaxDimensions));
  }
  SobolSequence seq;
  // One stream for the whole scramble: the matrices and shifts depend on the seed alone, never
  // on a trial, so every trial of a study sees the same sequence.
  std::mt19937_64 rng = TrialRng(seed, 0, "qmc/scramble");
  for (int d = 0; d < dimensions; ++d) {
    std::array<uint32_t, kBits> v = DirectionNumbers(d);
    uint32_t shift = 0;
    if (scramble) {
      Scramble(v, rng);
      shift = static_cast<uint32_t>(rng() >> 32);
    }
    seq.directions_.push_back(v);
    seq.shift_.push_back(shift);
  }
  return seq;
}

std::vector<uint32_t> SobolSequence::PointBits(uint32_t index) const {
  // Gray-code order: point i is the XOR of the direction integers picked by the bits of
  // gray(i) = i ^ (i >> 1), so any point is computed directly, without its predecessors.
  const uint32_t gray = index ^ (index >> 1);
  std::vector<uint32_t> out(shift_);
  for (size_t d = 0; d < out.size(); ++d) {
    uint32_t x = out[d];
    for (uint32_t g = gray; g != 0; g &= g - 1) x ^= directions_[d][__builtin_ctz(g)];
    out[d] = x;
  }
  return out;
}

std::vector<double> SobolSequence::Point(uint32_t index) const {
  const std::vector<uint32_t> bits = PointBits(index);
  std::vector<double> out(bits.size());
  for (size_t d = 0; d < bits.size(); ++d) out[d] = static_cast<double>(bits[d]) * 0x1.0p-32;
  return out;
}

double MapUnitToDistribution(const config::Distribution& dist, double u) {
  u = std::clamp(u, 0.0, std::nextafter(1.0, 0.0));
  if (dist.type == config::ParamType::kCategorical) {
    const double n = static_cast<double>(dist.choices.size());
    return std::min(std::floor(u * n), n - 1);
  }
  const double step = EffectiveStep(dist);
  if (step <= 0) {  // continuous float
    double v;
    if (dist.log) {
      const double log_low = std::log(dist.low);
      v = std::exp(log_low + u * (std::log(dist.high) - log_low));
    } else {
      v = dist.low + u * (dist.high - dist.low);
    }
    return std::clamp(v, dist.low, dist.high);
  }
  // Past 2^53 neighbouring grid values are no longer distinct doubles (the random sampler's cap).
  const double count = std::min(DiscreteCount(dist), 9007199254740992.0);
  if (!(count >= 1)) return std::numeric_limits<double>::quiet_NaN();
  if (dist.log) {
    // Log-uniform over the rounding intervals of the end points, as the random sampler draws
    // log ints: flooring a linear u onto a log grid would ignore the log.
    const double half = step / 2;
    const double log_low = std::log(dist.low - half);
    const double v = std::exp(log_low + u * (std::log(dist.high + half) - log_low));
    const double k = std::clamp(std::round((v - dist.low) / step), 0.0, count - 1);
    return DiscreteValue(dist, static_cast<uint64_t>(k));
  }
  const double k = std::min(std::floor(u * count), count - 1);
  return DiscreteValue(dist, static_cast<uint64_t>(k));
}

common::Result<std::unique_ptr<QmcSampler>> QmcSampler::Create(const config::SearchSpace& space,
                                                               uint64_t seed,
                                                               const config::QmcConfig& config) {
  if (space.size() > static_cast<size_t>(SobolSequence::kMaxDimensions)) {
    return common::InvalidArgument(
        "qmc sampler: the space has " + ParamCount(space.size()) + "; expected at most " +
        std::to_string(SobolSequence::kMaxDimensions) +
        " (the Sobol direction numbers built in): use the tpe or random sampler");
  }
  // Every dimension the sampler may use: a space inferred at run time may be larger than the
  // [space]. The scramble is drawn dimension by dimension from one stream, so the first
  // coordinates are the same whatever the sequence's dimension.
  TRIALD_ASSIGN_OR_RETURN(SobolSequence seq, SobolSequence::Create(SobolSequence::kMaxDimensions,
                                                                   config.scramble, seed));
  return std::unique_ptr<QmcSampler>(new QmcSampler(space, std::move(seq), config.scramble, seed));
}

QmcSampler::QmcSampler(config::SearchSpace space, SobolSequence sequence, bool scramble,
                       uint64_t seed)
    : space_(std::move(space)), sequence_(std::move(sequence)), scramble_(scramble), seed_(seed) {}

config::SearchSpace QmcSampler::InferRelativeSearchSpace(const StudyView& study, int trial_number) {
  if (!space_.empty() || study.trials == nullptr) return space_;
  // Optuna's rule for a study without a declared space: the first finished trial's space.
  const model::TrialRecord* first = nullptr;
  for (const model::TrialRecord& t : *study.trials) {
    if (t.number >= trial_number) continue;
    if (t.state != model::TrialState::kComplete && t.state != model::TrialState::kPruned) continue;
    if (first == nullptr || t.number < first->number) first = &t;
  }
  config::SearchSpace space;
  if (first == nullptr) return space;
  for (const auto& [name, value] : first->params) {
    const config::Distribution& d = value.dist;
    if (d.type == config::ParamType::kCategorical) continue;
    const bool single = EffectiveStep(d) > 0 ? DiscreteCount(d) <= 1 : d.low == d.high;
    if (single || !d.Validate().ok()) continue;
    if (space.size() == static_cast<size_t>(SobolSequence::kMaxDimensions)) break;
    space.push_back({name, d});
  }
  return space;
}

common::Result<config::ParamValues> QmcSampler::SampleRelative(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  (void)study;
  if (relative_space.empty()) return config::ParamValues{};
  if (relative_space.size() > static_cast<size_t>(sequence_.dimensions())) {
    return common::Internal("qmc sampler: relative space of " + ParamCount(relative_space.size()) +
                            "; at most " + std::to_string(sequence_.dimensions()) + " fit");
  }
  if (trial_number < 0) {
    return common::InvalidArgument("qmc sampler: trial number " + std::to_string(trial_number) +
                                   "; expected >= 0");
  }
  // The unscrambled point 0 is the origin: every parameter at its low end is a poor first trial,
  // and Optuna skips it too.
  const uint32_t index = static_cast<uint32_t>(trial_number) + (scramble_ ? 0 : 1);
  const std::vector<double> u = sequence_.Point(index);
  config::ParamValues values;
  for (size_t d = 0; d < relative_space.size(); ++d) {
    values[relative_space[d].name] = MapUnitToDistribution(relative_space[d].dist, u[d]);
  }
  return values;
}

common::Result<double> QmcSampler::SampleIndependent(const StudyView& study, int trial_number,
                                                     const config::ParamSpec& param) {
  (void)study;
  std::mt19937_64 rng = TrialRng(seed_, trial_number, param.name);
  return DrawUniform(param.dist, rng);
}

}  // namespace triald::sampler
