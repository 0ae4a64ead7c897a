#include "daemon/scheduler.h"

#include <unistd.h>

#include <algorithm>

#include "daemon/scheduler/client_asks.h"
#include "daemon/scheduler/gpu_drains.h"
#include "daemon/scheduler/lazy_writer.h"
#include "daemon/scheduler/measured_metrics.h"
#include "daemon/scheduler/recovery.h"
#include "daemon/scheduler/retry_policy.h"
#include "daemon/scheduler/running_trials.h"
#include "daemon/scheduler/scheduler_hosts.h"
#include "daemon/scheduler/spawn_failures.h"
#include "daemon/scheduler/storage_batch.h"
#include "daemon/scheduler/stored_studies.h"
#include "daemon/scheduler/study_control.h"
#include "daemon/scheduler/study_fork_servers.h"
#include "daemon/scheduler/study_loader.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/scheduler/trial_channel.h"
#include "daemon/scheduler/trial_gpus.h"
#include "daemon/scheduler/trial_outcome.h"
#include "daemon/scheduler/trial_starter.h"

namespace triald::daemon {
using common::Result;
using common::Status;
using launcher::StopReason;
using model::StudyState;
using model::TrialRecord;
using model::TrialState;

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)), host_(std::make_unique<Host>(this)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
  if (options_.max_workers < 1) options_.max_workers = 1;
  running_ = std::make_unique<RunningTrials>(options_.logger);
  if (options_.leftovers == nullptr) {
    own_leftovers_ = std::make_unique<ProcLeftoverProcesses>();
    options_.leftovers = own_leftovers_.get();
  }
  if (options_.env == nullptr) {
    own_env_ = SystemSchedulerEnv();
    options_.env = own_env_.get();
  }
  CoordinatorOptions co;
  co.storage = options_.storage;
  co.clock = options_.clock;
  co.logger = options_.logger;
  co.host = host_.get();
  co.node_timeout_s = options_.node_timeout_s;
  co.fence_after_s = options_.fence_after_s;
  co.reads = options_.storage_reads.get();
  coordinator_ = MakeNodeCoordinator(std::move(co));
  StudyRecorder::Options ro;
  ro.storage = options_.storage;
  ro.clock = options_.clock;
  ro.logger = options_.logger;
  recorder_ = std::make_unique<StudyRecorder>(std::move(ro));
  StudyLoader::Options lo;
  lo.storage = options_.storage;
  lo.clock = options_.clock;
  lo.logger = options_.logger;
  lo.admission.env = options_.env;
  lo.admission.gpus = options_.gpus;
  lo.admission.trial_worker = options_.trial_worker;
  lo.admission.base_env = options_.base_env;
  lo.admission.check_executor = options_.check_executor;
  lo.seed_source = options_.seed_source;
  lo.make_sampler = options_.make_sampler;
  lo.make_pruner = options_.make_pruner;
  if (options_.post) {
    // A background sample is ready (its thread calls this): pump on the event loop.
    lo.background_ready = [post = options_.post, this] { post([this] { Pump(); }); };
  }
  loader_ = std::make_unique<StudyLoader>(std::move(lo));
  TrialStarter::Options to;
  to.launcher = options_.launcher;
  to.storage = options_.storage;
  to.logger = options_.logger;
  to.recorder = recorder_.get();
  to.coordinator = coordinator_.get();
  to.env = options_.env;
  to.settings.state_dir = options_.state_dir;
  to.settings.log_head_bytes = options_.log_head_bytes;
  to.settings.log_tail_bytes = options_.log_tail_bytes;
  to.settings.base_env = options_.base_env;
  to.trials_as_submitters = options_.trials_as_submitters;
  if (options_.trial_write_storage && options_.post) {
    LazyWriter::Options lw;
    lw.storage = options_.trial_write_storage;
    lw.post = options_.post;
    lw.logger = options_.logger;
    lw.on_outage = [this](const Status& st) {
      OnStorageRefused(st);
      Pump();  // which asks to be woken for the storage probe
    };
    lw.on_refused = [this](int64_t trial_id, const Status& st) {
      // Its trial ended elsewhere (another node took it over while this one was cut off):
      // reading the study again stops it here, as a refusal on the loop does.
      RunningTrial* rt = running_->Find(trial_id);
      if (rt != nullptr && st.code() == common::Code::kFailedPrecondition) {
        coordinator_->Follow(*rt->study);
      }
    };
    lazy_writer_ = std::make_unique<LazyWriter>(std::move(lw));
  }
  to.lazy_writer = lazy_writer_.get();
  to.pending_writes = &pending_writes_;
  to.storage_held = [this] { return outage_.held(); };
  to.on_storage_refused = [this](const Status& st) { OnStorageRefused(st); };
  starter_ = std::make_unique<TrialStarter>(std::move(to));
  SpawnFailures::Options so;
  so.clock = options_.clock;
  so.logger = options_.logger;
  so.recorder = recorder_.get();
  spawn_failures_ = std::make_unique<SpawnFailures>(std::move(so));
  control_host_ = std::make_unique<Control>(this);
  StudyControl::Options vo;
  vo.storage = options_.storage;
  vo.clock = options_.clock;
  vo.logger = options_.logger;
  vo.coordinator = coordinator_.get();
  vo.recorder = recorder_.get();
  vo.env = options_.env;
  vo.host = control_host_.get();
  vo.state_dir = options_.state_dir;
  control_ = std::make_unique<StudyControl>(std::move(vo));
  StudyForkServers::Options fo;
  fo.launcher = options_.launcher;
  fo.logger = options_.logger;
  fo.recorder = recorder_.get();
  fo.find_study = [this](const std::string& name) -> const StudyCache* { return FindActive(name); };
  fork_servers_ = std::make_unique<StudyForkServers>(std::move(fo));
  if (options_.gpus != nullptr) {
    GpuDrains::Options go;
    go.pool = options_.gpus;
    go.storage = options_.storage;
    go.clock = options_.clock;
    go.logger = options_.logger;
    gpu_drains_ = std::make_unique<GpuDrains>(std::move(go));
  }
}

Scheduler::~Scheduler() {
  fork_servers_.reset();  // the launcher's events stop first, before any trial or study goes
  // No read off the loop comes back to a coordinator that is gone (nor to a study).
  options_.storage_reads.reset();
}

