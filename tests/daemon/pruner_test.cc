// Pruner contract (run against every pruner kind) and the factory.

#include "daemon/pruner/pruner.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/sweep.h"
#include "daemon/storage/records.h"

namespace triald::pruner {
namespace {

using storage::TrialRecord;
using storage::TrialState;

const std::vector<std::string> kPruners = {"nop"};

std::unique_ptr<Pruner> Make(const std::string& kind) {
  config::PrunerConfig config;
  config.kind = kind;
  auto r = MakePruner(config);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// Ten finished trials reporting 0..9 at steps 0..9 (trial i reports i at every step).
std::vector<TrialRecord> History() {
  std::vector<TrialRecord> trials;
  for (int i = 0; i < 10; ++i) {
    TrialRecord t;
    t.number = i;
    t.state = TrialState::kComplete;
    for (int step = 0; step < 10; ++step) t.intermediate[step] = i;
    t.value = i;
    trials.push_back(t);
  }
  return trials;
}

TEST_CASE("every pruner leaves a trial without intermediate values alone", "[pruner]") {
  const std::string kind = GENERATE(from_range(kPruners));
  INFO("pruner " << kind);
  auto pruner = Make(kind);
  std::vector<TrialRecord> trials = History();
  TrialRecord fresh;
  fresh.number = 10;
  fresh.state = TrialState::kRunning;
  trials.push_back(fresh);
  for (config::Direction d : {config::Direction::kMinimize, config::Direction::kMaximize}) {
    PruneContext context{d, &trials, &trials.back()};
    CHECK_FALSE(pruner->ShouldPrune(context));
  }
}

TEST_CASE("nop pruner never prunes, even a trial far worse than the rest", "[pruner]") {
  auto pruner = Make("nop");
  std::vector<TrialRecord> trials = History();
  TrialRecord worst;
  worst.number = 10;
  worst.state = TrialState::kRunning;
  trials.push_back(worst);
  for (int step = 0; step < 10; ++step) {
    trials.back().intermediate[step] = 1e9;
    for (config::Direction d : {config::Direction::kMinimize, config::Direction::kMaximize}) {
      PruneContext context{d, &trials, &trials.back()};
      CHECK_FALSE(pruner->ShouldPrune(context));
    }
  }
  NopPruner direct;
  PruneContext context{config::Direction::kMinimize, &trials, &trials.back()};
  CHECK_FALSE(direct.ShouldPrune(context));
}

TEST_CASE("MakePruner rejects an unknown kind, naming it and the known ones", "[pruner]") {
  config::PrunerConfig config;
  config.kind = "median";
  auto r = MakePruner(config);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == common::Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("\"median\"") && Catch::Contains("nop"));
}

}  // namespace
}  // namespace triald::pruner
