#pragma once
// Enqueued parameters: the parameters of a trial queued by hand (Scheduler::Enqueue, `trialctl
// enqueue`). Every value given is parsed against its parameter's distribution as a user writes
// it ("0.01", "64", "adamw"), before anything is drawn, so a mistake costs nothing; the
// parameters not given are drawn by the study's sampler for the trial's number.
//
// Thread-safety: as the sampler it is given (the scheduler's thread).

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/sampler/sampler.h"

namespace triald::daemon {

struct EnqueuedParams {
  model::ParamMap params;  // every parameter of the space
  // kind = "python": values for parameters the objective suggests itself (not in [space]), as
  // given: they answer the trial's suggests of those names (TrialChannel), parsed against the
  // distribution each suggest gives, as Optuna's enqueue_trial does. Kept with the trial as
  // its attribute kEnqueuedAttr ({name: text}).
  std::map<std::string, std::string> deferred;
  std::string given;  // the given values as "name=value ..." (JSON values), for the event
};

// The trial attribute holding EnqueuedParams::deferred as a JSON object.
inline constexpr const char* kEnqueuedAttr = "triald.enqueued";
// A trial's deferred values (its kEnqueuedAttr), by name; none when it has no such attribute
// or it is not an object of strings.
std::map<std::string, std::string> EnqueuedValues(const model::TrialRecord& trial);

// Whether trial `t` has every value of `given` (enqueue --skip-if-exists): a parameter it holds
// equal to the value read against that parameter's distribution, or an enqueued value not yet
// suggested with the same text.
bool HasGivenValues(const model::TrialRecord& t, const std::map<std::string, std::string>& given);

// The parameters of study `study_name`'s next trial (number trials.size()). A name outside
// [space] is deferred for a define-by-run objective (kind = "python"), else an error. Errors:
// kInvalidArgument for an unknown parameter (not define-by-run) or a value its distribution
// does not contain (the message names it and what was expected); the sampler's error, with
// context.
common::Result<EnqueuedParams> ResolveEnqueuedParams(
    const std::string& study_name, const config::SweepSpec& spec, sampler::Sampler& sampler,
    const std::vector<model::TrialRecord>& trials, const std::map<std::string, std::string>& given);

}  // namespace triald::daemon
