#include "daemon/scheduler/trial_outcome.h"

#include <csignal>
#include <sstream>

#include "common/utf8.h"

namespace triald::daemon {
namespace {

using launcher::StopReason;
using model::TrialOutcome;
using model::TrialState;

std::string Seconds(double s) {
  std::ostringstream o;
  o << s;
  return o.str() + " s";
}

// The last non-empty line of a stderr tail, at most kMaxBytes of it (its end).
std::string LastLine(const std::string& tail) {
  constexpr size_t kMaxBytes = 300;
  size_t end = tail.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  size_t begin = tail.find_last_of('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  if (end + 1 - begin > kMaxBytes) begin = end + 1 - kMaxBytes;
  return tail.substr(begin, end + 1 - begin);
}

TrialOutcome Fail(const std::string& reason, const std::string& detail) {
  TrialOutcome out;
  out.state = TrialState::kFail;
  out.fail.reason = reason;
  out.fail.detail = detail;
  return out;
}

}  // namespace

TrialOutcome ClassifyExit(const TrialObservation& seen) {
  const launcher::ProcessOutcome& o = seen.process;
  TrialOutcome out;
  out.fail.stderr_tail = common::SanitizeUtf8(o.stderr_tail);
  out.fail.exit_code = o.exit.signaled ? -1 : o.exit.code;
  out.fail.signal = o.exit.signaled ? o.exit.signal : 0;
  out.fail.core_dumped = o.exit.core_dumped;
  // `killed`: the group was still there when the grace period after SIGTERM ran out, and got
  // SIGKILL. Say so, whether the main process died of it or had already ended another way.
  // A client's trial has no exit status: the launcher says how it ended instead.
  std::string how = o.ended_by.empty() ? o.exit.Describe() : o.ended_by;
  if (o.killed) {
    how += o.exit.signaled && o.exit.signal == SIGKILL
               ? " (still running when the grace period after SIGTERM ran out)"
               : "; its process group got SIGKILL when the grace period after SIGTERM ran out";
  }
  auto fail = [&](const std::string& reason, const std::string& detail) {
    out.state = TrialState::kFail;
    out.fail.reason = reason;
    out.fail.detail = common::SanitizeUtf8(detail);
    if (!seen.worker_error.empty()) out.fail.detail += "; worker said: " + seen.worker_error;
  };

  switch (o.stop_reason) {
    case StopReason::kPrune:
      out.state = TrialState::kPruned;
      if (seen.n_objectives == 1) out.value = seen.last_intermediate;
      break;
    case StopReason::kTimeout:
      fail("timeout", "exceeded trial_timeout of " + Seconds(seen.trial_timeout_s) + "; " + how);
      break;
    case StopReason::kStall: {
      const std::string last = LastLine(out.fail.stderr_tail);
      fail("stalled", "sent no line on the trial channel for stall_timeout of " +
                          Seconds(seen.stall_timeout_s) + "; " + how +
                          (last.empty() ? "; stderr is empty" : "; stderr ends: " + last));
      break;
    }
    case StopReason::kCancel:
      fail("cancelled", "study cancelled; " + how);
      break;
    case StopReason::kProtocol:
      fail("protocol", o.protocol_error);
      break;
    case StopReason::kShutdown:
    case StopReason::kNone:
      if (!o.protocol_error.empty()) {
        fail("protocol", o.protocol_error);
      } else if (!o.executor_failure.empty()) {
        fail(o.executor_failure, o.executor_detail.empty() ? how : o.executor_detail + "; " + how);
      } else if (o.oom && (o.exit.signaled || o.exit.code != 0)) {
        fail("oom", "out of memory: " + o.oom_detail + "; " + how);
      } else if (o.exit.signaled) {
        fail("signal", how);
      } else if (o.exit.code != 0) {
        fail("exit", how);
      } else if (seen.final_values.empty() && seen.worker_pruned) {
        out.state = TrialState::kPruned;
        if (seen.n_objectives == 1) out.value = seen.last_intermediate;
      } else if (seen.final_values.empty()) {
        fail("protocol", "exited with code 0 without reporting a final value");
      } else if (seen.final_values.size() != seen.n_objectives) {
        const size_t n = seen.n_objectives, all = n + seen.measured_objectives;
        fail("protocol",
             "final line carried " + std::to_string(seen.final_values.size()) + " objective value" +
                 (seen.final_values.size() == 1 ? "" : "s") + "; this study has " +
                 std::to_string(all) + " objective" + (all == 1 ? "" : "s") +
                 (seen.measured_objectives > 0 ? " (" + std::to_string(seen.measured_objectives) +
                                                     " of them measured by triald)"
                                               : std::string()) +
                 ", so expected " + std::to_string(n) + " value" + (n == 1 ? "" : "s"));
      } else {
        out.state = TrialState::kComplete;
        out.values = seen.final_values;
        if (seen.n_objectives == 1) out.value = seen.final_values.front();
      }
      if (o.stop_reason == StopReason::kShutdown && out.state == TrialState::kFail &&
          o.protocol_error.empty() &&
          (seen.final_values.empty() || seen.final_values.size() == seen.n_objectives)) {
        fail("shutdown", "triald was stopped while the trial ran; " + how);
      }
      break;
  }
  if (out.state != TrialState::kFail) {
    out.fail = model::FailInfo{};
    out.constraints = seen.constraints;
  }
  // What the process tree consumed is kept whatever the ending (a failed trial's peak memory is
  // what users look at first).
  out.resources = o.resources;
  return out;
}

TrialOutcome SpawnFailed(const std::string& error) { return Fail("spawn", error); }

void MirrorEnd(model::TrialRecord& trial, const TrialOutcome& out, double at) {
  trial.state = out.state;
  trial.value = out.value;
  trial.values = out.values;
  trial.constraints = out.constraints;
  trial.resources = out.resources;
  trial.fail = out.fail;
  trial.finished_at = at;
}

TrialOutcome CancelledBeforeStart() {
  return Fail("cancelled", "study cancelled before the trial started");
}

TrialOutcome StoppedBeforeStart(const std::string& why) {
  return Fail("cancelled", "the study stopped before the trial started: " + why);
}

TrialOutcome LostAtRestart(pid_t pid) {
  return Fail("lost", "triald stopped while the trial ran (pid " + std::to_string(pid) + ")");
}

TrialOutcome Fenced(const std::string& why) {
  return Fail("lost", "this node killed the trial: " + why);
}

TrialOutcome LostWithNode(const model::TrialRecord& t, const std::string& ended_by) {
  return Fail("lost", t.state == TrialState::kRunning
                          ? "node " + t.node +
                                " stopped sending heartbeats while the trial ran there (pid " +
                                std::to_string(t.process.pid) + "); ended by node " + ended_by
                          : "node " + t.node +
                                " stopped sending heartbeats after claiming the trial (it may have "
                                "started it); ended by node " +
                                ended_by);
}

std::string DescribeOutcome(const model::TrialOutcome& out) {
  std::string what = model::TrialStateName(out.state);
  if (out.state == model::TrialState::kFail) {
    what += "(" + out.fail.reason + "): " + out.fail.detail;
  }
  if (out.value) {
    what += " value=" + std::to_string(*out.value);
  } else if (!out.values.empty()) {
    what += " values=";
    for (size_t i = 0; i < out.values.size(); ++i) {
      what += (i > 0 ? "," : "") + std::to_string(out.values[i]);
    }
  }
  if (!out.constraints.empty()) {
    what += model::Feasible(out.constraints) ? " feasible" : " infeasible";
  }
  return what;
}

TrialObservation ObserveExit(const config::StudyConfig& study, const model::TrialRecord& trial,
                             const launcher::ProcessOutcome& process) {
  TrialObservation seen;
  seen.process = process;
  // The values the worker sends: the measured objectives are added after ClassifyExit.
  seen.n_objectives = study.worker_objectives();
  seen.measured_objectives = study.directions.size() - seen.n_objectives;
  if (!trial.intermediate.empty()) seen.last_intermediate = trial.intermediate.rbegin()->second;
  seen.trial_timeout_s = study.trial_timeout;
  seen.stall_timeout_s = study.stall_timeout;
  return seen;
}

}  // namespace triald::daemon
