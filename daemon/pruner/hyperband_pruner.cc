#include "daemon/pruner/hyperband_pruner.h"

#include <array>
#include <cmath>
#include <string>

namespace triald::pruner {

using model::TrialRecord;
using model::TrialState;

uint32_t Crc32(std::string_view data) {
  static const std::array<uint32_t, 256> kTable = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return table;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) crc = kTable[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

HyperbandPruner::HyperbandPruner(HyperbandPrunerOptions options) : options_(options) {}

void HyperbandPruner::TryInitialize(const PruneContext& context) {
  int64_t max_resource = options_.max_resource;
  if (max_resource == 0) {
    int64_t last_step = -1;
    for (const TrialRecord& t : *context.trials) {
      if (t.state != TrialState::kComplete || t.intermediate.empty()) continue;
      last_step = std::max(last_step, t.intermediate.rbegin()->first);
    }
    if (last_step < 0) return;  // no COMPLETE trial reported a step yet: try again later
    max_resource = last_step + 1;
  }
  // The same floating-point expression as Optuna's math.log(max / min, reduction_factor), so
  // that e.g. log(243) / log(3) = 4.999... gives the same bracket count there and here.
  const double ratio = static_cast<double>(max_resource) / options_.min_resource;
  const int n_brackets =
      static_cast<int>(
          std::floor(std::log(ratio) / std::log(static_cast<double>(options_.reduction_factor)))) +
      1;
  initialized_ = true;
  for (int b = 0; b < n_brackets; ++b) {
    const int s = n_brackets - 1 - b;
    const double scale = std::pow(static_cast<double>(options_.reduction_factor), s);
    const int64_t budget = static_cast<int64_t>(std::ceil(n_brackets * scale / (s + 1)));
    budgets_.push_back(budget);
    total_budget_ += budget;
    SuccessiveHalvingPrunerOptions sh;
    sh.min_resource = options_.min_resource;
    sh.reduction_factor = options_.reduction_factor;
    sh.min_early_stopping_rate = b;
    sh.bootstrap_count = options_.bootstrap_count;
    brackets_.emplace_back(sh);
  }
}

int HyperbandPruner::BracketOf(std::string_view study_name, int number) const {
  if (brackets_.empty() || total_budget_ <= 0) return 0;
  const std::string key = std::string(study_name) + "_" + std::to_string(number);
  int64_t n = static_cast<int64_t>(Crc32(key) % static_cast<uint64_t>(total_budget_));
  for (size_t b = 0; b < budgets_.size(); ++b) {
    n -= budgets_[b];
    if (n < 0) return static_cast<int>(b);
  }
  return static_cast<int>(budgets_.size()) - 1;  // unreachable: n < sum(budgets)
}

bool HyperbandPruner::ShouldPrune(const PruneContext& context) {
  if (!initialized_) TryInitialize(context);
  if (brackets_.empty()) return false;
  if (context.trial->intermediate.empty()) return false;
  const int bracket = BracketOf(context.study_name, context.trial->number);
  return brackets_[static_cast<size_t>(bracket)].ShouldPruneAmong(
      context,
      [&](const TrialRecord& t) { return BracketOf(context.study_name, t.number) == bracket; });
}

}  // namespace triald::pruner
