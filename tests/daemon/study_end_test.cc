// How a study ends when it cannot go on, and what the sampler is asked per trial: a study whose
// sampler fails ends FAILED (not COMPLETE) with the reason in a study_failed event, which
// `status` shows; a trial's relative sample is computed once, when its parameters are drawn.
// Runs the Scheduler on SQLite in memory with a fake launcher and environment (no file system).

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "daemon/control/verbs.h"
#include "daemon/sampler/random_sampler.h"
#include "daemon/scheduler.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fake_scheduler_env.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

namespace json = boost::json;
using model::StudyState;
using testing::FakeLauncher;

// A random sampler that counts what it is asked, per trial number, and fails every
// independent draw from trial `fail_from` on.
class EndCountingSampler final : public sampler::Sampler {
 public:
  struct Counts {
    std::map<int, int> relative;  // SampleRelative calls by trial number
    int fail_from = 1 << 30;
  };
  explicit EndCountingSampler(Counts* counts) : inner_(7), counts_(counts) {}

  config::SearchSpace InferRelativeSearchSpace(const sampler::StudyView& study,
                                               int number) override {
    return inner_.InferRelativeSearchSpace(study, number);
  }
  common::Result<config::ParamValues> SampleRelative(const sampler::StudyView& study, int number,
                                                     const config::SearchSpace& space) override {
    ++counts_->relative[number];
    return inner_.SampleRelative(study, number, space);
  }
  common::Result<double> SampleIndependent(const sampler::StudyView& study, int number,
                                           const config::ParamSpec& param) override {
    if (number >= counts_->fail_from) {
      return common::Internal("the model could not be fitted (trial " + std::to_string(number) +
                              ")");
    }
    return inner_.SampleIndependent(study, number, param);
  }

 private:
  sampler::RandomSampler inner_;
  Counts* counts_;
};

struct EndFixture {
  testing::FakeClock clock;
  FakeLauncher launcher;
  testing::FakeSchedulerEnv env;
  testing::FakeLeftovers leftovers;
  std::unique_ptr<storage::Storage> storage;
  EndCountingSampler::Counts counts;
  std::unique_ptr<Scheduler> scheduler;

  EndFixture() {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    storage = std::move(opened).value();
    SchedulerOptions so;
    so.storage = storage.get();
    so.launcher = &launcher;
    so.clock = &clock;
    so.state_dir = "/srv/triald-test";
    so.max_workers = 2;
    so.base_env = {"PATH=/usr/bin"};
    so.leftovers = &leftovers;
    so.env = &env;
    so.make_sampler =
        [this](const config::SamplerConfig&,
               const config::SearchSpace&) -> common::Result<std::unique_ptr<sampler::Sampler>> {
      return std::unique_ptr<sampler::Sampler>(std::make_unique<EndCountingSampler>(&counts));
    };
    scheduler = std::make_unique<Scheduler>(std::move(so));
    REQUIRE(scheduler->Recover().ok());
  }

  model::StudyRecord Submit(const std::string& name, int n_trials) {
    const std::string toml = "[study]\nname = \"" + name +
                             "\"\nn_trials = " + std::to_string(n_trials) +
                             "\nparallelism = 1\n\n[objective]\nkind = \"exec\"\ncommand = "
                             "[\"train\"]\n\n[space.lr]\ntype = \"float\"\nlow = 0.001\nhigh = "
                             "0.1\n";
    auto rec = scheduler->Submit({toml, "/sweeps/" + name + ".toml"});
    INFO(rec.status().ToString());
    REQUIRE(rec.ok());
    return *rec;
  }
  model::StudyRecord Stored(const std::string& name) {
    auto rec = storage->GetStudy(name);
    REQUIRE(rec.ok());
    return *rec;
  }
  std::vector<std::pair<std::string, std::string>> Events(int64_t study_id) {
    auto r = storage->GetEvents(study_id);
    REQUIRE(r.ok());
    std::vector<std::pair<std::string, std::string>> out;
    for (const model::EventRecord& e : *r) out.emplace_back(e.kind, e.detail);
    return out;
  }
  json::object Status(const std::string& name) {
    VerbContext context;
    context.storage = storage.get();
    context.state_dir = "/srv/triald-test";
    auto r = HandleVerb(context, "status", json::object{{"study", name}});
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return r->as_object();
  }
};

TEST_CASE("a study whose sampler fails ends FAILED with the reason, and status shows it",
          "[scheduler][study_end]") {
  EndFixture f;
  f.counts.fail_from = 2;  // trials 0 and 1 are drawn; the draw for trial 2 fails
  model::StudyRecord rec = f.Submit("s", 5);
  for (int i = 0; i < 2; ++i) {
    FakeLauncher::Launched* l = f.launcher.Find("s", i);
    REQUIRE(l != nullptr);
    f.launcher.Final(*l, 0.5);
    f.launcher.ExitCode(*l, 0);
  }
  // No third trial: the study ended with the two it had, and says why.
  CHECK(f.launcher.launch_count() == 2);
  CHECK(f.scheduler->active_study_count() == 0);
  CHECK(f.Stored("s").state == StudyState::kFailed);
  std::string failed_detail;
  for (const auto& [kind, detail] : f.Events(rec.id)) {
    CHECK(kind != "study_complete");
    if (kind == "study_failed") failed_detail = detail;
  }
  CHECK_THAT(failed_detail, Catch::Contains("sampler failed") &&
                                Catch::Contains("the model could not be fitted (trial 2)"));
  json::object status = f.Status("s");
  CHECK(status.at("state") == "FAILED");
  REQUIRE(status.at("failure").is_string());
  CHECK_THAT(std::string(status.at("failure").as_string().c_str()),
             Catch::Contains("the model could not be fitted"));
}

TEST_CASE("a study that ends normally is COMPLETE, with no failure in status",
          "[scheduler][study_end]") {
  EndFixture f;
  f.Submit("ok", 2);
  for (int i = 0; i < 2; ++i) {
    FakeLauncher::Launched* l = f.launcher.Find("ok", i);
    REQUIRE(l != nullptr);
    f.launcher.Final(*l, 1.0);
    f.launcher.ExitCode(*l, 0);
  }
  CHECK(f.Stored("ok").state == StudyState::kComplete);
  json::object status = f.Status("ok");
  CHECK(status.at("state") == "COMPLETE");
  CHECK(status.at("failure").is_null());
}

TEST_CASE("a trial's relative sample is computed once, when its parameters are drawn",
          "[scheduler][study_end][suggest]") {
  EndFixture f;
  f.Submit("r", 2);
  FakeLauncher::Launched* l = f.launcher.Find("r", 0);
  REQUIRE(l != nullptr);
  // A define-by-run suggest after the start: answered from the sample drawn with the trial.
  proto::SuggestDistribution d;
  d.type = "float";
  d.low = proto::SuggestNumber{0.0, false};
  d.high = proto::SuggestNumber{1.0, false};
  f.launcher.Suggest(*l, "momentum", d);
  REQUIRE(l->answers.size() == 1);
  CHECK_THAT(l->answers[0], Catch::Contains("momentum"));
  f.launcher.Final(*l, 0.5);
  f.launcher.ExitCode(*l, 0);
  FakeLauncher::Launched* next = f.launcher.Find("r", 1);
  REQUIRE(next != nullptr);
  f.launcher.Suggest(*next, "momentum", d);
  CHECK(f.counts.relative == std::map<int, int>{{0, 1}, {1, 1}});
}

}  // namespace
}  // namespace triald::daemon
