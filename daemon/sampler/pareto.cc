#include "daemon/sampler/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace triald::sampler::pareto {
namespace {

double Violation(const std::vector<double>& constraints) {
  double sum = 0;
  for (double c : constraints) {
    if (c > 0) sum += c;
  }
  return sum;
}

// The points of `points` that no other point dominates; of equal points, one is kept (the
// hypervolume does not change).
std::vector<Point> NonDominated(std::vector<Point> points) {
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<Point> kept;
  for (size_t i = 0; i < points.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < points.size() && !dominated; ++j) {
      dominated = j != i && Dominates(points[j], points[i]);
    }
    if (!dominated) kept.push_back(points[i]);
  }
  return kept;
}

double Hypervolume2d(std::vector<Point> points, const Point& reference) {
  std::sort(points.begin(), points.end());
  double volume = 0;
  double best_y = reference[1];
  for (const Point& p : points) {
    if (p[1] < best_y) {
      volume += (reference[0] - p[0]) * (best_y - p[1]);
      best_y = p[1];
    }
  }
  return volume;
}

double BoxVolume(const Point& p, const Point& reference) {
  double v = 1;
  for (size_t k = 0; k < p.size(); ++k) v *= reference[k] - p[k];
  return v;
}

// WFG: the hypervolume of a set of points that all lie strictly inside the reference box.
double Wfg(std::vector<Point> points, const Point& reference) {
  if (points.empty()) return 0;
  if (points.size() == 1) return BoxVolume(points[0], reference);
  if (reference.size() == 2) return Hypervolume2d(std::move(points), reference);
  // Sorting by the first objective keeps the limited sets small.
  std::sort(points.begin(), points.end());
  double volume = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    // Exclusive volume of points[i] against those after it.
    std::vector<Point> limited;
    limited.reserve(points.size() - i - 1);
    for (size_t j = i + 1; j < points.size(); ++j) {
      Point q(points[j].size());
      for (size_t k = 0; k < q.size(); ++k) q[k] = std::max(points[i][k], points[j][k]);
      limited.push_back(std::move(q));
    }
    volume += BoxVolume(points[i], reference) - Wfg(NonDominated(std::move(limited)), reference);
  }
  return volume;
}

}  // namespace

Point Minimized(const std::vector<double>& values,
                const std::vector<config::Direction>& directions) {
  Point p(values);
  for (size_t k = 0; k < p.size() && k < directions.size(); ++k) {
    if (directions[k] == config::Direction::kMaximize) p[k] = -p[k];
  }
  return p;
}

bool Dominates(const Point& a, const Point& b) {
  if (a.size() != b.size()) return false;
  bool better = false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] > b[k]) return false;
    if (a[k] < b[k]) better = true;
  }
  return better;
}

bool ConstrainedDominates(const Point& a, const std::vector<double>& a_constraints, const Point& b,
                          const std::vector<double>& b_constraints) {
  if (a_constraints.empty() && b_constraints.empty()) return Dominates(a, b);
  if (b_constraints.empty()) return true;
  if (a_constraints.empty()) return false;
  const bool a_feasible = model::Feasible(a_constraints);
  const bool b_feasible = model::Feasible(b_constraints);
  if (a_feasible && b_feasible) return Dominates(a, b);
  if (a_feasible) return true;
  if (b_feasible) return false;
  return Violation(a_constraints) < Violation(b_constraints);
}

std::vector<int> NonDominatedRanks(const std::vector<Point>& points,
                                   const std::vector<std::vector<double>>& constraints) {
  const size_t n = points.size();
  static const std::vector<double> kNone;
  auto constraints_of = [&](size_t i) -> const std::vector<double>& {
    return i < constraints.size() ? constraints[i] : kNone;
  };
  std::vector<std::vector<size_t>> dominated_by_me(n);
  std::vector<int> dominating_me(n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (ConstrainedDominates(points[i], constraints_of(i), points[j], constraints_of(j))) {
        dominated_by_me[i].push_back(j);
        ++dominating_me[j];
      } else if (ConstrainedDominates(points[j], constraints_of(j), points[i], constraints_of(i))) {
        dominated_by_me[j].push_back(i);
        ++dominating_me[i];
      }
    }
  }
  std::vector<int> rank(n, -1);
  std::vector<size_t> front;
  for (size_t i = 0; i < n; ++i) {
    if (dominating_me[i] == 0) front.push_back(i);
  }
  for (int r = 0; !front.empty(); ++r) {
    std::vector<size_t> next;
    for (size_t i : front) {
      rank[i] = r;
      for (size_t j : dominated_by_me[i]) {
        if (--dominating_me[j] == 0) next.push_back(j);
      }
    }
    front = std::move(next);
  }
  return rank;
}

