#include "daemon/scheduler/stored_studies.h"

#include <memory>
#include <optional>
#include <set>
#include <utility>

namespace triald::daemon {

std::vector<int64_t> FollowStoredStudies(const std::vector<model::StudyRecord>& stored,
                                         ActiveStudies* studies, const FollowOptions& options) {
  std::vector<int64_t> dropped;
  std::set<int64_t> ids;
  for (const model::StudyRecord& rec : stored) ids.insert(rec.id);
  for (auto it = studies->begin(); it != studies->end();) {
    const StudyRuntime& s = *it->second;
    if (ids.count(it->first) == 0 && s.running == 0 && s.pending_finishes == 0) {
      options.logger->info("study {}: deleted through another node", s.record.name);
      dropped.push_back(it->first);
      it = studies->erase(it);
    } else {
      ++it;
    }
  }
  for (const model::StudyRecord& rec : stored) {
    auto it = studies->find(rec.id);
    if (it != studies->end()) {
      options.coordinator->Adopt(*it->second, rec);
      continue;
    }
    if (rec.state != model::StudyState::kRunning || options.coordinator->LeftToOthers(rec.name)) {
      continue;
    }
    // Its trials as the tick read them off the loop, when it did.
    std::optional<common::Result<std::vector<model::TrialRecord>>> read =
        options.coordinator->TrialsToJoin(rec.id);
    if (read && !read->ok()) {  // as a load that failed to read them
      options.coordinator->LeaveToOthers(rec, read->status());
      continue;
    }
    common::Result<std::unique_ptr<StudyRuntime>> rt =
        read ? options.loader->Load(rec, std::move(*read).value()) : options.loader->Load(rec);
    if (!rt.ok()) {
      options.coordinator->LeaveToOthers(rec, rt.status());
      continue;
    }
    options.logger->info("study {}: joined ({} trials so far)", rec.name, (*rt)->trials.size());
    (*studies)[rec.id] = std::move(rt).value();
  }
  return dropped;
}

}  // namespace triald::daemon
