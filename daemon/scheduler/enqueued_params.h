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
  std::string given;       // the given values as "name=value ..." (JSON values), for the event
};

// The parameters of study `study_name`'s next trial (number trials.size()). Errors:
// kInvalidArgument for an unknown parameter or a value its distribution does not contain (the
// message names it and what was expected); the sampler's error, with context.
common::Result<EnqueuedParams> ResolveEnqueuedParams(
    const std::string& study_name, const config::SweepSpec& spec, sampler::Sampler& sampler,
    const std::vector<model::TrialRecord>& trials, const std::map<std::string, std::string>& given);

}  // namespace triald::daemon