// The control verbs (study_control.h).
Status Scheduler::Cancel(const std::string& name) { return control_->Cancel(name); }
Result<model::StudyRecord> Scheduler::Pause(const std::string& name, bool paused) {
  return control_->Pause(name, paused);
}
Result<model::StudyRecord> Scheduler::Extend(const std::string& name, int n_trials) {
  return control_->Extend(name, n_trials);
}
Result<model::StudyRecord> Scheduler::SetParallelism(const std::string& name, int parallelism) {
  return control_->SetParallelism(name, parallelism);
}
Result<model::StudyRecord> Scheduler::SetMetricNames(const std::string& name,
                                                     const std::vector<std::string>& names) {
  return control_->SetMetricNames(name, names);
}
Status Scheduler::FollowControl(const ControlStored& stored) { return control_->Follow(stored); }
Result<int64_t> Scheduler::Delete(const std::string& name, bool purge) {
  return control_->Delete(name, purge);
}
Result<DeleteHold> Scheduler::HoldForDelete(const std::string& name) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  StudyRuntime* study = FindActive(name);
  DeleteHold hold =
      StudyControl::HoldOf(name, study, study != nullptr && claims_.count(study->record.id) != 0);
  if (study != nullptr) study->held_for_delete = true;
  return hold;
}

Result<int64_t> Scheduler::FollowDelete(const DeleteStored& stored, bool purge) {
  return control_->FollowDelete(stored, purge);
}

void Scheduler::ReleaseDelete(const DeleteHold& hold) {
  if (!hold.study_id) return;
  auto found = studies_.find(*hold.study_id);
  if (found == studies_.end()) return;
  found->second->held_for_delete = false;
  Pump();
}

Result<TrialRecord> Scheduler::Enqueue(const std::string& name,
                                       const std::map<std::string, std::string>& params,
                                       bool skip_if_exists, bool* skipped) {
  return control_->Enqueue(name, params, skip_if_exists, skipped);
}

bool Scheduler::EnqueueOffLoop(const std::string& study_name,
                               std::map<std::string, std::string> params, bool skip_if_exists,
                               EnqueuedDone done) {
  if (!coordinator_->WritesOffLoop()) return false;
  const StudyRuntime* study = FindActive(study_name);
  if (study == nullptr) {
    done(StudyControl::NotLoadedHere(study_name), false);
    return true;
  }
  control_->EnqueueOffLoop(study->record.id, study_name, std::move(params), skip_if_exists,
                           std::move(done), 0);
  return true;
}

Status Scheduler::Ask(const std::string& name, std::shared_ptr<common::UniqueFd> connection) {
  StudyRuntime* study = FindActive(name);
  if (study == nullptr) {
    Result<model::StudyRecord> rec = options_.storage->GetStudy(name);
    if (!rec.ok() && rec.status().code() != common::Code::kNotFound) return rec.status();
    return AskOnInactive(name, rec.ok() ? &*rec : nullptr);
  }
  if (!IsClientStudy(*study)) return AskOnNonClient(*study);
  // The ask is served by this Pump or not at all: a trial launched for it took the connection.
  study->ask = std::move(connection);
  Pump();
  if (!study->ask) return Status::Ok();
  study->ask.reset();
  return AskRefused(*study, shutting_down_, outage_.held(), outage_.reason());
}

int Scheduler::queued_count() const {
  int n = 0;
  for (const auto& [id, s] : studies_) n += static_cast<int>(s->waiting.size());
  return n;
}

Result<model::StudyRecord> Scheduler::Submit(const config::SweepSource& source,
                                             const model::Submitter& submitter) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, Admit(source, submitter));
  return SubmitAdmitted(source, std::move(spec), submitter);
}

Result<config::SweepSpec> Scheduler::Admit(const config::SweepSource& source,
                                           const model::Submitter& submitter) const {
  return loader_->Admit(source, submitter);
}

Result<model::StudyRecord> Scheduler::SubmitAdmitted(const config::SweepSource& source,
                                                     config::SweepSpec spec,
                                                     const model::Submitter& submitter) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  // Continuing the study of this name (submit --resume, [study] load_if_exists) when there is
  // one; else a new study, as without.
  if (!MakesNewStudy(source, spec)) {
    Result<model::StudyRecord> existing = options_.storage->GetStudy(spec.study.name);
    if (existing.ok()) {
      const bool trusted = !submitter.known() || submitter.uid == 0 ||
                           submitter.uid == static_cast<int64_t>(::geteuid());
      return control_->Resume(spec, submitter, trusted);
    }
    if (existing.status().code() != common::Code::kNotFound) return existing.status();
  }
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StudyRuntime> study,
                          loader_->SubmitAdmitted(source, std::move(spec), submitter));
  const model::StudyRecord record = study->record;
  studies_[record.id] = std::move(study);
  Pump();  // may finish the study at once (a sampler with nothing to give) and drop it
  return record;
}

bool Scheduler::MakesNewStudy(const config::SweepSource& source, const config::SweepSpec& spec) {
  return !source.resume && !spec.study.load_if_exists;
}

Result<PreparedStudy> Scheduler::PrepareSubmitted(const config::SweepSource& source,
                                                  config::SweepSpec spec,
                                                  const model::Submitter& submitter) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  return loader_->PrepareSubmitted(source, std::move(spec), submitter);
}

model::StudyRecord Scheduler::AddSubmitted(PreparedStudy prepared, model::StudyRecord stored) {
  if (shutting_down_ || studies_.count(stored.id) != 0) {
    options_.logger->info(
        "study {} submitted: {}{}", stored.name, prepared.summary,
        shutting_down_ ? " (stored: this daemon is stopping; it runs when a daemon of this storage "
                         "takes it up)"
                       : " (joined already)");
    return stored;
  }
  std::unique_ptr<StudyRuntime> study = loader_->Submitted(std::move(prepared), stored);
  studies_[stored.id] = std::move(study);
  Pump();  // may finish the study at once (a sampler with nothing to give) and drop it
  return stored;
}

