#pragma once
// StudyRecorder: the one step behind every change of a study the scheduler makes: store it,
// mirror it in the record the scheduler holds, record the study event, log it. Storage comes
// first: a change that could not be stored is neither mirrored nor recorded, and the caller
// gets the error. An event that cannot be stored is logged and does not undo the change.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread owns it.

#include <string>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "daemon/model/records.h"
#include "daemon/scheduler/study_cache.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

class StudyRecorder {
 public:
  struct Options {
    storage::Storage* storage = nullptr;   // not owned
    const common::Clock* clock = nullptr;  // not owned
    common::Logger logger;
  };
  explicit StudyRecorder(Options options) : options_(std::move(options)) {}

  // Stores an event of `study` (nullptr: none) and `trial` (nullptr: none); a failure is logged.
  void Event(const StudyCache* study, const model::TrialRecord* trial, const std::string& kind,
             const std::string& detail);
  // The study's state becomes `state` (finished_at: now), stored and mirrored in `record` and,
  // when the study is active here, in `active` (else nullptr); then event `kind` with `detail`
  // and a log line (a warning for FAILED); an empty `kind`: neither (the caller records the
  // change with another, e.g. study_extended).
  common::Status SetState(model::StudyRecord& record, StudyCache* active, model::StudyState state,
                          const std::string& kind, const std::string& detail);
  // The study's control fields (paused, n_trials, parallelism of `record`), stored and mirrored
  // in `active` (else nullptr); then event `kind` with `detail` and a log line.
  common::Status SetControl(const model::StudyRecord& record, StudyCache* active,
                            const std::string& kind, const std::string& detail);
  // The study's submit choices (record.submit: its metric names), stored and mirrored in
  // `active` (else nullptr); then event `kind` with `detail` and a log line.
  common::Status SetSubmit(const model::StudyRecord& record, StudyCache* active,
                           const std::string& kind, const std::string& detail);
  // A state stored with its event elsewhere (off the event loop, at wall time `at`): mirrored in
  // `record` and `active` (else nullptr), and logged.
  void Mirror(model::StudyRecord& record, StudyCache* active, model::StudyState state, double at,
              const std::string& kind, const std::string& detail);
  // Control fields (paused, n_trials, parallelism, metric names of `record`) stored with their
  // event `kind` elsewhere (off the event loop): mirrored in `active` (else nullptr), and logged.
  void MirrorControl(const model::StudyRecord& record, StudyCache* active, const std::string& kind,
                     const std::string& detail);

 private:
  void Log(const model::StudyRecord& record, model::StudyState state, const std::string& kind,
           const std::string& detail);

  Options options_;
};

}  // namespace triald::daemon
