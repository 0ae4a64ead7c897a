// TrialGpus (daemon/scheduler/trial_gpus.h): every slot a trial holds goes back exactly once,
// straight to the pool when no process of the trial ran, through draining when one did.

#include "daemon/scheduler/trial_gpus.h"

#include <catch2/catch.hpp>
#include <memory>
#include <utility>

#include "daemon/devices/gpu_pool.h"
#include "daemon/scheduler/gpu_drains.h"
#include "daemon/storage/sqlite_storage.h"
#include "tests/daemon/fakes.h"

namespace triald::daemon {
namespace {

devices::GpuPoolOptions TwoGpus(devices::GpuProbe* probe = nullptr) {
  devices::GpuPoolOptions o;
  o.gpus = {0, 1};
  o.probe = probe;
  o.release_timeout_s = 60;
  o.process_group_of = [](pid_t pid) { return pid; };
  return o;
}

TEST_CASE("trial gpus: slots of a trial that never ran go straight back, once",
          "[scheduler][gpus]") {
  devices::GpuPool pool(TwoGpus());
  {
    auto got = pool.Acquire(2);
    REQUIRE(got);
    TrialGpus gpus(&pool, std::move(*got));
    CHECK(pool.free_slots() == 0);
    TrialGpus moved = std::move(gpus);  // the trial takes them
    CHECK(gpus.empty());
    CHECK(moved.slots().size() == 2);
    CHECK(pool.free_slots() == 0);
  }
  CHECK(pool.free_slots() == 2);
  CHECK_FALSE(pool.draining());
}

TEST_CASE("trial gpus: a trial that ran drains its slots, and gives nothing back twice",
          "[scheduler][gpus]") {
  testing::FakeClock clock;
  auto opened = storage::OpenSqliteStorage({":memory:"});
  REQUIRE(opened.ok());
  std::unique_ptr<storage::Storage> storage = std::move(opened).value();
  testing::FakeGpuProbe probe(2);
  devices::GpuPool pool(TwoGpus(&probe));
  GpuDrains::Options o;
  o.pool = &pool;
  o.storage = storage.get();
  o.clock = &clock;
  o.logger = common::MakeNullLogger();
  GpuDrains drains(std::move(o));
  {
    auto got = pool.Acquire(1);
    REQUIRE(got);
    TrialGpus gpus(&pool, std::move(*got));
    gpus.AddProcess(4242);
    probe.Hold(0, 4242, 512);  // it still holds memory as it exits
    probe.Hold(1, 4242, 512);
    gpus.Sample(/*pgid=*/0);
    REQUIRE(gpus.peak());
    CHECK(*gpus.peak() == 512);
    gpus.Drain(drains, /*trial_id=*/1, /*study_id=*/1);
    CHECK(gpus.empty());
  }
  // Destroyed after Drain: nothing given back by it; the slot drains.
  CHECK(pool.free_slots() == 1);
  CHECK(pool.draining());
  probe.Hold(0, 4242, 0);
  probe.Hold(1, 4242, 0);
  drains.Collect();
  CHECK(pool.free_slots() == 2);
}

}  // namespace
}  // namespace triald::daemon