Status Scheduler::Recover() {
  TRIALD_RETURN_IF_ERROR(coordinator_->Join());
  // One commit for the whole recovery on a storage of its own (on a shared one, every change
  // commits alone).
  std::unique_ptr<StorageBatch> pass = coordinator_->BeginPass();
  RecoveryOptions ro;
  ro.storage = options_.storage;
  ro.clock = options_.clock;
  ro.logger = options_.logger;
  ro.coordinator = coordinator_.get();
  ro.leftovers = options_.leftovers;
  ro.state_dir = options_.state_dir;
  TRIALD_ASSIGN_OR_RETURN(Recovered recovered, EndLostTrials(ro));
  for (model::StudyRecord& rec : recovered.studies) {
    if (rec.state != StudyState::kRunning) continue;
    Result<std::unique_ptr<StudyRuntime>> rt = loader_->Load(rec);
    if (!rt.ok()) {
      if (coordinator_->LeaveToOthers(rec, rt.status())) continue;  // other nodes may run it
      // The stored sweep no longer parses (e.g. an option this build dropped): keep its trials
      // and stop the study rather than refuse to start.
      options_.logger->error("study {}: cannot resume: {}", rec.name, rt.status().message());
      (void)recorder_->SetState(rec, nullptr, StudyState::kCancelled, "", "");
      continue;
    }
    StudyRuntime& study = *(studies_[rec.id] = std::move(rt).value());
    // Trials the previous daemon lost are retried like any other failure.
    for (int number : recovered.lost[rec.id]) {
      if (number < static_cast<int>(study.trials.size())) MaybeRetry(study, number);
    }
    options_.logger->info("study {} resumed: {}/{} trials finished", rec.name, study.finished,
                          rec.n_trials);
    LockedMaybeComplete(study);
  }
  return Status::Ok();
}

void Scheduler::LockedMaybeComplete(StudyRuntime& study) {
  // Off the loop, the end takes the lock itself.
  if (coordinator_->WritesOffLoop()) {
    MaybeCompleteStudy(study);
    return;
  }
  Result<std::unique_ptr<StorageBatch>> locked = coordinator_->Lock(study);
  if (locked.ok()) MaybeCompleteStudy(study);
}

void Scheduler::StopFailingStudy(StudyRuntime& study, const std::string& why) {
  recorder_->Event(&study, nullptr, "study_failing", why);
  FailStudy(study, why);
  // Its WAITING trials (retries, enqueued ones) do not start: they end as a cancelled study's.
  while (!study.waiting.empty()) {
    const int waiting = study.waiting.front();
    study.waiting.pop_front();
    FinishTrial(study, waiting, StoppedBeforeStart(why), /*own=*/false);
  }
}

void Scheduler::FailStudy(StudyRuntime& study, const std::string& why) {
  options_.logger->error("study {}: {}", study.record.name, why);
  study.exhausted = true;  // starts nothing more
  if (study.failure.empty()) study.failure = why;
  MaybeCompleteStudy(study);
}

std::optional<sampler::TrialSample> Scheduler::DrawParams(StudyRuntime& study) {
  if (study.sampler->Exhausted(study.view())) {
    study.exhausted = true;
    recorder_->Event(&study, nullptr, "sampler_exhausted", "no more configurations to try");
    MaybeCompleteStudy(study);
    return std::nullopt;
  }
  // The whole sample of the trial: its [space] parameters and, for its define-by-run suggests,
  // the relative sample (kept, not computed again when it starts).
  Result<sampler::TrialSample> sample =
      sampler::StartTrial(*study.sampler, study.view(), static_cast<int>(study.trials.size()));
  if (!sample.ok()) {
    recorder_->Event(&study, nullptr, "sampler_failed", sample.status().message());
    FailStudy(study, "sampler failed: " + sample.status().message());
    return std::nullopt;
  }
  return std::move(sample).value();
}

std::optional<Scheduler::Pick> Scheduler::PickNext(StudyRuntime& study) {
  // Shared storage: the claim checks the study under its lock, so a pause by any node holds.
  if (study.record.state != StudyState::kRunning || study.record.paused || study.held_for_delete) {
    return std::nullopt;
  }
  // A trial launched here stays WAITING in the cache until its start is known (a fork server's):
  // a read of the study meanwhile makes it claimable again in the cache; it is not.
  study.waiting.erase(std::remove_if(study.waiting.begin(), study.waiting.end(),
                                     [&](int number) {
                                       return running_->Find(study.trials[number].id) != nullptr;
                                     }),
                      study.waiting.end());
  // A sampler computing in the background (background_sampler.h) holds the trial until its
  // relative sample is ready; it pumps again then.
  if (!study.waiting.empty()) {
    const int number = study.waiting.front();
    if (study.spec.objective.define_by_run() &&
        !study.sampler->RelativeReady(study.view(), number)) {
      study.awaiting_sample = true;
      return std::nullopt;
    }
    return Pick{number, std::nullopt};
  }
  if (study.exhausted || study.configurations() >= study.record.n_trials) return std::nullopt;
  if (!study.sampler->RelativeReady(study.view(), static_cast<int>(study.trials.size()))) {
    study.awaiting_sample = true;
    return std::nullopt;
  }
  std::optional<sampler::TrialSample> sample = DrawParams(study);
  if (!sample) return std::nullopt;
  return Pick{std::nullopt, std::move(sample)};
}

namespace {
// A new trial's [space] parameters, from its sample.
model::ParamMap SpaceParams(const StudyRuntime& study, const sampler::TrialSample& sample) {
  model::ParamMap params;
  for (const config::ParamSpec& p : study.spec.space) {
    params[p.name] = model::ParamValue{sample.fixed.at(p.name), p.dist};
  }
  return params;
}
}  // namespace

std::optional<int> Scheduler::NextTrial(StudyRuntime& study) {
  std::optional<Pick> pick = PickNext(study);
  if (!pick) return std::nullopt;
  if (pick->waiting) return *pick->waiting;
  sampler::TrialSample& sample = *pick->sample;
  Result<TrialRecord> created = options_.storage->CreateTrial(
      study.record.id, SpaceParams(study, sample), options_.clock->WallSeconds());
  if (!created.ok()) {
    OnCreateRefused(study, created.status());
    return std::nullopt;
  }
  const int number = created->number;
  common::Span(options_.logger, options_.clock->WallSeconds() * 1e3, "created trial={}", number);
  if (static_cast<int>(study.trials.size()) != number) {
    options_.logger->error("study {}: trial numbering out of step ({} vs {})", study.record.name,
                           number, study.trials.size());
  }
  study.trials.resize(std::max<size_t>(study.trials.size(), number + 1));
  study.trials[number] = *created;
  sample.trial_number = number;
  study.drawn[number] = std::move(sample);
  return number;
}

void Scheduler::OnCreateRefused(StudyRuntime& study, const Status& st) {
  const std::string why = "storing a new trial: " + st.message();
  if (StorageOutage::IsOutage(st)) {
    OnStorageRefused(st);  // held: nothing starts until storage is back
  } else if (!coordinator_->StorageMayRecover()) {
    FailStudy(study, why);
  } else {
    options_.logger->error("study {}: {}", study.record.name, why);
  }
}

void Scheduler::SharedTick() { coordinator_->OnTick(shutting_down_); }

