// Pruners: the contract (run against every kind), each kind's decisions on crafted histories,
// worked out by hand from Optuna 3.1's definitions (optuna/pruners/_percentile.py,
// _successive_halving.py, _hyperband.py, _threshold.py, _patient.py) and Optuna 4's
// _wilcoxon.py, the Wilcoxon signed-rank p-values against exact tables and hand-computed normal
// approximations, the factory, and a cross-check that replays simulated studies through Optuna
// itself (scripts/check_pruners_against_optuna.py; wilcoxon, absent from Optuna 3.1, through a
// Python transcription of Optuna 4's pruner and SciPy's test).

#include "daemon/pruner/pruner.h"

#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/pruner/hyperband_pruner.h"
#include "daemon/pruner/percentile_pruner.h"
#include "daemon/pruner/successive_halving_pruner.h"
#include "daemon/pruner/wilcoxon_pruner.h"

namespace triald::pruner {
namespace {

using config::Direction;
using model::TrialRecord;
using model::TrialState;
using Steps = std::map<int64_t, double>;

constexpr Direction kMin = Direction::kMinimize;
constexpr Direction kMax = Direction::kMaximize;
const TrialState kComplete = TrialState::kComplete;
const TrialState kRunning = TrialState::kRunning;
const TrialState kPruned = TrialState::kPruned;
const TrialState kFail = TrialState::kFail;

const std::vector<std::string> kPruners = {"nop",       "median",    "percentile", "asha",
                                           "hyperband", "threshold", "patient",    "wilcoxon"};

std::unique_ptr<Pruner> Make(const config::PrunerConfig& config) {
  auto r = MakePruner(config);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// A pruner of `kind` with its defaults, and for the kinds that need options, the contract's:
// threshold keeps values within +-1e6; patient (patience 0) wraps a median pruner.
std::unique_ptr<Pruner> Make(const std::string& kind) {
  config::PrunerConfig config;
  config.kind = kind;
  if (kind == "threshold") {
    config.lower = -1e6;
    config.upper = 1e6;
  } else if (kind == "patient") {
    config.patience = 0;
    auto median = std::make_shared<config::PrunerConfig>();
    median->kind = "median";
    config.wrapped = median;
  }
  return Make(config);
}

TrialRecord T(int number, TrialState state, Steps intermediate) {
  TrialRecord t;
  t.number = number;
  t.state = state;
  t.intermediate = std::move(intermediate);
  if (state == kComplete && !t.intermediate.empty()) t.value = t.intermediate.rbegin()->second;
  return t;
}

// Asks `pruner` about the last of `trials` (the one that just reported).
bool Decide(Pruner& pruner, const std::vector<TrialRecord>& trials, Direction direction = kMin,
            const std::string& study = "s") {
  REQUIRE(!trials.empty());
  PruneContext context{direction, &trials, &trials.back(), study};
  return pruner.ShouldPrune(context);
}

// `trials` plus a running trial numbered after them with `steps`.
std::vector<TrialRecord> With(std::vector<TrialRecord> trials, Steps steps) {
  int number = static_cast<int>(trials.size());
  trials.push_back(T(number, kRunning, std::move(steps)));
  return trials;
}

// Ten finished trials reporting 0..9 at steps 0..9 (trial i reports i at every step).
std::vector<TrialRecord> History() {
  std::vector<TrialRecord> trials;
  for (int i = 0; i < 10; ++i) {
    Steps steps;
    for (int step = 0; step < 10; ++step) steps[step] = i;
    trials.push_back(T(i, kComplete, steps));
  }
  return trials;
}

// Steps 0..last, all with `value`.
Steps Flat(int last, double value) {
  Steps s;
  for (int step = 0; step <= last; ++step) s[step] = value;
  return s;
}

config::PrunerConfig Percentile(double percentile, int n_startup, int n_warmup = 0,
                                int interval = 1, int n_min = 1) {
  config::PrunerConfig c;
  c.kind = "percentile";
  c.percentile = percentile;
  c.n_startup_trials = n_startup;
  c.n_warmup_steps = n_warmup;
  c.interval_steps = interval;
  c.n_min_trials = n_min;
  return c;
}

config::PrunerConfig Median(int n_startup, int n_warmup = 0, int interval = 1, int n_min = 1) {
  config::PrunerConfig c = Percentile(50, n_startup, n_warmup, interval, n_min);
  c.kind = "median";
  return c;
}

config::PrunerConfig Asha(int min_resource = 1, int reduction_factor = 3,
                          int min_early_stopping_rate = 0, int bootstrap_count = 0) {
  config::PrunerConfig c;
  c.kind = "asha";
  c.min_resource = min_resource;
  c.reduction_factor = reduction_factor;
  c.min_early_stopping_rate = min_early_stopping_rate;
  c.bootstrap_count = bootstrap_count;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Contract: every kind

TEST_CASE("every pruner leaves a trial without intermediate values alone", "[pruner]") {
  const std::string kind = GENERATE(from_range(kPruners));
  INFO("pruner " << kind);
  auto pruner = Make(kind);
  std::vector<TrialRecord> trials = With(History(), {});
  for (Direction d : {kMin, kMax}) CHECK_FALSE(Decide(*pruner, trials, d));
}

TEST_CASE("no pruner stops the trial that is best at every step", "[pruner]") {
  const std::string kind = GENERATE(from_range(kPruners));
  auto pruner = Make(kind);
  for (Direction d : {kMin, kMax}) {
    INFO("pruner " << kind << ", " << config::DirectionName(d));
    std::vector<TrialRecord> trials = With(History(), {});
    for (int step = 0; step < 10; ++step) {
      trials.back().intermediate[step] = d == kMin ? -1.0 : 100.0;
      CHECK_FALSE(Decide(*pruner, trials, d));
    }
  }
}

TEST_CASE(
    "every pruner but nop and patient stops a trial far worse than every other by the last step",
    "[pruner]") {
  const std::string kind = GENERATE(from_range(kPruners));
  for (Direction d : {kMin, kMax}) {
    INFO("pruner " << kind << ", " << config::DirectionName(d));
    auto pruner = Make(kind);
    std::vector<TrialRecord> trials = With(History(), {});
    bool pruned = false;
    for (int step = 0; step < 10 && !pruned; ++step) {
      trials.back().intermediate[step] = d == kMin ? 1e9 : -1e9;
      pruned = Decide(*pruner, trials, d);
    }
    // Patient: a trial whose values do not change has not stopped improving (Optuna's strict
    // comparison), so the wrapped pruner is never asked.
    CHECK(pruned == (kind != "nop" && kind != "patient"));
  }
}

TEST_CASE("nop pruner never prunes, even a trial far worse than the rest", "[pruner]") {
  auto pruner = Make("nop");
  std::vector<TrialRecord> trials = With(History(), {});
  for (int step = 0; step < 10; ++step) {
    trials.back().intermediate[step] = 1e9;
    for (Direction d : {kMin, kMax}) CHECK_FALSE(Decide(*pruner, trials, d));
  }
}

// ---------------------------------------------------------------------------------------------
// Factory

TEST_CASE("MakePruner rejects an unknown kind, naming it and the known ones", "[pruner]") {
  config::PrunerConfig config;
  config.kind = "never";
  auto r = MakePruner(config);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("\"never\""));
  for (const std::string& kind : kPruners) CHECK_THAT(r.status().message(), Catch::Contains(kind));
}

TEST_CASE("MakePruner rejects options outside Optuna's ranges, naming option and value",
          "[pruner]") {
  struct Bad {
    config::PrunerConfig config;
    std::string expect;
  };
  std::vector<Bad> bad;
  bad.push_back({Median(5, 0, 0), "interval_steps = 0"});
  bad.push_back({Median(-1), "n_startup_trials = -1"});
  bad.push_back({Median(5, -2), "n_warmup_steps = -2"});
  bad.push_back({Percentile(25, 5, 0, 1, 0), "n_min_trials = 0"});
  bad.push_back({Percentile(101, 5), "percentile = 101"});
  bad.push_back({Asha(0), "min_resource = 0"});
  bad.push_back({Asha(1, 1), "reduction_factor = 1"});
  bad.push_back({Asha(1, 3, -1), "min_early_stopping_rate = -1"});
  bad.push_back({Asha(1, 3, 0, -1), "bootstrap_count = -1"});
  config::PrunerConfig hb;
  hb.kind = "hyperband";
  hb.min_resource = 3;
  hb.max_resource = 2;
  bad.push_back({hb, "max_resource = 2 is less than min_resource = 3"});
  hb.max_resource = 0;
  hb.bootstrap_count = 2;
  bad.push_back({hb, "bootstrap_count = 2"});
  config::PrunerConfig threshold;
  threshold.kind = "threshold";
  bad.push_back({threshold, "neither lower nor upper"});
  threshold.lower = 2;
  threshold.upper = 1;
  bad.push_back({threshold, "lower = 2 is greater than upper = 1"});
  threshold.upper = 3;
  threshold.interval_steps = 0;
  bad.push_back({threshold, "interval_steps = 0"});
  config::PrunerConfig patient;
  patient.kind = "patient";
  bad.push_back({patient, "patience = -1"});  // not given
  patient.patience = 1;
  patient.min_delta = -0.5;
  bad.push_back({patient, "min_delta = -0.5"});
  patient.min_delta = 0;
  auto bad_wrapped = std::make_shared<config::PrunerConfig>(Median(5, 0, 0));
  patient.wrapped = bad_wrapped;
  bad.push_back({patient, "wrapped: [pruner] interval_steps = 0"});
  config::PrunerConfig wilcoxon;
  wilcoxon.kind = "wilcoxon";
  wilcoxon.p_threshold = 1.5;
  bad.push_back({wilcoxon, "p_threshold = 1.5"});
  wilcoxon.p_threshold = 0.1;
  wilcoxon.n_startup_steps = -1;
  bad.push_back({wilcoxon, "n_startup_steps = -1"});
  for (const Bad& b : bad) {
    auto r = MakePruner(b.config);
    INFO(b.config.kind << ": expecting " << b.expect);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == common::Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(b.expect) && Catch::Contains("expected"));
  }
  // Median is percentile 50 whatever `percentile` says.
  config::PrunerConfig median = Median(5);
  median.percentile = 250;
  CHECK(MakePruner(median).ok());
}

// ---------------------------------------------------------------------------------------------
// Percentile and median

TEST_CASE("numpy's nanpercentile, to the last bit", "[pruner]") {
  // Expected values printed by numpy 1.24 (np.nanpercentile); the naive a + (b - a) * t
  // differs from each in the last bit.
  CHECK(NanPercentile({0.929, 0.809, 0.138, 0.428}, 60) == 0.7328);
  CHECK(NanPercentile({0.267, -0.335}, 90) == 0.2068);
  CHECK(NanPercentile({-0.498, -0.087, 0.185, -0.36}, 90) == 0.10340000000000003);
  CHECK(NanPercentile({0.307, -0.461, -0.344}, 33.3) == -0.383078);
  CHECK(NanPercentile({1, 2, 3, 4}, 33) == 1.99);
  CHECK(NanPercentile({4, 1, 3, 2}, 0) == 1);
  CHECK(NanPercentile({4, 1, 3, 2}, 100) == 4);
  CHECK(NanPercentile({std::nan(""), 10, 0, std::nan("")}, 25) == 2.5);
  CHECK(std::isnan(NanPercentile({}, 50)));
  CHECK(std::isnan(NanPercentile({std::nan("")}, 50)));
}

TEST_CASE("median: no pruning until n_startup_trials trials are COMPLETE", "[pruner]") {
  auto pruner = Make(Median(/*n_startup=*/2));
  TrialRecord a = T(0, kComplete, Flat(2, 1.0));
  TrialRecord b = T(1, kRunning, Flat(2, 2.0));
  for (TrialState other : {kRunning, kPruned, kFail}) {
    b.state = other;  // only COMPLETE trials count, for startup and for the median
    CHECK_FALSE(Decide(*pruner, With({a, b}, {{0, 10.0}})));
  }
  b.state = kComplete;
  CHECK(Decide(*pruner, With({a, b}, {{0, 10.0}})));  // 10 > median(1, 2) = 1.5
  // With no COMPLETE trial nothing is pruned, even with n_startup_trials = 0.
  auto eager = Make(Median(0));
  CHECK_FALSE(Decide(*eager, With({T(0, kPruned, Flat(2, 1.0))}, {{0, 10.0}})));
  CHECK(Decide(*eager, With({T(0, kComplete, Flat(2, 1.0))}, {{0, 10.0}})));
}

TEST_CASE("median compares the trial's best value so far with the median at its last step",
          "[pruner]") {
  auto pruner = Make(Median(2));
  std::vector<TrialRecord> done = {T(0, kComplete, {{0, 1}, {1, 1}}),
                                   T(1, kComplete, {{0, 3}, {1, 3}})};  // median 2 at each step
  SECTION("minimize: prune when best > median") {
    CHECK_FALSE(Decide(*pruner, With(done, {{0, 0.5}, {1, 10}})));  // best 0.5
    CHECK(Decide(*pruner, With(done, {{0, 2.5}, {1, 10}})));        // best 2.5
    CHECK_FALSE(Decide(*pruner, With(done, {{0, 2}, {1, 2}})));     // equal is kept
    CHECK(Decide(*pruner, With(done, {{0, 2.01}})));
  }
  SECTION("maximize: prune when best < median") {
    CHECK_FALSE(Decide(*pruner, With(done, {{0, 0.5}, {1, 10}}), kMax));  // best 10
    CHECK(Decide(*pruner, With(done, {{0, 1.5}, {1, 0}}), kMax));         // best 1.5
    CHECK_FALSE(Decide(*pruner, With(done, {{0, 2}}), kMax));
  }
  SECTION("the median is taken at the trial's last step only") {
    std::vector<TrialRecord> steep = {T(0, kComplete, {{0, 1}, {1, 100}}),
                                      T(1, kComplete, {{0, 3}, {1, 100}})};
    CHECK(Decide(*pruner, With(steep, {{0, 5}})));                 // median 2 at step 0
    CHECK_FALSE(Decide(*pruner, With(steep, {{0, 5}, {1, 50}})));  // median 100 at step 1
  }
}

TEST_CASE("median: no pruning before n_warmup_steps", "[pruner]") {
  auto pruner = Make(Median(2, /*n_warmup=*/3));
  std::vector<TrialRecord> done = {T(0, kComplete, Flat(5, 1)), T(1, kComplete, Flat(5, 2))};
  for (int last = 0; last <= 5; ++last) {
    INFO("trial reported steps 0.." << last);
    CHECK(Decide(*pruner, With(done, Flat(last, 10))) == (last >= 3));
  }
}

TEST_CASE("median checks once per interval_steps, counted from n_warmup_steps", "[pruner]") {
  auto pruner = Make(Median(2, /*n_warmup=*/1, /*interval=*/3));  // pruning steps 1, 4, 7, ...
  std::vector<TrialRecord> done = {T(0, kComplete, Flat(9, 1)), T(1, kComplete, Flat(9, 2))};
  SECTION("a trial reporting every step is checked at 1, 4, 7") {
    const std::vector<bool> expected = {false, true, false, false, true, false, false, true};
    for (int last = 0; last < static_cast<int>(expected.size()); ++last) {
      INFO("steps 0.." << last);
      CHECK(Decide(*pruner, With(done, Flat(last, 10))) == expected[last]);
    }
  }
  SECTION("a trial that skips a pruning step is checked at its next report") {
    CHECK(Decide(*pruner, With(done, {{0, 10}, {2, 10}})));  // first report past step 1
    CHECK_FALSE(Decide(*pruner, With(done, {{0, 10}, {2, 10}, {3, 10}})));
    CHECK(Decide(*pruner, With(done, {{0, 10}, {2, 10}, {3, 10}, {5, 10}})));  // past step 4
    CHECK_FALSE(Decide(*pruner, With(done, {{0, 10}, {2, 10}, {3, 10}, {5, 10}, {6, 10}})));
  }
}

TEST_CASE("percentile: fewer than n_min_trials values at the step, no pruning", "[pruner]") {
  auto pruner = Make(Median(1, 0, 1, /*n_min=*/3));
  std::vector<TrialRecord> trials = {T(0, kComplete, {{0, 1}}), T(1, kComplete, {{0, 2}})};
  CHECK_FALSE(Decide(*pruner, With(trials, {{0, 10}})));
  trials.push_back(T(2, kComplete, {{1, 5}}));  // COMPLETE, but nothing at step 0
  trials.push_back(T(3, kRunning, {{0, 0}}));   // a value at step 0, but not COMPLETE
  CHECK_FALSE(Decide(*pruner, With(trials, {{0, 10}})));
  trials.push_back(T(4, kComplete, {{0, 3}}));
  CHECK(Decide(*pruner, With(trials, {{0, 10}})));  // median(1, 2, 3) = 2
}

TEST_CASE("percentile keeps the top `percentile` percent, direction-aware", "[pruner]") {
  std::vector<TrialRecord> done;
  for (int i = 0; i < 5; ++i) done.push_back(T(i, kComplete, {{0, i + 1.0}}));  // 1..5
  auto p25 = Make(Percentile(25, 5));
  // Minimize: the 25th percentile of 1..5 is 2.
  CHECK_FALSE(Decide(*p25, With(done, {{0, 2.0}})));
  CHECK(Decide(*p25, With(done, {{0, 2.1}})));
  // Maximize: the 75th percentile, 4.
  CHECK_FALSE(Decide(*p25, With(done, {{0, 4.0}}), kMax));
  CHECK(Decide(*p25, With(done, {{0, 3.9}}), kMax));
  // Interpolated: the 25th percentile of {0, 10} is 2.5.
  auto p25_two = Make(Percentile(25, 2));
  std::vector<TrialRecord> two = {T(0, kComplete, {{0, 0}}), T(1, kComplete, {{0, 10}})};
  CHECK(Decide(*p25_two, With(two, {{0, 2.6}})));
  CHECK_FALSE(Decide(*p25_two, With(two, {{0, 2.4}})));
}

// ---------------------------------------------------------------------------------------------
// Successive halving (asha). min_resource 1, reduction_factor 3: rungs end at steps 1, 3, 9.

TEST_CASE("asha: nothing is pruned before the first rung ends", "[pruner]") {
  auto pruner = Make(Asha());
  std::vector<TrialRecord> others = {T(0, kComplete, Flat(9, 0.0))};
  CHECK_FALSE(Decide(*pruner, With(others, {{0, 1e9}})));
  CHECK(Decide(*pruner, With(others, {{0, 1e9}, {1, 1e9}})));
  auto late = Make(Asha(1, 3, /*min_early_stopping_rate=*/1));  // rungs end at 3, 9, 27
  for (int last = 0; last <= 3; ++last) {
    INFO("steps 0.." << last);
    CHECK(Decide(*late, With(others, Flat(last, 1e9))) == (last == 3));
  }
  auto wide = Make(Asha(/*min_resource=*/2));  // rungs end at 2, 6, 18
  CHECK_FALSE(Decide(*wide, With(others, Flat(1, 1e9))));
  CHECK(Decide(*wide, With(others, Flat(2, 1e9))));
}

TEST_CASE(
    "asha: while fewer than reduction_factor trials reached a rung, only the best so far "
    "is promoted",
    "[pruner]") {
  auto pruner = Make(Asha());
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 5}, {1, 5}})));  // alone at the rung
  std::vector<TrialRecord> one = {T(0, kRunning, {{0, 1}, {1, 1}})};
  CHECK(Decide(*pruner, With(one, {{0, 9}, {1, 2}})));
  CHECK_FALSE(Decide(*pruner, With(one, {{0, 9}, {1, 1}})));  // ties are promoted
  CHECK_FALSE(Decide(*pruner, With(one, {{0, 9}, {1, 0.5}})));
  CHECK(Decide(*pruner, With(one, {{0, 9}, {1, 0.5}}), kMax));
  CHECK_FALSE(Decide(*pruner, With(one, {{0, 9}, {1, 2}}), kMax));
}

