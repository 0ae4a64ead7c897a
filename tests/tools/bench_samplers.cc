// triald-bench-samplers: the C++ half of scripts/bench_search.py.
//
// Drives triald's samplers in-process exactly as the daemon does — MakeSampler() from a
// SamplerConfig, then SampleParams() for every trial over a StudyView of all trials so far — and
// prints one JSON object per line. Figures only: nothing here asserts.
//
//   triald-bench-samplers quality [--seeds N] [--trials N] [--checkpoints 30,100]
//                                 [--functions branin,...] [--samplers tpe,random,qmc]
//     {"mode":"quality","function":F,"sampler":S,"seed":s,"best":{"30":v,"100":v}}
//     best-so-far after each checkpoint (minimisation), one line per (function, sampler, seed).
//
//   triald-bench-samplers speed [--history 100,1000,5000] [--repeats N] [--samplers tpe]
//     {"mode":"speed","sampler":S,"history":n,"params":5,"repeats":r,"ms_per_suggestion":x,
//      "cpu_ms_per_suggestion":y}
//     wall and CPU time of one SampleParams() call with n random COMPLETE trials of 5 floats as
//     history.
//
// The objective functions are defined identically in scripts/bench_search.py; keep them in step.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/sampler.h"

namespace triald::bench {
namespace {

using config::Distribution;
using config::ParamSpec;
using config::ParamType;
using config::ParamValues;
using config::SearchSpace;

constexpr double kPi = 3.14159265358979323846;

Distribution Float(double low, double high) {
  Distribution d;
  d.type = ParamType::kFloat;
  d.low = low;
  d.high = high;
  return d;
}

Distribution Int(double low, double high) {
  Distribution d;
  d.type = ParamType::kInt;
  d.low = low;
  d.high = high;
  d.step = 1;
  return d;
}

Distribution Categorical(std::vector<std::string> choices) {
  Distribution d;
  d.type = ParamType::kCategorical;
  for (std::string& c : choices) d.choices.emplace_back(std::move(c));
  return d;
}

struct Function {
  std::string name;
  SearchSpace space;
  std::function<double(const ParamValues&)> f;
};

SearchSpace Box(const std::string& prefix, int n, double low, double high) {
  SearchSpace s;
  for (int i = 0; i < n; ++i) s.push_back({prefix + std::to_string(i), Float(low, high)});
  return s;
}

std::vector<double> Coords(const ParamValues& v, const std::string& prefix, int n) {
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = v.at(prefix + std::to_string(i));
  return x;
}

std::vector<Function> Functions() {
  std::vector<Function> fs;
  fs.push_back({"branin", {{"x0", Float(-5, 10)}, {"x1", Float(0, 15)}}, [](const ParamValues& v) {
                  const double x1 = v.at("x0"), x2 = v.at("x1");
                  const double b = 5.1 / (4 * kPi * kPi), c = 5 / kPi, t = 1 / (8 * kPi);
                  const double q = x2 - b * x1 * x1 + c * x1 - 6;
                  return q * q + 10 * (1 - t) * std::cos(x1) + 10;
                }});
  fs.push_back({"hartmann6", Box("x", 6, 0, 1), [](const ParamValues& v) {
                  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
                  static const double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                                 {0.05, 10, 17, 0.1, 8, 14},
                                                 {3, 3.5, 1.7, 10, 17, 8},
                                                 {17, 8, 0.05, 10, 0.1, 14}};
                  static const double p[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
                  const std::vector<double> x = Coords(v, "x", 6);
                  double sum = 0;
                  for (int i = 0; i < 4; ++i) {
                    double inner = 0;
                    for (int j = 0; j < 6; ++j)
                      inner += a[i][j] * (x[j] - p[i][j]) * (x[j] - p[i][j]);
                    sum += alpha[i] * std::exp(-inner);
                  }
                  return -sum;
                }});
  fs.push_back({"rosenbrock5", Box("x", 5, -5, 10), [](const ParamValues& v) {
                  const std::vector<double> x = Coords(v, "x", 5);
                  double sum = 0;
                  for (int i = 0; i + 1 < 5; ++i) {
                    const double a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
                    sum += 100 * a * a + b * b;
                  }
                  return sum;
                }});
  fs.push_back({"ackley5", Box("x", 5, -32.768, 32.768), [](const ParamValues& v) {
                  const std::vector<double> x = Coords(v, "x", 5);
                  double sq = 0, cs = 0;
                  for (double xi : x) {
                    sq += xi * xi;
                    cs += std::cos(2 * kPi * xi);
                  }
                  return -20 * std::exp(-0.2 * std::sqrt(sq / 5)) - std::exp(cs / 5) + 20 +
                         std::exp(1.0);
                }});
  fs.push_back({"mixed",
                {{"x", Float(-5, 5)},
                 {"y", Float(-5, 5)},
                 {"n", Int(1, 20)},
                 {"c", Categorical({"a", "b", "c"})}},
                [](const ParamValues& v) {
                  static const double offset[3] = {1.0, 0.0, 2.5};
                  const double dx = v.at("x") - 1, dy = v.at("y") + 2, dn = (v.at("n") - 7) / 3;
                  return dx * dx + dy * dy + dn * dn + offset[static_cast<int>(v.at("c"))];
                }});
  return fs;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int> IntList(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : SplitList(s)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || v < 1) {
      std::fprintf(stderr, "triald-bench-samplers: %s: \"%s\" is not a positive integer\n",
                   flag.c_str(), item.c_str());
      std::exit(2);
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

std::unique_ptr<sampler::Sampler> MakeOrDie(const std::string& kind, const SearchSpace& space,
                                            uint64_t seed) {
  config::SamplerConfig config;
  config.kind = kind;
  config.seed = seed;
  config.seed_given = true;
  auto sampler = sampler::MakeSampler(config, space);
  if (!sampler.ok()) {
    std::fprintf(stderr, "triald-bench-samplers: %s\n", sampler.status().message().c_str());
    std::exit(1);
  }
  return std::move(sampler).value();
}

model::TrialRecord Complete(int number, const SearchSpace& space, const ParamValues& values,
                            double value) {
  model::TrialRecord t;
  t.number = number;
  t.state = model::TrialState::kComplete;
  t.value = value;
  for (const ParamSpec& p : space) t.params[p.name] = {values.at(p.name), p.dist};
  return t;
}

// One study, as the scheduler runs it: sample trial N from trials 0..N-1, evaluate, store.
std::vector<double> RunStudy(const Function& fn, const std::string& kind, uint64_t seed,
                             int trials) {
  auto s = MakeOrDie(kind, fn.space, seed);
  std::vector<model::TrialRecord> history;
  sampler::StudyView view{config::Direction::kMinimize, &fn.space, &history};
  std::vector<double> best_so_far;
  double best = INFINITY;
  for (int n = 0; n < trials; ++n) {
    auto values = sampler::SampleParams(*s, view, n);
    if (!values.ok()) {
      std::fprintf(stderr, "triald-bench-samplers: %s trial %d: %s\n", kind.c_str(), n,
                   values.status().message().c_str());
      std::exit(1);
    }
    const double v = fn.f(*values);
    history.push_back(Complete(n, fn.space, *values, v));
    best = std::min(best, v);
    best_so_far.push_back(best);
  }
  return best_so_far;
}

int Quality(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const std::vector<int> checkpoints = IntList("--checkpoints", flags.at("--checkpoints"));
  int trials = IntList("--trials", flags.at("--trials")).at(0);
  for (int c : checkpoints) trials = std::max(trials, c);
  const std::vector<std::string> wanted = SplitList(flags.at("--functions"));
  const std::vector<std::string> samplers = SplitList(flags.at("--samplers"));
  for (const Function& fn : Functions()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), fn.name) == wanted.end()) {
      continue;
    }
    for (const std::string& kind : samplers) {
      for (int seed = 0; seed < seeds; ++seed) {
        const std::vector<double> best = RunStudy(fn, kind, static_cast<uint64_t>(seed), trials);
        std::printf(
            "{\"mode\":\"quality\",\"function\":\"%s\",\"sampler\":\"%s\",\"seed\":%d,"
            "\"best\":{",
            fn.name.c_str(), kind.c_str(), seed);
        for (size_t i = 0; i < checkpoints.size(); ++i) {
          std::printf("%s\"%d\":%.17g", i ? "," : "", checkpoints[i],
                      best[static_cast<size_t>(checkpoints[i] - 1)]);
        }
        std::printf("}}\n");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

// CPU time of this process: on a shared machine wall time also counts other processes' turns.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int Speed(const std::map<std::string, std::string>& flags) {
  const std::vector<int> sizes = IntList("--history", flags.at("--history"));
  const int repeats = IntList("--repeats", flags.at("--repeats")).at(0);
  const std::vector<std::string> samplers = SplitList(flags.at("--samplers"));
  const int n_params = 5;
  SearchSpace space = Box("x", n_params, 0, 1);
  for (int n : sizes) {
    // History: n random COMPLETE trials of a shifted sphere, made by the random sampler.
    std::vector<model::TrialRecord> history;
    sampler::StudyView view{config::Direction::kMinimize, &space, &history};
    auto random = MakeOrDie("random", space, 12345);
    for (int i = 0; i < n; ++i) {
      ParamValues v = *sampler::SampleParams(*random, view, i);
      double f = 0;
      for (const auto& [name, x] : v) f += (x - 0.3) * (x - 0.3);
      history.push_back(Complete(i, space, v, f));
    }
    for (const std::string& kind : samplers) {
      auto s = MakeOrDie(kind, space, 7);
      // One untimed call warms caches and the allocator.
      if (!sampler::SampleParams(*s, view, n).ok()) return 1;
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = CpuSeconds();
      for (int r = 0; r < repeats; ++r) {
        auto values = sampler::SampleParams(*s, view, n + r);
        if (!values.ok()) return 1;
      }
      const double cpu = CpuSeconds() - cpu_start;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf(
          "{\"mode\":\"speed\",\"sampler\":\"%s\",\"history\":%d,\"params\":%d,"
          "\"repeats\":%d,\"ms_per_suggestion\":%.6g,\"cpu_ms_per_suggestion\":%.6g}\n",
          kind.c_str(), n, n_params, repeats, 1e3 * seconds / repeats, 1e3 * cpu / repeats);
      std::fflush(stdout);
    }
  }
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: triald-bench-samplers quality [--seeds N] [--trials N] [--checkpoints A,B]"
               " [--functions F,...] [--samplers S,...]\n"
               "       triald-bench-samplers speed [--history N,...] [--repeats N]"
               " [--samplers S,...]\n");
  return 2;
}

int Main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string mode = argv[1];
  std::map<std::string, std::string> flags = {
      {"--seeds", "10"},   {"--trials", "100"}, {"--checkpoints", "30,100"},
      {"--functions", ""}, {"--samplers", ""},  {"--history", "100,1000,5000"},
      {"--repeats", "20"},
  };
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flags.count(flag) == 0 || i + 1 >= argc) {
      std::fprintf(stderr, "triald-bench-samplers: unknown flag or missing value: %s\n",
                   flag.c_str());
      return Usage();
    }
    flags[flag] = argv[++i];
  }
  if (mode == "quality") {
    if (flags["--samplers"].empty()) flags["--samplers"] = "tpe,random";
    return Quality(flags);
  }
  if (mode == "speed") {
    if (flags["--samplers"].empty()) flags["--samplers"] = "tpe";
    return Speed(flags);
  }
  return Usage();
}

}  // namespace
}  // namespace triald::bench

int main(int argc, char** argv) { return triald::bench::Main(argc, argv); }
