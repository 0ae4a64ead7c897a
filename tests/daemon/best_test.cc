// The best trials of a study (daemon/control/best.h): the Pareto front built a page at a time
// equals the front of all trials at once, with ties, duplicates and infeasible trials; the best
// feasible trial of a single-objective study; and the `best` verb on SQLite in memory, for a
// study of several pages.
#include "daemon/control/best.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "daemon/control/verbs.h"
#include "daemon/sampler/pareto.h"
#include "daemon/storage/sqlite_storage.h"

namespace triald::daemon {
namespace {

namespace json = boost::json;
using config::Direction;
using model::TrialRecord;
using model::TrialState;

TrialRecord Trial(int number, std::vector<double> values, std::vector<double> constraints = {},
                  TrialState state = TrialState::kComplete) {
  TrialRecord t;
  t.number = number;
  t.state = state;
  if (state == TrialState::kComplete) t.values = std::move(values);
  if (t.values.size() == 1) t.value = t.values[0];
  t.constraints = std::move(constraints);
  return t;
}

std::vector<int> Numbers(const std::vector<TrialRecord>& trials) {
  std::vector<int> out;
  for (const TrialRecord& t : trials) out.push_back(t.number);
  return out;
}

std::vector<int> FrontOf(const std::vector<TrialRecord>& trials, size_t page,
                         const std::vector<Direction>& directions) {
  FrontBuilder b(directions);
  for (size_t i = 0; i < trials.size(); i += page) {
    b.Add(std::vector<TrialRecord>(trials.begin() + i,
                                   trials.begin() + std::min(trials.size(), i + page)));
  }
  return Numbers(b.front());
}

}  // namespace

TEST_CASE("FrontBuilder: the front of feasible COMPLETE trials, page by page", "[best]") {
  const std::vector<Direction> dirs = {Direction::kMinimize, Direction::kMaximize};
  // Hand-computed: as minimisation the points are (v0, -v1).
  std::vector<TrialRecord> trials = {
      Trial(0, {1, 1}),             // (1,-1): dominated by 1
      Trial(1, {1, 3}),             // (1,-3): front
      Trial(2, {0.5, 0.5}, {0.1}),  // would be on the front, but infeasible
      Trial(3, {2, 5}),             // (2,-5): front
      Trial(4, {2, 5}, {-1, 0}),    // duplicate of 3, feasible (0 counts): front
      Trial(5, {}, {}, TrialState::kFail),
      Trial(6, {3, 4}),  // dominated by 3
      Trial(7, {}, {}, TrialState::kPruned),
      Trial(8, {0, 0}),                  // (0,0): front (smallest v0)
      Trial(9, {5, 9}, {std::nan("")}),  // NaN constraint: infeasible
      Trial(10, {4, 5}),                 // dominated by 3
  };
  for (size_t page : {1, 2, 3, 100}) {
    INFO("page " << page);
    CHECK(FrontOf(trials, page, dirs) == std::vector<int>{1, 3, 4, 8});
  }
  FrontBuilder b(dirs);
  b.Add(trials);
  CHECK(b.complete() == 9);
  CHECK(b.feasible() == 7);

  // All infeasible: an empty front.
  FrontBuilder none(dirs);
  none.Add({Trial(0, {1, 1}, {1}), Trial(1, {0, 2}, {0.5, -1})});
  CHECK(none.front().empty());
  CHECK(none.complete() == 2);
  CHECK(none.feasible() == 0);
}

TEST_CASE("FrontBuilder agrees with ParetoFront of the whole set, three objectives", "[best]") {
  const std::vector<Direction> dirs = {Direction::kMinimize, Direction::kMaximize,
                                       Direction::kMinimize};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coarse(0, 5);  // coarse values: many ties and duplicates
  std::vector<TrialRecord> trials;
  for (int i = 0; i < 300; ++i) {
    std::vector<double> c;
    if (i % 7 == 0) c = {1.0};
    if (i % 5 == 0) c = {-1.0, -2.0};
    trials.push_back(Trial(i, {double(coarse(rng)), double(coarse(rng)), double(coarse(rng))}, c,
                           i % 11 == 0 ? TrialState::kPruned : TrialState::kComplete));
  }
  std::vector<int> whole;
  for (size_t i : sampler::pareto::ParetoFront(trials, dirs)) whole.push_back(trials[i].number);
  REQUIRE(!whole.empty());
  for (size_t page : {1, 17, 256}) CHECK(FrontOf(trials, page, dirs) == whole);
  for (int n : whole) {
    CHECK(trials[n].Feasible());
    CHECK(trials[n].state == TrialState::kComplete);
  }
}

TEST_CASE("BestFeasible: best value among feasible COMPLETE trials, lowest number on ties",
          "[best]") {
  std::vector<TrialRecord> trials = {
      Trial(0, {3.0}),          Trial(1, {-5.0}, {0.2}),  // best value, infeasible
      Trial(2, {1.0}, {0.0}),   Trial(3, {1.0}),          // equal to 2: 2 wins
      Trial(4, {std::nan("")}), Trial(5, {}, {}, TrialState::kPruned),
      Trial(6, {9.0}),
  };
  trials[5].value = -100;  // a pruned trial's last intermediate value is never the best
  BestFeasible min(Direction::kMinimize);
  min.Add(trials);
  REQUIRE(min.best());
  CHECK(min.best()->number == 2);
  BestFeasible max(Direction::kMaximize);
  max.Add({trials.begin(), trials.begin() + 3});
  max.Add({trials.begin() + 3, trials.end()});
  REQUIRE(max.best());
  CHECK(max.best()->number == 6);
  BestFeasible none(Direction::kMinimize);
  none.Add({Trial(0, {1.0}, {1.0}), Trial(1, {0.0}, {0.0, 2.0})});
  CHECK(!none.best());
}

namespace {

constexpr int kBig = 600;  // more than two pages (kTrialsPerPiece)

struct StoredStudy {
  std::unique_ptr<storage::Storage> storage;
  VerbContext context;
  int64_t study_id = 0;

