// TrialChannel (daemon/scheduler/trial_channel.h): one running trial's lines and requests,
// against SQLite in memory, a scripted pruner and a process that records what it was told.

#include "daemon/scheduler/trial_channel.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "daemon/sampler/random_sampler.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

using launcher::StopReason;
using proto::ReportType;

// What the channel told the trial's process.
class RecordingProcess final : public launcher::TrialProcess {
 public:
  std::vector<std::string> answers;
  std::vector<StopReason> stops, deferred_stops;
  std::string protocol_error;

  const model::ProcessIdentity& identity() const override { return id_; }
  bool started() const override { return true; }
  void Stop(StopReason reason) override { stops.push_back(reason); }
  void StopAfterGrace(StopReason reason) override { deferred_stops.push_back(reason); }
  void Answer(const std::string& line) override { answers.push_back(line); }
  void FailProtocol(const std::string& message) override {
    if (protocol_error.empty()) protocol_error = message;
  }

 private:
  model::ProcessIdentity id_{100, 100, 1};
};

// A sampler that counts its relative samples.
class CountingSampler final : public sampler::Sampler {
 public:
  int relative = 0;
  common::Result<config::ParamValues> SampleRelative(const sampler::StudyView&, int,
                                                     const config::SearchSpace&) override {
    ++relative;
    return config::ParamValues{};
  }
  common::Result<double> SampleIndependent(const sampler::StudyView& study, int number,
                                           const config::ParamSpec& param) override {
    return inner_.SampleIndependent(study, number, param);
  }

 private:
  sampler::RandomSampler inner_{3};
};

struct Fixture {
  std::unique_ptr<storage::Storage> storage;
  StudyRuntime study;
  CountingSampler* sampler = nullptr;
  std::shared_ptr<std::vector<testing::ScriptedPruner::Question>> asked =
      std::make_shared<std::vector<testing::ScriptedPruner::Question>>();
  bool prune = false;  // the pruner's answer
  int refreshes = 0;
  RecordingProcess process;
  std::unique_ptr<TrialChannel> channel;

  explicit Fixture(const std::string& kind = "exec", int64_t max_steps = 10'000) {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(opened).value();
    model::NewStudy ns;
    ns.name = "c";
    ns.n_trials = 1;
    ns.spec_toml = "[study]\n";
    auto rec = storage->CreateStudy(ns, 1);
    REQUIRE(rec.ok());
    study.record = *rec;
    study.spec.objective.kind = kind;
    study.spec.study.max_intermediate_steps = max_steps;
    auto trial = storage->CreateTrial(rec->id, {}, 2);
    REQUIRE(trial.ok());
    REQUIRE(storage->MarkRunning(trial->id, {100, 100, 1}, 3).ok());
    study.trials.push_back(*trial);
    auto owned = std::make_unique<CountingSampler>();
    sampler = owned.get();
    study.sampler = std::move(owned);
    study.pruner = std::make_unique<testing::ScriptedPruner>(
        [this](const pruner::PruneContext&) { return prune; }, asked);
    TrialChannel::Options o;
    o.storage = storage.get();
    o.logger = common::MakeNullLogger();
    o.process = &process;
    o.study = &study;
    o.number = 0;
    o.refresh_for_pruning = [this] { ++refreshes; };
    channel = std::make_unique<TrialChannel>(std::move(o));
  }

  void Send(proto::ReportMessage m) { channel->OnMessage(m); }
  void Report(int64_t step, double value) {
    proto::ReportMessage m;
    m.type = ReportType::kReport;
    m.step = step;
    m.value = value;
    Send(m);
  }
  void Suggest(const std::string& name, double low, double high) {
    proto::ReportMessage m;
    m.type = ReportType::kSuggest;
    m.name = name;
    m.distribution.type = "float";
    m.distribution.low = proto::SuggestNumber{low, false, 0};
    m.distribution.high = proto::SuggestNumber{high, false, 0};
    Send(m);
  }
  model::TrialRecord Stored() {
    auto trials = storage->GetTrials(study.record.id);
    REQUIRE(trials.ok());
    REQUIRE(trials->size() == 1);
    return trials->front();
  }
};