TEST_CASE("asha: promotion needs the top 1/reduction_factor of every trial at the rung",
          "[pruner]") {
  auto pruner = Make(Asha());
  // Five others reached rung 0 (step 1) with 1..5; their state does not matter.
  std::vector<TrialRecord> others;
  const TrialState states[] = {kComplete, kPruned, kRunning, kFail, kComplete};
  for (int i = 0; i < 5; ++i) others.push_back(T(i, states[i], {{0, 0}, {1, i + 1.0}}));
  // Six values: the best 6/3 = 2 are promoted. Minimize: <= 2.
  CHECK_FALSE(Decide(*pruner, With(others, {{1, 2.0}})));
  CHECK(Decide(*pruner, With(others, {{1, 2.5}})));
  // Maximize: >= the second largest of {1, 2, 3, 4, 5, v}.
  CHECK_FALSE(Decide(*pruner, With(others, {{1, 4.0}}), kMax));
  CHECK(Decide(*pruner, With(others, {{1, 3.5}}), kMax));
  // Nine values: the best 3. Minimize: <= 3.
  for (int i = 5; i < 8; ++i) others.push_back(T(i, kComplete, {{1, i + 1.0}}));
  CHECK_FALSE(Decide(*pruner, With(others, {{1, 3.0}})));
  CHECK(Decide(*pruner, With(others, {{1, 3.5}})));
}

