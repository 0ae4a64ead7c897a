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
//   triald-bench-samplers trace [--seeds N] [--trials N] [--functions F,...] [--samplers tpe]
//     {"mode":"trace","function":F,"sampler":S,"seed":s,"trial":n,"params":{...},"value":v}
//     every trial of every study (internal values: a categorical's choice index), to look into
//     a run or to check that the two sides' functions agree.
//
//   triald-bench-samplers speed [--history 100,1000,5000] [--repeats N] [--samplers tpe]
//     {"mode":"speed","sampler":S,"history":n,"params":5,"repeats":r,"ms_per_suggestion":x,
//      "cpu_ms_per_suggestion":y}
//     wall and CPU time of one SampleParams() call with n random COMPLETE trials of 5 floats as
//     history.
//
//   triald-bench-samplers conditional [--seeds N] [--trials N] [--checkpoints 30,100]
//                                     [--samplers tpe-group,tpe,random]
//     {"mode":"conditional","sampler":S,"seed":s,"best":{"30":v,"100":v}}
//     the define-by-run benchmark: an optimizer choice whose three branches have their own
//     parameters and their own best value, driven as the daemon drives a python objective
//     (StartTrial() at the trial's start, Suggest() for each parameter the objective asks for).
//     tpe-group is TPE with group = true.
//
//   triald-bench-samplers dynamic-speed [--history 100,1000] [--repeats N]
//     {"mode":"dynamic-speed","sampler":"tpe-group","history":n,"params":5,"repeats":r,
//      "ms_per_trial":x,"cpu_ms_per_trial":y,"ms_per_suggest":x/5,"cpu_ms_per_suggest":y/5}
//     one define-by-run trial (StartTrial() plus 5 Suggest() calls) with n random COMPLETE trials
//     of 5 suggested floats as history: the sampler's share of an answered suggest.
//
//   triald-bench-samplers constrained [--seeds N] [--trials N] [--checkpoints 30,100]
//                                     [--functions cquadratic4,cbranin]
//     {"mode":"constrained","function":F,"sampler":"tpe","seed":s,"best":{"30":v,"100":v},
//      "feasible":{"30":k,"100":k}}
//     scripts/bench_constrained.py: TPE (default options) on two constrained functions, each
//     trial reporting its constraints as a worker would; best feasible value so far (null while
//     none) and the number of feasible trials at each checkpoint.
//
//   triald-bench-samplers mo-speed [--history 1000] [--repeats N] [--objectives 2,3]
//     {"mode":"mo-speed","sampler":"tpe","objectives":m,"history":n,"params":5,"repeats":r,
//      "ms_per_suggestion":x,"cpu_ms_per_suggestion":y}
//     one SampleParams() of multi-objective TPE with n COMPLETE trials of 5 floats (random
//     points of DTLZ2 with m objectives) as history.
//
//   triald-bench-samplers multiobjective [--seeds N] [--checkpoints 100,300]
//                                        [--functions zdt1,zdt2,dtlz2] [--samplers nsga2]
//     {"mode":"multiobjective","function":F,"sampler":S,"seed":s,"reference":[r...],
//      "hypervolume":{"100":v,"300":v}}
//     the hypervolume (pareto::Hypervolume) of the first N trials' objective values at each
//     checkpoint, the sampler seeing a study with several directions (all minimised).
//
//   triald-bench-samplers hypervolume
//     reads lines "r1 r2 ... | a1 a2 ... | b1 b2 ... | ..." (the reference point, then the
//     points) from stdin and prints each set's hypervolume (pareto::Hypervolume) on a line: the
//     same code measures Optuna's fronts in scripts/bench_multiobjective.py.
//
//   triald-bench-samplers gp [--seeds N] [--checkpoints 20,40,60] --functions F,...
//                            [--samplers gp,tpe] [--parallel 1,4]
//     {"mode":"gp","function":F,"sampler":S,"parallel":p,"seed":s,"seconds":t,
//      "best":{"20":v,"40":v,"60":v}}
//     scripts/bench_gp.py: studies of as many trials as the last checkpoint, p trials in flight
//     (asked at once, the oldest told first, as in cmaes mode); F is any function of quality
//     mode or of constrained mode (then the best feasible value, null while none).
//
//   triald-bench-samplers cmaes [--seeds N] [--trials N] [--functions rosenbrock5,ackley5]
//                               [--parallel 1,4] [--history 1000] [--repeats N]
//     {"mode":"cmaes","function":F,"parallel":p,"seed":s,"best":v}
//     kind = "cmaes" studies of N trials (default 200): with parallel p, p trials are asked at
//     once and each is told when it finishes (the oldest first), then one more is asked, as the
//     daemon does with parallelism p. Then, for each history size n:
//     {"mode":"cmaes-speed","history":n,"params":5,"repeats":r,"ms_per_suggestion":x,
//      "cpu_ms_per_suggestion":y}
//     one SampleParams() after n trials of a cmaes study on a 5-d sphere (the replay included).
//
// The objective functions are defined identically in scripts/bench_search.py (the constrained
// ones in scripts/bench_constrained.py, the multi-objective ones in
// scripts/bench_multiobjective.py); keep them in step.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/pareto.h"
#include "daemon/sampler/sampler.h"

