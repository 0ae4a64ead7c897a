// The objectives' dispatch and the two small LibTorch objectives; "lm" lives in
// worker/lm_objective.cc.
#include "worker/builtin_objectives.h"

#include <time.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <sstream>

#include "config/sweep.h"
#include "worker/lm_objective.h"
#include "worker/torch_status.h"

namespace triald::worker {
namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;

// Only the CPU is supported until the language-model objective brings device handling; naming
// the value keeps "cuda:0" in a sweep from silently running on the CPU.
Result<torch::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  return Status(InvalidArgument("TRIALD_PARAMS: parameter 'device' is '" + name +
                                "', but this trial-worker supports only \"cpu\""));
}

// Sleeps up to `total`, waking early when a stop is requested, so step_delay_ms never delays a
// SIGTERM by more than one slice.
void SleepUnlessStopped(std::chrono::milliseconds total, const ObjectiveContext& ctx) {
  constexpr auto kSlice = std::chrono::milliseconds(10);
  auto deadline = std::chrono::steady_clock::now() + total;
  while (!ctx.StopRequested()) {
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return;
    auto nap = std::min<std::chrono::steady_clock::duration>(left, kSlice);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(nap).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    // EINTR (the SIGTERM handler ran) simply ends this slice; the loop re-checks the flag.
    nanosleep(&ts, nullptr);
  }
}

std::string FormatDouble(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// The likely cause of an overflowing loss, when it is the learning rate (a huge start point is
// the other way to get there).
std::string DivergenceHint(double learning_rate) {
  if (learning_rate < 0.1) return "";
  return " (learning_rate " + FormatDouble(learning_rate) +
         " diverges: SGD on this function is stable only below 0.1)";
}

// f(x, y) = (x - 1)^2 + 10 (y + 2)^2, minimised by plain SGD. The minimum is 0 at (1, -2). The
// curvature along y is 20, so SGD is stable only for learning_rate < 2/20 = 0.1: at 0.1 the y
// error flips sign each step without shrinking, above it the loss grows geometrically. That
// makes it a small but honest test of a sweep over learning rates.
Result<double> RunQuadraticSgd(const Params& params, ObjectiveContext& ctx) {
  TRIALD_ASSIGN_OR_RETURN(double x0, params.GetDouble("x0", 3.0));
  TRIALD_ASSIGN_OR_RETURN(double y0, params.GetDouble("y0", -3.0));
  // 0.05 rather than the stability limit 0.1, so that running with defaults converges.
  TRIALD_ASSIGN_OR_RETURN(double learning_rate, params.GetDouble("learning_rate", 0.05));
  TRIALD_ASSIGN_OR_RETURN(int64_t steps, params.GetInt("steps", 20));
  TRIALD_ASSIGN_OR_RETURN(int64_t step_delay_ms, params.GetInt("step_delay_ms", 0));
  TRIALD_ASSIGN_OR_RETURN(std::string device_name, params.GetString("device", "cpu"));
  TRIALD_RETURN_IF_ERROR(CheckNoUnknownParams(
      "quadratic-sgd", params, {"x0", "y0", "learning_rate", "steps", "step_delay_ms", "device"}));
  if (!(learning_rate > 0)) {
    return InvalidArgument("TRIALD_PARAMS: parameter 'learning_rate' must be > 0, got " +
                           FormatDouble(learning_rate));
  }
  if (steps < 1) {
    return InvalidArgument("TRIALD_PARAMS: parameter 'steps' must be >= 1, got " +
                           std::to_string(steps));
  }
  if (step_delay_ms < 0) {
    return InvalidArgument("TRIALD_PARAMS: parameter 'step_delay_ms' must be >= 0, got " +
                           std::to_string(step_delay_ms));
  }
  TRIALD_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(device_name));

  // float64, so the loss returned through .item<double>() carries no float32 rounding.
  auto options = torch::TensorOptions().dtype(torch::kFloat64).device(device).requires_grad(true);
  torch::Tensor x = torch::full({}, x0, options);
  torch::Tensor y = torch::full({}, y0, options);
  torch::optim::SGD optimizer({x, y}, torch::optim::SGDOptions(learning_rate));
  auto loss_at = [&] { return (x - 1).pow(2) + 10 * (y + 2).pow(2); };

  for (int64_t step = 0; step < steps; ++step) {
    if (ctx.StopRequested()) return StoppedStatus();
    optimizer.zero_grad();
    torch::Tensor loss = loss_at();
    double value = loss.item<double>();
    if (!std::isfinite(value)) {
      return InvalidArgument("quadratic-sgd: loss became " + FormatDouble(value) + " at step " +
                             std::to_string(step) + DivergenceHint(learning_rate));
    }
    // Report the loss at the point this step starts from, so step 0 is the initial loss.
    TRIALD_RETURN_IF_ERROR(ctx.OnStep(step, value));
    loss.backward();
    optimizer.step();
    if (step_delay_ms > 0) SleepUnlessStopped(std::chrono::milliseconds(step_delay_ms), ctx);
  }
  if (ctx.StopRequested()) return StoppedStatus();

  torch::NoGradGuard no_grad;
  double final_loss = loss_at().item<double>();
  if (!std::isfinite(final_loss)) {
    return InvalidArgument("quadratic-sgd: final loss is " + FormatDouble(final_loss) +
                           DivergenceHint(learning_rate));
  }
  return final_loss;
}