TEST_CASE("asha: each rung is decided once, against the others' values at that rung", "[pruner]") {
  auto pruner = Make(Asha());
  std::vector<TrialRecord> others = {T(0, kComplete, {{1, 5}, {2, 5}, {3, 1}}),
                                     T(1, kComplete, {{1, 6}, {2, 6}, {3, 2}})};
  // Promoted at rung 0 (step 1: 0 beats 5 and 6), then nothing is judged at step 2...
  CHECK_FALSE(Decide(*pruner, With(others, {{0, 0}, {1, 0}})));
  CHECK_FALSE(Decide(*pruner, With(others, {{0, 0}, {1, 0}, {2, 100}})));
  // ...and at step 3 the trial's rung-1 value meets the others' (1 and 2): best of 3 passes.
  CHECK(Decide(*pruner, With(others, {{0, 0}, {1, 0}, {2, 100}, {3, 1.5}})));
  CHECK_FALSE(Decide(*pruner, With(others, {{0, 0}, {1, 0}, {2, 100}, {3, 0.5}})));
}

TEST_CASE("asha: a trial that skipped a rung's end is ranked by its first value past it",
          "[pruner]") {
  auto pruner = Make(Asha());
  // Trial 0 reported steps 0, 2, 5: its rung-0 value is step 2's (3.0), not step 0's.
  std::vector<TrialRecord> others = {T(0, kComplete, {{0, 0}, {2, 3.0}, {5, 0.1}})};
  CHECK_FALSE(Decide(*pruner, With(others, {{1, 2.0}})));
  CHECK(Decide(*pruner, With(others, {{1, 3.5}})));
  // A report that jumps past two rung ends is judged at both, in order.
  std::vector<TrialRecord> steady = {T(0, kComplete, {{1, 5}, {3, 1}})};
  CHECK(Decide(*pruner, With(steady, {{0, 1}, {3, 6}})));          // loses rung 0 (5)
  CHECK(Decide(*pruner, With(steady, {{0, 1}, {3, 2}})));          // wins rung 0, loses rung 1
  CHECK_FALSE(Decide(*pruner, With(steady, {{0, 1}, {3, 0.5}})));  // wins both
}