namespace triald::bench {
namespace {

using config::Distribution;
using config::ParamSpec;
using config::ParamType;
using config::ParamValues;
using config::SearchSpace;
namespace pareto = sampler::pareto;

constexpr double kPi = 3.14159265358979323846;

Distribution Float(double low, double high) {
  Distribution d;
  d.type = ParamType::kFloat;
  d.low = low;
  d.high = high;
  return d;
}

Distribution Int(double low, double high, double step = 1) {
  Distribution d;
  d.type = ParamType::kInt;
  d.low = low;
  d.high = high;
  d.step = step;
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

Distribution LogFloatDist(double low, double high) {
  Distribution d = Float(low, high);
  d.log = true;
  return d;
}

Distribution LogIntDist(double low, double high) {
  Distribution d = Int(low, high);
  d.log = true;
  return d;
}

// valley6's rotation: the orthonormal matrix of a Householder reflection about
// u = (1, 2, 3, 4, 5, 6) / |u|, I - 2 u u^T (a full rotation of every axis, simple to repeat).
double ValleyRotation(int i, int j) {
  const double norm2 = 1 + 4 + 9 + 16 + 25 + 36;
  return (i == j ? 1.0 : 0.0) - 2.0 * (i + 1) * (j + 1) / norm2;
}

// The Hartmann family over D dimensions (its A and P), Rosenbrock and Ackley in any dimension.
template <int D>
double Hartmann(const std::vector<double>& x, const double (&a)[4][D], const double (&p)[4][D]) {
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < D; ++j) inner += a[i][j] * (x[j] - p[i][j]) * (x[j] - p[i][j]);
    sum += alpha[i] * std::exp(-inner);
  }
  return -sum;
}

double Rosenbrock(const std::vector<double>& x) {
  double sum = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
    sum += 100 * a * a + b * b;
  }
  return sum;
}

double Ackley(const std::vector<double>& x) {
  double sq = 0, cs = 0;
  for (double xi : x) {
    sq += xi * xi;
    cs += std::cos(2 * kPi * xi);
  }
  const double n = static_cast<double>(x.size());
  return -20 * std::exp(-0.2 * std::sqrt(sq / n)) - std::exp(cs / n) + 20 + std::exp(1.0);
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
                  static const double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                                 {0.05, 10, 17, 0.1, 8, 14},
                                                 {3, 3.5, 1.7, 10, 17, 8},
                                                 {17, 8, 0.05, 10, 0.1, 14}};
                  static const double p[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
                  return Hartmann(Coords(v, "x", 6), a, p);
                }});
  fs.push_back({"rosenbrock5", Box("x", 5, -5, 10),
                [](const ParamValues& v) { return Rosenbrock(Coords(v, "x", 5)); }});
  fs.push_back({"ackley5", Box("x", 5, -32.768, 32.768),
                [](const ParamValues& v) { return Ackley(Coords(v, "x", 5)); }});
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
  // Widened set: functions of other characters than the five above.
  fs.push_back({"rastrigin8", Box("x", 8, -5.12, 5.12), [](const ParamValues& v) {
                  // Separable, a regular grid of local minima; 0 at the origin.
                  double sum = 10.0 * 8;
                  for (double xi : Coords(v, "x", 8)) sum += xi * xi - 10 * std::cos(2 * kPi * xi);
                  return sum;
                }});
  fs.push_back({"schwefel4", Box("x", 4, -500, 500), [](const ParamValues& v) {
                  // Separable and deceptive: the best minimum (0, at x = 420.97 in every
                  // coordinate) lies far from the second best, near the edge of the box.
                  double sum = 418.9828872724338 * 4;
                  for (double xi : Coords(v, "x", 4)) sum -= xi * std::sin(std::sqrt(std::abs(xi)));
                  return sum;
                }});
  fs.push_back({"valley6", Box("x", 6, -2, 2), [](const ParamValues& v) {
                  // A narrow curved valley along no axis: rotate, then bend the first
                  // coordinate's axis into a parabola; 0 at the origin.
                  const std::vector<double> x = Coords(v, "x", 6);
                  std::vector<double> y(6, 0.0);
                  for (int i = 0; i < 6; ++i) {
                    for (int j = 0; j < 6; ++j) y[i] += ValleyRotation(i, j) * x[j];
                  }
                  double sum = y[0] * y[0];
                  for (int i = 1; i < 6; ++i) {
                    const double d = y[i] - 0.5 * y[0] * y[0];
                    sum += 100 * d * d;
                  }
                  return sum;
                }});
  fs.push_back({"plateau4", Box("x", 4, 0, 1), [](const ParamValues& v) {
                  // Flat (1) everywhere but in a basin of radius 0.25 around c; many trials tie.
                  static const double c[4] = {0.7, 0.2, 0.6, 0.35};
                  const std::vector<double> x = Coords(v, "x", 4);
                  double r2 = 0;
                  for (int i = 0; i < 4; ++i) r2 += (x[i] - c[i]) * (x[i] - c[i]);
                  return std::min(1.0, r2 / (0.25 * 0.25));
                }});
  // scripts/bench_gp.py's set (with branin and hartmann6): small budgets, low dimensions.
  fs.push_back(
      {"hartmann3", Box("x", 3, 0, 1), [](const ParamValues& v) {
         static const double a[4][3] = {{3, 10, 30}, {0.1, 10, 35}, {3, 10, 30}, {0.1, 10, 35}};
         static const double p[4][3] = {{0.3689, 0.1170, 0.2673},
                                        {0.4699, 0.4387, 0.7470},
                                        {0.1091, 0.8732, 0.5547},
                                        {0.03815, 0.5743, 0.8828}};
         return Hartmann(Coords(v, "x", 3), a, p);
       }});
  fs.push_back({"logrosenbrock4", Box("x", 4, -2.048, 2.048), [](const ParamValues& v) {
                  // Rosenbrock with its output log-scaled: log(1 + f), 0 at (1, 1, 1, 1).
                  return std::log1p(Rosenbrock(Coords(v, "x", 4)));
                }});
  fs.push_back({"ackley4", Box("x", 4, -32.768, 32.768),
                [](const ParamValues& v) { return Ackley(Coords(v, "x", 4)); }});
  fs.push_back({"lrsweep",
                {{"lr", LogFloatDist(1e-5, 1e-1)},
                 {"warmup", Int(0, 2000, 100)},
                 {"weight_decay", LogFloatDist(1e-6, 1e-1)}},
                [](const ParamValues& v) {
                  // A validation loss shaped like a fine-tuning sweep: a sharp optimum in log
                  // lr near 3e-4 that moves up with warm-up (a high lr needs warm-up, and
                  // diverges without it), a broad one in log weight decay, and noise (a
                  // deterministic function of the parameters, so both sides see the same).
                  const double l = std::log10(v.at("lr"));
                  const double w = v.at("warmup") / 1000.0;
                  const double d = std::log10(v.at("weight_decay")) + 2.5;
                  const double centre = -3.5 + 0.6 * w;
                  const double over = std::max(0.0, l - centre - 0.5);
                  const double noise = 0.02 * std::sin(1e4 * (l + 3.1 * w + 1.7 * d));
                  return 1.8 + 0.5 * (l - centre) * (l - centre) + 2.0 * over * over +
                         0.03 * d * d + 0.05 * (w - 0.8) * (w - 0.8) + noise;
                }});
  fs.push_back({"logscale5",
                {{"lr", LogFloatDist(1e-6, 1)},
                 {"wd", LogFloatDist(1e-8, 1e-1)},
                 {"eps", LogFloatDist(1e-10, 1e-3)},
                 {"batch", LogIntDist(8, 1024)},
                 {"dropout", Float(0, 0.6)}},
                [](const ParamValues& v) {
                  // Log-scale parameters as a training run has them: a sharp optimum in log lr,
                  // a broad one in log weight decay, eps that hardly matters, a log int.
                  const double lr = std::log10(v.at("lr")) + 2.7;
                  const double wd = std::log10(v.at("wd")) + 4.5;
                  const double eps = std::log10(v.at("eps")) + 8;
                  const double batch = std::log2(v.at("batch")) - 6;
                  const double drop = v.at("dropout") - 0.15;
                  return 2 * lr * lr + 0.2 * wd * wd + 0.01 * eps * eps + 0.3 * batch * batch +
                         5 * drop * drop + 0.5 * lr * batch;
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
// With `trace`, every trial is printed as it is evaluated.
std::vector<double> RunStudy(const Function& fn, const std::string& kind, uint64_t seed, int trials,
                             bool trace = false) {
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
    if (trace) {
      std::printf(
          "{\"mode\":\"trace\",\"function\":\"%s\",\"sampler\":\"%s\",\"seed\":%llu,"
          "\"trial\":%d,\"params\":{",
          fn.name.c_str(), kind.c_str(), static_cast<unsigned long long>(seed), n);
      const char* sep = "";
      for (const ParamSpec& p : fn.space) {
        std::printf("%s\"%s\":%.17g", sep, p.name.c_str(), values->at(p.name));
        sep = ",";
      }
      std::printf("},\"value\":%.17g}\n", v);
    }
    history.push_back(Complete(n, fn.space, *values, v));
    best = std::min(best, v);
    best_so_far.push_back(best);
  }
  return best_so_far;
}

int Trace(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const int trials = IntList("--trials", flags.at("--trials")).at(0);
  const std::vector<std::string> wanted = SplitList(flags.at("--functions"));
  for (const Function& fn : Functions()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), fn.name) == wanted.end()) {
      continue;
    }
    for (const std::string& kind : SplitList(flags.at("--samplers"))) {
      for (int seed = 0; seed < seeds; ++seed) {
        RunStudy(fn, kind, static_cast<uint64_t>(seed), trials, /*trace=*/true);
      }
    }
  }
  std::fflush(stdout);
  return 0;
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