void Scheduler::FollowStored(const std::vector<model::StudyRecord>& stored) {
  FollowOptions follow;
  follow.coordinator = coordinator_.get();
  follow.loader = loader_.get();
  follow.logger = options_.logger;
  for (int64_t dropped : FollowStoredStudies(stored, &studies_, follow)) {
    if (gpu_reserved_for_ == dropped) gpu_reserved_for_ = 0;
  }
  for (auto& [id, study] : studies_) {
    if (!coordinator_->Follow(*study)) continue;
    // A study whose last trials ended elsewhere without completing it (that node died between
    // the two) is completed here.
    if (study->record.state == StudyState::kRunning && study->running == 0 &&
        std::all_of(study->trials.begin(), study->trials.end(),
                    [](const TrialRecord& t) { return model::IsFinished(t.state); }) &&
        study->configurations() >= study->record.n_trials) {
      LockedMaybeComplete(*study);
    }
  }
  Pump();
}

bool Scheduler::CanStart(const StudyRuntime& s) const {
  if (shutting_down_ || outage_.held() || s.record.state != StudyState::kRunning ||
      s.record.paused) {
    return false;
  }
  if (s.running >= s.parallelism()) return false;
  if (claims_.count(s.record.id) > 0) return false;  // one claim off the loop at a time
  if (s.awaiting_sample) return false;               // asked again at the next Pump()
  if (IsClientStudy(s) && !s.ask) return false;      // its trials start only when asked
  if (!s.spawn.Ready(options_.clock->MonotonicSeconds())) return false;
  if (!s.waiting.empty()) return true;
  return !s.exhausted && s.configurations() < s.record.n_trials;
}

bool Scheduler::RunsHere(const StudyRuntime& s) {
  return s.spec.executor.kind == "local" && !IsClientStudy(s);  // a client's trial runs there
}

bool Scheduler::HasWork() const {
  if (running_count() > 0 || !claims_.empty()) return true;
  for (const auto& [id, s] : studies_) {
    if (s->record.state != StudyState::kRunning || s->record.paused || IsClientStudy(*s)) continue;
    if (!s->waiting.empty() || (!s->exhausted && s->configurations() < s->record.n_trials)) {
      return true;
    }
  }
  return false;
}

int Scheduler::local_running() const {
  int n = 0;
  for (const auto& [id, s] : studies_) n += RunsHere(*s) ? s->running : 0;
  for (const auto& [id, claim] : claims_) n += claim.runs_here ? 1 : 0;  // their slots are held
  return n;
}

void Scheduler::Pump() {
  if (pumping_) return;  // re-entered from a synchronous spawn failure
  pumping_ = true;
  // A study whose next sample was being computed in the background is asked again (its
  // sampler pumps when the sample is ready; any other event may find it ready too).
  for (auto& [id, study] : studies_) study->awaiting_sample = false;
  ProbeStorage();
  // Every trial started in this pass is recorded (created, then RUNNING with its pid) in one
  // commit (shared storage: each claim commits alone, before its process starts).
  std::unique_ptr<StorageBatch> pass = coordinator_->BeginPass();
  if (gpu_reserved_for_ != 0) {
    auto held = studies_.find(gpu_reserved_for_);
    if (held == studies_.end() || !CanStart(*held->second)) gpu_reserved_for_ = 0;
  }
  // Round-robin over studies, one trial each per turn, resuming after the study served last,
  // so one big study cannot starve the others. Every StartTrial either starts a trial or stops
  // its study for now (a spawn failure starts its back-off; an exhausted sampler stops it), so
  // this ends.
  for (bool started = true; started;) {
    started = false;
    std::vector<StudyRuntime*> order;
    auto next = studies_.upper_bound(last_served_study_);
    for (size_t i = 0; i < studies_.size(); ++i, ++next) {
      if (next == studies_.end()) next = studies_.begin();
      order.push_back(next->second.get());
    }
    for (StudyRuntime* study : order) {
      if (!CanStart(*study)) continue;
      TrialGpus gpus;
      if (RunsHere(*study) && local_running() >= options_.max_workers) continue;
      if (const int k = LocalGpusPerTrial(study->spec); k > 0) {
        // The reservation: while one GPU study waits for slots, no other GPU trial starts.
        if (gpu_reserved_for_ != 0 && gpu_reserved_for_ != study->record.id) continue;
        std::optional<std::vector<devices::GpuSlot>> got =
            options_.gpus ? options_.gpus->Acquire(k) : std::nullopt;
        if (!got) {
          if (gpu_reserved_for_ == 0) {
            gpu_reserved_for_ = study->record.id;
            options_.logger->debug("study {}: waiting for {} free GPU(s)", study->record.name, k);
          }
          continue;
        }
        gpu_reserved_for_ = 0;
        gpus = TrialGpus(options_.gpus, std::move(*got));
      }
      last_served_study_ = study->record.id;
      // Shared storage: a claim can find the study full (other nodes took its last trials) or
      // the storage failing; only a started trial goes round again, so this ends too.
      const bool ran = StartTrial(*study, std::move(gpus));
      started = started || ran || !coordinator_->FailedStartEndsPass();
    }
  }
  if (pass != nullptr) {
    Status committed = pass->Commit();
    for (const PassLaunch& l : pass_launches_) {
      common::Span(options_.logger, options_.clock->WallSeconds() * 1e3, "committed trial={}",
                   l.number);
    }
    if (!committed.ok()) {
      options_.logger->critical("storing the trials started: {}", committed.message());
      OnStorageRefused(committed);
      UndoPass();
    }
    pass.reset();
  }
  pass_launches_.clear();
  pumping_ = false;
  // A study's trials (every intermediate value and attribute) are many small blocks: give them
  // back, or the daemon's RSS stays at its peak after a large study.
  const bool dropped = DropEndedStudies();
  // A study backing off: Pump() again when its wait is over.
  if (options_.wake_after && !shutting_down_) {
    if (std::optional<double> delay = spawn_failures_->WakeDelay(studies_)) {
      options_.wake_after(*delay);
    }
    // Held: Pump() again for the next probe.
    if (outage_.held()) {
      options_.wake_after(outage_.RetryIn(options_.clock->MonotonicSeconds()));
    }
  }
  if (dropped) options_.env->ReturnFreedMemory();
  if (options_.on_change) options_.on_change();
  if (shutting_down_ && running_->empty() && coordinator_->ends_in_flight() == 0 &&
      coordinator_->claims_in_flight() == 0 && on_idle_) {
    auto fn = std::move(on_idle_);
    on_idle_ = nullptr;
    fn();
  }
}

