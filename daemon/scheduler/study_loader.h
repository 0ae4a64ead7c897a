#pragma once
// StudyLoader: makes the StudyRuntime of a study this node is to run, from either end:
//   Submit  a sweep being submitted: admitted (admission.h), its sampler and pruner built before
//           anything is stored (a bad sweep leaves no trace), then the study stored with its
//           study_submitted event in one commit.
//   Load    a stored study (recovery, a study joined from another node, one extended or
//           activated again): readmitted, built, and its stored trials loaded and counted.
// The caller owns what it returns and decides when its trials start; nothing is started here.
//
// Owns: the StudyAdmission. Not owned: storage, clock.
//
// Thread-safety: not thread-safe; the scheduler's event-loop thread only.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "config/sweep.h"
#include "daemon/model/records.h"
#include "daemon/pruner/pruner.h"
#include "daemon/sampler/sampler.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/storage/storage.h"

namespace triald::daemon {

// A submitted study built and not stored yet (StudyLoader::PrepareSubmitted): its runtime (the
// sampler and pruner made, so a bad sweep has failed already), the study to store and its
// events.
struct PreparedStudy {
  PreparedStudy();
  ~PreparedStudy();
  PreparedStudy(PreparedStudy&&) noexcept;
  PreparedStudy& operator=(PreparedStudy&&) noexcept;

  std::unique_ptr<StudyRuntime> runtime;
  model::NewStudy study;
  std::vector<std::pair<std::string, std::string>> events;  // (kind, detail), stored with it
  std::string where;                                        // the sweep file, for messages
  std::string named;    // how its name was given ("[study] name = ..." or "submit --name ...")
  std::string summary;  // "N trials, parallelism P, seed S"
};

class StudyLoader {
 public:
  using MakeSampler = std::function<common::Result<std::unique_ptr<sampler::Sampler>>(
      const config::SamplerConfig&, const config::SearchSpace&)>;
  using MakePruner =
      std::function<common::Result<std::unique_ptr<pruner::Pruner>>(const config::PrunerConfig&)>;

  struct Options {
    storage::Storage* storage = nullptr;   // not owned
    const common::Clock* clock = nullptr;  // not owned
    common::Logger logger;
    StudyAdmission::Options admission;  // whether a sweep may run on this node
    // Draws a seed for sweeps that give none; empty: 0.
    std::function<uint64_t()> seed_source;
    MakeSampler make_sampler;  // empty: sampler::MakeSampler
    MakePruner make_pruner;    // empty: pruner::MakePruner
    // Set: a sampler whose relative sample takes long to compute ([sampler] kind = "gp", and
    // "auto" when it picks the GP) runs behind a BackgroundSampler, which calls this from its
    // own thread when a sample is ready (the daemon posts a Pump() to its event loop). Empty:
    // it runs on the caller's thread (tests driving the scheduler without an event loop).
    std::function<void()> background_ready;
  };
  explicit StudyLoader(Options options);

  // A submitted sweep, admitted and stored as a new study (state RUNNING, no trials yet). Errors
  // name the sweep file and key; kAlreadyExists for a name in use. Nothing is stored on error.
  common::Result<std::unique_ptr<StudyRuntime>> Submit(const config::SweepSource& source,
                                                       const model::Submitter& submitter);
  // The same for a sweep Admit has admitted already (its spec), with no check again.
  common::Result<std::unique_ptr<StudyRuntime>> SubmitAdmitted(const config::SweepSource& source,
                                                               config::SweepSpec spec,
                                                               const model::Submitter& submitter);
  // SubmitAdmitted in three steps, so that its storage calls can run on another thread:
  //   PrepareSubmitted  the study built (errors name the sweep file); no storage call.
  //   StoreSubmitted    the study and its events stored in one commit, with `storage` (any
  //                     thread's own connection); kAlreadyExists for a name in use, with the
  //                     message that says what to do instead.
  //   Submitted         its runtime, with the record stored; no storage call.
  common::Result<PreparedStudy> PrepareSubmitted(const config::SweepSource& source,
                                                 config::SweepSpec spec,
                                                 const model::Submitter& submitter);
  static common::Result<model::StudyRecord> StoreSubmitted(storage::Storage& storage,
                                                           const PreparedStudy& prepared,
                                                           double now,
                                                           const common::Logger& logger);
  std::unique_ptr<StudyRuntime> Submitted(PreparedStudy prepared, model::StudyRecord stored);
  // The checks of Submit alone (StudyAdmission::Admit): the spec a submission would run, for a
  // study it continues (submit --resume) instead of creating one, or for SubmitAdmitted. Safe to
  // call from any thread while the loader lives, with an env and a GPU pool that are (the
  // daemon's: SystemSchedulerEnv, whose pool's count is fixed): it changes nothing.
  common::Result<config::SweepSpec> Admit(const config::SweepSource& source,
                                          const model::Submitter& submitter) const {
    return admission_.Admit(source, submitter);
  }
  // A stored study, readmitted on this node, with its trials as storage has them.
  common::Result<std::unique_ptr<StudyRuntime>> Load(const model::StudyRecord& record);
  // The same with its trials as read already (off the event loop: a tick's read of a study this
  // node joins); no storage call.
  common::Result<std::unique_ptr<StudyRuntime>> Load(const model::StudyRecord& record,
                                                     std::vector<model::TrialRecord> trials);

 private:
  // The runtime of `record` running `spec`, with `trials`, counted.
  common::Result<std::unique_ptr<StudyRuntime>> Loaded(const model::StudyRecord& record,
                                                       config::SweepSpec spec,
                                                       std::vector<model::TrialRecord> trials);
  // The runtime of `record` running `spec`: its sampler (seeded with the record's seed) and
  // pruner built; no trials.
  common::Result<std::unique_ptr<StudyRuntime>> Build(const model::StudyRecord& record,
                                                      config::SweepSpec spec) const;

  Options options_;
  StudyAdmission admission_;
};

}  // namespace triald::daemon