TEST_CASE("trial channel: a report is stored, the pruner asked, and a yes stops the trial",
          "[scheduler][channel]") {
  Fixture f;
  f.Report(1, 0.5);
  CHECK(f.refreshes == 1);
  REQUIRE(f.asked->size() == 1);
  CHECK(f.asked->back().intermediate == std::map<int64_t, double>{{1, 0.5}});
  CHECK(f.process.stops.empty());
  f.prune = true;
  f.Report(2, 0.9);
  CHECK(f.channel->pruned());
  CHECK(f.process.stops == std::vector<StopReason>{StopReason::kPrune});
  // Later reports are dropped: the trial ends at the step it was pruned at.
  f.Report(3, 0.1);
  CHECK(f.asked->size() == 2);
  CHECK(f.Stored().intermediate == std::map<int64_t, double>{{1, 0.5}, {2, 0.9}});
}

TEST_CASE("trial channel: a python trial is pruned cooperatively, and learns it by should_prune",
          "[scheduler][channel]") {
  Fixture f("python");
  f.prune = true;
  f.Report(1, 0.5);
  CHECK(f.process.stops.empty());
  CHECK(f.process.deferred_stops == std::vector<StopReason>{StopReason::kPrune});
  proto::ReportMessage ask;
  ask.type = ReportType::kShouldPrune;
  f.Send(ask);
  REQUIRE(f.process.answers.size() == 1);
  CHECK(f.process.answers[0] == proto::EncodeShouldPruneAnswer(true));
}

TEST_CASE("trial channel: relative_params is answered with the trial's relative sample",
          "[scheduler][channel]") {
  Fixture f("python");
  proto::ReportMessage ask;
  ask.type = ReportType::kRelativeParams;
  f.Send(ask);
  REQUIRE(f.process.answers.size() == 1);
  // The fixture's sampler draws no joint sample: an empty object, never an error.
  CHECK(f.process.answers[0] == "{\"type\":\"relative_params\",\"params\":{}}\n");
  CHECK(f.process.protocol_error.empty());
}

TEST_CASE("trial channel: a report over the caps ends the trial FAIL(protocol)",
          "[scheduler][channel]") {
  Fixture f("exec", /*max_steps=*/1);
  f.Report(1, 0.5);
  CHECK(f.process.protocol_error.empty());
  f.Report(2, 0.5);
  CHECK_THAT(f.process.protocol_error, Catch::Contains("max_intermediate_steps"));
  CHECK(f.Stored().intermediate.size() == 1);
}

TEST_CASE("trial channel: suggests are answered, stored, and asked again alike",
          "[scheduler][channel][suggest]") {
  Fixture f;
  f.Suggest("lr", 0.0, 1.0);
  REQUIRE(f.process.answers.size() == 1);
  CHECK_THAT(f.process.answers[0], Catch::Contains("\"lr\""));
  REQUIRE(f.Stored().params.count("lr") == 1);
  f.Suggest("lr", 0.0, 1.0);
  REQUIRE(f.process.answers.size() == 2);
  CHECK(f.process.answers[1] == f.process.answers[0]);
  CHECK(f.sampler->relative == 1);  // the first suggest started the sample
  // Another distribution for the same name is refused, with the answer first.
  f.Suggest("lr", 0.0, 2.0);
  REQUIRE(f.process.answers.size() == 3);
  CHECK_THAT(f.process.answers[2], Catch::Contains("error"));
  CHECK_THAT(f.process.protocol_error, Catch::Contains("lr"));
}

TEST_CASE("trial channel: a suggest after the final line is refused", "[scheduler][channel]") {
  Fixture f;
  proto::ReportMessage fin;
  fin.type = ReportType::kFinal;
  fin.values = {1.5};
  f.Send(fin);
  f.Suggest("lr", 0.0, 1.0);
  CHECK_THAT(f.process.protocol_error, Catch::Contains("after the final value"));
  TrialObservation seen;
  f.channel->Observe(&seen);
  CHECK(seen.final_values == std::vector<double>{1.5});
}

TEST_CASE("trial channel: a sample drawn with the trial is used, not computed again",
          "[scheduler][channel][suggest]") {
  Fixture f;
  sampler::TrialSample drawn;
  drawn.trial_number = 0;
  f.channel->StartSample(drawn);
  f.Suggest("lr", 0.0, 1.0);
  REQUIRE(f.process.answers.size() == 1);
  CHECK(f.sampler->relative == 0);
}

TEST_CASE("trial channel: nothing is stored once another node ended the trial",
          "[scheduler][channel]") {
  Fixture f;
  f.channel->MarkTakenOver();
  f.Report(1, 0.5);
  proto::ReportMessage attr;
  attr.type = ReportType::kAttr;
  attr.key = "k";
  attr.json_value = "1";
  f.Send(attr);
  CHECK(f.asked->empty());
  CHECK(f.Stored().intermediate.empty());
  CHECK(f.Stored().attrs.empty());
}

}  // namespace
}  // namespace triald::daemon