bool Scheduler::DropEndedStudies() {
  bool dropped = false;
  for (auto it = studies_.begin(); it != studies_.end();) {
    const StudyRuntime& s = *it->second;
    if (s.record.state != StudyState::kRunning && s.running == 0 && s.pending_finishes == 0) {
      fork_servers_->Release(s);  // none of its trials is starting or running
      it = studies_.erase(it);
      dropped = true;
    } else {
      ++it;
    }
  }
  return dropped;
}

bool Scheduler::StartTrial(StudyRuntime& study, TrialGpus gpus) {
  // A client's ask is answered by the Pump it made: its trial is claimed on the loop.
  if (coordinator_->WritesOffLoop() && !IsClientStudy(study)) {
    return ClaimOffLoop(study, std::move(gpus));
  }
  const size_t known = study.trials.size();
  std::optional<int> claimed = coordinator_->ClaimNext(study, [&] { return NextTrial(study); });
  if (!claimed) return false;  // `gpus` go straight back
  return LaunchClaimed(study, *claimed, study.trials.size() > known, std::move(gpus));
}

bool Scheduler::ClaimOffLoop(StudyRuntime& study, TrialGpus gpus) {
  std::optional<Pick> pick = PickNext(study);
  if (!pick) return false;  // `gpus` go straight back
  ClaimPick claim;
  claim.waiting = pick->waiting;
  if (pick->sample) claim.params = SpaceParams(study, *pick->sample);
  claim.number = static_cast<int>(study.trials.size());
  claim.n_trials = study.record.n_trials;
  const int64_t sid = study.record.id;
  auto [held, added] = claims_.emplace(
      sid, ClaimInFlight{std::move(gpus), std::move(pick->sample), RunsHere(study)});
  if (!added) return false;  // CanStart holds a study with a claim in flight
  if (!coordinator_->ClaimOffLoop(study, std::move(claim), [this, sid](StudyCache*, ClaimMade m) {
        OnClaimed(sid, std::move(m));
      })) {
    claims_.erase(held);  // the lease does not hold: nothing is claimed until it does
    return false;
  }
  return true;
}

void Scheduler::OnClaimed(int64_t study_id, ClaimMade made) {
  auto held = claims_.find(study_id);
  if (held == claims_.end()) return;
  ClaimInFlight claim = std::move(held->second);
  claims_.erase(held);
  auto found = studies_.find(study_id);
  StudyRuntime* study = found == studies_.end() ? nullptr : found->second.get();
  if (study != nullptr) {
    switch (made.outcome) {
      case ClaimMade::Outcome::kStale:
        // Picked again on what the claim read (applied), at once.
        options_.logger->debug("study {}: claim made again: {}", study->record.name, made.why);
        break;
      case ClaimMade::Outcome::kFailed:
        if (made.trial) {
          // Claimed, but this node's lease lapsed: it waits, this node's, for the next beat.
          options_.logger->warn("study {}: {}", study->record.name, made.status.message());
        } else if (StorageOutage::IsOutage(made.status)) {
          OnStorageRefused(made.status);  // held: nothing starts until storage is back
        } else {
          options_.logger->error("study {}: claiming a trial: {}", study->record.name,
                                 made.status.message());
        }
        // Tried again at the next tick, not in a loop against a failing storage; a shutdown
        // still ends when nothing else is left.
        if (shutting_down_) Pump();
        return;
      case ClaimMade::Outcome::kClaimed: {
        const int number = made.trial->number;
        if (made.created && claim.sample) {
          claim.sample->trial_number = number;
          study->drawn[number] = std::move(*claim.sample);
        }
        if (shutting_down_ || outage_.held() || study->record.state != StudyState::kRunning ||
            study->record.paused || study->held_for_delete) {
          // Stopped meanwhile: the claim is given back, and the trial waits (unless a cancel
          // ended it) for the next start on any node.
          if (study->trials[number].state == TrialState::kWaiting) {
            if (std::find(study->waiting.begin(), study->waiting.end(), number) ==
                study->waiting.end()) {
              study->waiting.push_front(number);
            }
            coordinator_->ReleaseOffLoop(*study, number, [this] { Pump(); });
          }
          break;
        }
        LaunchClaimed(*study, number, made.created, std::move(claim.gpus));
        break;
      }
    }
  }
  Pump();
}

bool Scheduler::LaunchClaimed(StudyRuntime& study, int number, bool created, TrialGpus gpus) {
  const int64_t tid = study.trials[number].id;
  launcher::TrialCallbacks cb;
  cb.on_started = [this, tid](const model::ProcessIdentity& id) { OnStarted(tid, id); };
  cb.on_message = [this, tid](const proto::ReportMessage& m) {
    if (RunningTrial* rt = running_->Find(tid)) rt->channel->OnMessage(m);
  };
  cb.on_exit = [this, tid](const launcher::ProcessOutcome& o) { OnExit(tid, o); };
  TrialStarter::Failure failure;
  std::unique_ptr<RunningTrial> rt =
      starter_->Launch(study, number, std::move(gpus), std::move(cb), &failure);
  if (!rt) {
    OnSpawnFailure(study, number, failure.error, failure.message);
    return false;
  }
  const model::ProcessIdentity id = rt->process->identity();
  const bool starting = rt->starting;
  running_->Add(tid, std::move(rt));
  ++study.running;
  if (pumping_) pass_launches_.push_back({&study, number, tid, created});
  common::Span(options_.logger, options_.clock->WallSeconds() * 1e3, "launched trial={}", number);
  if (starting) {
    // A fork server starts it (launcher.h): OnStarted, or OnExit with never_started.
    options_.logger->debug("study {} trial {}: starting", study.record.name, number);
    return true;
  }
  return OnStarted(tid, id);
}