// ---------------------------------------------------------------------------------------------
// Define-by-run.

std::unique_ptr<sampler::Sampler> MakeDynamicOrDie(const std::string& label, uint64_t seed) {
  config::SamplerConfig config;
  config.kind = label == "tpe-group" ? "tpe" : label;
  config.seed = seed;
  config.seed_given = true;
  config.tpe.group = label == "tpe-group";
  auto sampler = sampler::MakeSampler(config, {});
  if (!sampler.ok()) {
    std::fprintf(stderr, "triald-bench-samplers: %s\n", sampler.status().message().c_str());
    std::exit(1);
  }
  return std::move(sampler).value();
}

// One define-by-run trial: the trial is in the history (RUNNING) while it asks, with the
// parameters answered so far, as the scheduler keeps it.
class DynamicTrial {
 public:
  DynamicTrial(sampler::Sampler& s, std::vector<model::TrialRecord>& history)
      : sampler_(s), history_(history), view_{config::Direction::kMinimize, &kNoSpace, &history} {
    model::TrialRecord t;
    t.number = static_cast<int>(history.size());
    t.state = model::TrialState::kRunning;
    history.push_back(t);
    auto started = sampler::StartTrial(s, view_, t.number);
    if (!started.ok()) Die(started.status().message());
    sample_ = std::move(started).value();
  }

  double Ask(const std::string& name, const Distribution& dist) {
    auto v = sampler::Suggest(sampler_, view_, sample_, {name, dist});
    if (!v.ok()) Die(v.status().message());
    history_.back().params[name] = {*v, dist};
    return *v;
  }

  void Finish(double value) {
    history_.back().state = model::TrialState::kComplete;
    history_.back().value = value;
  }

 private:
  static void Die(const std::string& message) {
    std::fprintf(stderr, "triald-bench-samplers: %s\n", message.c_str());
    std::exit(1);
  }
  static const SearchSpace kNoSpace;

  sampler::Sampler& sampler_;
  std::vector<model::TrialRecord>& history_;
  sampler::StudyView view_;
  sampler::TrialSample sample_;
};

const SearchSpace DynamicTrial::kNoSpace;

