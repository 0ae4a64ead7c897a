// Ask and tell ([objective] kind = "client", daemon/scheduler/client_asks.h) through the
// scheduler's API over the fake launcher: a client study starts a trial only when asked, its
// trials are launched with the asking connection and count toward parallelism and n_trials but
// not max_workers, and every refused ask says why. The real connection's side
// (launcher/client_launcher.h) is tested against a real triald by tests/proto/
// python_client_test.py.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "common/fd.h"
#include "daemon/scheduler.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/scheduler_harness.h"

namespace triald::daemon {
namespace {

using common::Code;
using model::StudyState;
using model::TrialState;
using testing::FakeLauncher;
using testing::SchedulerHarness;
using testing::SchedulerHarnessOptions;
using testing::Sweep;
using Launched = FakeLauncher::Launched;

// A connection as the control server hands it over (one end of a pipe will do: the fake
// launcher only keeps it).
std::shared_ptr<common::UniqueFd> Connection() {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::close(fds[1]);
  return std::make_shared<common::UniqueFd>(fds[0]);
}

Sweep ClientSweep(const std::string& name, int n_trials, int parallelism) {
  Sweep s;
  s.name = name;
  s.kind = "client";
  s.n_trials = n_trials;
  s.parallelism = parallelism;
  s.space = testing::kUnitSpace;
  return s;
}

TEST_CASE("a client study starts a trial only when asked, with the asking connection",
          "[scheduler][client]") {
  SchedulerHarnessOptions o;
  o.max_workers = 1;
  SchedulerHarness h(o);
  FakeLauncher& l = h.launcher();
  // A process of another study holds the host's only worker: asked trials do not need one.
  Sweep busy;
  busy.name = "busy";
  busy.n_trials = 1;
  h.SubmitOk(busy);
  REQUIRE(l.live_count("busy") == 1);
  h.SubmitOk(ClientSweep("c", 3, 2));
  h.scheduler().Pump();
  CHECK(l.live_count("c") == 0);  // nothing starts unasked
  CHECK(h.Trials("c").empty());

  std::shared_ptr<common::UniqueFd> first = Connection();
  REQUIRE(h.scheduler().Ask("c", first).ok());
  REQUIRE(l.live_count("c") == 1);
  Launched& a = *l.Live("c").front();
  CHECK(a.spec.client == first);  // the trial runs on the asking connection
  CHECK(a.trial == 0);
  CHECK(a.env().count("TRIALD_PARAMS") == 1);
  CHECK(h.Trials("c").at(0).state == TrialState::kRunning);
  REQUIRE(h.scheduler().Ask("c", Connection()).ok());
  CHECK(l.live_count("c") == 2);

  // Its parallelism: trials asked and not yet told.
  common::Status full = h.scheduler().Ask("c", Connection());
  CHECK(full.code() == Code::kFailedPrecondition);
  CHECK_THAT(full.message(), Catch::Contains("2 trial(s) asked and not yet told") &&
                                 Catch::Contains("trialctl set c parallelism=N"));
  CHECK(l.launch_count() == 3);  // busy's, and the two asked
  l.Complete(a, 0.5);
  REQUIRE(h.scheduler().Ask("c", Connection()).ok());
  CHECK(l.Live("c").back()->trial == 2);
  // All n_trials asked: refused; told, the study completes and says so.
  common::Status all = h.scheduler().Ask("c", Connection());
  CHECK(all.code() == Code::kFailedPrecondition);
  for (Launched* p : l.Live("c")) l.Complete(*p, 1.0);
  h.scheduler().Pump();
  CHECK(h.State("c") == StudyState::kComplete);
  common::Status done = h.scheduler().Ask("c", Connection());
  CHECK(done.code() == Code::kFailedPrecondition);
  CHECK_THAT(done.message(),
             Catch::Contains("is COMPLETE") &&
                 Catch::Contains("`trialctl extend c --n-trials N` allows more trials"));
}

TEST_CASE("an ask is refused, saying why: unknown, not a client study, paused, failed start",
          "[scheduler][client]") {
  SchedulerHarness h;
  FakeLauncher& l = h.launcher();
  CHECK(h.scheduler().Ask("nope", Connection()).code() == Code::kNotFound);
  Sweep exec;
  exec.name = "exec";
  h.SubmitOk(exec);
  common::Status not_client = h.scheduler().Ask("exec", Connection());
  CHECK(not_client.code() == Code::kFailedPrecondition);
  CHECK_THAT(not_client.message(), Catch::Contains("[objective] kind = \"exec\""));

  h.SubmitOk(ClientSweep("c", 5, 1));
  REQUIRE(h.scheduler().Pause("c", true).ok());
  common::Status paused = h.scheduler().Ask("c", Connection());
  CHECK_THAT(paused.message(),
             Catch::Contains("is paused") && Catch::Contains("`trialctl resume c`"));
  REQUIRE(h.scheduler().Pause("c", false).ok());
  CHECK(l.live_count("c") == 0);  // resuming starts nothing either

  // A launch that fails answers the ask (the connection stays the server's to answer on).
  l.FailNextLaunch("no connection");
  std::shared_ptr<common::UniqueFd> conn = Connection();
  common::Status failed = h.scheduler().Ask("c", conn);
  CHECK_FALSE(failed.ok());
  CHECK(conn->get() >= 0);
  CHECK(h.Trials("c").size() == 1);
  CHECK(h.Trials("c").at(0).state == TrialState::kWaiting);  // asked again, it starts
}

}  // namespace
}  // namespace triald::daemon