TEST_CASE("asha: with bootstrap_count, the first trials at a rung are pruned (Optuna's rule)",
          "[pruner]") {
  auto pruner = Make(Asha(1, 3, 0, /*bootstrap_count=*/2));
  CHECK(Decide(*pruner, With({}, {{1, 0.0}})));  // 1 value <= 2
  std::vector<TrialRecord> one = {T(0, kPruned, {{1, 5}})};
  CHECK(Decide(*pruner, With(one, {{1, 0.0}})));  // 2 values <= 2
  std::vector<TrialRecord> two = {T(0, kPruned, {{1, 5}}), T(1, kPruned, {{1, 6}})};
  CHECK_FALSE(Decide(*pruner, With(two, {{1, 0.0}})));
  CHECK(Decide(*pruner, With(two, {{1, 5.5}})));
}

// ---------------------------------------------------------------------------------------------
// Hyperband

TEST_CASE("CRC-32 is zlib's", "[pruner]") {
  CHECK(Crc32("123456789") == 0xCBF43926u);
  CHECK(Crc32("") == 0u);
}

TEST_CASE("hyperband: bracket count and budgets are Optuna's", "[pruner]") {
  struct Case {
    int max_resource;
    std::vector<int64_t> budgets;
  };
  // From optuna.pruners.HyperbandPruner(min_resource=1, reduction_factor=3). 243 gives 5
  // brackets, not 6: Optuna's math.log(243, 3) is 4.999...
  const std::vector<Case> cases = {{9, {9, 5, 3}},
                                   {27, {27, 12, 6, 4}},
                                   {81, {81, 34, 15, 8, 5}},
                                   {243, {81, 34, 15, 8, 5}},
                                   {100, {81, 34, 15, 8, 5}}};
  for (const Case& c : cases) {
    INFO("max_resource " << c.max_resource);
    HyperbandPrunerOptions o;
    o.max_resource = c.max_resource;
    HyperbandPruner pruner(o);
    std::vector<TrialRecord> trials = With({}, {{0, 1.0}});
    CHECK_FALSE(Decide(pruner, trials));
    CHECK(pruner.n_brackets() == static_cast<int>(c.budgets.size()));
    CHECK(pruner.budgets() == c.budgets);
  }
}

TEST_CASE("hyperband: a trial's bracket is Optuna's, from its study name and number, and stable",
          "[pruner]") {
  // binascii.crc32(f"hb_{n}") % 17 walked through budgets [9, 5, 3], as Optuna computes it.
  const std::vector<int> expected = {0, 0, 2, 2, 1, 1, 1, 2, 1, 0, 1, 0, 1, 1, 1, 0, 2, 0, 2, 0};
  HyperbandPrunerOptions o;
  o.max_resource = 9;
  for (int round = 0; round < 2; ++round) {  // a fresh pruner (a restarted daemon) agrees
    HyperbandPruner pruner(o);
    (void)Decide(pruner, With({}, {{0, 1.0}}), kMin, "hb");
    for (int n = 0; n < static_cast<int>(expected.size()); ++n) {
      INFO("trial " << n);
      CHECK(pruner.BracketOf("hb", n) == expected[n]);
    }
  }
}

TEST_CASE("hyperband: each bracket is successive halving over its own trials only", "[pruner]") {
  config::PrunerConfig c;
  c.kind = "hyperband";
  c.max_resource = 9;  // brackets 0, 1, 2: rungs end at 1,3,9 / 3,9 / 9
  // In study "hb": trials 0, 1, 9, 11 are in bracket 0; 4, 5, 6, 8 in bracket 1.
  std::vector<TrialRecord> trials(12);
  for (int n = 0; n < 12; ++n) trials[n] = T(n, kComplete, {});
  trials[0].intermediate = {{1, 9}, {3, 9}};  // bracket 0
  trials[4].intermediate = {{1, 1}, {3, 1}};  // bracket 1: far better, but not a rival of 1
  SECTION("bracket 0 ignores bracket 1's trials") {
    auto pruner = Make(c);
    trials[1] = T(1, kRunning, {{0, 5}, {1, 5}});
    PruneContext ctx{kMin, &trials, &trials[1], "hb"};
    CHECK_FALSE(pruner->ShouldPrune(ctx));  // best of bracket 0 at rung 0 ({9, 5})
    auto asha = Make(Asha());
    CHECK(asha->ShouldPrune(ctx));  // plain asha sees trial 4's 1 as well
    trials[1].intermediate[1] = 9.5;
    CHECK(pruner->ShouldPrune(ctx));
  }
  SECTION("bracket 1 stops trials at its first rung only, step 3") {
    auto pruner = Make(c);
    trials[5] = T(5, kRunning, {{0, 100}, {1, 100}});
    PruneContext ctx{kMin, &trials, &trials[5], "hb"};
    CHECK_FALSE(pruner->ShouldPrune(ctx));
    trials[5].intermediate[2] = 100;
    CHECK_FALSE(pruner->ShouldPrune(ctx));
    trials[5].intermediate[3] = 100;
    CHECK(pruner->ShouldPrune(ctx));  // {1, 100} at step 3
  }
}

TEST_CASE("hyperband with max_resource 0 waits for a COMPLETE trial, then uses its last step + 1",
          "[pruner]") {
  HyperbandPrunerOptions o;  // max_resource 0
  HyperbandPruner pruner(o);
  std::vector<TrialRecord> trials = {T(0, kPruned, Flat(20, 0.0)), T(1, kRunning, Flat(30, 0.0)),
                                     T(2, kRunning, Flat(9, 1e9))};
  CHECK_FALSE(Decide(pruner, trials));
  CHECK(pruner.n_brackets() == 0);
  trials[1].state = kComplete;
  trials[1].intermediate = Flat(8, 0.0);  // steps 0..8: max_resource 9
  (void)Decide(pruner, trials);
  CHECK(pruner.n_brackets() == 3);
  CHECK(pruner.budgets() == std::vector<int64_t>{9, 5, 3});
  // Fixed from then on, as in Optuna.
  trials.push_back(T(3, kComplete, Flat(300, 0.0)));
  (void)Decide(pruner, trials);
  CHECK(pruner.n_brackets() == 3);
}