bool Scheduler::OnStarted(int64_t tid, const model::ProcessIdentity& id) {
  RunningTrial* found = running_->Find(tid);
  if (found == nullptr) return false;
  RunningTrial& rt = *found;
  StudyRuntime& study = *rt.study;
  const int number = rt.number;
  rt.starting = false;
  TrialRecord& trial = study.trials[number];
  spawn_failures_->OnStarted(study, number);
  const double now = options_.clock->WallSeconds();
  Status st;
  if (coordinator_->WritesOffLoop()) {
    // Shared storage: stored off the event loop, and the trial runs meanwhile (OnRunningStored).
    coordinator_->MarkRunningOffLoop(tid, id, now,
                                     [this, tid](const Status& s) { OnRunningStored(tid, s); });
  } else {
    st = options_.storage->MarkRunning(tid, id, now);
  }
  if (!st.ok() && StorageOutage::IsOutage(st)) {
    // Storage is away: the trial is stopped (nothing of its run is stored) and waits, first in
    // line, for storage to come back; no outcome is recorded, so no trial is spent.
    OnStorageRefused(st);
    running_->Take(tid);
    --study.running;
    study.waiting.push_front(number);
    options_.logger->warn("study {} trial {}: stopped; its start could not be stored ({})",
                          study.record.name, number, st.message());
    return false;
  }
  if (!st.ok()) {
    // Not durable means we could not recover it after a crash: do not let it run.
    StopUnrecorded(study, tid, number, st);
    return false;
  }
  trial.state = TrialState::kRunning;
  trial.process = id;
  trial.started_at = now;
  rt.gpus.AddProcess(id.pid);
  // Its define-by-run sampling, with the sample drawn with its parameters when there is one.
  auto drawn = study.drawn.find(number);
  std::optional<sampler::TrialSample> sample;
  if (drawn != study.drawn.end()) {
    sample = std::move(drawn->second);
    study.drawn.erase(drawn);
  }
  if (study.spec.objective.define_by_run() || sample) rt.channel->StartSample(std::move(sample));
  options_.logger->debug("study {} trial {} started (pid {})", study.record.name, number, id.pid);
  common::Span(options_.logger, options_.clock->WallSeconds() * 1e3, "started trial={} pid={}",
               number, id.pid);
  return true;
}

void Scheduler::OnRunningStored(int64_t tid, const Status& st) {
  if (st.ok()) return;
  RunningTrial* rt = running_->Find(tid);
  if (StorageOutage::IsOutage(st)) {
    // Storage is away: nothing new starts (held), and this trial runs on; its end is stored
    // with what it ran (kept until storage is back), as an end always is. Until then storage
    // has it WAITING, claimed by this node.
    OnStorageRefused(st);
    if (rt != nullptr) {
      options_.logger->warn("study {} trial {}: its start could not be stored ({}); it runs on",
                            rt->study->record.name, rt->number, st.message());
    }
    return;
  }
  if (rt == nullptr) return;  // over already: its end, queued behind, is refused as this was
  // Refused for itself (another node counted this one dead and ended the trial's claim): it
  // must not run on.
  StopUnrecorded(*rt->study, tid, rt->number, st);
}

void Scheduler::StopUnrecorded(StudyRuntime& study, int64_t tid, int number, const Status& st) {
  options_.logger->error("study {} trial {}: {}", study.record.name, number, st.message());
  // Destroying it kills its group at once, and gives back its slots.
  running_->Take(tid);
  --study.running;
  study.drawn.erase(number);
  FinishTrial(study, number, SpawnFailed("could not record the running trial: " + st.message()));
  Pump();  // does nothing when called from inside Pump
}

void Scheduler::OnNeverStarted(int64_t trial_id, const launcher::ProcessOutcome& o) {
  std::unique_ptr<RunningTrial> rt = running_->Take(trial_id);
  if (!rt) return;
  StudyRuntime& study = *rt->study;
  const int number = rt->number;
  rt.reset();  // no process of it ran: its slots go straight back
  --study.running;
  if (model::IsFinished(study.trials[number].state)) {
    // Already ended with the study's WAITING trials (a cancel gathers every one of them).
  } else if (study.record.state == StudyState::kCancelled) {
    // Cancelled while it was starting: it ends as the study's WAITING trials did.
    FinishTrial(study, number, CancelledBeforeStart(), /*own=*/false);
  } else if (shutting_down_ || o.stop_reason == StopReason::kShutdown) {
    // Stays WAITING in storage: the next daemon starts it.
    study.waiting.push_front(number);
  } else {
    // As a failed Launch(): it waits again, first in line, and the study backs off.
    OnSpawnFailure(study, number, o.spawn_error, o.spawn_message);
  }
  Pump();
}

std::optional<launcher::ForkServerStatus> Scheduler::fork_server_status(int64_t study_id) const {
  auto it = studies_.find(study_id);
  if (it == studies_.end()) return std::nullopt;
  return fork_servers_->Status(*it->second);
}

void Scheduler::OnSpawnFailure(StudyRuntime& study, int number, const launcher::SpawnError& error,
                               const std::string& message) {
  // The trial never ran: it waits again, first in line, with its parameters (enqueued ones
  // included); storage still has it WAITING. The study backs off.
  study.waiting.push_front(number);
  spawn_failures_->OnFailure(study, number, error, message);
}

std::optional<SpawnBackoff::Snapshot> Scheduler::spawn_status(int64_t study_id) const {
  auto it = studies_.find(study_id);
  if (it == studies_.end()) return std::nullopt;
  return spawn_failures_->Status(*it->second);
}

std::vector<Scheduler::RunningView> Scheduler::running_trials() const { return running_->Views(); }

StudyRuntime* Scheduler::FindActive(const std::string& name) const {
  for (const auto& [id, study] : studies_) {
    if (study->record.name == name) return study.get();
  }
  return nullptr;
}

const StudyCache* Scheduler::active_study(const std::string& name) const {
  return FindActive(name);
}

std::optional<int64_t> Scheduler::pareto_front_size(int64_t study_id) {
  auto it = studies_.find(study_id);
  if (it == studies_.end() || it->second->spec.study.directions.size() < 2) return std::nullopt;
  return it->second->ParetoFrontSize();
}

void Scheduler::OnExit(int64_t trial_id, const launcher::ProcessOutcome& o) {
  if (o.never_started) {
    OnNeverStarted(trial_id, o);
    return;
  }
  std::unique_ptr<RunningTrial> rt = running_->Take(trial_id);
  if (!rt) return;
  common::Span(options_.logger, options_.clock->WallSeconds() * 1e3, "exited trial={}", rt->number);
  StudyRuntime& study = *rt->study;
  --study.running;
  TrialObservation seen = ObserveExit(study.spec.study, study.trials[rt->number], o);
  if (!rt->gpus.empty()) {
    // The driver still shows the just-exited processes' memory for a while: one more sample,
    // of the pids seen so far. Unset when no sample of the trial ever succeeded.
    rt->gpus.Sample(/*pgid=*/0);
    seen.process.resources.peak_gpu_memory_bytes = rt->gpus.peak();
  }
  rt->channel->Observe(&seen);
  model::TrialOutcome outcome = ClassifyExit(seen);
  ApplyMeasured(study.spec.study, &outcome);
  FinishTrial(study, rt->number, outcome);
  common::Span(options_.logger, options_.clock->WallSeconds() * 1e3, "finished trial={}",
               rt->number);
  // Its slots drain: free again once the driver shows none of its processes holding memory.
  if (gpu_drains_) rt->gpus.Drain(*gpu_drains_, trial_id, study.record.id);
  rt.reset();  // the process is over; its handle goes now
  Pump();
}

