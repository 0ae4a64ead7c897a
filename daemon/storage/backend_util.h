#pragma once
// Small helpers both Storage backends use (sqlite_storage.cc, postgres_storage.cc); not part of
// the Storage interface.
//
// Thread-safety: pure functions.

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/storage/storage.h"

namespace triald::storage::backend {

// The stored name of a direction ("MAXIMIZE", "MINIMIZE"), as trialctl shows it.
inline const char* DirectionText(config::Direction d) {
  return d == config::Direction::kMaximize ? "MAXIMIZE" : "MINIMIZE";
}

// A study's directions as stored beside `direction` (which holds directions[0]): "" for a
// single objective, else the names joined by commas ("MINIMIZE,MAXIMIZE").
std::string DirectionsText(const std::vector<config::Direction>& directions);
// Reads DirectionsText back: "" gives {first}. kInternal naming the text if a name is unknown.
common::Result<std::vector<config::Direction>> ParseDirectionsText(const std::string& text,
                                                                   config::Direction first,
                                                                   const std::string& op);

// The directions a new study is stored with: study.directions, or {direction} when empty.
// kInvalidArgument when directions[0] is not `direction`.
common::Result<std::vector<config::Direction>> NewStudyDirections(const model::NewStudy& study,
                                                                  const std::string& op);

// A trial's objective values or constraints as stored: "" for none, else a JSON array of
// numbers, each the double's shortest exact form (NaN and infinities, which reported values
// never are, as null).
std::string DoublesText(const std::vector<double>& values);
// Reads DoublesText back (null as NaN). kInternal naming the text if it is not such an array.
common::Result<std::vector<double>> ParseDoublesText(const std::string& text,
                                                     const std::string& op);
// What FinishTrial stores as a trial's values: "" when they are just {value} (a single-objective
// trial, whose value column holds them), else DoublesText(values).
std::string StoredValuesText(const model::TrialOutcome& outcome);
// A trial's values as read: those stored, else {value} for a COMPLETE trial with a value (so
// trials stored before values existed read as single-objective ones), else none.
std::vector<double> TrialValues(const model::TrialRecord& t, std::vector<double> stored);

// A trial's resources as stored (trials.resources_json): "" for none, else
// model::ResourcesToJson serialized. ParseResourcesText reads it back (kInternal naming the
// text when it is not such an object).
std::string ResourcesText(const std::optional<model::TrialResources>& resources);
common::Result<std::optional<model::TrialResources>> ParseResourcesText(const std::string& text,
                                                                        const std::string& op);

// SetStudyControl's arguments: n_trials >= 1 and parallelism >= 0, else kInvalidArgument
// naming `op` and the value.
// studies.submit_json: the submitter's choices as a JSON object of the ones given ("" for
// none), and back (unknown keys ignored; kInternal naming `where` when it is not an object).
std::string SubmitChoicesText(const config::SubmitChoices& choices);
common::Result<config::SubmitChoices> ParseSubmitChoicesText(const std::string& text,
                                                             const std::string& where);

common::Status CheckStudyControl(int n_trials, int parallelism, const std::string& op);

// The record CreateStudy returns for `study`, stored with `id` at `at` as RUNNING.
model::StudyRecord NewStudyRecord(const model::NewStudy& study,
                                  const std::vector<config::Direction>& directions, int64_t id,
                                  double at);

// CreateTrial's parameters: kInvalidArgument naming `op` and the first whose internal value is
// NaN.
common::Status CheckNewParams(const model::ParamMap& params, const std::string& op);

// FinishTrial's outcome: kInvalidArgument naming `op` unless its state is a finished one.
common::Status CheckFinishedOutcome(const model::TrialOutcome& outcome, const std::string& op);

// How messages name a trial or study known only by its id: "trial id 7", "study id 3".
inline std::string TrialIdLabel(int64_t trial_id) { return "trial id " + std::to_string(trial_id); }
inline std::string StudyIdLabel(int64_t study_id) { return "study id " + std::to_string(study_id); }

// Runs `body`, turning any exception (bad_alloc, or one thrown by a config helper) into an
// Internal status: Storage is a component boundary that exceptions must not cross. A RAII
// rollback guard inside `body` still runs during unwinding.
template <typename F>
auto Guarded(const char* op, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    return common::Internal(std::string(op) + ": unexpected exception: " + e.what());
  } catch (...) {
    return common::Internal(std::string(op) + ": unexpected non-standard exception");
  }
}

// A trial state read back from a GROUP BY state row; kInternal naming the text if unknown.
inline common::Result<model::TrialState> ParseTrialStateColumn(const std::string& text,
                                                               const std::string& op) {
  std::optional<model::TrialState> state = model::ParseTrialState(text);
  if (!state) return common::Internal(op + ": stored trial state \"" + text + "\" is unknown");
  return *state;
}

// Adds one GROUP BY state row of CountTrials: `count` trials in `state`, `retries` of them
// retries, `started` of them started, `run_seconds` their run time together. Only finished
// trials count toward TrialCounts::ran and ran_seconds.
inline void AddStateCount(TrialCounts* c, model::TrialState state, int64_t count, int64_t retries,
                          int64_t started, double run_seconds) {
  switch (state) {
    case model::TrialState::kWaiting:
      c->waiting += count;
      break;
    case model::TrialState::kRunning:
      c->running += count;
      break;
    case model::TrialState::kComplete:
      c->complete += count;
      break;
    case model::TrialState::kPruned:
      c->pruned += count;
      break;
    case model::TrialState::kFail:
      c->failed += count;
      break;
  }
  c->retries += retries;
  if (model::IsFinished(state)) {
    c->ran += started;
    c->ran_seconds += run_seconds;
  }
}

// GetTrialPage's arguments: a first number from 0 and a positive limit.
inline common::Status CheckPageArguments(int from_number, int limit, const std::string& op) {
  if (from_number < 0 || limit <= 0) {
    return common::InvalidArgument(op + ": a page starts at a trial number >= 0 (got " +
                                   std::to_string(from_number) + ") and holds at least one trial " +
                                   "(got a limit of " + std::to_string(limit) + ")");
  }
  return common::Status::Ok();
}

}  // namespace triald::storage::backend