// ---------------------------------------------------------------------------------------------
// Threshold

config::PrunerConfig Threshold(std::optional<double> lower, std::optional<double> upper,
                               int n_warmup = 0, int interval = 1) {
  config::PrunerConfig c;
  c.kind = "threshold";
  c.lower = lower;
  c.upper = upper;
  c.n_warmup_steps = n_warmup;
  c.interval_steps = interval;
  return c;
}

TEST_CASE("threshold prunes when the latest value leaves [lower, upper], whatever the others do",
          "[pruner]") {
  auto both = Make(Threshold(0.0, 1.0));
  for (Direction d : {kMin, kMax}) {  // the direction plays no part
    CHECK_FALSE(Decide(*both, With({}, {{0, 0.5}}), d));
    CHECK_FALSE(Decide(*both, With({}, {{0, 0.0}}), d));  // the bounds are kept
    CHECK_FALSE(Decide(*both, With({}, {{0, 1.0}}), d));
    CHECK(Decide(*both, With({}, {{0, 1.01}}), d));
    CHECK(Decide(*both, With({}, {{0, -0.01}}), d));
    CHECK(Decide(*both, With({}, {{0, std::nan("")}}), d));
  }
  // Only the value at the largest step counts, not earlier ones nor other trials.
  CHECK_FALSE(Decide(*both, With({}, {{0, 5.0}, {1, 0.5}})));
  CHECK(Decide(*both, With(History(), {{0, 0.5}, {1, 5.0}})));
  CHECK_FALSE(Decide(*both, With({}, {{3, 0.5}, {1, 5.0}})));  // step 3 is the latest
  auto upper = Make(Threshold(std::nullopt, 1.0));
  CHECK_FALSE(Decide(*upper, With({}, {{0, -1e300}})));
  CHECK(Decide(*upper, With({}, {{0, 2.0}})));
  auto lower = Make(Threshold(0.0, std::nullopt));
  CHECK_FALSE(Decide(*lower, With({}, {{0, 1e300}})));
  CHECK(Decide(*lower, With({}, {{0, -2.0}})));
}

TEST_CASE("threshold: warm-up and interval as Optuna's", "[pruner]") {
  auto pruner = Make(Threshold(std::nullopt, 1.0, /*n_warmup=*/2, /*interval=*/3));  // 2, 5, 8
  const std::vector<bool> expected = {false, false, true, false, false, true, false, false, true};
  for (int last = 0; last < static_cast<int>(expected.size()); ++last) {
    INFO("steps 0.." << last);
    CHECK(Decide(*pruner, With({}, Flat(last, 10))) == expected[last]);
  }
  // A report that skips pruning step 5 is checked at once.
  CHECK(Decide(*pruner, With({}, {{0, 10}, {6, 10}})));
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 10}, {6, 10}, {7, 10}})));
}

// ---------------------------------------------------------------------------------------------
// Patient

config::PrunerConfig Patient(int patience, double min_delta = 0,
                             std::optional<config::PrunerConfig> wrapped = std::nullopt) {
  config::PrunerConfig c;
  c.kind = "patient";
  c.patience = patience;
  c.min_delta = min_delta;
  if (wrapped) c.wrapped = std::make_shared<config::PrunerConfig>(*wrapped);
  return c;
}

TEST_CASE("patient: nothing is decided before patience + 2 steps", "[pruner]") {
  auto pruner = Make(Patient(2));  // no wrapped pruner: plain early stopping
  // Getting worse at every step: stalled as soon as there is one step before the last three.
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 1}, {1, 2}, {2, 3}})));
  CHECK(Decide(*pruner, With({}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}})));
  auto zero = Make(Patient(0));
  CHECK_FALSE(Decide(*zero, With({}, {{0, 1}})));
  CHECK(Decide(*zero, With({}, {{0, 1}, {1, 2}})));
}

TEST_CASE("patient compares the best before the last patience + 1 steps with the best in them",
          "[pruner]") {
  auto pruner = Make(Patient(1));
  // Minimize: earlier {5, 4} best 4; recent {4.5, 4.2} best 4.2 > 4: stalled.
  CHECK(Decide(*pruner, With({}, {{0, 5}, {1, 4}, {2, 4.5}, {3, 4.2}})));
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 5}, {1, 4}, {2, 4.5}, {3, 3.9}})));
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 5}, {1, 4}, {2, 4.5}, {3, 4}})));  // equal: not
  // Steps in order of step, not of report: the map holds {0: 4, 1: 5, 2: 6}.
  CHECK(Decide(*pruner, With({}, {{2, 6}, {0, 4}, {1, 5}})));
  // Maximize: earlier best 5; recent best 4.8 < 5: stalled.
  CHECK(Decide(*pruner, With({}, {{0, 1}, {1, 5}, {2, 4.8}, {3, 4}}), kMax));
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 1}, {1, 5}, {2, 5.1}, {3, 4}}), kMax));
  // min_delta: a slip smaller than it is not a stall.
  auto tolerant = Make(Patient(1, 0.5));
  CHECK_FALSE(Decide(*tolerant, With({}, {{0, 5}, {1, 4}, {2, 4.5}, {3, 4.2}})));
  CHECK(Decide(*tolerant, With({}, {{0, 5}, {1, 4}, {2, 4.6}, {3, 4.7}})));
  CHECK_FALSE(Decide(*tolerant, With({}, {{0, 1}, {1, 5}, {2, 4.8}, {3, 4}}), kMax));
  CHECK(Decide(*tolerant, With({}, {{0, 1}, {1, 5}, {2, 4.4}, {3, 4}}), kMax));
  // NaNs are ignored; all NaN on one side is never a stall.
  CHECK(Decide(*pruner, With({}, {{0, 1}, {1, std::nan("")}, {2, 2}, {3, 3}})));
  CHECK_FALSE(Decide(*pruner, With({}, {{0, std::nan("")}, {1, std::nan("")}, {2, 3}})));
}

TEST_CASE("patient asks the wrapped pruner only once the trial has stalled", "[pruner]") {
  auto pruner = Make(Patient(1, 0, Threshold(std::nullopt, 10.0)));
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 1}, {1, 2}, {2, 3}})));     // stalled, within bounds
  CHECK(Decide(*pruner, With({}, {{0, 1}, {1, 2}, {2, 30}})));          // stalled, out of bounds
  CHECK_FALSE(Decide(*pruner, With({}, {{0, 50}, {1, 40}, {2, 30}})));  // improving
  // Wrapping median: the median decides, against the other trials.
  auto median = Make(Patient(0, 0, Median(1)));
  std::vector<TrialRecord> done = {T(0, kComplete, Flat(5, 1.0))};
  CHECK(Decide(*median, With(done, {{0, 2}, {1, 3}})));            // stalled, worse
  CHECK_FALSE(Decide(*median, With(done, {{0, 0.5}, {1, 0.7}})));  // stalled, better
  CHECK_FALSE(Decide(*median, With(done, {{0, 3}, {1, 2}})));      // improving
}

// ---------------------------------------------------------------------------------------------
// Wilcoxon

constexpr WilcoxonAlternative kGreater = WilcoxonAlternative::kGreater;
constexpr WilcoxonAlternative kLess = WilcoxonAlternative::kLess;

