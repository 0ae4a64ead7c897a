// How a trial ended (daemon/scheduler/trial_outcome.h), one row per case: every FAIL reason,
// COMPLETE and PRUNED, with the exact detail messages users see in `trialctl trials`.

#include "daemon/scheduler/trial_outcome.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/utf8.h"

namespace triald::daemon {
namespace {

using launcher::StopReason;
using model::TrialState;

common::ExitStatus Exited(int code) {
  common::ExitStatus e;
  e.code = code;
  return e;
}

common::ExitStatus Killed(int sig, bool core = false) {
  common::ExitStatus e;
  e.signaled = true;
  e.signal = sig;
  e.core_dumped = core;
  return e;
}

struct Row {
  explicit Row(const char* n) : name(n) {}
  const char* name;
  // What was observed.
  StopReason stop = StopReason::kNone;
  common::ExitStatus exit;
  bool killed = false;
  std::string protocol_error;
  bool oom = false;
  std::string oom_detail;
  std::vector<double> finals;
  std::string worker_error;
  std::optional<double> last_intermediate;
  size_t n_objectives = 1;
  size_t measured_objectives = 0;
  std::vector<double> constraints;
  // What is stored.
  TrialState state = TrialState::kWaiting;
  std::optional<double> value;
  std::optional<std::vector<double>> values;  // unset: {value} when value is set, else none
  std::vector<double> stored_constraints;
  std::string reason;  // FAIL only
  std::string detail;  // FAIL only
};

std::vector<Row> Rows() {
  std::vector<Row> rows;
  auto add = [&](Row r) { rows.push_back(std::move(r)); };
  Row r("");

  r = Row("one final value, exit 0");
  r.exit = Exited(0), r.finals = {0.25}, r.state = TrialState::kComplete, r.value = 0.25;
  add(r);

  r = Row("pruned: the value of its largest step");
  r.stop = StopReason::kPrune, r.exit = Killed(SIGTERM), r.last_intermediate = 0.75;
  r.finals = {9.0}, r.state = TrialState::kPruned, r.value = 0.75;
  add(r);

  r = Row("pruned before any intermediate value: no value");
  r.stop = StopReason::kPrune, r.exit = Killed(SIGKILL), r.killed = true;
  r.state = TrialState::kPruned;
  add(r);

  r = Row("timeout");
  r.stop = StopReason::kTimeout, r.exit = Killed(SIGTERM), r.state = TrialState::kFail;
  r.reason = "timeout", r.detail = "exceeded trial_timeout of 2.5 s; killed by SIGTERM";
  add(r);

  r = Row("timeout that needed SIGKILL, with the worker's error");
  r.stop = StopReason::kTimeout, r.exit = Killed(SIGKILL), r.killed = true;
  r.worker_error = "stuck in a collective", r.state = TrialState::kFail, r.reason = "timeout";
  r.detail =
      "exceeded trial_timeout of 2.5 s; killed by SIGKILL (still running when the grace period "
      "after SIGTERM ran out); worker said: stuck in a collective";
  add(r);

  r = Row("timeout whose main process exited but whose group needed SIGKILL");
  r.stop = StopReason::kTimeout, r.exit = Exited(0), r.killed = true;
  r.state = TrialState::kFail, r.reason = "timeout";
  r.detail =
      "exceeded trial_timeout of 2.5 s; exited with code 0; its process group got SIGKILL when "
      "the grace period after SIGTERM ran out";
  add(r);

  r = Row("cancelled while running");
  r.stop = StopReason::kCancel, r.exit = Killed(SIGTERM), r.finals = {1.0};
  r.state = TrialState::kFail, r.reason = "cancelled",
  r.detail = "study cancelled; killed by SIGTERM";
  add(r);

  r = Row("stopped for a protocol error");
  r.stop = StopReason::kProtocol, r.exit = Killed(SIGTERM);
  r.protocol_error = "line 3: unknown type \"fnial\"", r.state = TrialState::kFail;
  r.reason = "protocol", r.detail = "line 3: unknown type \"fnial\"";
  add(r);

  r = Row("a protocol error seen after it exited on its own");
  r.exit = Exited(0), r.finals = {1.0}, r.protocol_error = "line 9: value is NaN";
  r.state = TrialState::kFail, r.reason = "protocol", r.detail = "line 9: value is NaN";
  add(r);

  r = Row("out of memory");
  r.exit = Killed(SIGKILL), r.oom = true, r.oom_detail = "memory.events counted 1 oom_kill";
  r.state = TrialState::kFail, r.reason = "oom";
  r.detail = "out of memory: memory.events counted 1 oom_kill; killed by SIGKILL";
  add(r);

  r = Row("an oom count on a trial that still succeeded");
  r.exit = Exited(0), r.oom = true, r.oom_detail = "memory.events counted 1 oom_kill";
  r.finals = {2.0}, r.state = TrialState::kComplete, r.value = 2.0;
  add(r);

  r = Row("killed by a signal");
  r.exit = Killed(SIGSEGV, /*core=*/true), r.state = TrialState::kFail, r.reason = "signal";
  r.detail = "killed by SIGSEGV (core dumped)";
  add(r);

  r = Row("non-zero exit, with the worker's error");
  r.exit = Exited(3), r.finals = {1.0}, r.worker_error = "no such file: data.bin";
  r.state = TrialState::kFail, r.reason = "exit";
  r.detail = "exited with code 3; worker said: no such file: data.bin";
  add(r);

  r = Row("exit 0 without a final value");
  r.exit = Exited(0), r.state = TrialState::kFail, r.reason = "protocol";
  r.detail = "exited with code 0 without reporting a final value";
  add(r);

  r = Row("exit 0 with two final values");
  r.exit = Exited(0), r.finals = {1.0, 2.0}, r.state = TrialState::kFail, r.reason = "protocol";
  r.detail =
      "final line carried 2 objective values; this study has 1 objective, so expected 1 value";
  add(r);

  r = Row("stopped by the daemon's shutdown");
  r.stop = StopReason::kShutdown, r.exit = Killed(SIGTERM), r.state = TrialState::kFail;
  r.reason = "shutdown", r.detail = "triald was stopped while the trial ran; killed by SIGTERM";
  add(r);

  r = Row("stopped by shutdown, after exiting 0 without a value");
  r.stop = StopReason::kShutdown, r.exit = Exited(0), r.state = TrialState::kFail;
  r.reason = "shutdown", r.detail = "triald was stopped while the trial ran; exited with code 0";
  add(r);

  r = Row("stopped by shutdown, but it finished with its value first");
  r.stop = StopReason::kShutdown, r.exit = Exited(0), r.finals = {4.0};
  r.state = TrialState::kComplete, r.value = 4.0;
  add(r);

  r = Row("stopped by shutdown, with a protocol error");
  r.stop = StopReason::kShutdown, r.exit = Killed(SIGTERM), r.protocol_error = "line 1: not JSON";
  r.state = TrialState::kFail, r.reason = "protocol", r.detail = "line 1: not JSON";
  add(r);

  r = Row("stopped by shutdown after reporting two values");
  r.stop = StopReason::kShutdown, r.exit = Exited(0), r.finals = {1.0, 2.0};
  r.state = TrialState::kFail, r.reason = "protocol";
  r.detail =
      "final line carried 2 objective values; this study has 1 objective, so expected 1 value";
  add(r);

  // Several objectives: values, never a single value.
  r = Row("two objectives, two final values");
  r.exit = Exited(0), r.finals = {0.31, 812.0}, r.n_objectives = 2;
  r.state = TrialState::kComplete, r.values = std::vector<double>{0.31, 812.0};
  add(r);

  r = Row("two objectives, one final value");
  r.exit = Exited(0), r.finals = {0.31}, r.n_objectives = 2;
  r.state = TrialState::kFail, r.reason = "protocol";
  r.detail =
      "final line carried 1 objective value; this study has 2 objectives, so expected 2 "
      "values";
  add(r);

  r = Row("one value and one measured objective, two final values");
  r.exit = Exited(0), r.finals = {0.31, 812.0}, r.measured_objectives = 1;
  r.state = TrialState::kFail, r.reason = "protocol";
  r.detail =
      "final line carried 2 objective values; this study has 2 objectives (1 of them measured "
      "by triald), so expected 1 value";
  add(r);

  r = Row("three objectives, four final values, stopped by shutdown");
  r.stop = StopReason::kShutdown, r.exit = Exited(0), r.finals = {1, 2, 3, 4}, r.n_objectives = 3;
  r.state = TrialState::kFail, r.reason = "protocol";
  r.detail =
      "final line carried 4 objective values; this study has 3 objectives, so expected 3 "
      "values";
  add(r);

  r = Row("two objectives, finished before the daemon's shutdown");
  r.stop = StopReason::kShutdown, r.exit = Exited(0), r.finals = {1, 2}, r.n_objectives = 2;
  r.state = TrialState::kComplete, r.values = std::vector<double>{1, 2};
  add(r);

  r = Row("two objectives, stopped for pruning: no value");
  r.stop = StopReason::kPrune, r.exit = Killed(SIGTERM), r.n_objectives = 2;
  r.last_intermediate = 0.5;
  r.state = TrialState::kPruned;
  add(r);

  // Constraints are kept on COMPLETE and PRUNED trials, dropped on FAIL.
  r = Row("constraints with one objective");
  r.exit = Exited(0), r.finals = {2.5}, r.constraints = {-1.0, 0.5};
  r.state = TrialState::kComplete, r.value = 2.5, r.stored_constraints = {-1.0, 0.5};
  add(r);

  r = Row("constraints with two objectives");
  r.exit = Exited(0), r.finals = {1, 2}, r.n_objectives = 2, r.constraints = {0.0};
  r.state = TrialState::kComplete, r.values = std::vector<double>{1, 2};
  r.stored_constraints = {0.0};
  add(r);

  r = Row("constraints of a pruned trial");
  r.stop = StopReason::kPrune, r.exit = Killed(SIGTERM), r.last_intermediate = 3.0;
  r.constraints = {1.0};
  r.state = TrialState::kPruned, r.value = 3.0, r.stored_constraints = {1.0};
  add(r);

  r = Row("constraints of a failed trial are dropped");
  r.exit = Exited(1), r.constraints = {1.0};
  r.state = TrialState::kFail, r.reason = "exit", r.detail = "exited with code 1";
  add(r);

  return rows;
}

TEST_CASE("how a trial ended, from what was observed", "[outcome]") {
  for (const Row& row : Rows()) {
    INFO(row.name);
    TrialObservation seen;
    seen.process.stop_reason = row.stop;
    seen.process.exit = row.exit;
    seen.process.killed = row.killed;
    seen.process.protocol_error = row.protocol_error;
    seen.process.oom = row.oom;
    seen.process.oom_detail = row.oom_detail;
    seen.process.stderr_tail = "last words\n";
    seen.final_values = row.finals;
    seen.worker_error = row.worker_error;
    seen.last_intermediate = row.last_intermediate;
    seen.trial_timeout_s = 2.5;
    seen.n_objectives = row.n_objectives;
    seen.measured_objectives = row.measured_objectives;
    seen.constraints = row.constraints;

    model::TrialOutcome out = ClassifyExit(seen);
    CHECK(out.state == row.state);
    CHECK(out.value == row.value);
    const std::vector<double> values = row.values ? *row.values
                                                  : (row.value && row.state == TrialState::kComplete
                                                         ? std::vector<double>{*row.value}
                                                         : std::vector<double>{});
    CHECK(out.values == values);
    CHECK(out.constraints == row.stored_constraints);
    CHECK(out.fail.reason == row.reason);
    CHECK(out.fail.detail == row.detail);
    if (row.state == TrialState::kFail) {
      // How the process ended, as `trialctl trials` shows it.
      CHECK(out.fail.exit_code == (row.exit.signaled ? -1 : row.exit.code));
      CHECK(out.fail.signal == (row.exit.signaled ? row.exit.signal : 0));
      CHECK(out.fail.core_dumped == row.exit.core_dumped);
      CHECK(out.fail.stderr_tail == "last words\n");
    } else {
      CHECK(out.fail.exit_code == model::FailInfo{}.exit_code);
      CHECK(out.fail.signal == 0);
      CHECK(out.fail.stderr_tail.empty());
    }
  }
}

TEST_CASE("a trial's stderr tail and detail are stored as valid UTF-8", "[outcome]") {
  TrialObservation seen;
  seen.process.exit = Exited(1);
  seen.process.stderr_tail = std::string("bad byte \xff here");
  seen.process.oom = true;
  seen.process.oom_detail = std::string("stderr says \xfe");
  model::TrialOutcome out = ClassifyExit(seen);
  CHECK(out.fail.reason == "oom");
  CHECK(out.fail.stderr_tail == common::SanitizeUtf8(seen.process.stderr_tail));
  CHECK(out.fail.stderr_tail != seen.process.stderr_tail);
  CHECK(out.fail.detail ==
        common::SanitizeUtf8("out of memory: " + seen.process.oom_detail + "; exited with code 1"));
}

TEST_CASE("a stalled trial is FAIL(stalled) naming the timeout and its last stderr line",
          "[outcome]") {
  TrialObservation seen;
  seen.process.stop_reason = StopReason::kStall;
  seen.process.exit.signaled = true;
  seen.process.exit.signal = SIGTERM;
  seen.process.stderr_tail = "epoch 1\nwaiting for the data loader\n\n";
  seen.stall_timeout_s = 2.5;
  model::TrialOutcome out = ClassifyExit(seen);
  CHECK(out.state == TrialState::kFail);
  CHECK(out.fail.reason == "stalled");
  CHECK_THAT(out.fail.detail, Catch::StartsWith("sent no line on the trial channel for "
                                                "stall_timeout of 2.5 s; killed by SIGTERM"));
  CHECK_THAT(out.fail.detail, Catch::EndsWith("; stderr ends: waiting for the data loader"));
  CHECK(out.fail.stderr_tail == seen.process.stderr_tail);

  seen.process.stderr_tail.clear();
  CHECK_THAT(ClassifyExit(seen).fail.detail, Catch::EndsWith("; stderr is empty"));
  // A long last line is cut to its end.
  seen.process.stderr_tail = "x\n" + std::string(1000, 'y') + "END";
  const std::string detail = ClassifyExit(seen).fail.detail;
  CHECK_THAT(detail, Catch::EndsWith("yyyEND"));
  CHECK(detail.size() < 500);
}

TEST_CASE("the reasons decided without a process exit", "[outcome]") {
  struct Case {
    const char* name;
    model::TrialOutcome out;
    std::string reason;
    std::string detail;
  };
  model::TrialRecord running;
  running.state = TrialState::kRunning;
  running.node = "beta";
  running.process.pid = 4242;
  model::TrialRecord claimed;
  claimed.state = TrialState::kWaiting;
  claimed.node = "beta";
  const std::vector<Case> cases = {
      {"spawn", SpawnFailed("exec /opt/train: No such file or directory"), "spawn",
       "exec /opt/train: No such file or directory"},
      {"cancelled before it started", CancelledBeforeStart(), "cancelled",
       "study cancelled before the trial started"},
      {"lost at a restart", LostAtRestart(4242), "lost",
       "triald stopped while the trial ran (pid 4242)"},
      {"lost with a dead node while running", LostWithNode(running, "alpha"), "lost",
       "node beta stopped sending heartbeats while the trial ran there (pid 4242); ended by node "
       "alpha"},
      {"lost with a dead node after claiming", LostWithNode(claimed, "alpha"), "lost",
       "node beta stopped sending heartbeats after claiming the trial (it may have started it); "
       "ended by node alpha"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(c.out.state == TrialState::kFail);
    CHECK_FALSE(c.out.value.has_value());
    CHECK(c.out.fail.reason == c.reason);
    CHECK(c.out.fail.detail == c.detail);
    CHECK(c.out.fail.exit_code == -1);
    CHECK(c.out.fail.signal == 0);
  }
}

}  // namespace
}  // namespace triald::daemon
