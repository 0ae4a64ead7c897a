// triald-header-objective: an exec objective written against the header-only C++ client
// (proto/client/cpp/triald/trial.h) and nothing else, as a user's C++ training program would be.
// Minimises (x - 1)^2: reports a curve that converges to it over `steps` steps (default 8, 40 ms
// apart), then returns it. A trial stopped by triald (prune, cancel, timeout) exits 143 at the
// next step boundary through triald::Run.

#include <triald/trial.h>

#include <chrono>
#include <cstdint>
#include <thread>

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
    return value;
  });
}