TEST_CASE("Wilcoxon p-values: the exact distribution without ties or zeros", "[pruner]") {
  // n = 5, all positive: P(T+ >= 15) = 1/32, the textbook smallest p-value for n = 5.
  CHECK(WilcoxonPValue({1, 2, 3, 4, 5}, kGreater) == 1.0 / 32);
  CHECK(WilcoxonPValue({1, 2, 3, 4, 5}, kLess) == 1.0);
  CHECK(WilcoxonPValue({-0.1, -0.2}, kLess) == 0.25);
  // n = 10, T+ = 1 + 2 + 3 + 4 = 10: 43 of the 1024 subsets of {1..10} sum to at most 10
  // (the tables' one-sided 0.0420 at T = 10) and 991 to at least 10.
  const std::vector<double> d = {0.1, -0.5, 0.2, -0.6, 0.3, -0.7, 0.4, -0.8, -0.9, -1.0};
  CHECK(WilcoxonPValue(d, kLess) == 43.0 / 1024);
  CHECK(WilcoxonPValue(d, kGreater) == 991.0 / 1024);
  // Only |d|'s order matters.
  std::vector<double> scaled;
  for (double x : d) scaled.push_back(x * 1000 + (x > 0 ? 5 : -5));
  CHECK(WilcoxonPValue(scaled, kLess) == 43.0 / 1024);
  CHECK(std::isnan(WilcoxonPValue({}, kLess)));
  // The example of SciPy's documentation (Fisher's paired differences, n = 15): one-sided
  // p = 0.0206298828125, twice that (0.041259765625) two-sided.
  const std::vector<double> fisher = {6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75};
  CHECK(WilcoxonPValue(fisher, kGreater) == 0.0206298828125);
}

TEST_CASE("Wilcoxon p-values: every sign flip when n <= 13 with ties or zeros (zsplit)",
          "[pruner]") {
  // |d| = 1, 1, 2, 3: ranks 1.5, 1.5, 3, 4; T+ = 1.5 + 1.5 + 4 = 7. Of the 16 sign patterns,
  // T+ >= 7 for {3, 4}, {1.5, 1.5, 4}, {1.5, 3, 4} twice and all four: 5/16.
  CHECK(WilcoxonPValue({1, 1, -2, 3}, kGreater) == 5.0 / 16);
  // T+ <= 7 for all but the three patterns summing to 8.5, 8.5 and 10: 13/16.
  CHECK(WilcoxonPValue({1, 1, -2, 3}, kLess) == 13.0 / 16);
  // A zero has rank 1 and counts half to T+: T+ = 0.5 + 2 + 3 = 5.5, the largest of
  // {0.5, 2.5, 3.5, 5.5}.
  CHECK(WilcoxonPValue({0, 2, 3}, kGreater) == 0.25);
  CHECK(WilcoxonPValue({0, 2, 3}, kLess) == 1.0);
  CHECK(WilcoxonPValue({0, 0}, kGreater) == 1.0);  // nothing to tell the signs apart
  // Equal differences: only the all-positive pattern (1 of 2^4) reaches T+ = 10.
  CHECK(WilcoxonPValue({7, 7, 7, 7}, kGreater) == 1.0 / 16);
}

TEST_CASE("Wilcoxon p-values: the normal approximation beyond, with the tie correction",
          "[pruner]") {
  // n = 14, |-1| = |1| tied: ranks 1.5, 1.5, 3..14; T+ = 1.5 + (3 + ... + 14) = 103.5;
  // mean 14 * 15 / 4 = 52.5; variance (14 * 15 * 29 - (2^3 - 2) / 2) / 24 = 6087 / 24;
  // z = 51 / sqrt(253.625) = 3.20238944796563; P(Z >= z) = 6.8146301217568e-4.
  std::vector<double> d = {-1, 1};
  for (int i = 2; i <= 13; ++i) d.push_back(i);
  CHECK(WilcoxonPValue(d, kGreater) == Approx(6.814630121756777e-4).epsilon(1e-12));
  CHECK(WilcoxonPValue(d, kLess) == Approx(1 - 6.814630121756777e-4).epsilon(1e-12));
  // Fourteen zeros: T+ = mean, z = 0.
  CHECK(WilcoxonPValue(std::vector<double>(14, 0.0), kGreater) == 0.5);
  // n = 51 needs no ties: 1..51 with 3 and 37..51 negative gives T+ = 663 = 51 * 52 / 4, so
  // p = 0.5 exactly (the exact distribution would give more, its mass at 663 included).
  std::vector<double> wide;
  for (int i = 1; i <= 51; ++i) wide.push_back(i == 3 || i >= 37 ? -i : i);
  CHECK(WilcoxonPValue(wide, kGreater) == 0.5);
  CHECK(WilcoxonPValue(wide, kLess) == 0.5);
}

config::PrunerConfig Wilcoxon(double p_threshold = 0.1, int n_startup_steps = 2) {
  config::PrunerConfig c;
  c.kind = "wilcoxon";
  c.p_threshold = p_threshold;
  c.n_startup_steps = n_startup_steps;
  return c;
}

// A COMPLETE trial whose value is the mean of its values, as a wilcoxon objective returns.
TrialRecord Instances(int number, Steps values) {
  TrialRecord t = T(number, kComplete, values);
  double sum = 0;
  for (const auto& [s, v] : values) sum += v;
  t.value = sum / static_cast<double>(values.size());
  return t;
}

TEST_CASE("wilcoxon compares the trial with the best trial at the steps both reported",
          "[pruner]") {
  auto pruner = Make(Wilcoxon());
  // Best (minimize): trial 1, mean 1.5. Trial 0 (mean 10) is worse.
  const std::vector<TrialRecord> done = {
      Instances(0, {{0, 10}, {1, 10}, {2, 10}, {3, 10}, {4, 10}, {5, 10}}),
      Instances(1, {{0, 1}, {1, 2}, {2, 1}, {3, 2}, {4, 1}, {5, 2}})};
  // Differences 1, 1, 1, 1 at steps 5, 3, 0, 1 (reported in that order): p = 1/16 < 0.1.
  CHECK(Decide(*pruner, With(done, {{5, 3}, {3, 3}, {0, 2}, {1, 3}})));
  // Three differences: p = 1/8, kept; with p_threshold 0.2, pruned.
  CHECK_FALSE(Decide(*pruner, With(done, {{5, 3}, {3, 3}, {0, 2}})));
  CHECK(Decide(*Make(Wilcoxon(0.2)), With(done, {{5, 3}, {3, 3}, {0, 2}})));
  // Steps the best trial lacks do not count: still three differences.
  CHECK_FALSE(Decide(*pruner, With(done, {{5, 3}, {3, 3}, {0, 2}, {7, 9}})));
  // d = -0.5, 1, 1.5, 2 (no ties: exact): T+ = 2 + 3 + 4 = 9, P(T+ >= 9) = 2/16, kept.
  CHECK_FALSE(Decide(*pruner, With(done, {{0, 0.5}, {1, 3}, {2, 2.5}, {3, 4}})));
  // Maximize: the best is trial 0 (mean 10); a trial below it at every step is pruned.
  CHECK(Decide(*pruner, With(done, {{0, 9}, {1, 8}, {2, 9}, {3, 8}}), kMax));
  CHECK_FALSE(Decide(*pruner, With(done, {{0, 11}, {1, 12}, {2, 11}, {3, 12}}), kMax));
}