std::vector<double> CrowdingDistance(const std::vector<Point>& front) {
  const size_t n = front.size();
  std::vector<double> distance(n, 0.0);
  if (n == 0) return distance;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<size_t> order(n);
  for (size_t k = 0; k < front[0].size(); ++k) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return front[a][k] < front[b][k]; });
    if (front[order.front()][k] == front[order.back()][k]) continue;
    // Values with -inf below the smallest and +inf above the largest, as Optuna.
    auto value = [&](size_t pos) -> double {  // pos in [0, n + 1]
      if (pos == 0) return -inf;
      if (pos == n + 1) return inf;
      return front[order[pos - 1]][k];
    };
    double v_min = inf, v_max = -inf;
    for (size_t pos = 0; pos <= n + 1; ++pos) {
      const double v = value(pos);
      if (std::isfinite(v)) v_min = std::min(v_min, v), v_max = std::max(v_max, v);
    }
    double width = v_max - v_min;
    if (!(width > 0)) width = 1.0;
    for (size_t pos = 1; pos <= n; ++pos) {
      const double lo = value(pos - 1), hi = value(pos + 1);
      const double gap = lo == hi ? 0.0 : hi - lo;
      distance[order[pos - 1]] += gap / width;
    }
  }
  return distance;
}

double Hypervolume(const std::vector<Point>& points, const Point& reference) {
  std::vector<Point> inside;
  for (const Point& p : points) {
    if (p.size() != reference.size()) continue;
    bool strictly = true;
    for (size_t k = 0; k < p.size() && strictly; ++k) strictly = p[k] < reference[k];
    if (strictly) inside.push_back(p);
  }
  if (inside.empty() || reference.empty()) return 0;
  if (reference.size() == 1) {
    double best = reference[0];
    for (const Point& p : inside) best = std::min(best, p[0]);
    return reference[0] - best;
  }
  return Wfg(NonDominated(std::move(inside)), reference);
}

std::vector<size_t> ParetoFront(const std::vector<model::TrialRecord>& trials,
                                const std::vector<config::Direction>& directions) {
  std::vector<size_t> candidates;
  std::vector<Point> points;
  for (size_t i = 0; i < trials.size(); ++i) {
    const model::TrialRecord& t = trials[i];
    if (t.state != model::TrialState::kComplete || !t.Feasible()) continue;
    if (t.values.size() != directions.size()) continue;
    candidates.push_back(i);
    points.push_back(Minimized(t.values, directions));
  }
  std::vector<size_t> front;
  if (directions.size() == 2) {
    // O(n log n): sorted by the first objective then the second, a point is on the front when
    // its second value is below every earlier point's of a smaller first value, or ties it.
    std::vector<size_t> order(points.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return points[a] < points[b]; });
    double best_y = std::numeric_limits<double>::infinity();
    size_t pos = 0;
    while (pos < order.size()) {
      // A run of equal first values: only its smallest second value (and equal points) can be
      // on the front, and only if that beats every earlier point.
      size_t end = pos;
      while (end < order.size() && points[order[end]][0] == points[order[pos]][0]) ++end;
      const double y = points[order[pos]][1];
      if (y < best_y) {
        for (size_t q = pos; q < end && points[order[q]][1] == y; ++q) {
          front.push_back(candidates[order[q]]);
        }
        best_y = y;
      }
      pos = end;
    }
    std::sort(front.begin(), front.end());
    return front;
  }
  const std::vector<int> rank = NonDominatedRanks(points);
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (rank[i] == 0) front.push_back(candidates[i]);
  }
  return front;
}

}  // namespace triald::sampler::pareto
