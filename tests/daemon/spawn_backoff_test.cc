// SpawnBackoff and ClassifySpawnError: the policy for trials that could not be started, with
// the time given by the test (no clock, no fork).

#include "daemon/scheduler/spawn_backoff.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <vector>

namespace triald::daemon {
namespace {

using launcher::SpawnError;
using launcher::SpawnStep;

TEST_CASE("spawn errors: resource shortages and cgroups are transient, the rest persistent",
          "[spawn]") {
  for (int err : {EAGAIN, EMFILE, ENFILE, ENOMEM, ETXTBSY}) {
    INFO("errno " << err);
    CHECK(ClassifySpawnError({SpawnStep::kFork, err}) == SpawnCause::kTransient);
    CHECK(ClassifySpawnError({SpawnStep::kPrepare, err}) == SpawnCause::kTransient);
  }
  for (int err : {ENOENT, EACCES, ENOTDIR, ENOEXEC, E2BIG, ELOOP, 0}) {
    INFO("errno " << err);
    CHECK(ClassifySpawnError({SpawnStep::kExec, err}) == SpawnCause::kPersistent);
    CHECK(ClassifySpawnError({SpawnStep::kWorkdir, err}) == SpawnCause::kPersistent);
  }
  // Not allowed to become the submitter, or no account for it: a person has to act.
  for (int err : {EPERM, EINVAL, 0}) {
    INFO("errno " << err);
    CHECK(ClassifySpawnError({SpawnStep::kCredentials, err}) == SpawnCause::kPersistent);
  }
  // A cgroup that cannot be created is transient whatever its errno.
  for (int err : {ENOENT, EACCES, ENOSPC, 0}) {
    CHECK(ClassifySpawnError({SpawnStep::kCgroup, err}) == SpawnCause::kTransient);
  }
}

TEST_CASE("the back-off starts at 0.1 s, doubles and stops at 30 s", "[spawn]") {
  SpawnBackoff b;
  CHECK(b.Ready(0));
  CHECK_FALSE(b.backing_off());
  double now = 100;
  std::vector<double> delays;
  for (int i = 0; i < 40; ++i) {
    SpawnBackoff::Failure f = b.OnFailure({SpawnStep::kFork, EAGAIN}, "fork: busy", now);
    CHECK(f.failures == i + 1);
    CHECK(f.cause == SpawnCause::kTransient);
    CHECK_FALSE(f.held_now);
    delays.push_back(f.delay_s);
    CHECK_FALSE(b.Ready(now));
    CHECK_FALSE(b.Ready(now + f.delay_s * 0.99));
    CHECK(b.Ready(now + f.delay_s));
    now += f.delay_s;
  }
  CHECK(delays[0] == Approx(0.1));
  CHECK(delays[1] == Approx(0.2));
  CHECK(delays[2] == Approx(0.4));
  CHECK(delays[8] == Approx(25.6));
  CHECK(delays[9] == Approx(30));
  CHECK(delays[39] == Approx(30));
  CHECK_FALSE(b.held());  // transient causes never hold
  CHECK(b.reason() == "fork: busy");

  CHECK(b.OnStart());
  CHECK_FALSE(b.backing_off());
  CHECK(b.Ready(now));
  CHECK_FALSE(b.OnStart());  // nothing to recover from
  // After a start the next failure waits 0.1 s again.
  CHECK(b.OnFailure({SpawnStep::kFork, EAGAIN}, "again", now).delay_s == Approx(0.1));
}

TEST_CASE("three persistent failures in a row hold the study until a trial starts", "[spawn]") {
  SpawnBackoff b;
  const SpawnError missing{SpawnStep::kExec, ENOENT};
  CHECK_FALSE(b.OnFailure(missing, "exec /x: No such file or directory", 0).held_now);
  CHECK_FALSE(b.OnFailure(missing, "exec /x: No such file or directory", 1).held_now);
  CHECK_FALSE(b.held());
  SpawnBackoff::Failure third = b.OnFailure(missing, "exec /x: No such file or directory", 2);
  CHECK(third.held_now);
  CHECK(third.cause == SpawnCause::kPersistent);
  CHECK(b.held());
  // Held once: later failures do not hold it again, and it is still retried.
  CHECK_FALSE(b.OnFailure(missing, "exec /x: No such file or directory", 3).held_now);
  CHECK(b.held());
  CHECK(b.Ready(1000));
  SpawnBackoff::Snapshot s = b.Take(3);
  CHECK(s.held);
  CHECK(s.failures == 4);
  CHECK(s.cause == SpawnCause::kPersistent);
  CHECK(s.reason == "exec /x: No such file or directory");
  CHECK(s.retry_in_s == Approx(0.8));
  CHECK(b.Take(1000).retry_in_s == 0);

  CHECK(b.OnStart());
  CHECK_FALSE(b.held());
}

TEST_CASE("a transient failure between persistent ones restarts the count to holding", "[spawn]") {
  SpawnBackoff b;
  const SpawnError denied{SpawnStep::kExec, EACCES};
  b.OnFailure(denied, "denied", 0);
  b.OnFailure(denied, "denied", 0);
  b.OnFailure({SpawnStep::kFork, EAGAIN}, "busy", 0);
  CHECK_FALSE(b.OnFailure(denied, "denied", 0).held_now);
  CHECK_FALSE(b.OnFailure(denied, "denied", 0).held_now);
  CHECK(b.OnFailure(denied, "denied", 0).held_now);
  // The back-off itself counts every failure in a row: the sixth waits 0.1 * 2^5.
  CHECK(b.Take(0).retry_in_s == Approx(3.2));
}

}  // namespace
}  // namespace triald::daemon
