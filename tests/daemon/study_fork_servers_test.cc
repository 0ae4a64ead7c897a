// StudyForkServers (daemon/scheduler/study_fork_servers.h): the launcher's fork server events as
// study events, a study's server state, and its release, over a FakeLauncher and SQLite in
// memory.

#include "daemon/scheduler/study_fork_servers.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "tests/daemon/fakes.h"
#include "tests/daemon/parts_fixture.h"

namespace triald::daemon {
namespace {

using Kind = launcher::ForkServerEvent::Kind;

struct ForkServersFixture : PartsFixture {
  testing::FakeLauncher launcher;
  StudyRuntime forked;  // a study whose sweep has a fork server
  StudyRuntime plain;   // one without
  std::unique_ptr<StudyForkServers> servers;

  ForkServersFixture() {
    forked.record = StoredStudy("forked", 1);
    plain.record = StoredStudy("plain", 1);
    forked.spec.objective.fork_server = true;
    StudyForkServers::Options o;
    o.launcher = &launcher;
    o.logger = common::MakeNullLogger();
    o.recorder = recorder.get();
    o.find_study = [this](const std::string& name) -> const StudyCache* {
      if (name == forked.record.name) return &forked;
      if (name == plain.record.name) return &plain;
      return nullptr;
    };
    servers = std::make_unique<StudyForkServers>(std::move(o));
  }
  std::vector<std::string> Events(int64_t study_id) {
    return EventsOf(study_id, [](const model::EventRecord& e) { return e.kind + ": " + e.detail; });
  }
};

TEST_CASE("fork servers: the launcher's events become events of the study of that name",
          "[scheduler][fork]") {
  ForkServersFixture f;
  f.launcher.ForkEvent("forked", Kind::kStarted, "pid 7, preloaded torch");
  f.launcher.ForkEvent("forked", Kind::kExited, "killed by signal 9");
  f.launcher.ForkEvent("gone", Kind::kOff, "no study of that name: dropped");
  CHECK(f.Events(f.forked.record.id) ==
        std::vector<std::string>{"fork_server_started: pid 7, preloaded torch",
                                 "fork_server_exited: killed by signal 9"});
  CHECK(f.Events(f.plain.record.id).empty());
  auto all = f.storage->GetEvents(std::nullopt);
  REQUIRE(all.ok());
  CHECK(all->size() == 2);
}

TEST_CASE("fork servers: a study's server state, \"not started\" before its first launch",
          "[scheduler][fork]") {
  ForkServersFixture f;
  CHECK_FALSE(f.servers->Status(f.plain).has_value());
  auto before = f.servers->Status(f.forked);
  REQUIRE(before.has_value());
  CHECK(before->state == "not started");
  launcher::ForkServerStatus on;
  on.state = "on";
  on.pid = 7;
  f.launcher.fork_status["forked"] = on;
  auto now = f.servers->Status(f.forked);
  REQUIRE(now.has_value());
  CHECK(now->state == "on");
  CHECK(now->pid == 7);
}

TEST_CASE("fork servers: only a study with a server releases one, the listener goes with them",
          "[scheduler][fork]") {
  ForkServersFixture f;
  f.servers->Release(f.plain);
  f.servers->Release(f.forked);
  CHECK(f.launcher.released == std::vector<std::string>{"forked"});
  f.servers->ReleaseAll();
  CHECK(f.launcher.released_all == 1);
  REQUIRE(f.launcher.fork_listener);
  f.servers.reset();
  CHECK_FALSE(f.launcher.fork_listener);
}

}  // namespace
}  // namespace triald::daemon
