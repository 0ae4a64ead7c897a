#pragma once
// The objectives trial-worker can run. This header deliberately includes no LibTorch header:
// only objectives.cc pays LibTorch's compile time, and main.cc and the tests stay fast to build.
//
// Thread-safety: RunObjective may be called from any thread, but LibTorch settings it touches
// (threads, seeds) are per process, so run one objective per process, as trial-worker does.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/params.h"

namespace triald::worker {

// What a running objective sees of the outside world. trial-worker wires it to the Reporter,
// stdout and the SIGTERM flag; tests wire it to recorders.
class ObjectiveContext {
 public:
  virtual ~ObjectiveContext() = default;

  // Called once per step with that step's intermediate value (always finite). A non-OK status
  // (the report pipe is gone) stops the objective, which returns that status.
  virtual common::Status OnStep(int64_t step, double value) = 0;

  // True once the trial was asked to stop (SIGTERM from the daemon on prune, cancel, timeout or
  // shutdown). Objectives check it between steps and during waits and then return
  // StoppedStatus() promptly.
  virtual bool StopRequested() const = 0;
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
common::Result<double> RunObjective(std::string_view name, const Params& params,
                                    ObjectiveContext& ctx);

// The status an objective returns when it stopped because StopRequested() became true.
common::Status StoppedStatus();

}  // namespace triald::worker
