#pragma once
// The `best` verb and the study's best trials, as `best`, `status` and the exports read them.
//
// Rules (daemon/README.md, "Best trials"):
//   - One objective: the best COMPLETE trial whose value is not NaN, among the FEASIBLE ones
//     (every constraint value <= 0; a trial without constraints is feasible); the lowest number
//     among equal values. Optuna 3.1's study.best_trial ignores constraints; triald does not
//     offer an infeasible trial as the best, so a study with constraints whose trials are all
//     infeasible has no best trial.
//   - Several objectives: the Pareto front of the feasible COMPLETE trials
//     (sampler::pareto::ParetoFront), by number. Optuna 3.1's study.best_trials is the front of
//     every COMPLETE trial, feasible or not; on a study whose trials are all feasible the two
//     agree.
//
// Cost: one objective: the storage's best-trial query, plus a scan of the study a page
// (kTrialsPerPiece trials) at a time only when that trial is infeasible. Several objectives:
// a scan a page at a time, holding only the front found so far; each page is read in its own
// step of the reply stream (the stream sends a space meanwhile), so the event loop serves other
// clients between pages.
//
// Thread-safety: FrontBuilder and BestFeasible are plain values; the verb runs on the event-loop
// thread as every verb does.

#include <boost/json.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "daemon/control/verbs.h"
#include "daemon/model/records.h"
#include "daemon/storage/read_model.h"

namespace triald::daemon {

// A study's directions: StudyRecord::directions, or {direction} for a record without them.
std::vector<config::Direction> StudyDirections(const model::StudyRecord& study);

// The Pareto front of trials added a page at a time; only the front so far is kept.
class FrontBuilder {
 public:
  explicit FrontBuilder(std::vector<config::Direction> directions);
  // Adds the trials of `page` (any states, any order of numbers).
  void Add(const std::vector<model::TrialRecord>& page);
  // The front of every trial added: feasible COMPLETE trials with one value per direction that
  // no other such trial dominates, by number.
  const std::vector<model::TrialRecord>& front() const { return front_; }
  int64_t complete() const { return complete_; }  // COMPLETE trials added
  int64_t feasible() const { return feasible_; }  // of those, feasible with all their values

 private:
  std::vector<config::Direction> directions_;
  std::vector<model::TrialRecord> front_;
  int64_t complete_ = 0;
  int64_t feasible_ = 0;
};

// The best feasible COMPLETE trial of a single-objective study among trials added a page at a
// time, per the rule above.
class BestFeasible {
 public:
  explicit BestFeasible(config::Direction direction) : direction_(direction) {}
  void Add(const std::vector<model::TrialRecord>& page);
  const std::optional<model::TrialRecord>& best() const { return best_; }

 private:
  config::Direction direction_;
  std::optional<model::TrialRecord> best_;
};

// The best feasible COMPLETE trial of a single-objective study, from the storage: its best-trial
// query, and a scan when that trial is infeasible. nullopt when there is none.
common::Result<std::optional<model::TrialRecord>> BestFeasibleTrial(
    storage::ReadModel& storage, const model::StudyRecord& study);

// best {study}:
//   one objective: TrialToJson of the best feasible COMPLETE trial; not_found when there is none
//   several: {study, directions, complete, feasible, best_trials: [TrialToJson]} (best_trials
//   empty when no COMPLETE trial is feasible).
common::Result<std::unique_ptr<ReplyStream>> BestStreamer(const VerbContext& context,
                                                          const boost::json::object& args);

}  // namespace triald::daemon
