// triald-header-objective: an exec objective written against the header-only C++ client
// (proto/client/cpp/triald/trial.h) and nothing else, as a user's C++ training program would be.
// Minimises (x - 1)^2: reports a curve that converges to it over `steps` steps (default 8, 40 ms
// apart), then returns it. A trial stopped by triald (prune, cancel, timeout) exits 143 at the
// next step boundary through triald::Run.
//
// In a study with two objectives (TRIALD_N_OBJECTIVES=2) it returns ((x - 1)^2, (x + 1)^2), whose
// Pareto set is x in [-1, 1]; with more it still returns two values, which triald::Run refuses
// (the trial fails naming the count). With a parameter max_x it sends the constraint x - max_x
// (feasible when x <= max_x).

#include <triald/trial.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

int main() {
  return triald::Run([](triald::Trial& trial) {
    const double x = trial.Param<double>("x");
    const int64_t steps = trial.Param<int64_t>("steps", 8);
    const double value = (x - 1) * (x - 1);
    trial.Attr("language", "c++");
    for (int64_t step = 0; step < steps; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
      trial.Report(step, value + static_cast<double>(steps - 1 - step));
    }
    if (trial.Has("max_x")) trial.Constraints({x - trial.Param<double>("max_x")});
    std::vector<double> values = {value};
    if (trial.n_objectives() >= 2) values.push_back((x + 1) * (x + 1));
    return values;
  });
}