// Reports nothing and returns param "value": a worker that exercises only the protocol. Other
// parameters are ignored on purpose, so any search space can drive it.
Result<double> RunEcho(const Params& params, ObjectiveContext& ctx) {
  TRIALD_ASSIGN_OR_RETURN(double value, params.GetDouble("value", 0.0));
  if (ctx.StopRequested()) return StoppedStatus();
  return value;
}

}  // namespace

Status CheckNoUnknownParams(std::string_view objective, const Params& params,
                            const std::vector<std::string_view>& known) {
  std::vector<std::string> unread = params.UnreadNames();
  if (unread.empty()) return Status::Ok();
  std::string message = "TRIALD_PARAMS: unknown parameter '" + unread.front() + "' for objective " +
                        std::string(objective) + " (known:";
  for (std::string_view name : known) message += " " + std::string(name);
  return InvalidArgument(message + ")");
}

const std::vector<ObjectiveInfo>& Objectives() {
  static const std::vector<ObjectiveInfo> kObjectives = {
      {"quadratic-sgd",
       "LibTorch SGD on (x-1)^2 + 10(y+2)^2; params x0=3 y0=-3 learning_rate=0.05 steps=20 "
       "step_delay_ms=0 device=cpu"},
      {"echo", "reports final = param value (default 0); protocol only"},
      {"lm",
       [] {
         std::string summary =
             "fine-tunes a GPT-2 checkpoint; needs --config (the sweep's [objective] as JSON); "
             "params override";
         for (std::string_view name : LmParamNames()) summary += " " + std::string(name);
         return summary;
       }()},
  };
  return kObjectives;
}

Status StoppedStatus() {
  return common::FailedPrecondition("objective stopped before completion: stop requested");
}

Result<double> RunObjective(std::string_view name, const Params& params, ObjectiveContext& ctx) {
  return RunObjective(name, params, "", ctx);
}

Result<double> RunObjective(std::string_view name, const Params& params, std::string_view config,
                            ObjectiveContext& ctx) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<double> values,
                          RunObjectiveValues(name, params, config, ctx));
  return values.front();
}

Result<std::vector<double>> RunObjectiveValues(std::string_view name, const Params& params,
                                               std::string_view config, ObjectiveContext& ctx,
                                               LmInputs* lm_preloaded) {
  const bool is_known = std::any_of(Objectives().begin(), Objectives().end(),
                                    [&](const ObjectiveInfo& info) { return info.name == name; });
  if (is_known && name != "lm" && !config.empty()) {
    return InvalidArgument("objective " + std::string(name) + " takes no --config");
  }
  if (is_known) {
    return TorchCall("objective " + std::string(name), [&]() -> Result<std::vector<double>> {
      if (name == "quadratic-sgd") {
        TRIALD_ASSIGN_OR_RETURN(double value, RunQuadraticSgd(params, ctx));
        return std::vector<double>{value};
      }
      if (name == "echo") {
        TRIALD_ASSIGN_OR_RETURN(double value, RunEcho(params, ctx));
        return std::vector<double>{value};
      }
      if (config.empty()) {
        return InvalidArgument(
            "objective lm needs --config '<JSON>': the [objective] settings of the sweep (model, "
            "train_file, eval_file, ...), which triald passes when it starts the worker");
      }
      Result<config::LmObjectiveConfig> lm = config::LmObjectiveFromJson(config);
      if (!lm.ok()) return lm.status().WithContext("--config");
      return RunLmObjectiveValues(*lm, params, ctx, lm_preloaded);
    });
  }
  std::string known;
  for (const ObjectiveInfo& info : Objectives()) known += (known.empty() ? "" : ", ") + info.name;
  return InvalidArgument("unknown objective '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace triald::worker