  explicit StoredStudy(std::vector<Direction> directions) {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(*opened);
    context.storage = storage.get();
    context.state_dir = "/nonexistent";
    model::NewStudy ns;
    ns.name = "s";
    ns.direction = directions[0];
    ns.directions = directions;
    ns.n_trials = kBig;
    ns.spec_toml = "[study]\n";
    ns.spec_path = "/s.toml";
    auto study = storage->CreateStudy(ns, 1);
    REQUIRE(study.ok());
    study_id = study->id;
  }

  void Finish(TrialState state, std::vector<double> values, std::vector<double> constraints) {
    config::Distribution d;
    d.type = config::ParamType::kFloat;
    d.low = 0;
    d.high = 1;
    auto t = storage->CreateTrial(study_id, {{"x", {0.5, d}}}, 10);
    REQUIRE(t.ok());
    REQUIRE(storage->MarkRunning(t->id, {100, 100, 1}, 20).ok());
    model::TrialOutcome o;
    o.state = state;
    if (state == TrialState::kComplete) {
      o.values = values;
      if (values.size() == 1) o.value = values[0];
    }
    o.constraints = std::move(constraints);
    REQUIRE(storage->FinishTrial(t->id, o, 22).ok());
  }

  common::Result<json::value> Best() { return HandleVerb(context, "best", {{"study", "s"}}); }
};

}  // namespace

TEST_CASE("best verb, several objectives: the front of a study larger than a page",
          "[best][storage]") {
  StoredStudy s({Direction::kMinimize, Direction::kMinimize});
  std::vector<int> expected;
  REQUIRE(s.storage->BeginBatch().ok());
  for (int i = 0; i < kBig; ++i) {
    if (i % 10 == 9) {
      s.Finish(TrialState::kFail, {}, {});
      continue;
    }
    // Points on the line x + y = 600 form the front; every third is infeasible (a better point
    // x + y = 500 that is infeasible must not hide them); the rest lie behind the line.
    const double x = i;
    if (i % 3 == 0) {
      s.Finish(TrialState::kComplete, {x, kBig - x}, {-1.0});
      expected.push_back(i);
    } else if (i % 3 == 1) {
      s.Finish(TrialState::kComplete, {x, kBig - 100 - x}, {2.0});
    } else {
      s.Finish(TrialState::kComplete, {x + 3, kBig - x + 3}, {});
    }
  }
  REQUIRE(s.storage->CommitBatch().ok());
  common::Result<json::value> r = s.Best();
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  const json::object& o = r->as_object();
  CHECK(o.at("study") == "s");
  CHECK(o.at("directions") == json::array{"minimize", "minimize"});
  std::vector<int> got;
  for (const json::value& t : o.at("best_trials").as_array()) {
    got.push_back(static_cast<int>(t.at("number").as_int64()));
  }
  CHECK(got == expected);
  CHECK(o.at("complete").as_int64() == kBig - kBig / 10);
  // Feasible: i % 3 != 1 among the COMPLETE trials.
  int64_t feasible = 0;
  for (int i = 0; i < kBig; ++i) feasible += i % 10 != 9 && i % 3 != 1;
  CHECK(o.at("feasible").as_int64() == feasible);
}

TEST_CASE("best verb, several objectives, every trial infeasible: an empty front",
          "[best][storage]") {
  StoredStudy s({Direction::kMinimize, Direction::kMaximize});
  s.Finish(TrialState::kComplete, {1, 2}, {0.5});
  s.Finish(TrialState::kComplete, {0, 3}, {1e-9});
  common::Result<json::value> r = s.Best();
  REQUIRE(r.ok());
  CHECK(r->at("best_trials").as_array().empty());
  CHECK(r->at("complete").as_int64() == 2);
  CHECK(r->at("feasible").as_int64() == 0);
}

TEST_CASE("best verb, one objective with constraints: the best feasible trial", "[best][storage]") {
  StoredStudy s({Direction::kMinimize});
  common::Result<json::value> empty = s.Best();
  REQUIRE(!empty.ok());
  CHECK(empty.status().message() == "study \"s\" has no COMPLETE trial yet");
  s.Finish(TrialState::kComplete, {5.0}, {0.3});
  common::Result<json::value> infeasible = s.Best();
  REQUIRE(!infeasible.ok());
  CHECK(infeasible.status().code() == common::Code::kNotFound);
  CHECK_THAT(infeasible.status().message(), Catch::Contains("no feasible COMPLETE trial"));
  REQUIRE(s.storage->BeginBatch().ok());
  for (int i = 0; i < kBig; ++i) {
    // The lowest values are infeasible; the best feasible one is i = 449, trial 450.
    const double v = 1000.0 - i;
    s.Finish(TrialState::kComplete, {v}, {i >= 450 ? 1.0 : -1.0});
  }
  REQUIRE(s.storage->CommitBatch().ok());
  common::Result<json::value> r = s.Best();
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->at("number").as_int64() == 450);
  // status shows the same best.
  common::Result<json::value> st = HandleVerb(s.context, "status", {{"study", "s"}});
  REQUIRE(st.ok());
  CHECK(st->at("best").at("number").as_int64() == 450);
}

}  // namespace triald::daemon
