// daemon/sampler/pareto.h against hand-computed sets: dominance, constrained dominance,
// non-dominated ranks, crowding distance, hypervolume and the Pareto front of trials.

#include "daemon/sampler/pareto.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

namespace triald::sampler::pareto {
namespace {

using config::Direction;
constexpr double kInf = std::numeric_limits<double>::infinity();

model::TrialRecord Done(int number, std::vector<double> values,
                        std::vector<double> constraints = {}) {
  model::TrialRecord t;
  t.number = number;
  t.state = model::TrialState::kComplete;
  t.values = std::move(values);
  t.constraints = std::move(constraints);
  return t;
}

TEST_CASE("pareto: dominance needs no worse everywhere and better somewhere", "[pareto]") {
  CHECK(Dominates({1, 2}, {1, 3}));
  CHECK(Dominates({0, 0}, {1, 1}));
  CHECK_FALSE(Dominates({1, 2}, {1, 2}));  // equal points do not dominate
  CHECK_FALSE(Dominates({1, 3}, {2, 2}));
  CHECK_FALSE(Dominates({1, 2}, {1, 2, 3}));  // lengths differ
  CHECK(Minimized({1, 2, 3}, {Direction::kMinimize, Direction::kMaximize, Direction::kMinimize}) ==
        Point{1, -2, 3});
}

TEST_CASE("pareto: constrained dominance follows Optuna's four rules", "[pareto]") {
  // Both feasible: plain dominance.
  CHECK(ConstrainedDominates({0, 0}, {-1}, {1, 1}, {0}));
  CHECK_FALSE(ConstrainedDominates({1, 1}, {-1}, {0, 0}, {0}));
  // Feasible beats infeasible whatever the values.
  CHECK(ConstrainedDominates({9, 9}, {0}, {0, 0}, {0.1}));
  CHECK_FALSE(ConstrainedDominates({0, 0}, {0.1}, {9, 9}, {0}));
  // Both infeasible: the smaller total violation (positive parts only).
  CHECK(ConstrainedDominates({9, 9}, {0.5, -10}, {0, 0}, {0.3, 0.3}));
  CHECK_FALSE(ConstrainedDominates({0, 0}, {0.3, 0.3}, {9, 9}, {0.5, -10}));
  // With constraints beats without; neither has them: plain dominance.
  CHECK(ConstrainedDominates({9, 9}, {5}, {0, 0}, {}));
  CHECK_FALSE(ConstrainedDominates({0, 0}, {}, {9, 9}, {5}));
  CHECK(ConstrainedDominates({0, 0}, {}, {1, 1}, {}));
}

TEST_CASE("pareto: non-dominated ranks of a hand-sorted set", "[pareto]") {
  // Front 0: (1,5) (2,3) (4,1); front 1: (3,4) (5,2); front 2: (6,6); (2,3) twice: both rank 0.
  const std::vector<Point> points = {{3, 4}, {1, 5}, {6, 6}, {2, 3}, {4, 1}, {5, 2}, {2, 3}};
  CHECK(NonDominatedRanks(points) == std::vector<int>{1, 0, 2, 0, 0, 1, 0});
  // Constraints reorder: (6,6) is the only feasible point, so it alone is rank 0; the others
  // rank by violation.
  const std::vector<std::vector<double>> c = {{1}, {2}, {-1}, {3}, {3}, {0.5}, {4}};
  CHECK(NonDominatedRanks(points, c) == std::vector<int>{2, 3, 0, 4, 4, 1, 5});
  CHECK(NonDominatedRanks({}).empty());
}

TEST_CASE("pareto: crowding distance as Optuna computes it", "[pareto]") {
  // Objective 0 spans 1..4 (width 3), objective 1 spans 1..5 (width 4).
  const std::vector<Point> front = {{1, 5}, {2, 3}, {4, 1}};
  const std::vector<double> d = CrowdingDistance(front);
  CHECK(d[0] == kInf);
  CHECK(d[2] == kInf);
  CHECK(d[1] == Approx((4.0 - 1.0) / 3 + (5.0 - 1.0) / 4));
  // An objective with all values equal adds nothing.
  const std::vector<double> flat = CrowdingDistance({{1, 7}, {2, 7}, {3, 7}});
  CHECK(flat[1] == Approx(1.0));  // (3 - 1) / 2 from objective 0 only
  CHECK(CrowdingDistance({{1, 1}, {1, 1}}) == std::vector<double>{0, 0});
}

TEST_CASE("pareto: hypervolume in 2-D and 3-D against hand-computed volumes", "[pareto]") {
  // 2-D staircase with reference (4, 4): boxes [1,4]x[3,4], [2,4]x[2,3], [3,4]x[1,2] = 3+2+1.
  CHECK(Hypervolume({{1, 3}, {2, 2}, {3, 1}}, {4, 4}) == Approx(6.0));
  // A dominated point and a point outside the reference add nothing.
  CHECK(Hypervolume({{1, 3}, {2, 2}, {3, 1}, {3, 3}, {5, 0}, {4, 0}}, {4, 4}) == Approx(6.0));
  CHECK(Hypervolume({}, {1, 1}) == 0);
  // 3-D: two unit-corner boxes overlapping. Reference (2,2,2); a = (0,0,1) gives 2*2*1 = 4,
  // b = (1,1,0) gives 1*1*2 = 2; their intersection [1,2]x[1,2]x[1,2] = 1: union 5.
  CHECK(Hypervolume({{0, 0, 1}, {1, 1, 0}}, {2, 2, 2}) == Approx(5.0));
  // Reference (1,1,1) and (0.5,0.5,0), (0.5,0,0.5), (0,0.5,0.5): each box 0.5*0.5*1 = 0.25,
  // every pairwise and the triple intersection [0.5,1]^3 = 0.125: 3*0.25 - 3*0.125 + 0.125.
  CHECK(Hypervolume({{0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}}, {1, 1, 1}) == Approx(0.5));
  // 1-D: the distance from the best point to the reference.
  CHECK(Hypervolume({{3}, {1}}, {4}) == Approx(3.0));
}

TEST_CASE("pareto: the front of trials keeps ties and duplicates, never an infeasible trial",
          "[pareto]") {
  const std::vector<Direction> mm = {Direction::kMinimize, Direction::kMinimize};
  std::vector<model::TrialRecord> trials = {
      Done(0, {1, 5}), Done(1, {2, 3}),      Done(2, {2, 3}),  // a duplicate
      Done(3, {3, 4}),                                         // dominated by 1
      Done(4, {4, 1}), Done(5, {0, 0}, {1}),                   // infeasible
      Done(6, {1, 6}),                                         // dominated by 0 (tie in x)
      Done(7, {5, 1}),                                         // dominated by 4 (tie in y)
  };
  model::TrialRecord running;
  running.number = 8;
  running.state = model::TrialState::kRunning;
  trials.push_back(running);
  CHECK(ParetoFront(trials, mm) == std::vector<size_t>{0, 1, 2, 4});
  // The same through the n-dimensional path (a third, constant objective).
  std::vector<model::TrialRecord> three = trials;
  for (auto& t : three) {
    if (!t.values.empty()) t.values.push_back(7);
  }
  CHECK(ParetoFront(three, {Direction::kMinimize, Direction::kMinimize, Direction::kMinimize}) ==
        std::vector<size_t>{0, 1, 2, 4});
  // Maximising the second objective: (1, 6) is best in both.
  CHECK(ParetoFront(trials, {Direction::kMinimize, Direction::kMaximize}) ==
        std::vector<size_t>{6});
  // All infeasible: nothing is on the front.
  std::vector<model::TrialRecord> bad = {Done(0, {1, 1}, {0.5}), Done(1, {2, 0}, {1, -1})};
  CHECK(ParetoFront(bad, mm).empty());
  // Feasible at exactly 0.
  CHECK(ParetoFront({Done(0, {1, 1}, {0, -3})}, mm) == std::vector<size_t>{0});
}

}  // namespace
}  // namespace triald::sampler::pareto