void Scheduler::MaybeRetry(StudyRuntime& study, int number) {
  const TrialRecord failed = study.trials[number];  // a copy: trials grows below
  RetryDecision d = DecideRetry(study, failed);
  if (d.exhausted) recorder_->Event(&study, &failed, "retries_exhausted", *d.exhausted);
  if (!d.retry) return;
  Result<TrialRecord> created = options_.storage->CreateTrial(
      study.record.id, failed.params, options_.clock->WallSeconds(), failed.id);
  if (!created.ok()) {
    options_.logger->error("study {} trial {}: storing its retry: {}", study.record.name, number,
                           created.status().message());
    return;
  }
  study.trials.resize(std::max<size_t>(study.trials.size(), created->number + 1));
  study.trials[created->number] = *created;
  study.waiting.push_back(created->number);
  ++study.retries_created;
  ++study.retried;
  const std::string what = d.retry->what(created->number);
  options_.logger->info("study {}: {}", study.record.name, what);
  recorder_->Event(&study, &*created, d.retry->kind, what);
}

bool Scheduler::FinishOffLoop(StudyRuntime& study, int number, const model::TrialOutcome& out,
                              std::optional<EndReaped> reaped) {
  if (!coordinator_->WritesOffLoop()) return false;
  const TrialRecord& trial = study.trials[number];
  EndWrite end;
  end.trial_id = trial.id;
  end.number = number;
  end.outcome = out;
  end.at = options_.clock->WallSeconds();
  end.reaped = std::move(reaped);
  if (!end.reaped) {  // another node's trial has no writes of this node's
    end.writes = pending_writes_.TakeTrial(trial.id);
    if (lazy_writer_) {
      end.take_queued = [writer = lazy_writer_.get(), id = trial.id] {
        return writer->TakeTrial(id);
      };
    }
  }
  end.finished = DescribeOutcome(out);
  // What FinishTrial would decide once the end is mirrored: a retry, unless the study stops
  // failing with it (the streak, looked at on a copy: OnEndStored moves the study's own).
  TrialRecord ended = trial;
  ended.state = out.state;
  ended.fail = out.fail;
  ended.finished_at = end.at;
  FailureStreak streak = study.streak;
  if (!streak.OnFinished(ended)) {
    RetryDecision d = DecideRetry(study, ended);
    end.exhausted = std::move(d.exhausted);
    end.retry = std::move(d.retry);
  }
  coordinator_->FinishOffLoop(study, std::move(end),
                              [this](StudyCache* s, const EndWrite& e, EndStored stored) {
                                OnEndStored(static_cast<StudyRuntime*>(s), e, std::move(stored));
                              });
  return true;
}

void Scheduler::OnEndStored(StudyRuntime* active, const EndWrite& end, EndStored stored) {
  if (active == nullptr) {
    Pump();  // a shutdown may wait for it
    return;
  }
  StudyRuntime& study = *active;
  const int number = end.number;
  if (stored.dropped) {
    Pump();
    return;
  }
  if (!stored.status.ok()) {
    // Kept by the coordinator for a later tick (as an end whose study could not be locked on
    // the loop: the heartbeats, not this, decide whether the node may go on); its writes wait
    // here with it.
    for (PendingWrites::Write& w : stored.writes) {
      pending_writes_.Keep(std::move(w), options_.logger);
    }
    Pump();
    return;
  }
  const model::TrialOutcome& out = end.outcome;
  TrialRecord& trial = study.trials[number];
  MirrorEnd(trial, out, end.at);
  if (stored.retry) {
    const int n = stored.retry->number;
    study.trials.resize(std::max<size_t>(study.trials.size(), n + 1));
    study.trials[n] = *stored.retry;
    options_.logger->info("study {}: {}", study.record.name, end.retry->what(n));
  }
  // The counts from the trials: the transaction's read may have brought the end already.
  study.Recount(options_.storage->node());
  options_.logger->info("study {} trial {}: {}", study.record.name, number, end.finished);
  if (std::optional<std::string> stop = study.streak.OnFinished(study.trials[number])) {
    StopFailingStudy(study, *stop);  // its retry, if one was made, ends with the waiting ones
  }
  MaybeCompleteStudy(study);
  Pump();
}

bool Scheduler::gpu_work() const {
  if (options_.gpus == nullptr) return false;
  if (options_.gpus->draining()) return true;
  return running_->HoldGpus();
}

void Scheduler::PollDevices() {
  if (options_.gpus == nullptr) return;
  running_->SampleGpus();
  if (gpu_drains_->Collect()) Pump();
}

void Scheduler::FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& out,
                            bool own) {
  // This node's own trial on shared storage: stored off the event loop (OnEndStored mirrors it).
  if (own && FinishOffLoop(study, number, out)) return;
  // The trial's end, its event and the study's completion are one commit, made before any
  // other trial starts.
  StorageBatch batch(options_.storage, options_.logger);
  if (!coordinator_->BeginFinish(study, number, out, own, batch)) return;
  const StudyCache::Saved before = study.Save(number);  // for the coordinator to take back
  TrialRecord& trial = study.trials[number];
  const double now = options_.clock->WallSeconds();
  // Its writes not stored yet go first, in this commit: a finished trial takes no more.
  if (lazy_writer_) {
    for (PendingWrites::Write& w : lazy_writer_->TakeTrial(trial.id)) {
      pending_writes_.Keep(std::move(w), options_.logger);
    }
  }
  Status st = pending_writes_.Flush(*options_.storage, options_.logger, trial.id);
  if (st.ok()) st = options_.storage->FinishTrial(trial.id, out, now);
  if (!st.ok()) {
    OnStorageRefused(st);
    if (coordinator_->KeepFailedFinish(study, number, out, own, st)) return;
    options_.logger->error("study {} trial {}: storing its end: {}", study.record.name, number,
                           st.message());
  }
  MirrorEnd(trial, out, now);
  ++study.finished;
  const std::string what = DescribeOutcome(out);
  options_.logger->info("study {} trial {}: {}", study.record.name, number, what);
  recorder_->Event(&study, &trial, "trial_finished", what);
  if (std::optional<std::string> stop = study.streak.OnFinished(trial)) {
    StopFailingStudy(study, *stop);  // none of these failures is retried
  } else {
    MaybeRetry(study, number);  // may grow study.trials: `trial` is not used after this
  }
  MaybeCompleteStudy(study);
  coordinator_->CommitFinish(study, number, out, own, batch, before);
}

