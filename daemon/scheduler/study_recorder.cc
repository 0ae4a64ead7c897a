#include "daemon/scheduler/study_recorder.h"

#include <optional>

namespace triald::daemon {

void StudyRecorder::Event(const StudyCache* study, const model::TrialRecord* trial,
                          const std::string& kind, const std::string& detail) {
  std::optional<int64_t> sid, tid;
  if (study != nullptr) sid = study->record.id;
  if (trial != nullptr) tid = trial->id;
  common::Status st =
      options_.storage->AppendEvent(sid, tid, kind, detail, options_.clock->WallSeconds());
  if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
}

common::Status StudyRecorder::SetState(model::StudyRecord& record, StudyCache* active,
                                       model::StudyState state, const std::string& kind,
                                       const std::string& detail) {
  const double now = options_.clock->WallSeconds();
  TRIALD_RETURN_IF_ERROR(options_.storage->SetStudyState(record.id, state, now));
  if (!kind.empty()) {
    common::Status st = options_.storage->AppendEvent(record.id, std::nullopt, kind, detail, now);
    if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
  }
  Mirror(record, active, state, now, kind, detail);
  return common::Status::Ok();
}

void StudyRecorder::Mirror(model::StudyRecord& record, StudyCache* active, model::StudyState state,
                           double at, const std::string& kind, const std::string& detail) {
  const double finished_at = state == model::StudyState::kRunning ? 0 : at;
  record.state = state;
  record.finished_at = finished_at;
  if (active != nullptr) {
    active->record.state = state;
    active->record.finished_at = finished_at;
  }
  if (!kind.empty()) Log(record, state, kind, detail);
}

common::Status StudyRecorder::SetControl(const model::StudyRecord& record, StudyCache* active,
                                         const std::string& kind, const std::string& detail) {
  TRIALD_RETURN_IF_ERROR(options_.storage->SetStudyControl(record.id, record.paused,
                                                           record.n_trials, record.parallelism));
  common::Status st = options_.storage->AppendEvent(record.id, std::nullopt, kind, detail,
                                                    options_.clock->WallSeconds());
  if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
  MirrorControl(record, active, kind, detail);
  return common::Status::Ok();
}

void StudyRecorder::MirrorControl(const model::StudyRecord& record, StudyCache* active,
                                  const std::string& kind, const std::string& detail) {
  if (active != nullptr) {
    active->record.paused = record.paused;
    active->record.n_trials = record.n_trials;
    active->record.parallelism = record.parallelism;
    active->record.submit.metric_names = record.submit.metric_names;
  }
  Log(record, record.state, kind, detail);
}

common::Status StudyRecorder::SetSubmit(const model::StudyRecord& record, StudyCache* active,
                                        const std::string& kind, const std::string& detail) {
  TRIALD_RETURN_IF_ERROR(options_.storage->SetStudySubmit(record.id, record.submit));
  if (active != nullptr) active->record.submit = record.submit;
  common::Status st = options_.storage->AppendEvent(record.id, std::nullopt, kind, detail,
                                                    options_.clock->WallSeconds());
  if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
  Log(record, record.state, kind, detail);
  return common::Status::Ok();
}

void StudyRecorder::Log(const model::StudyRecord& record, model::StudyState state,
                        const std::string& kind, const std::string& detail) {
  const std::string what = detail.empty() ? kind : kind + " (" + detail + ")";
  if (state == model::StudyState::kFailed) {
    options_.logger->warn("study {}: {}", record.name, what);
  } else {
    options_.logger->info("study {}: {}", record.name, what);
  }
}

}  // namespace triald::daemon