TEST_CASE("wilcoxon: startup steps, no best trial, non-finite values, the average rule",
          "[pruner]") {
  const std::vector<TrialRecord> done = {Instances(0, Flat(9, 0.0))};
  const Steps worse = Flat(4, 1.0);  // five differences of 1: p = 1/32
  CHECK(Decide(*Make(Wilcoxon()), With(done, worse)));
  CHECK_FALSE(Decide(*Make(Wilcoxon(0.1, 6)), With(done, worse)));
  CHECK(Decide(*Make(Wilcoxon(0.1, 5)), With(done, worse)));
  // At least two differences whatever n_startup_steps says (p = 1/2 or 1 before that anyway,
  // so p_threshold 1 shows it).
  CHECK_FALSE(Decide(*Make(Wilcoxon(1.0, 0)), With(done, {{0, 1.0}})));
  CHECK(Decide(*Make(Wilcoxon(1.0, 0)), With(done, {{0, 1.0}, {1, 1.0}})));
  auto pruner = Make(Wilcoxon());
  // No COMPLETE trial: nothing to compare with.
  std::vector<TrialRecord> running = {T(0, kRunning, Flat(9, 0.0)), T(1, kPruned, Flat(9, 0.0))};
  CHECK_FALSE(Decide(*pruner, With(running, worse)));
  // A non-finite value in the trial or in the best trial: never pruned.
  Steps nan_worse = worse;
  nan_worse[7] = std::nan("");
  CHECK_FALSE(Decide(*pruner, With(done, nan_worse)));
  std::vector<TrialRecord> inf_best = {Instances(0, Flat(9, 0.0))};
  inf_best[0].intermediate[3] = std::numeric_limits<double>::infinity();
  inf_best[0].value = 0;
  CHECK_FALSE(Decide(*pruner, With(inf_best, worse)));
  // Worse at every shared step but no worse on average over all its values: kept (Optuna's
  // safety rule). Best mean 2; the trial's 1, 1, 1, 1 against 0, 0, 0, 0 plus a 0 elsewhere.
  std::vector<TrialRecord> mixed = {Instances(0, {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 10}})};
  CHECK_FALSE(Decide(*pruner, With(mixed, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {9, 0}})));
  CHECK(Decide(*pruner, With(mixed, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {9, 9}})));
}

TEST_CASE("wilcoxon: the best trial is the best feasible one when the best-valued is infeasible",
          "[pruner]") {
  auto pruner = Make(Wilcoxon());
  std::vector<TrialRecord> done = {Instances(0, Flat(5, 0.0)), Instances(1, Flat(5, 5.0))};
  const Steps between = Flat(5, 2.0);  // worse than trial 0, better than trial 1
  CHECK(Decide(*pruner, With(done, between)));
  done[0].constraints = {0.5};  // infeasible: trial 1 is the best
  CHECK_FALSE(Decide(*pruner, With(done, between)));
  done[1].constraints = {1.0};  // no feasible trial: no pruning
  CHECK_FALSE(Decide(*pruner, With(done, between)));
  done[0].constraints = {0.0};  // feasible again (<= 0)
  CHECK(Decide(*pruner, With(done, between)));
}

// ---------------------------------------------------------------------------------------------
// Cross-check against Optuna itself

// A simulated study: trials start in number order, `parallel` at a time; at each tick a random
// running trial reports its next step and the pruner decides; a pruned trial is PRUNED at once,
// one that reached its last step COMPLETE. The events (with our decisions) are what Optuna
// replays.
struct Simulation {
  config::PrunerConfig pruner;
  Direction direction = kMin;
  std::string study = "sim";
  uint64_t seed = 1;
  int n_trials = 12;
  int parallel = 3;
  int max_steps = 12;
  bool sparse = false;  // steps advance by 1..3 instead of 1
  // Whether Optuna must agree on every decision. Not for hyperband with max_resource = 0: Optuna
  // records no rung value for reports made before its brackets exist (before the first trial
  // completes), while ours derive them from every report (see hyperband_pruner.h).
  bool exact = true;
  // Wilcoxon's setting: each trial reports one value per instance, steps 0..max_steps - 1 in a
  // random order (quality + the instance's difficulty + noise, rounded to `round_to`), and
  // completes with their mean (plus number * 1e-9, so that no two trials tie for the best).
  bool instances = false;
  double round_to = 0.05;
};

// The pruner's options as the replay script reads them (scripts/check_pruners_against_optuna.py).
boost::json::object PrunerJson(const config::PrunerConfig& c) {
  boost::json::object p;
  p["kind"] = c.kind;
  p["percentile"] = c.percentile;
  p["n_startup_trials"] = c.n_startup_trials;
  p["n_warmup_steps"] = c.n_warmup_steps;
  p["interval_steps"] = c.interval_steps;
  p["n_min_trials"] = c.n_min_trials;
  p["min_resource"] = c.min_resource;
  p["max_resource"] = c.max_resource;
  p["reduction_factor"] = c.reduction_factor;
  p["min_early_stopping_rate"] = c.min_early_stopping_rate;
  p["bootstrap_count"] = c.bootstrap_count;
  p["lower"] = c.lower ? boost::json::value(*c.lower) : boost::json::value(nullptr);
  p["upper"] = c.upper ? boost::json::value(*c.upper) : boost::json::value(nullptr);
  p["patience"] = c.patience;
  p["min_delta"] = c.min_delta;
  p["wrapped"] =
      c.wrapped ? boost::json::value(PrunerJson(*c.wrapped)) : boost::json::value(nullptr);
  p["p_threshold"] = c.p_threshold;
  p["n_startup_steps"] = c.n_startup_steps;
  return p;
}

boost::json::object Simulate(const Simulation& sim, int* decisions, int* prunes) {
  std::mt19937_64 rng(sim.seed);
  auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  auto pruner = Make(sim.pruner);
  std::vector<TrialRecord> trials;
  std::vector<int> planned;
  std::vector<double> quality;
  std::vector<int> running;
  std::vector<std::vector<int64_t>> orders;  // instances: each trial's order of steps
  std::vector<double> difficulty;            // instances: per step
  if (sim.instances) {
    for (int i = 0; i < sim.max_steps; ++i) difficulty.push_back(uniform());
  }
  boost::json::array events;
  int finished = 0;
  while (finished < sim.n_trials) {
    while (static_cast<int>(running.size()) < sim.parallel &&
           static_cast<int>(trials.size()) < sim.n_trials) {
      int n = static_cast<int>(trials.size());
      trials.push_back(T(n, kRunning, {}));
      planned.push_back(3 + static_cast<int>(uniform() * sim.max_steps));
      quality.push_back(uniform());
      std::vector<int64_t> order;
      if (sim.instances) {
        for (int64_t i = 0; i < sim.max_steps; ++i) order.push_back(i);
        for (size_t i = order.size() - 1; i > 0; --i) {  // Fisher-Yates
          std::swap(order[i], order[static_cast<size_t>(uniform() * static_cast<double>(i + 1))]);
        }
        planned.back() = sim.max_steps - 1;
      }
      orders.push_back(std::move(order));
      running.push_back(n);
      events.push_back({{"t", n}, {"start", true}});
    }
    size_t pick = static_cast<size_t>(uniform() * running.size());
    int n = running[pick];
    TrialRecord& t = trials[n];
    int64_t step = t.intermediate.empty() ? 0 : t.intermediate.rbegin()->first + 1;
    if (sim.sparse && !t.intermediate.empty()) step += static_cast<int64_t>(uniform() * 3);
    // Curves that improve with steps, at a level set by the trial's quality, with noise;
    // rounded so that ties happen.
    double value = std::round((quality[n] + 1.0 / (1 + step) + 0.2 * uniform()) * 20) / 20;
    const size_t reported = t.intermediate.size();
    if (sim.instances) {
      step = orders[n][reported];
      value = std::round((quality[n] + difficulty[step] + 0.3 * uniform()) / sim.round_to) *
              sim.round_to;
    }
    t.intermediate[step] = value;
    PruneContext ctx{sim.direction, &trials, &t, sim.study};
    bool prune = pruner->ShouldPrune(ctx);
    ++*decisions;
    *prunes += prune;
    events.push_back({{"t", n}, {"step", step}, {"value", value}, {"prune", prune}});
    const bool done =
        sim.instances ? static_cast<int>(reported) + 1 == sim.max_steps : step >= planned[n];
    if (prune || done) {
      t.state = prune ? kPruned : kComplete;
      if (!prune) {
        t.value = value;
        if (sim.instances) {
          double sum = 0;
          for (const auto& [s, v] : t.intermediate) sum += v;
          t.value = sum / static_cast<double>(t.intermediate.size()) + n * 1e-9;
        }
        events.push_back({{"t", n}, {"complete", *t.value}});
      }
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
      ++finished;
    }
  }
  boost::json::object o;
  o["pruner"] = PrunerJson(sim.pruner);
  o["direction"] = config::DirectionName(sim.direction);
  o["study_name"] = sim.study;
  o["events"] = std::move(events);
  return o;
}

