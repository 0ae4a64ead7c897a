#pragma once
// The objectives built into trial-worker (quadratic-sgd, echo, lm) and what they share: the
// context they report through, the check for unknown parameters, the stopped status. This
// header deliberately includes no LibTorch header: only builtin_objectives.cc pays LibTorch's
// compile time, and main.cc and the tests stay fast to build.
//
// Thread-safety: RunObjective may be called from any thread, but LibTorch settings it touches
// (threads, seeds) are per process, so run one objective per process, as trial-worker does.

#include <boost/json/value.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/params.h"

namespace triald::worker {

struct LmInputs;  // worker/lm_objective.h

// What a running objective sees of the outside world. trial-worker wires it to the Reporter,
// stdout and the SIGTERM flag; tests wire it to recorders.
class ObjectiveContext {
 public:
  virtual ~ObjectiveContext() = default;

  // Called once per step with that step's intermediate value (always finite). A non-OK status
  // (the report pipe is gone) stops the objective, which returns that status.
  virtual common::Status OnStep(int64_t step, double value) = 0;

  // Called with facts about the trial worth keeping beside its value (parameter count, device,
  // tokens seen, ...). A non-OK status (the report pipe is gone) stops the objective. The
  // default drops the attribute, for contexts that only record steps.
  virtual common::Status OnAttr(std::string_view key, const boost::json::value& value) {
    (void)key;
    (void)value;
    return common::Status::Ok();
  }

  // True once the trial was asked to stop (SIGTERM from the daemon on prune, cancel, timeout or
  // shutdown). Objectives check it between steps and during waits and then return
  // StoppedStatus() promptly.
  virtual bool StopRequested() const = 0;
  // The trial's own folder (TRIALD_TRIAL_DIR), where an objective keeps its checkpoints, and the
  // folder of the failed attempt a retry may resume from (TRIALD_RESUME_DIR); "" when not given.
  virtual std::string TrialDir() const { return {}; }
  virtual std::string ResumeDir() const { return {}; }
};

struct ObjectiveInfo {
  std::string name;
  std::string summary;  // one line for --help
};

// Every objective trial-worker knows, in --help order.
const std::vector<ObjectiveInfo>& Objectives();

// Runs the objective `name` with `params` and returns its final value. Errors are Status values,
// never exceptions: an unknown objective or parameter, a parameter of the wrong type or out of
// range, a non-finite loss, a LibTorch failure, or StoppedStatus() when ctx.StopRequested().
//
// `config` is the text of trial-worker's --config: the objective's fixed settings. "lm" requires
// it (the JSON of config::LmObjectiveConfig, as config::LmObjectiveToJson writes it); the other
// objectives take none, and refuse one rather than ignore it.
common::Result<double> RunObjective(std::string_view name, const Params& params,
                                    std::string_view config, ObjectiveContext& ctx);
// The same without --config.
common::Result<double> RunObjective(std::string_view name, const Params& params,
                                    ObjectiveContext& ctx);
// The objective's values, what trial-worker sends as final: one for quadratic-sgd and echo; for
// lm, the metrics its config's objectives name (the evaluation loss alone when it names none).
// RunObjective returns the first of them. `lm_preloaded`, for "lm" only: the inputs a fork
// server loaded for this same config (see RunLmObjectiveValues); ignored by the others.
common::Result<std::vector<double>> RunObjectiveValues(std::string_view name, const Params& params,
                                                       std::string_view config,
                                                       ObjectiveContext& ctx,
                                                       LmInputs* lm_preloaded = nullptr);

// Fails when `params` holds a name no Get* call has read, i.e. one the objective does not know:
// a typo ("learning_rat") would otherwise run the whole trial with the default and look like a
// valid result. `known` is listed in the message.
common::Status CheckNoUnknownParams(std::string_view objective, const Params& params,
                                    const std::vector<std::string_view>& known);

// The status an objective returns when it stopped because StopRequested() became true.
common::Status StoppedStatus();

}  // namespace triald::worker