Distribution LogFloat(double low, double high) {
  Distribution d = Float(low, high);
  d.log = true;
  return d;
}

Distribution LogInt(double low, double high) {
  Distribution d = Int(low, high);
  d.log = true;
  return d;
}

// The conditional benchmark; scripts/bench_search.py defines it identically. An optimizer choice
// with a learning rate every branch shares (each branch wants its own) and parameters of its
// own: the best value of sgd is 0 (momentum 0.9 with nesterov, lr 10^-1.5), of rmsprop 0.1, of
// adam 0.2.
double ConditionalObjective(DynamicTrial& t) {
  const int optimizer =
      static_cast<int>(t.Ask("optimizer", Categorical({"adam", "sgd", "rmsprop"})));
  const double lr = std::log10(t.Ask("lr", LogFloat(1e-5, 1e-1)));
  if (optimizer == 0) {
    const double beta1 = t.Ask("beta1", Float(0.5, 0.999));
    const double wd = std::log10(t.Ask("weight_decay", LogFloat(1e-6, 1e-2)));
    return 0.2 + (lr + 3.5) * (lr + 3.5) / 4 + 10 * (beta1 - 0.9) * (beta1 - 0.9) +
           (wd + 4) * (wd + 4) / 16;
  }
  if (optimizer == 1) {
    const double momentum = t.Ask("momentum", Float(0, 0.99));
    const double nesterov = t.Ask("nesterov", Categorical({"true", "false"}));
    return (lr + 1.5) * (lr + 1.5) / 4 + 2 * (momentum - 0.9) * (momentum - 0.9) + 0.1 * nesterov;
  }
  const double rho = t.Ask("rho", Float(0.5, 0.99));
  const double units = std::log2(t.Ask("units", LogInt(8, 256)));
  return 0.1 + (lr + 2.5) * (lr + 2.5) / 4 + 4 * (rho - 0.9) * (rho - 0.9) +
         (units - 6) * (units - 6) / 20;
}