std::vector<Simulation> Simulations() {
  std::vector<config::PrunerConfig> configs = {Median(2),
                                               Median(3, 2, 3),
                                               Percentile(25, 2, 0, 1, 2),
                                               Percentile(70, 4, 1, 2),
                                               Asha(),
                                               Asha(1, 2),
                                               Asha(2, 3, 1),
                                               Asha(1, 3, 0, 2),
                                               Asha(1, 4)};
  config::PrunerConfig hb;
  hb.kind = "hyperband";
  hb.max_resource = 9;
  configs.push_back(hb);
  hb.max_resource = 0;  // auto
  configs.push_back(hb);
  hb.reduction_factor = 2;
  hb.max_resource = 16;
  hb.bootstrap_count = 1;
  configs.push_back(hb);
  configs.push_back(Threshold(std::nullopt, 1.2));
  configs.push_back(Threshold(0.45, 1.3, /*n_warmup=*/1, /*interval=*/2));
  configs.push_back(Threshold(0.5, std::nullopt));
  configs.push_back(Patient(2));
  configs.push_back(Patient(1, 0.05));
  configs.push_back(Patient(0, 0, Median(2)));
  configs.push_back(Patient(1, 0.02, Percentile(25, 2, 0, 1, 2)));
  configs.push_back(Patient(2, 0, Threshold(std::nullopt, 1.0)));
  std::vector<Simulation> sims;
  uint64_t seed = 1;
  for (const config::PrunerConfig& c : configs) {
    for (Direction d : {kMin, kMax}) {
      for (int variant = 0; variant < 2; ++variant) {
        Simulation s;
        s.pruner = c;
        s.direction = d;
        s.seed = seed++;
        s.study = "sim-" + std::to_string(s.seed);
        s.n_trials = 14 + 6 * variant;
        s.parallel = 2 + 2 * variant;
        // Percentile's interval logic is about skipped steps; successive halving's derivation
        // of rung values is exact when no report jumps past two rung ends (see its header).
        s.sparse = c.kind == "median" || c.kind == "percentile" || c.kind == "threshold";
        s.exact = !(c.kind == "hyperband" && c.max_resource == 0);
        sims.push_back(s);
      }
    }
  }
  // Wilcoxon: ties (coarse rounding) with up to 13 and more shared steps, no ties (fine
  // rounding, the exact distribution), and more than 50 steps (the normal approximation).
  struct Setting {
    config::PrunerConfig pruner;
    int instances;
    double round_to;
  };
  const std::vector<Setting> settings = {{Wilcoxon(), 12, 0.05},
                                         {Wilcoxon(0.1, 5), 30, 0.05},
                                         {Wilcoxon(0.2, 2), 20, 0.001},
                                         {Wilcoxon(0.05, 3), 60, 0.01}};
  for (const Setting& w : settings) {
    for (Direction d : {kMin, kMax}) {
      for (int variant = 0; variant < 2; ++variant) {
        Simulation s;
        s.pruner = w.pruner;
        s.direction = d;
        s.seed = seed++;
        s.study = "sim-" + std::to_string(s.seed);
        s.n_trials = 10 + 6 * variant;
        s.parallel = 2 + variant;
        s.max_steps = w.instances;
        s.instances = true;
        s.round_to = w.round_to;
        sims.push_back(s);
      }
    }
  }
  return sims;
}

TEST_CASE("pruners agree with Optuna 3.1 on simulated studies", "[pruner][optuna]") {
  const std::string python = "/usr/bin/python3";
  const std::string script =
      std::string(TRIALD_SOURCE_DIR) + "/scripts/check_pruners_against_optuna.py";
  REQUIRE(std::filesystem::exists(script));
  int decisions = 0, prunes = 0;
  boost::json::array cases;
  const std::vector<Simulation> sims = Simulations();
  for (const Simulation& s : sims) cases.push_back(Simulate(s, &decisions, &prunes));
  std::string path = (std::filesystem::temp_directory_path() /
                      ("triald-pruner-cases-" + std::to_string(::getpid()) + ".json"))
                         .string();
  std::ofstream(path) << boost::json::serialize(cases);
  std::string command = python + " " + script + " --cases " + path + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  int status = ::pclose(pipe);
  if (std::getenv("TRIALD_TEST_KEEP") == nullptr) std::remove(path.c_str());
  INFO("script output:\n" << output << "(cases: " << path << ", kept with TRIALD_TEST_KEEP=1)");
  REQUIRE(status == 0);  // 3: python3-optuna is missing (the output says so)
  boost::json::value result = boost::json::parse(output.substr(output.rfind("{\"optuna\"")));
  CHECK(result.at("decisions").as_int64() == decisions);
  int64_t exact_total = 0, exact_agree = 0, auto_total = 0, auto_agree = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_kind;  // agree, decisions
  for (const Simulation& s : sims) {
    const boost::json::value& r = result.at("by_study").at(s.study);
    (s.exact ? exact_total : auto_total) += r.at("decisions").as_int64();
    (s.exact ? exact_agree : auto_agree) += r.at("agree").as_int64();
    by_kind[s.pruner.kind].first += r.at("agree").as_int64();
    by_kind[s.pruner.kind].second += r.at("decisions").as_int64();
  }
  std::map<std::string, int> prunes_by_kind;
  for (size_t i = 0; i < sims.size(); ++i) {
    for (const boost::json::value& e : cases[i].at("events").as_array()) {
      if (const boost::json::value* p = e.as_object().if_contains("prune")) {
        prunes_by_kind[sims[i].pruner.kind] += p->as_bool();
      }
    }
  }
  for (const auto& [kind, counts] : by_kind) {
    std::cout << "  " << kind << ": " << counts.first << "/" << counts.second << " agree, "
              << prunes_by_kind[kind] << " prunes\n";
    CHECK(prunes_by_kind[kind] > 0);  // every kind's histories do exercise pruning
  }
  std::cout << "pruners vs Optuna " << std::string(result.at("optuna").as_string()) << ": "
            << exact_agree << "/" << exact_total << " decisions agree (" << prunes
            << " prunes in all) over " << cases.size()
            << " simulated studies; hyperband with max_resource = 0 (known difference): "
            << auto_agree << "/" << auto_total << "\n";
  CHECK(exact_agree == exact_total);
  CHECK(prunes > decisions / 20);  // the histories do exercise pruning
}

}  // namespace
}  // namespace triald::pruner
