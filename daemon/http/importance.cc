#include "daemon/http/importance.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace triald::daemon::http {

namespace {

// eta^2 of (parameter value, objective) points, binned per the method in the header.
double EtaSquared(const std::vector<std::pair<double, double>>& points, bool categorical) {
  const size_t n = points.size();
  double mean = 0;
  for (const auto& p : points) mean += p.second;
  mean /= static_cast<double>(n);
  double total = 0;
  for (const auto& p : points) total += (p.second - mean) * (p.second - mean);
  if (!(total > 0)) return 0;
  // Bins: (sum, count) per bin.
  std::vector<std::pair<double, size_t>> bins;
  std::vector<std::pair<double, double>> sorted = points;
  std::sort(sorted.begin(), sorted.end());
  if (categorical) {
    for (size_t i = 0; i < n; ++i) {
      if (i == 0 || sorted[i].first != sorted[i - 1].first) bins.emplace_back(0, 0);
      bins.back().first += sorted[i].second;
      ++bins.back().second;
    }
  } else {
    const size_t per_bin = (n + kMaxBins - 1) / kMaxBins;
    size_t in_bin = 0;
    for (size_t i = 0; i < n; ++i) {
      // A new bin once the current one is full, but never between equal values.
      if (i == 0 || (in_bin >= per_bin && sorted[i].first != sorted[i - 1].first)) {
        bins.emplace_back(0, 0);
        in_bin = 0;
      }
      bins.back().first += sorted[i].second;
      ++bins.back().second;
      ++in_bin;
    }
  }
  double between = 0;
  for (const auto& [sum, count] : bins) {
    const double m = sum / static_cast<double>(count);
    between += static_cast<double>(count) * (m - mean) * (m - mean);
  }
  return std::clamp(between / total, 0.0, 1.0);
}

}  // namespace

std::vector<ParamImportance> ParameterImportance(const std::vector<model::TrialRecord>& trials,
                                                 size_t objective, int min_trials) {
  std::map<std::string, std::vector<std::pair<double, double>>> by_param;
  std::map<std::string, bool> categorical;
  int used = 0;
  for (const model::TrialRecord& t : trials) {
    if (t.state != model::TrialState::kComplete || !t.Feasible()) continue;
    if (objective >= t.values.size() || !std::isfinite(t.values[objective])) continue;
    ++used;
    for (const auto& [name, pv] : t.params) {
      if (!std::isfinite(pv.internal)) continue;
      by_param[name].emplace_back(pv.internal, t.values[objective]);
      categorical[name] = pv.dist.type == config::ParamType::kCategorical;
    }
  }
  std::vector<ParamImportance> out;
  if (used < min_trials) return out;
  double sum = 0;
  for (const auto& [name, points] : by_param) {
    if (static_cast<int>(points.size()) < min_trials) continue;
    ParamImportance p;
    p.name = name;
    p.trials = static_cast<int>(points.size());
    p.eta_squared = EtaSquared(points, categorical[name]);
    sum += p.eta_squared;
    out.push_back(std::move(p));
  }
  if (!(sum > 0)) return {};
  for (ParamImportance& p : out) p.importance = p.eta_squared / sum;
  std::sort(out.begin(), out.end(), [](const ParamImportance& a, const ParamImportance& b) {
    return a.importance != b.importance ? a.importance > b.importance : a.name < b.name;
  });
  return out;
}

}  // namespace triald::daemon::http