size_t Scheduler::lazy_writes_queued() const { return lazy_writer_ ? lazy_writer_->queued() : 0; }

double Scheduler::storage_retry_in() const {
  return outage_.RetryIn(options_.clock->MonotonicSeconds());
}

void Scheduler::OnStorageRefused(const Status& st) {
  const bool was = outage_.held();
  if (!outage_.OnFailure(st, options_.clock->MonotonicSeconds())) return;
  if (options_.on_change) options_.on_change();
  if (was) return;
  options_.logger->critical(
      "storage refuses writes: {}; no trial starts until it takes them again "
      "(the trial ends it could not store are kept)",
      st.message());
}

void Scheduler::ProbeStorage() {
  const double now = options_.clock->MonotonicSeconds();
  if (probe_in_flight_ || !outage_.ProbeDue(now)) return;
  const std::string detail = "storage takes writes again after " +
                             std::to_string(outage_.failures()) +
                             " refused (the first: " + outage_.reason() + ")";
  const double at = options_.clock->WallSeconds();
  if (options_.storage_reads) {
    // A server that holds this call (a stopped backend, a lock) holds that thread, not the loop.
    probe_in_flight_ = true;
    options_.storage_reads->Submit([this, detail, at](storage::Storage& s) {
      Status probe = s.AppendEvent(std::nullopt, std::nullopt, "storage_resumed", detail, at);
      return StorageReads::Done([this, probe] {
        probe_in_flight_ = false;
        if (!outage_.held()) return;
        OnProbe(probe);
        if (!outage_.held()) Pump();  // resumed: start what waited
      });
    });
    return;
  }
  OnProbe(options_.storage->AppendEvent(std::nullopt, std::nullopt, "storage_resumed", detail, at));
}

void Scheduler::OnProbe(const Status& probe) {
  const double now = options_.clock->MonotonicSeconds();
  const std::string why = outage_.reason();
  if (!probe.ok()) {
    outage_.OnProbeFailure(now);
    if (options_.on_change) options_.on_change();
    options_.logger->warn("storage still refuses writes: {}; next try in {:.0f} s", probe.message(),
                          outage_.RetryIn(now));
    return;
  }
  outage_.OnSuccess();
  if (options_.on_change) options_.on_change();
  options_.logger->warn(
      "storage takes writes again (it refused: {}); storing the kept trial "
      "writes and ends, then starting trials",
      why);
  if (lazy_writer_) {
    // The writes kept meanwhile go to the writer, off the loop, in front of its own (each
    // trial's are older than any of its queued: its end took those); a kept end's retry takes
    // its trial's back from there into its own transaction.
    lazy_writer_->WriteFirst(pending_writes_.Take(pending_writes_.size()));
    lazy_writer_->Resume();
  } else if (Status kept = pending_writes_.Flush(*options_.storage, options_.logger); !kept.ok()) {
    OnStorageRefused(kept);
    return;
  }
  coordinator_->StorageBack();
}

void Scheduler::UndoPass() {
  for (auto it = pass_launches_.rbegin(); it != pass_launches_.rend(); ++it) {
    StudyRuntime& study = *it->study;
    // Destroying it kills its process group at once and gives back its GPU slots.
    if (running_->Take(it->trial_id) != nullptr) --study.running;
    study.drawn.erase(it->number);
    study.waiting.erase(std::remove(study.waiting.begin(), study.waiting.end(), it->number),
                        study.waiting.end());
    if (it->created && it->number + 1 == static_cast<int>(study.trials.size())) {
      study.trials.pop_back();
    } else if (it->number < static_cast<int>(study.trials.size())) {
      TrialRecord& t = study.trials[it->number];
      t.state = TrialState::kWaiting;
      t.process = {};
      t.started_at = 0;
      study.waiting.push_front(it->number);
    }
    options_.logger->warn(
        "study {} trial {}: stopped; its start could not be stored (it starts "
        "again once storage takes writes)",
        study.record.name, it->number);
  }
  pass_launches_.clear();
}

void Scheduler::MaybeCompleteStudy(StudyRuntime& study) {
  if (study.record.state != StudyState::kRunning) return;
  if (study.running > 0 || !study.waiting.empty()) return;
  // Shared storage: nothing may be waiting or running on any node either.
  if (coordinator_->OpenElsewhere(study)) return;
  if (study.finished - study.retried < study.record.n_trials && !study.exhausted) return;
  const bool failed = !study.failure.empty();
  const std::string counts =
      std::to_string(study.finished) + " trials finished" +
      (study.retried > 0 ? ", " + std::to_string(study.retried) + " of them retried" : "");
  StudyEndWrite end;
  end.state = failed ? StudyState::kFailed : StudyState::kComplete;
  end.n_trials = study.record.n_trials;
  end.kind = failed ? "study_failed" : "study_complete";
  end.detail = failed ? study.failure + " (" + counts + ")" : counts;
  end.at = options_.clock->WallSeconds();
  if (coordinator_->WritesOffLoop()) {
    // Shared storage: decided again under the study's lock with its trials read afresh, off the
    // loop; Pump() when it is back (the study leaves memory then).
    if (study.ending) return;
    study.ending = true;
    const int64_t sid = study.record.id;
    coordinator_->EndStudyOffLoop(
        study, end, [this, sid, end](StudyCache*, const Status& st, bool ended) {
          auto found = studies_.find(sid);
          if (found != studies_.end()) {
            StudyRuntime& s = *found->second;
            s.ending = false;
            if (ended && s.record.state == StudyState::kRunning) {
              recorder_->Mirror(s.record, nullptr, end.state, end.at, end.kind, end.detail);
            } else if (!st.ok()) {
              // Decided again at the next tick (FollowStored) or end.
              options_.logger->error("study {}: storing its end: {}", s.record.name, st.message());
            }
          }
          Pump();
        });
    return;
  }
  Status st = recorder_->SetState(study.record, nullptr, end.state, end.kind, end.detail);
  if (!st.ok()) {
    options_.logger->error("study {}: storing its end: {}", study.record.name, st.message());
  }
}

void Scheduler::BeginShutdown(std::function<void()> on_idle) {
  shutting_down_ = true;
  on_idle_ = std::move(on_idle);
  running_->StopAll();
  // No trial starts any more: the fork servers go (a start still pending ends never started).
  fork_servers_->ReleaseAll();
  Pump();  // runs on_idle at once when nothing is running
}

}  // namespace triald::daemon
