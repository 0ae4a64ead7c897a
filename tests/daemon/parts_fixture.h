#pragma once
// What the scheduler parts' tests (tests/daemon/*_test.cc of daemon/scheduler/) start from:
// SQLite in memory, a FakeClock, the StudyRecorder over both, and the events a study recorded.
// A part's own Fixture derives from PartsFixture and builds the part on these; MakeCoordinator
// and LoaderOptions fill the options of the parts most of them need, by field name.

#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "daemon/scheduler/node_coordinator.h"
#include "daemon/scheduler/scheduler_env.h"
#include "daemon/scheduler/study_loader.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {

struct PartsFixture {
  testing::FakeClock clock;
  std::unique_ptr<storage::Storage> storage = OpenMemory();
  std::unique_ptr<StudyRecorder> recorder = MakeRecorder(storage.get(), &clock);

  // The local coordinator over this storage (shared storage would give the shared one).
  std::unique_ptr<NodeCoordinator> MakeCoordinator() {
    CoordinatorOptions o;
    o.storage = storage.get();
    o.clock = &clock;
    o.logger = common::MakeNullLogger();
    return MakeNodeCoordinator(std::move(o));
  }

  // A StudyLoader's options over this storage; sweeps are admitted against `env`
  // with PATH=/usr/bin.
  StudyLoader::Options LoaderOptions(SchedulerEnv* env) {
    StudyLoader::Options o;
    o.storage = storage.get();
    o.clock = &clock;
    o.logger = common::MakeNullLogger();
    o.admission.env = env;
    o.admission.base_env = {"PATH=/usr/bin"};
    return o;
  }

  // A study stored as created at time 1, with nothing but its name and trial budget.
  model::StudyRecord StoredStudy(const std::string& name, int n_trials) {
    model::NewStudy ns;
    ns.name = name;
    ns.n_trials = n_trials;
    ns.spec_toml = "[study]\n";
    auto rec = storage->CreateStudy(ns, 1);
    REQUIRE(rec.ok());
    return *rec;
  }

  // The events of `study_id` in the order stored, each as `format` writes it (default: its kind).
  std::vector<std::string> EventsOf(
      int64_t study_id, const std::function<std::string(const model::EventRecord&)>& format =
                            [](const model::EventRecord& e) { return e.kind; }) {
    auto r = storage->GetEvents(study_id);
    REQUIRE(r.ok());
    std::vector<std::string> out;
    for (const auto& e : *r) out.push_back(format(e));
    return out;
  }

 private:
  static std::unique_ptr<storage::Storage> OpenMemory() {
    auto opened = storage::OpenSqliteStorage({":memory:"});
    REQUIRE(opened.ok());
    return std::move(opened).value();
  }
  static std::unique_ptr<StudyRecorder> MakeRecorder(storage::Storage* storage,
                                                     const common::Clock* clock) {
    StudyRecorder::Options o;
    o.storage = storage;
    o.clock = clock;
    o.logger = common::MakeNullLogger();
    return std::make_unique<StudyRecorder>(std::move(o));
  }
};

}  // namespace triald::daemon