int Conditional(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const std::vector<int> checkpoints = IntList("--checkpoints", flags.at("--checkpoints"));
  int trials = IntList("--trials", flags.at("--trials")).at(0);
  for (int c : checkpoints) trials = std::max(trials, c);
  for (const std::string& label : SplitList(flags.at("--samplers"))) {
    for (int seed = 0; seed < seeds; ++seed) {
      auto s = MakeDynamicOrDie(label, static_cast<uint64_t>(seed));
      std::vector<model::TrialRecord> history;
      std::vector<double> best_so_far;
      double best = INFINITY;
      for (int n = 0; n < trials; ++n) {
        DynamicTrial t(*s, history);
        const double v = ConditionalObjective(t);
        t.Finish(v);
        best = std::min(best, v);
        best_so_far.push_back(best);
      }
      std::printf("{\"mode\":\"conditional\",\"sampler\":\"%s\",\"seed\":%d,\"best\":{",
                  label.c_str(), seed);
      for (size_t i = 0; i < checkpoints.size(); ++i) {
        std::printf("%s\"%d\":%.17g", i ? "," : "", checkpoints[i],
                    best_so_far[static_cast<size_t>(checkpoints[i] - 1)]);
      }
      std::printf("}}\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

int DynamicSpeed(const std::map<std::string, std::string>& flags) {
  const std::vector<int> sizes = IntList("--history", flags.at("--history"));
  const int repeats = IntList("--repeats", flags.at("--repeats")).at(0);
  const int n_params = 5;
  const std::string label = "tpe-group";
  for (int n : sizes) {
    // History: n COMPLETE trials of 5 suggested floats drawn at random, a shifted sphere.
    std::vector<model::TrialRecord> history;
    auto random = MakeDynamicOrDie("random", 12345);
    for (int i = 0; i < n; ++i) {
      DynamicTrial t(*random, history);
      double f = 0;
      for (int j = 0; j < n_params; ++j) {
        const double x = t.Ask("x" + std::to_string(j), Float(0, 1));
        f += (x - 0.3) * (x - 0.3);
      }
      t.Finish(f);
    }
    auto s = MakeDynamicOrDie(label, 7);
    // Each timed trial is taken back out of the history, so every one sees the same n trials.
    auto one_trial = [&]() {
      DynamicTrial t(*s, history);
      for (int j = 0; j < n_params; ++j) t.Ask("x" + std::to_string(j), Float(0, 1));
      history.pop_back();
    };
    one_trial();  // untimed: warms caches and the allocator
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    for (int r = 0; r < repeats; ++r) one_trial();
    const double cpu = (CpuSeconds() - cpu_start) / repeats;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
    std::printf(
        "{\"mode\":\"dynamic-speed\",\"sampler\":\"%s\",\"history\":%d,\"params\":%d,"
        "\"repeats\":%d,\"ms_per_trial\":%.6g,\"cpu_ms_per_trial\":%.6g,"
        "\"ms_per_suggest\":%.6g,\"cpu_ms_per_suggest\":%.6g}\n",
        label.c_str(), n, n_params, repeats, 1e3 * wall, 1e3 * cpu, 1e3 * wall / n_params,
        1e3 * cpu / n_params);
    std::fflush(stdout);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Constraints and several objectives.

// A constrained function: value and constraint values (feasible when all <= 0). Defined
// identically in scripts/bench_constrained.py.
struct ConstrainedFunction {
  std::string name;
  SearchSpace space;
  std::function<double(const ParamValues&, std::vector<double>*)> f;
};

std::vector<ConstrainedFunction> ConstrainedFunctions() {
  std::vector<ConstrainedFunction> fs;
  // sum (x_i - 1)^2 on [-3, 3]^4 with sum x_i <= 1 and x3 >= 0.5: best 7/3 at
  // (1/6, 1/6, 1/6, 1/2); about a quarter of the box is feasible.
  fs.push_back(
      {"cquadratic4", Box("x", 4, -3, 3), [](const ParamValues& v, std::vector<double>* c) {
         const std::vector<double> x = Coords(v, "x", 4);
         double f = 0, sum = 0;
         for (double xi : x) {
           f += (xi - 1) * (xi - 1);
           sum += xi;
         }
         *c = {sum - 1, 0.5 - x[3]};
         return f;
       }});
  // Branin with x0 x1 >= 40 and x0 + x1 <= 18: every global minimum of Branin is infeasible;
  // best 2.6849 near (9.78, 4.09); about 15% of the box is feasible.
  fs.push_back({"cbranin",
                {{"x0", Float(-5, 10)}, {"x1", Float(0, 15)}},
                [](const ParamValues& v, std::vector<double>* c) {
                  const double x1 = v.at("x0"), x2 = v.at("x1");
                  const double b = 5.1 / (4 * kPi * kPi), cc = 5 / kPi, t = 1 / (8 * kPi);
                  const double q = x2 - b * x1 * x1 + cc * x1 - 6;
                  *c = {(40 - x1 * x2) / 40, (x1 + x2 - 18) / 10};
                  return q * q + 10 * (1 - t) * std::cos(x1) + 10;
                }});
  return fs;
}

int Constrained(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const std::vector<int> checkpoints = IntList("--checkpoints", flags.at("--checkpoints"));
  int trials = IntList("--trials", flags.at("--trials")).at(0);
  for (int c : checkpoints) trials = std::max(trials, c);
  const std::vector<std::string> wanted = SplitList(flags.at("--functions"));
  for (const ConstrainedFunction& fn : ConstrainedFunctions()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), fn.name) == wanted.end()) {
      continue;
    }
    for (int seed = 0; seed < seeds; ++seed) {
      auto s = MakeOrDie("tpe", fn.space, static_cast<uint64_t>(seed));
      std::vector<model::TrialRecord> history;
      sampler::StudyView view{config::Direction::kMinimize, &fn.space, &history};
      std::vector<double> best_so_far;
      std::vector<int> feasible_so_far;
      double best = INFINITY;
      int feasible = 0;
      for (int n = 0; n < trials; ++n) {
        auto values = sampler::SampleParams(*s, view, n);
        if (!values.ok()) {
          std::fprintf(stderr, "triald-bench-samplers: trial %d: %s\n", n,
                       values.status().message().c_str());
          return 1;
        }
        std::vector<double> constraints;
        const double v = fn.f(*values, &constraints);
        model::TrialRecord t = Complete(n, fn.space, *values, v);
        t.values = {v};
        t.constraints = constraints;
        if (t.Feasible()) {
          ++feasible;
          best = std::min(best, v);
        }
        history.push_back(std::move(t));
        best_so_far.push_back(best);
        feasible_so_far.push_back(feasible);
      }
      std::printf(
          "{\"mode\":\"constrained\",\"function\":\"%s\",\"sampler\":\"tpe\","
          "\"seed\":%d,\"best\":{",
          fn.name.c_str(), seed);
      for (size_t i = 0; i < checkpoints.size(); ++i) {
        const double b = best_so_far[static_cast<size_t>(checkpoints[i] - 1)];
        if (std::isfinite(b)) {
          std::printf("%s\"%d\":%.17g", i ? "," : "", checkpoints[i], b);
        } else {
          std::printf("%s\"%d\":null", i ? "," : "", checkpoints[i]);
        }
      }
      std::printf("},\"feasible\":{");
      for (size_t i = 0; i < checkpoints.size(); ++i) {
        std::printf("%s\"%d\":%d", i ? "," : "", checkpoints[i],
                    feasible_so_far[static_cast<size_t>(checkpoints[i] - 1)]);
      }
      std::printf("}}\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

// DTLZ2 with m objectives over n variables in [0, 1] (minimised).
std::vector<double> Dtlz2(const std::vector<double>& x, int m) {
  double g = 0;
  for (size_t i = static_cast<size_t>(m - 1); i < x.size(); ++i) g += (x[i] - 0.5) * (x[i] - 0.5);
  std::vector<double> f(static_cast<size_t>(m), 1 + g);
  for (int k = 0; k < m; ++k) {
    for (int i = 0; i < m - 1 - k; ++i) f[k] *= std::cos(x[i] * kPi / 2);
    if (k > 0) f[k] *= std::sin(x[m - 1 - k] * kPi / 2);
  }
  return f;
}

int MoSpeed(const std::map<std::string, std::string>& flags) {
  const std::vector<int> sizes = IntList("--history", flags.at("--history"));
  const int repeats = IntList("--repeats", flags.at("--repeats")).at(0);
  const int n_params = 5;
  SearchSpace space = Box("x", n_params, 0, 1);
  for (int m : IntList("--objectives", flags.at("--objectives"))) {
    const std::vector<config::Direction> directions(static_cast<size_t>(m),
                                                    config::Direction::kMinimize);
    for (int n : sizes) {
      std::vector<model::TrialRecord> history;
      sampler::StudyView view{config::Direction::kMinimize, &space, &history, directions};
      auto random = MakeOrDie("random", space, 12345);
      for (int i = 0; i < n; ++i) {
        ParamValues v = *sampler::SampleParams(*random, view, i);
        model::TrialRecord t = Complete(i, space, v, 0);
        t.value.reset();
        t.values = Dtlz2(Coords(v, "x", n_params), m);
        history.push_back(std::move(t));
      }
      auto s = MakeOrDie("tpe", space, 7);
      if (!sampler::SampleParams(*s, view, n).ok()) return 1;  // untimed warm-up
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = CpuSeconds();
      for (int r = 0; r < repeats; ++r) {
        if (!sampler::SampleParams(*s, view, n + r).ok()) return 1;
      }
      const double cpu = CpuSeconds() - cpu_start;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf(
          "{\"mode\":\"mo-speed\",\"sampler\":\"tpe\",\"objectives\":%d,\"history\":%d,"
          "\"params\":%d,\"repeats\":%d,\"ms_per_suggestion\":%.6g,"
          "\"cpu_ms_per_suggestion\":%.6g}\n",
          m, n, n_params, repeats, 1e3 * seconds / repeats, 1e3 * cpu / repeats);
      std::fflush(stdout);
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Several objectives: ZDT1, ZDT2 (10 variables, 2 objectives) and DTLZ2 (8 variables, 3
// objectives), all minimised over [0, 1]^n. scripts/bench_multiobjective.py defines them
// identically. The reference point is 1.1 times the largest value each objective takes on the
// box (ZDT: f1 <= 1, f2 <= g <= 10; DTLZ2: f <= 1 + g <= 2.5), so every trial counts.

struct MultiFunction {
  std::string name;
  SearchSpace space;
  pareto::Point reference;
  std::function<std::vector<double>(const ParamValues&)> f;
};

double ZdtG(const std::vector<double>& x) {
  double sum = 0;
  for (size_t i = 1; i < x.size(); ++i) sum += x[i];
  return 1 + 9 * sum / static_cast<double>(x.size() - 1);
}

std::vector<MultiFunction> MultiFunctions() {
  std::vector<MultiFunction> fs;
  fs.push_back({"zdt1", Box("x", 10, 0, 1), {1.1, 11.0}, [](const ParamValues& v) {
                  const std::vector<double> x = Coords(v, "x", 10);
                  const double g = ZdtG(x);
                  return std::vector<double>{x[0], g * (1 - std::sqrt(x[0] / g))};
                }});
  fs.push_back({"zdt2", Box("x", 10, 0, 1), {1.1, 11.0}, [](const ParamValues& v) {
                  const std::vector<double> x = Coords(v, "x", 10);
                  const double g = ZdtG(x);
                  return std::vector<double>{x[0], g * (1 - (x[0] / g) * (x[0] / g))};
                }});
  fs.push_back({"dtlz2", Box("x", 8, 0, 1), {2.75, 2.75, 2.75}, [](const ParamValues& v) {
                  const std::vector<double> x = Coords(v, "x", 8);
                  double g = 0;
                  for (size_t i = 2; i < x.size(); ++i) g += (x[i] - 0.5) * (x[i] - 0.5);
                  const double a = x[0] * kPi / 2, b = x[1] * kPi / 2;
                  return std::vector<double>{(1 + g) * std::cos(a) * std::cos(b),
                                             (1 + g) * std::cos(a) * std::sin(b),
                                             (1 + g) * std::sin(a)};
                }});
  return fs;
}

int MultiObjective(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const std::vector<int> checkpoints = IntList("--checkpoints", flags.at("--checkpoints"));
  int trials = 0;
  for (int c : checkpoints) trials = std::max(trials, c);
  const std::vector<std::string> wanted = SplitList(flags.at("--functions"));
  const std::vector<std::string> samplers = SplitList(flags.at("--samplers"));
  for (const MultiFunction& fn : MultiFunctions()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), fn.name) == wanted.end()) {
      continue;
    }
    for (const std::string& kind : samplers) {
      for (int seed = 0; seed < seeds; ++seed) {
        auto s = MakeOrDie(kind, fn.space, static_cast<uint64_t>(seed));
        std::vector<model::TrialRecord> history;
        sampler::StudyView view;
        view.space = &fn.space;
        view.trials = &history;
        view.directions.assign(fn.reference.size(), config::Direction::kMinimize);
        std::vector<pareto::Point> points;
        std::printf(
            "{\"mode\":\"multiobjective\",\"function\":\"%s\",\"sampler\":\"%s\","
            "\"seed\":%d,\"reference\":[",
            fn.name.c_str(), kind.c_str(), seed);
        for (size_t k = 0; k < fn.reference.size(); ++k) {
          std::printf("%s%.17g", k ? "," : "", fn.reference[k]);
        }
        std::printf("],\"hypervolume\":{");
        size_t next = 0;
        for (int n = 0; n < trials; ++n) {
          auto values = sampler::SampleParams(*s, view, n);
          if (!values.ok()) {
            std::fprintf(stderr, "triald-bench-samplers: %s trial %d: %s\n", kind.c_str(), n,
                         values.status().message().c_str());
            std::exit(1);
          }
          model::TrialRecord t = Complete(n, fn.space, *values, 0);
          t.value.reset();
          t.values = fn.f(*values);
          points.push_back(t.values);
          history.push_back(std::move(t));
          for (size_t i = 0; i < checkpoints.size(); ++i) {
            if (checkpoints[i] != n + 1) continue;
            std::printf("%s\"%d\":%.17g", next++ ? "," : "", checkpoints[i],
                        pareto::Hypervolume(points, fn.reference));
          }
        }
        std::printf("}}\n");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int HypervolumeOfStdin() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<pareto::Point> sets;
    std::stringstream in(line);
    std::string part;
    while (std::getline(in, part, '|')) {
      std::stringstream numbers(part);
      pareto::Point p;
      double x = 0;
      while (numbers >> x) p.push_back(x);
      if (!numbers.eof()) {
        std::fprintf(stderr, "triald-bench-samplers: hypervolume: not a number in \"%s\"\n",
                     part.c_str());
        return 1;
      }
      sets.push_back(std::move(p));
    }
    if (sets.empty() || sets[0].empty()) {
      std::fprintf(stderr, "triald-bench-samplers: hypervolume: no reference point in \"%s\"\n",
                   line.c_str());
      return 1;
    }
    const pareto::Point reference = sets[0];
    sets.erase(sets.begin());
    for (const pareto::Point& p : sets) {
      if (p.size() != reference.size()) {
        std::fprintf(stderr,
                     "triald-bench-samplers: hypervolume: a point of %zu values for a reference "
                     "of %zu\n",
                     p.size(), reference.size());
        return 1;
      }
    }
    std::printf("%.17g\n", pareto::Hypervolume(sets, reference));
  }
  std::fflush(stdout);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// scripts/bench_gp.py: small budgets, in parallel, with constraints.

// One study of `trials` trials with `parallel` in flight (the oldest running trial finishes
// before the next is asked, as the daemon runs parallelism p). Returns, for each n, the best
// feasible value among trials 0..n-1 (NAN while none is feasible).
std::vector<double> RunParallelStudy(
    const SearchSpace& space,
    const std::function<double(const ParamValues&, std::vector<double>*)>& f,
    const std::string& kind, uint64_t seed, int trials, int parallel) {
  auto s = MakeOrDie(kind, space, seed);
  std::vector<model::TrialRecord> history;
  sampler::StudyView view{config::Direction::kMinimize, &space, &history};
  std::vector<double> value_of(static_cast<size_t>(trials), NAN);
  size_t oldest = 0;
  double clock = 0;
  auto finish_oldest = [&] {
    model::TrialRecord& t = history[oldest];
    ParamValues values;
    for (const auto& [name, p] : t.params) values[name] = p.internal;
    std::vector<double> constraints;
    const double v = f(values, &constraints);
    t.state = model::TrialState::kComplete;
    t.value = v;
    t.values = {v};
    t.constraints = constraints;
    t.finished_at = ++clock;
    if (model::Feasible(constraints)) value_of[oldest] = v;
    ++oldest;
  };
  for (int n = 0; n < trials; ++n) {
    if (static_cast<int>(history.size() - oldest) >= parallel) finish_oldest();
    auto values = sampler::SampleParams(*s, view, n);
    if (!values.ok()) {
      std::fprintf(stderr, "triald-bench-samplers: %s trial %d: %s\n", kind.c_str(), n,
                   values.status().message().c_str());
      std::exit(1);
    }
    model::TrialRecord t = Complete(n, space, *values, 0);
    t.state = model::TrialState::kRunning;
    t.value.reset();
    t.created_at = ++clock;
    history.push_back(std::move(t));
  }
  while (oldest < history.size()) finish_oldest();
  std::vector<double> best(value_of.size(), NAN);
  double b = NAN;
  for (size_t i = 0; i < value_of.size(); ++i) {
    if (!std::isnan(value_of[i]) && (std::isnan(b) || value_of[i] < b)) b = value_of[i];
    best[i] = b;
  }
  return best;
}

int Gp(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const std::vector<int> checkpoints = IntList("--checkpoints", flags.at("--checkpoints"));
  int trials = 0;
  for (int c : checkpoints) trials = std::max(trials, c);
  const std::vector<std::string> wanted = SplitList(flags.at("--functions"));
  const std::vector<int> parallel = IntList("--parallel", flags.at("--parallel"));
  struct Named {
    std::string name;
    SearchSpace space;
    std::function<double(const ParamValues&, std::vector<double>*)> f;
  };
  std::vector<Named> all;
  for (const Function& fn : Functions()) {
    all.push_back({fn.name, fn.space,
                   [f = fn.f](const ParamValues& v, std::vector<double>*) { return f(v); }});
  }
  for (const ConstrainedFunction& fn : ConstrainedFunctions())
    all.push_back({fn.name, fn.space, fn.f});
  for (const std::string& name : wanted) {
    const Named* fn = nullptr;
    for (const Named& n : all) fn = n.name == name ? &n : fn;
    if (fn == nullptr) {
      std::fprintf(stderr, "triald-bench-samplers: unknown function %s\n", name.c_str());
      return 2;
    }
    for (int p : parallel) {
      for (const std::string& kind : SplitList(flags.at("--samplers"))) {
        for (int seed = 0; seed < seeds; ++seed) {
          const auto start = std::chrono::steady_clock::now();
          const std::vector<double> best =
              RunParallelStudy(fn->space, fn->f, kind, static_cast<uint64_t>(seed), trials, p);
          const double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::printf(
              "{\"mode\":\"gp\",\"function\":\"%s\",\"sampler\":\"%s\",\"parallel\":%d,"
              "\"seed\":%d,\"seconds\":%.4g,\"best\":{",
              name.c_str(), kind.c_str(), p, seed, seconds);
          for (size_t i = 0; i < checkpoints.size(); ++i) {
            const double v = best[static_cast<size_t>(checkpoints[i] - 1)];
            if (std::isnan(v)) {
              std::printf("%s\"%d\":null", i ? "," : "", checkpoints[i]);
            } else {
              std::printf("%s\"%d\":%.17g", i ? "," : "", checkpoints[i], v);
            }
          }
          std::printf("}}\n");
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// CMA-ES.

// One cmaes study of `trials` trials with `parallel` of them in flight (RunParallelStudy):
// the best value.
double RunCmaesStudy(const Function& fn, uint64_t seed, int trials, int parallel) {
  return RunParallelStudy(
             fn.space, [&fn](const ParamValues& v, std::vector<double>*) { return fn.f(v); },
             "cmaes", seed, trials, parallel)
      .back();
}

int Cmaes(const std::map<std::string, std::string>& flags) {
  const int seeds = IntList("--seeds", flags.at("--seeds")).at(0);
  const int trials = IntList("--trials", flags.at("--trials")).at(0);
  const std::vector<int> parallel = IntList("--parallel", flags.at("--parallel"));
  std::vector<std::string> wanted = SplitList(flags.at("--functions"));
  if (wanted.empty()) wanted = {"rosenbrock5", "ackley5"};
  for (const Function& fn : Functions()) {
    if (std::find(wanted.begin(), wanted.end(), fn.name) == wanted.end()) continue;
    for (int p : parallel) {
      for (int seed = 0; seed < seeds; ++seed) {
        const double best = RunCmaesStudy(fn, static_cast<uint64_t>(seed), trials, p);
        std::printf(
            "{\"mode\":\"cmaes\",\"function\":\"%s\",\"parallel\":%d,\"seed\":%d,"
            "\"best\":%.17g}\n",
            fn.name.c_str(), p, seed, best);
        std::fflush(stdout);
      }
    }
  }
  const int repeats = IntList("--repeats", flags.at("--repeats")).at(0);
  const int n_params = 5;
  const SearchSpace space = Box("x", n_params, 0, 1);
  for (int n : IntList("--history", flags.at("--history"))) {
    // History: a sequential cmaes study of n trials on a shifted sphere.
    auto s = MakeOrDie("cmaes", space, 7);
    std::vector<model::TrialRecord> history;
    sampler::StudyView view{config::Direction::kMinimize, &space, &history};
    for (int i = 0; i < n; ++i) {
      ParamValues v = *sampler::SampleParams(*s, view, i);
      double f = 0;
      for (const auto& [name, x] : v) f += (x - 0.3) * (x - 0.3);
      history.push_back(Complete(i, space, v, f));
      history.back().created_at = 2.0 * i;
      history.back().finished_at = 2.0 * i + 1;
    }
    if (!sampler::SampleParams(*s, view, n).ok()) return 1;  // untimed warm-up
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = CpuSeconds();
    for (int r = 0; r < repeats; ++r) {
      if (!sampler::SampleParams(*s, view, n).ok()) return 1;
    }
    const double cpu = CpuSeconds() - cpu_start;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "{\"mode\":\"cmaes-speed\",\"history\":%d,\"params\":%d,\"repeats\":%d,"
        "\"ms_per_suggestion\":%.6g,\"cpu_ms_per_suggestion\":%.6g}\n",
        n, n_params, repeats, 1e3 * seconds / repeats, 1e3 * cpu / repeats);
    std::fflush(stdout);
  }
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: triald-bench-samplers quality [--seeds N] [--trials N] [--checkpoints A,B]"
               " [--functions F,...] [--samplers S,...]\n"
               "       triald-bench-samplers trace [--seeds N] [--trials N]"
               " [--functions F,...] [--samplers S,...]\n"
               "       triald-bench-samplers speed [--history N,...] [--repeats N]"
               " [--samplers S,...]\n"
               "       triald-bench-samplers conditional [--seeds N] [--trials N]"
               " [--checkpoints A,B] [--samplers tpe-group,tpe,random]\n"
               "       triald-bench-samplers dynamic-speed [--history N,...] [--repeats N]\n"
               "       triald-bench-samplers constrained [--seeds N] [--trials N]"
               " [--checkpoints A,B] [--functions F,...]\n"
               "       triald-bench-samplers mo-speed [--history N,...] [--repeats N]"
               " [--objectives M,...]\n"
               "       triald-bench-samplers multiobjective [--seeds N] [--checkpoints A,B]"
               " [--functions zdt1,zdt2,dtlz2] [--samplers nsga2,...]\n"
               "       triald-bench-samplers hypervolume < \"REF | POINT | POINT ...\" lines\n"
               "       triald-bench-samplers cmaes [--seeds N] [--trials N] [--functions F,...]"
               " [--parallel P,...] [--history N,...] [--repeats N]\n"
               "       triald-bench-samplers gp [--seeds N] [--checkpoints 20,40,60]"
               " --functions F,... [--samplers gp,tpe] [--parallel P,...]\n");
  return 2;
}

int Main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string mode = argv[1];
  std::map<std::string, std::string> flags = {
      {"--seeds", "10"},   {"--trials", "100"},     {"--checkpoints", "30,100"},
      {"--functions", ""}, {"--samplers", ""},      {"--history", "100,1000,5000"},
      {"--repeats", "20"}, {"--objectives", "2,3"}, {"--parallel", "1,4"},
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
  if (mode == "trace") {
    if (flags["--samplers"].empty()) flags["--samplers"] = "tpe";
    return Trace(flags);
  }
  if (mode == "conditional") {
    if (flags["--samplers"].empty()) flags["--samplers"] = "tpe-group";
    return Conditional(flags);
  }
  if (mode == "dynamic-speed") {
    if (flags["--history"] == "100,1000,5000") flags["--history"] = "100,1000";
    return DynamicSpeed(flags);
  }
  if (mode == "constrained") return Constrained(flags);
  if (mode == "mo-speed") {
    if (flags["--history"] == "100,1000,5000") flags["--history"] = "1000";
    return MoSpeed(flags);
  }
  if (mode == "multiobjective") {
    if (flags["--samplers"].empty()) flags["--samplers"] = "nsga2";
    if (flags["--checkpoints"] == "30,100") flags["--checkpoints"] = "100,300";
    return MultiObjective(flags);
  }
  if (mode == "hypervolume") return HypervolumeOfStdin();
  if (mode == "cmaes") {
    if (flags["--trials"] == "100") flags["--trials"] = "200";
    if (flags["--history"] == "100,1000,5000") flags["--history"] = "1000";
    return Cmaes(flags);
  }
  if (mode == "gp") {
    if (flags["--samplers"].empty()) flags["--samplers"] = "gp,tpe";
    if (flags["--checkpoints"] == "30,100") flags["--checkpoints"] = "20,40,60";
    return Gp(flags);
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
