#include "daemon/scheduler/trial_starter.h"

#include <optional>
#include <utility>

#include "daemon/scheduler/resume_dir.h"

namespace triald::daemon {

std::unique_ptr<RunningTrial> TrialStarter::Launch(StudyRuntime& study, int number, TrialGpus gpus,
                                                   launcher::TrialCallbacks callbacks,
                                                   Failure* failure) {
  model::TrialRecord& trial = study.trials[number];
  std::optional<ResumeFolder> resume;
  if (trial.retry_of_number) resume = ResumeFolderOf(study, trial);
  LaunchSettings settings = options_.settings;
  settings.node = options_.storage->node();
  launcher::LaunchSpec ls =
      MakeLaunchSpec(settings, study.record.name, study.spec, trial, gpus.slots(),
                     resume ? resume->dir : "", study.RetryHistory(trial));
  ls.submitter = study.record.submitter;
  ls.client = std::move(study.ask);  // kind = "client": the asking program's connection
  launcher::LaunchResult proc = options_.launcher->Launch(ls, std::move(callbacks));
  if (!proc.ok()) {
    study.ask = std::move(ls.client);  // not served: the ask is answered with why
    *failure = Failure{proc.spawn_error(), proc.status().message()};
    return nullptr;
  }
  if (resume) {
    const std::string what = DescribeResumeFolder(*resume, number, *trial.retry_of_number);
    options_.logger->info("study {}: {}", study.record.name, what);
    options_.recorder->Event(&study, &trial, "resume_folder", what);
  }
  auto rt = std::make_unique<RunningTrial>();
  rt->study = &study;
  rt->number = number;
  rt->gpus = std::move(gpus);  // the trial holds them now
  rt->process = std::move(proc).value();
  TrialChannel::Options co;
  co.storage = options_.storage;
  co.logger = options_.logger;
  co.process = rt->process.get();
  co.study = &study;
  co.number = number;
  co.refresh_for_pruning = [this, &study] { options_.coordinator->RefreshForPruning(study); };
  co.on_write_refused = [this, &study] { options_.coordinator->Follow(study); };
  co.pending_writes = options_.pending_writes;
  co.lazy_writer = options_.lazy_writer;
  co.storage_held = options_.storage_held;
  co.on_storage_refused = options_.on_storage_refused;
  co.on_event = [this, &study, number](const std::string& kind, const std::string& detail) {
    options_.recorder->Event(&study, &study.trials[number], kind, detail);
  };
  rt->channel = std::make_unique<TrialChannel>(std::move(co));
  rt->starting = !rt->process->started();
  return rt;
}

ResumeFolder TrialStarter::ResumeFolderOf(const StudyRuntime& study,
                                          const model::TrialRecord& retry) const {
  RetryFolderQuery q;
  q.env = options_.env;
  q.state_dir = options_.settings.state_dir;
  q.study = &study.record;
  q.of = *retry.retry_of_number;
  if (q.of >= 0 && static_cast<size_t>(q.of) < study.trials.size()) q.failed = &study.trials[q.of];
  q.shared = options_.storage->shared();
  q.node = options_.storage->node();
  q.as_submitter = options_.trials_as_submitters;
  return ResumeFolderForRetry(q);
}

}  // namespace triald::daemon
