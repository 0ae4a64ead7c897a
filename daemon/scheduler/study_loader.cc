#include "daemon/scheduler/study_loader.h"

#include <string>
#include <utility>

#include "daemon/sampler/auto_sampler.h"
#include "daemon/scheduler/background_sampler.h"
#include "daemon/scheduler/storage_batch.h"

namespace triald::daemon {
using common::Result;
using common::Status;

StudyLoader::StudyLoader(Options options)
    : options_(std::move(options)), admission_(options_.admission) {}

Result<std::unique_ptr<StudyRuntime>> StudyLoader::Build(const model::StudyRecord& record,
                                                         config::SweepSpec spec) const {
  auto rt = std::make_unique<StudyRuntime>();
  rt->record = record;
  rt->spec = std::move(spec);
  rt->streak = FailureStreak(rt->spec.study.max_failures_in_a_row);
  config::SamplerConfig sc = sampler::ResolveAutoSampler(rt->spec.sampler, rt->spec);
  sc.seed = record.seed;
  if (rt->spec.sampler.kind == "auto")
    rt->sampler_choice = sampler::ChooseAutoSampler(rt->spec).why;
  TRIALD_ASSIGN_OR_RETURN(rt->sampler, options_.make_sampler
                                           ? options_.make_sampler(sc, rt->spec.space)
                                           : sampler::MakeSampler(sc, rt->spec.space));
  if (sc.kind == "gp" && options_.background_ready) {
    rt->sampler =
        std::make_unique<BackgroundSampler>(std::move(rt->sampler), options_.background_ready);
  }
  TRIALD_ASSIGN_OR_RETURN(rt->pruner, options_.make_pruner ? options_.make_pruner(rt->spec.pruner)
                                                           : pruner::MakePruner(rt->spec.pruner));
  return rt;
}

Result<std::unique_ptr<StudyRuntime>> StudyLoader::Submit(const config::SweepSource& source,
                                                          const model::Submitter& submitter) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, admission_.Admit(source, submitter));
  return SubmitAdmitted(source, std::move(spec), submitter);
}

Result<std::unique_ptr<StudyRuntime>> StudyLoader::SubmitAdmitted(
    const config::SweepSource& source, config::SweepSpec spec, const model::Submitter& submitter) {
  TRIALD_ASSIGN_OR_RETURN(PreparedStudy prepared,
                          PrepareSubmitted(source, std::move(spec), submitter));
  TRIALD_ASSIGN_OR_RETURN(
      model::StudyRecord rec,
      StoreSubmitted(*options_.storage, prepared, options_.clock->WallSeconds(), options_.logger));
  return Submitted(std::move(prepared), std::move(rec));
}

PreparedStudy::PreparedStudy() = default;
PreparedStudy::~PreparedStudy() = default;
PreparedStudy::PreparedStudy(PreparedStudy&&) noexcept = default;
PreparedStudy& PreparedStudy::operator=(PreparedStudy&&) noexcept = default;

Result<PreparedStudy> StudyLoader::PrepareSubmitted(const config::SweepSource& source,
                                                    config::SweepSpec spec,
                                                    const model::Submitter& submitter) {
  PreparedStudy p;
  p.where = source.path.empty() ? "<sweep>" : source.path;
  p.study = StudyAdmission::NewStudyOf(spec, source, submitter, options_.seed_source);
  p.named = source.submit.name.empty() ? "[study] name = \"" + p.study.name + "\""
                                       : "submit --name \"" + p.study.name + "\"";
  // Build the sampler and pruner before storing anything, so a bad sweep leaves no trace.
  model::StudyRecord probe;
  probe.seed = p.study.seed;
  Result<std::unique_ptr<StudyRuntime>> built = Build(probe, std::move(spec));
  if (!built.ok()) return built.status().WithContext(p.where);
  p.runtime = std::move(built).value();
  p.summary = std::to_string(p.study.n_trials) + " trials, parallelism " +
              std::to_string(p.runtime->spec.study.parallelism) + ", seed " +
              std::to_string(p.study.seed);
  p.events.emplace_back("study_submitted", p.summary);
  if (!p.runtime->sampler_choice.empty()) {
    p.events.emplace_back("sampler_chosen",
                          "[sampler] kind = \"auto\" chose " + p.runtime->sampler_choice);
  }
  return p;
}

Result<model::StudyRecord> StudyLoader::StoreSubmitted(storage::Storage& storage,
                                                       const PreparedStudy& prepared, double now,
                                                       const common::Logger& logger) {
  const model::NewStudy& ns = prepared.study;
  // The study is stored before any of its trials starts, with its events, in one commit (the
  // scheduler's transactions are its own: on a shared storage one per claim, each locking one
  // study).
  StorageBatch batch(&storage, logger);
  Result<model::StudyRecord> rec = storage.CreateStudy(ns, now);
  if (!rec.ok() && rec.status().code() == common::Code::kAlreadyExists) {
    return common::AlreadyExists(
        prepared.where + ": " + prepared.named +
        ": a study of that name already exists; expected a new name (`trialctl submit --name "
        "NEW_NAME FILE` keeps the file as it is), or continue it with `trialctl submit --resume "
        "FILE` (n_trials more trials; [study] load_if_exists = true does the same) or `trialctl "
        "extend " +
        ns.name + " --n-trials N`, or remove it first with `trialctl delete " + ns.name + "`");
  }
  if (!rec.ok()) return rec.status();
  for (const auto& [kind, detail] : prepared.events) {
    Status st = storage.AppendEvent(rec->id, std::nullopt, kind, detail, now);
    if (!st.ok()) logger->error("storing event {}: {}", kind, st.message());
  }
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing study \"" + ns.name + "\"");
  return rec;
}

std::unique_ptr<StudyRuntime> StudyLoader::Submitted(PreparedStudy prepared,
                                                     model::StudyRecord stored) {
  std::unique_ptr<StudyRuntime> study = std::move(prepared.runtime);
  study->record = std::move(stored);
  options_.logger->info("study {} submitted: {}", study->record.name, prepared.summary);
  return study;
}

Result<std::unique_ptr<StudyRuntime>> StudyLoader::Load(const model::StudyRecord& record) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, admission_.Readmit(record));
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::TrialRecord> trials,
                          options_.storage->GetTrials(record.id));
  return Loaded(record, std::move(spec), std::move(trials));
}

Result<std::unique_ptr<StudyRuntime>> StudyLoader::Load(const model::StudyRecord& record,
                                                        std::vector<model::TrialRecord> trials) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, admission_.Readmit(record));
  return Loaded(record, std::move(spec), std::move(trials));
}

Result<std::unique_ptr<StudyRuntime>> StudyLoader::Loaded(const model::StudyRecord& record,
                                                          config::SweepSpec spec,
                                                          std::vector<model::TrialRecord> trials) {
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StudyRuntime> rt, Build(record, std::move(spec)));
  rt->trials = std::move(trials);
  rt->Recount(options_.storage->node());
  rt->streak.Rebuild(rt->trials);
  rt->synced_at = options_.clock->MonotonicSeconds();
  return rt;
}

}  // namespace triald::daemon
