// StudyLoader (daemon/scheduler/study_loader.h): a submitted sweep stored as a new study with its
// event in one step, or nothing stored at all; a stored study loaded with its trials, against
// SQLite in memory and a fake environment (no file system).

#include "daemon/scheduler/study_loader.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tests/daemon/fake_scheduler_env.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/parts_fixture.h"

namespace triald::daemon {
namespace {

const char* const kSweep = R"([study]
name = "s"
n_trials = 4
parallelism = 2

[objective]
kind = "exec"
command = ["train"]

[space.x]
type = "float"
low = 0
high = 1
)";

struct LoaderFixture : PartsFixture {
  testing::FakeSchedulerEnv env;
  std::string sampler_error;  // the sampler factory fails with it when not empty
  std::unique_ptr<StudyLoader> loader;

  LoaderFixture() {
    StudyLoader::Options o = LoaderOptions(&env);
    o.seed_source = [] { return uint64_t{77}; };
    o.make_sampler = [this](const config::SamplerConfig& c, const config::SearchSpace& space)
        -> common::Result<std::unique_ptr<sampler::Sampler>> {
      if (!sampler_error.empty()) return common::InvalidArgument(sampler_error);
      return sampler::MakeSampler(c, space);
    };
    loader = std::make_unique<StudyLoader>(std::move(o));
  }
  size_t StoredStudies() {
    auto r = storage->ListStudies();
    REQUIRE(r.ok());
    return r->size();
  }
  std::vector<std::string> EventKinds(int64_t study_id) { return EventsOf(study_id); }
};

TEST_CASE("study loader: a submitted sweep is stored with its event and a built sampler",
          "[scheduler][loader]") {
  LoaderFixture f;
  auto study = f.loader->Submit({kSweep, "/s/a.toml"}, {});
  INFO(study.status().ToString());
  REQUIRE(study.ok());
  const StudyRuntime& rt = **study;
  CHECK(rt.record.name == "s");
  CHECK(rt.record.state == model::StudyState::kRunning);
  CHECK(rt.record.seed == 77);  // the sweep gives none: drawn from seed_source
  CHECK(rt.spec.study.parallelism == 2);
  CHECK(rt.sampler != nullptr);
  CHECK(rt.pruner != nullptr);
  CHECK(rt.trials.empty());
  auto stored = f.storage->GetStudy("s");
  REQUIRE(stored.ok());
  CHECK(stored->id == rt.record.id);
  CHECK(f.EventKinds(rt.record.id) == std::vector<std::string>{"study_submitted"});
}

TEST_CASE("study loader: a sweep refused leaves nothing stored, and says where",
          "[scheduler][loader]") {
  LoaderFixture f;
  SECTION("admission refuses it") {
    f.env.missing_executables = {"train"};
    auto study = f.loader->Submit({kSweep, "/s/a.toml"}, {});
    REQUIRE_FALSE(study.ok());
    CHECK_THAT(study.status().message(), Catch::StartsWith("/s/a.toml: [objective] command[0]"));
  }
  SECTION("its sampler cannot be built") {
    f.sampler_error = "no such sampler";
    auto study = f.loader->Submit({kSweep, ""}, {});
    REQUIRE_FALSE(study.ok());
    CHECK_THAT(study.status().message(),
               Catch::StartsWith("<sweep>") && Catch::Contains("no such sampler"));
  }
  SECTION("its name is taken") {
    REQUIRE(f.loader->Submit({kSweep, "/s/a.toml"}, {}).ok());
    auto again = f.loader->Submit({kSweep, "/s/b.toml"}, {});
    REQUIRE_FALSE(again.ok());
    CHECK(again.status().code() == common::Code::kAlreadyExists);
    CHECK_THAT(again.status().message(), Catch::StartsWith("/s/b.toml: [study] name = \"s\""));
    CHECK(f.StoredStudies() == 1);
    return;
  }
  CHECK(f.StoredStudies() == 0);
}

TEST_CASE("study loader: a stored study is loaded with its trials counted", "[scheduler][loader]") {
  LoaderFixture f;
  auto submitted = f.loader->Submit({kSweep, "/s/a.toml"}, {});
  REQUIRE(submitted.ok());
  const int64_t id = (*submitted)->record.id;
  std::vector<model::TrialRecord> created;
  for (int i = 0; i < 3; ++i) {
    auto t = f.storage->CreateTrial(id, {}, 2);
    REQUIRE(t.ok());
    created.push_back(*t);
  }
  model::TrialOutcome done;
  done.state = model::TrialState::kComplete;
  done.value = 0.5;
  done.values = {0.5};
  REQUIRE(f.storage->FinishTrial(created[0].id, done, 3).ok());
  f.clock.Advance(12);
  auto stored = f.storage->GetStudy("s");
  REQUIRE(stored.ok());

  auto loaded = f.loader->Load(*stored);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  const StudyRuntime& rt = **loaded;
  CHECK(rt.trials.size() == 3);
  CHECK(rt.finished == 1);
  CHECK(rt.waiting == std::deque<int>{1, 2});
  CHECK(rt.synced_at == f.clock.MonotonicSeconds());
  CHECK(rt.sampler != nullptr);

  SECTION("unless its sampler cannot be built") {
    f.sampler_error = "no such sampler";
    auto failed = f.loader->Load(*stored);
    REQUIRE_FALSE(failed.ok());
    CHECK_THAT(failed.status().message(), Catch::Contains("no such sampler"));
  }
}

}  // namespace
}  // namespace triald::daemon
