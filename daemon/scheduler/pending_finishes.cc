#include "daemon/scheduler/pending_finishes.h"

#include "daemon/scheduler/node_coordinator.h"

namespace triald::daemon {

void PendingFinishes::Keep(StudyCache& study, int number, const model::TrialOutcome& outcome,
                           bool own, const std::string& why, const common::Logger& logger) {
  logger->warn("study {} trial {}: its end ({}) is kept until storage takes it: {}",
               study.record.name, number, model::TrialStateName(outcome.state), why);
  entries_.push_back({study.record.id, number, outcome, own});
  ++study.pending_finishes;
}

void PendingFinishes::Retry(CoordinatorHost& host) {
  std::vector<Entry> kept;
  kept.swap(entries_);
  for (const Entry& e : kept) {
    StudyCache* study = host.FindStudy(e.study_id);
    if (study == nullptr) continue;
    --study->pending_finishes;
    host.FinishTrial(*study, e.number, e.outcome, e.own);
  }
}

}  // namespace triald::daemon
