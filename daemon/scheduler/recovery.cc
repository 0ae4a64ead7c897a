#include "daemon/scheduler/recovery.h"

#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {

common::Result<Recovered> EndLostTrials(const RecoveryOptions& o) {
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> running, o.storage->GetRunningTrials());
  Recovered out;
  TRIALD_ASSIGN_OR_RETURN(out.studies, o.storage->ListStudies());
  std::map<int64_t, std::string> names;
  for (const model::StudyRecord& s : out.studies) names[s.id] = s.name;
  // The trials this daemon left running (on a shared storage, other nodes' trials are theirs).
  std::vector<model::TrialRecord> lost;
  for (model::TrialRecord& t : running) {
    if (o.coordinator->IsOwn(t)) lost.push_back(std::move(t));
  }
  // No trial runs yet, so any process of this state directory is a leftover: a lost trial's,
  // or one whose start the previous daemon never got to record.
  std::vector<model::ProcessIdentity> identities;
  for (const model::TrialRecord& t : lost) identities.push_back(t.process);
  int killed = o.leftovers->Kill(o.state_dir, identities);
  if (killed > 0) o.logger->warn("killed {} process(es) left by the previous triald", killed);
  for (const model::TrialRecord& t : lost) {
    model::TrialOutcome outcome = LostAtRestart(t.process.pid);
    common::Status st = o.storage->FinishTrial(t.id, outcome, o.clock->WallSeconds());
    if (o.coordinator->EndedElsewhere(st)) continue;  // another node found it silent first
    if (!st.ok()) return st.WithContext("marking trial lost");
    out.lost[t.study_id].push_back(t.number);
    o.logger->warn("study {} trial {}: lost (it was running when triald stopped)",
                   names[t.study_id], t.number);
    (void)o.storage->AppendEvent(t.study_id, t.id, "trial_lost", outcome.fail.detail,
                                 o.clock->WallSeconds());
  }
  return out;
}

}  // namespace triald::daemon
