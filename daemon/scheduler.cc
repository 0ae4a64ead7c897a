#include "daemon/scheduler.h"

#include <algorithm>
#include <set>

#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/gpu_drains.h"
#include "daemon/scheduler/launch_spec.h"
#include "daemon/scheduler/measured_metrics.h"
#include "daemon/scheduler/recovery.h"
#include "daemon/scheduler/storage_batch.h"
#include "daemon/scheduler/study_control.h"
#include "daemon/scheduler/study_recorder.h"
#include "daemon/scheduler/study_runtime.h"
#include "daemon/scheduler/trial_channel.h"
#include "daemon/scheduler/trial_gpus.h"
#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {
using common::Result;
using common::Status;
using launcher::StopReason;
using model::StudyState;
using model::TrialRecord;
using model::TrialState;

// One launched trial of this node, from Launch() to on_exit. Members are destroyed in reverse:
// the channel before the process it answers, the process before its slots go back.
struct Scheduler::RunningTrial {
  StudyRuntime* study = nullptr;
  int number = 0;
  TrialGpus gpus;  // given back if it never ran, else drained at exit
  std::unique_ptr<launcher::TrialProcess> process;
  std::unique_ptr<TrialChannel> channel;
  // Launched, not started yet (a fork server's fork pending): it holds its slot, but storage
  // still has it WAITING, with no process (OnStarted records it RUNNING).
  bool starting = false;
};

// What the coordinator may ask of the scheduler (node_coordinator.h). Every StudyCache it is
// given is a StudyRuntime of this scheduler.
class Scheduler::Host final : public CoordinatorHost {
 public:
  explicit Host(Scheduler* s) : s_(s) {}
  void StopTrialsEndedElsewhere(StudyCache& study) override { s_->StopTrials(study, true); }
  void StopStudyTrials(StudyCache& study) override { s_->StopTrials(study, false); }
  void RecordEvent(const StudyCache& study, const TrialRecord* trial, const std::string& kind,
                   const std::string& detail) override {
    s_->recorder_->Event(&study, trial, kind, detail);
  }
  void FinishTrial(StudyCache& study, int number, const model::TrialOutcome& outcome,
                   bool own) override {
    s_->FinishTrial(static_cast<StudyRuntime&>(study), number, outcome, own);
  }
  StudyCache* FindStudy(int64_t study_id) override {
    auto it = s_->studies_.find(study_id);
    return it == s_->studies_.end() ? nullptr : it->second.get();
  }

 private:
  Scheduler* s_;
};

// What the control verbs may ask of the scheduler (study_control.h).
class Scheduler::Control final : public ControlHost {
 public:
  explicit Control(Scheduler* s) : s_(s) {}
  bool shutting_down() const override { return s_->shutting_down_; }
  StudyRuntime* ActiveStudy(int64_t study_id) override {
    auto it = s_->studies_.find(study_id);
    return it == s_->studies_.end() ? nullptr : it->second.get();
  }
  Status Activate(const model::StudyRecord& rec) override {
    Result<std::unique_ptr<StudyRuntime>> rt = s_->LoadStudy(rec);
    if (rt.ok()) {
      s_->studies_[rec.id] = std::move(rt).value();
      return Status::Ok();
    }
    return s_->coordinator_->LeaveToOthers(rec, rt.status()) ? Status::Ok() : rt.status();
  }
  void Forget(int64_t study_id) override {
    auto it = s_->studies_.find(study_id);
    if (it != s_->studies_.end()) {
      s_->ReleaseForkServer(*it->second);
      s_->studies_.erase(it);
    }
    if (s_->gpu_reserved_for_ == study_id) s_->gpu_reserved_for_ = 0;
  }
  void FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& outcome,
                   bool own) override {
    s_->FinishTrial(study, number, outcome, own);
  }
  void StopTrials(StudyRuntime& study) override { s_->StopTrials(study, false); }
  void Pump() override { s_->Pump(); }

 private:
  Scheduler* s_;
};

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)), host_(std::make_unique<Host>(this)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
  if (options_.max_workers < 1) options_.max_workers = 1;
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
  coordinator_ = MakeNodeCoordinator(std::move(co));
  StudyRecorder::Options ro;
  ro.storage = options_.storage;
  ro.clock = options_.clock;
  ro.logger = options_.logger;
  recorder_ = std::make_unique<StudyRecorder>(std::move(ro));
  StudyAdmission::Options ao;
  ao.env = options_.env;
  ao.gpus = options_.gpus;
  ao.trial_worker = options_.trial_worker;
  ao.base_env = options_.base_env;
  admission_ = std::make_unique<StudyAdmission>(std::move(ao));
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
  if (options_.launcher != nullptr) {
    options_.launcher->SetForkServerListener(
        [this](const launcher::ForkServerEvent& ev) { OnForkServerEvent(ev); });
  }
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
  if (options_.launcher != nullptr) options_.launcher->SetForkServerListener(nullptr);
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
Result<int64_t> Scheduler::Delete(const std::string& name, bool purge) {
  return control_->Delete(name, purge);
}
Result<TrialRecord> Scheduler::Enqueue(const std::string& name,
                                       const std::map<std::string, std::string>& params) {
  return control_->Enqueue(name, params);
}

void Scheduler::StopTrials(const StudyCache& study, bool ended_elsewhere) {
  for (auto& [tid, rt] : running_) {
    if (rt->study != &study) continue;
    if (ended_elsewhere) {
      const TrialRecord& stored = study.trials[rt->number];
      if (rt->channel->taken_over() || !model::IsFinished(stored.state)) continue;
      rt->channel->MarkTakenOver();
      options_.logger->warn(
          "study {} trial {}: already ended by another node as {}({}) (this node was silent); "
          "stopping it",
          study.record.name, rt->number, model::TrialStateName(stored.state), stored.fail.reason);
    }
    rt->process->Stop(StopReason::kCancel);
  }
}

int Scheduler::queued_count() const {
  int n = 0;
  for (const auto& [id, s] : studies_) n += static_cast<int>(s->waiting.size());
  return n;
}

Result<std::unique_ptr<StudyRuntime>> Scheduler::BuildRuntime(const model::StudyRecord& record,
                                                              config::SweepSpec spec) {
  auto rt = std::make_unique<StudyRuntime>();
  rt->record = record;
  rt->spec = std::move(spec);
  config::SamplerConfig sc = rt->spec.sampler;
  sc.seed = record.seed;
  TRIALD_ASSIGN_OR_RETURN(rt->sampler, options_.make_sampler
                                           ? options_.make_sampler(sc, rt->spec.space)
                                           : sampler::MakeSampler(sc, rt->spec.space));
  TRIALD_ASSIGN_OR_RETURN(rt->pruner, options_.make_pruner ? options_.make_pruner(rt->spec.pruner)
                                                           : pruner::MakePruner(rt->spec.pruner));
  return rt;
}

Result<model::StudyRecord> Scheduler::Submit(const config::SweepSource& source,
                                             const model::Submitter& submitter) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, admission_->Admit(source));
  const std::string where = source.path.empty() ? "<sweep>" : source.path;
  const model::NewStudy ns =
      StudyAdmission::NewStudyOf(spec, source, submitter, options_.seed_source);
  // Build the sampler and pruner before storing anything, so a bad sweep leaves no trace.
  model::StudyRecord probe;
  probe.seed = ns.seed;
  Result<std::unique_ptr<StudyRuntime>> check = BuildRuntime(probe, spec);
  if (!check.ok()) return check.status().WithContext(where);

  StorageBatch batch(options_.storage, options_.logger);
  Result<model::StudyRecord> rec = options_.storage->CreateStudy(ns, options_.clock->WallSeconds());
  if (!rec.ok() && rec.status().code() == common::Code::kAlreadyExists) {
    return common::AlreadyExists(where + ": [study] name = \"" + ns.name +
                                 "\": a study of that name already exists; expected a new "
                                 "name (see `trialctl studies`)");
  }
  if (!rec.ok()) return rec.status();
  StudyRuntime& study = *(studies_[rec->id] = std::move(check).value());
  study.record = *rec;
  const std::string what = std::to_string(ns.n_trials) + " trials, parallelism " +
                           std::to_string(study.spec.study.parallelism) + ", seed " +
                           std::to_string(ns.seed);
  recorder_->Event(&study, nullptr, "study_submitted", what);
  options_.logger->info("study {} submitted: {}", ns.name, what);
  // The study is stored before any of its trials starts (Pump's transactions are its own: on a
  // shared storage one per claim, each locking one study).
  Status committed = batch.Commit();
  if (!committed.ok()) {
    studies_.erase(rec->id);
    return committed.WithContext("storing study \"" + ns.name + "\"");
  }
  Pump();  // may finish the study at once (a sampler with nothing to give) and drop it
  return *rec;
}

Result<std::unique_ptr<StudyRuntime>> Scheduler::LoadStudy(const model::StudyRecord& rec) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, admission_->Readmit(rec));
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StudyRuntime> rt, BuildRuntime(rec, std::move(spec)));
  TRIALD_ASSIGN_OR_RETURN(rt->trials, options_.storage->GetTrials(rec.id));
  rt->Recount(options_.storage->node());
  rt->synced_at = options_.clock->MonotonicSeconds();
  return rt;
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
    Result<std::unique_ptr<StudyRuntime>> rt = LoadStudy(rec);
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
  Result<std::unique_ptr<StorageBatch>> locked = coordinator_->Lock(study);
  if (locked.ok()) MaybeCompleteStudy(study);
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

std::optional<int> Scheduler::NextTrial(StudyRuntime& study) {
  // Shared storage: the claim re-read the study under its lock, so a pause by any node holds.
  if (study.record.state != StudyState::kRunning || study.record.paused) return std::nullopt;
  if (!study.waiting.empty()) return study.waiting.front();
  if (study.exhausted || study.configurations() >= study.record.n_trials) return std::nullopt;
  std::optional<sampler::TrialSample> sample = DrawParams(study);
  if (!sample) return std::nullopt;
  model::ParamMap params;
  for (const config::ParamSpec& p : study.spec.space) {
    params[p.name] = model::ParamValue{sample->fixed.at(p.name), p.dist};
  }
  Result<TrialRecord> created =
      options_.storage->CreateTrial(study.record.id, params, options_.clock->WallSeconds());
  if (!created.ok()) {
    const std::string why = "storing a new trial: " + created.status().message();
    if (!coordinator_->StorageMayRecover()) {
      FailStudy(study, why);  // storage is failing: start nothing more for this study
    } else {
      options_.logger->error("study {}: {}", study.record.name, why);
    }
    return std::nullopt;
  }
  const int number = created->number;
  if (static_cast<int>(study.trials.size()) != number) {
    options_.logger->error("study {}: trial numbering out of step ({} vs {})", study.record.name,
                           number, study.trials.size());
  }
  study.trials.resize(std::max<size_t>(study.trials.size(), number + 1));
  study.trials[number] = *created;
  sample->trial_number = number;
  study.drawn[number] = std::move(*sample);
  return number;
}

void Scheduler::SharedTick() {
  std::optional<std::vector<model::StudyRecord>> stored = coordinator_->OnTick(shutting_down_);
  if (!stored) return;
  // A study another node deleted (none of its trials ran, so none runs here) is forgotten.
  std::set<int64_t> ids;
  for (const model::StudyRecord& rec : *stored) ids.insert(rec.id);
  for (auto it = studies_.begin(); it != studies_.end();) {
    StudyRuntime& s = *it->second;
    if (ids.count(it->first) == 0 && s.running == 0 && s.pending_finishes == 0) {
      options_.logger->info("study {}: deleted through another node", s.record.name);
      if (gpu_reserved_for_ == it->first) gpu_reserved_for_ = 0;
      it = studies_.erase(it);
    } else {
      ++it;
    }
  }
  for (const model::StudyRecord& rec : *stored) {
    auto it = studies_.find(rec.id);
    if (it != studies_.end()) {
      coordinator_->Adopt(*it->second, rec);
      continue;
    }
    if (rec.state != StudyState::kRunning || coordinator_->LeftToOthers(rec.name)) continue;
    Result<std::unique_ptr<StudyRuntime>> rt = LoadStudy(rec);
    if (!rt.ok()) {
      coordinator_->LeaveToOthers(rec, rt.status());
      continue;
    }
    options_.logger->info("study {}: joined ({} trials so far)", rec.name, (*rt)->trials.size());
    studies_[rec.id] = std::move(rt).value();
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
  if (shutting_down_ || s.record.state != StudyState::kRunning || s.record.paused) return false;
  if (s.running >= s.parallelism()) return false;
  if (!s.spawn.Ready(options_.clock->MonotonicSeconds())) return false;
  if (!s.waiting.empty()) return true;
  return !s.exhausted && s.configurations() < s.record.n_trials;
}

void Scheduler::Pump() {
  if (pumping_) return;  // re-entered from a synchronous spawn failure
  pumping_ = true;
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
  for (bool started = true; started && running_count() < options_.max_workers;) {
    started = false;
    std::vector<StudyRuntime*> order;
    auto next = studies_.upper_bound(last_served_study_);
    for (size_t i = 0; i < studies_.size(); ++i, ++next) {
      if (next == studies_.end()) next = studies_.begin();
      order.push_back(next->second.get());
    }
    for (StudyRuntime* study : order) {
      if (running_count() >= options_.max_workers) break;
      if (!CanStart(*study)) continue;
      TrialGpus gpus;
      if (const int k = study->spec.study.gpus_per_trial; k > 0) {
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
  pass.reset();
  pumping_ = false;
  // A study's trials (every intermediate value and attribute) are many small blocks: give them
  // back, or the daemon's RSS stays at its peak after a large study.
  const bool dropped = DropEndedStudies();
  WakeForBackoff();
  if (dropped) options_.env->ReturnFreedMemory();
  if (options_.on_change) options_.on_change();
  if (shutting_down_ && running_.empty() && on_idle_) {
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
      ReleaseForkServer(s);  // none of its trials is starting or running
      it = studies_.erase(it);
      dropped = true;
    } else {
      ++it;
    }
  }
  return dropped;
}

bool Scheduler::StartTrial(StudyRuntime& study, TrialGpus gpus) {
  std::optional<int> claimed = coordinator_->ClaimNext(study, [&] { return NextTrial(study); });
  if (!claimed) return false;  // `gpus` go straight back
  const int number = *claimed;
  TrialRecord& trial = study.trials[number];
  LaunchSettings settings;
  settings.state_dir = options_.state_dir;
  settings.log_head_bytes = options_.log_head_bytes;
  settings.log_tail_bytes = options_.log_tail_bytes;
  settings.base_env = options_.base_env;
  settings.node = options_.storage->node();
  std::optional<ResumeFolder> resume;
  if (trial.retry_of_number) resume = ResumeFolderOf(study, trial);
  launcher::LaunchSpec ls = MakeLaunchSpec(settings, study.record.name, study.spec, trial,
                                           gpus.slots(), resume ? resume->dir : "");
  ls.submitter = study.record.submitter;
  const int64_t tid = trial.id;
  launcher::TrialCallbacks cb;
  cb.on_started = [this, tid](const model::ProcessIdentity& id) { OnStarted(tid, id); };
  cb.on_message = [this, tid](const proto::ReportMessage& m) {
    if (auto it = running_.find(tid); it != running_.end()) it->second->channel->OnMessage(m);
  };
  cb.on_exit = [this, tid](const launcher::ProcessOutcome& o) { OnExit(tid, o); };
  launcher::LaunchResult proc = options_.launcher->Launch(ls, std::move(cb));
  if (!proc.ok()) {
    OnSpawnFailure(study, number, proc.spawn_error(), proc.status().message());
    return false;
  }
  if (resume) {
    const std::string what = DescribeResumeFolder(*resume, number, *trial.retry_of_number);
    options_.logger->info("study {}: {}", study.record.name, what);
    recorder_->Event(&study, &trial, "resume_folder", what);
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
  co.refresh_for_pruning = [this, &study] { coordinator_->RefreshForPruning(study); };
  rt->channel = std::make_unique<TrialChannel>(std::move(co));
  rt->starting = !rt->process->started();
  const model::ProcessIdentity id = rt->process->identity();
  const bool starting = rt->starting;
  running_[tid] = std::move(rt);
  ++study.running;
  if (starting) {
    // A fork server starts it (launcher.h): OnStarted, or OnExit with never_started.
    options_.logger->debug("study {} trial {}: starting", study.record.name, number);
    return true;
  }
  return OnStarted(tid, id);
}

bool Scheduler::OnStarted(int64_t tid, const model::ProcessIdentity& id) {
  auto it = running_.find(tid);
  if (it == running_.end()) return false;
  RunningTrial& rt = *it->second;
  StudyRuntime& study = *rt.study;
  const int number = rt.number;
  rt.starting = false;
  TrialRecord& trial = study.trials[number];
  if (study.spawn.OnStart()) {
    options_.logger->info("study {}: trials start again", study.record.name);
    recorder_->Event(&study, &trial, "spawn_recovered",
                     "trial " + std::to_string(number) + " started");
  }
  const double now = options_.clock->WallSeconds();
  Status st = options_.storage->MarkRunning(tid, id, now);
  if (!st.ok()) {
    // Not durable means we could not recover it after a crash: do not let it run. Destroying it
    // kills its group at once, and gives back its slots (no process of it ran).
    options_.logger->error("study {} trial {}: {}", study.record.name, number, st.message());
    running_.erase(it);
    --study.running;
    study.drawn.erase(number);
    FinishTrial(study, number, SpawnFailed("could not record the running trial: " + st.message()));
    Pump();  // does nothing when called from inside Pump
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
  if (study.spec.objective.kind == "python" || sample) rt.channel->StartSample(std::move(sample));
  options_.logger->debug("study {} trial {} started (pid {})", study.record.name, number, id.pid);
  return true;
}

void Scheduler::OnNeverStarted(int64_t trial_id, const launcher::ProcessOutcome& o) {
  auto it = running_.find(trial_id);
  if (it == running_.end()) return;
  StudyRuntime& study = *it->second->study;
  const int number = it->second->number;
  running_.erase(it);  // no process of it ran: its slots go straight back
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

void Scheduler::OnForkServerEvent(const launcher::ForkServerEvent& ev) {
  for (auto& [id, study] : studies_) {
    if (study->record.name != ev.key) continue;
    const char* kind = launcher::ForkServerEventName(ev.kind);
    if (ev.kind == launcher::ForkServerEvent::Kind::kStarted) {
      options_.logger->info("study {}: fork server ready ({})", ev.key, ev.detail);
    } else {
      options_.logger->warn("study {}: {}: {}", ev.key, kind, ev.detail);
    }
    recorder_->Event(study.get(), nullptr, kind, ev.detail);
    return;
  }
}

std::optional<launcher::ForkServerStatus> Scheduler::fork_server_status(int64_t study_id) const {
  auto it = studies_.find(study_id);
  if (it == studies_.end() || !it->second->spec.objective.fork_server) return std::nullopt;
  std::optional<launcher::ForkServerStatus> st =
      options_.launcher->fork_server_status(it->second->record.name);
  if (!st) {
    st.emplace();
    st->state = "not started";  // no trial has been launched since the study became active
  }
  return st;
}

void Scheduler::ReleaseForkServer(const StudyRuntime& study) {
  if (study.spec.objective.fork_server) options_.launcher->ReleaseForkServer(study.record.name);
}

void Scheduler::OnSpawnFailure(StudyRuntime& study, int number, const launcher::SpawnError& error,
                               const std::string& message) {
  const bool was_held = study.spawn.held();
  SpawnBackoff::Failure f =
      study.spawn.OnFailure(error, message, options_.clock->MonotonicSeconds());
  // The trial never ran: it waits again, first in line, with its parameters (enqueued ones
  // included); storage still has it WAITING.
  study.waiting.push_front(number);
  const std::string what = DescribeSpawnFailure(f, number, message);
  if (was_held) {
    options_.logger->debug("study {}: {}", study.record.name, what);
  } else {
    options_.logger->warn("study {}: {}", study.record.name, what);
  }
  recorder_->Event(&study, &study.trials[number], "spawn_failed", what);
  if (f.held_now) {
    options_.logger->error(
        "study {}: held: trials cannot start: {} (retried every {} s at most until they do)",
        study.record.name, message, SpawnBackoff::kMaxDelay);
    recorder_->Event(&study, nullptr, "study_held",
                     "trials cannot start: " + message + " (" + std::to_string(f.failures) +
                         " failures in a row; retried with back-off until one starts)");
  }
}

void Scheduler::WakeForBackoff() {
  if (!options_.wake_after || shutting_down_) return;
  std::optional<double> earliest;
  for (const auto& [id, study] : studies_) {
    if (!study->spawn.backing_off() || study->record.state != StudyState::kRunning) continue;
    if (!earliest || study->spawn.retry_at() < *earliest) earliest = study->spawn.retry_at();
  }
  if (earliest) {
    options_.wake_after(std::max(0.0, *earliest - options_.clock->MonotonicSeconds()));
  }
}

std::optional<SpawnBackoff::Snapshot> Scheduler::spawn_status(int64_t study_id) const {
  auto it = studies_.find(study_id);
  if (it == studies_.end() || !it->second->spawn.backing_off()) return std::nullopt;
  return it->second->spawn.Take(options_.clock->MonotonicSeconds());
}

std::vector<Scheduler::RunningView> Scheduler::running_trials() const {
  std::vector<RunningView> out;
  out.reserve(running_.size());
  for (const auto& [id, rt] : running_) {
    out.push_back({rt->study->record.id, rt->number, devices::GpuPool::SlotList(rt->gpus.slots())});
  }
  return out;
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
  auto it = running_.find(trial_id);
  if (it == running_.end()) return;
  std::unique_ptr<RunningTrial> rt = std::move(it->second);
  running_.erase(it);
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
  // Its slots drain: free again once the driver shows none of its processes holding memory.
  if (gpu_drains_) rt->gpus.Drain(*gpu_drains_, trial_id, study.record.id);
  rt.reset();  // the process is over; its handle goes now
  Pump();
}

void Scheduler::MaybeRetry(StudyRuntime& study, int number) {
  const TrialRecord failed = study.trials[number];  // a copy: trials grows below
  const config::StudyConfig& cfg = study.spec.study;
  if (failed.state != TrialState::kFail || cfg.retries == 0 ||
      study.record.state != StudyState::kRunning ||
      std::find(cfg.retry_on.begin(), cfg.retry_on.end(), failed.fail.reason) ==
          cfg.retry_on.end()) {
    return;
  }
  const int attempts = study.RetriesBehind(failed);
  if (attempts >= cfg.retries) {
    recorder_->Event(
        &study, &failed, "retries_exhausted",
        "FAIL(" + failed.fail.reason + ") after " + std::to_string(attempts) + " retries");
    return;
  }
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
  const std::string what = "trial " + std::to_string(created->number) + " retries trial " +
                           std::to_string(number) + " (FAIL(" + failed.fail.reason + "), retry " +
                           std::to_string(attempts + 1) + " of " + std::to_string(cfg.retries) +
                           ")";
  options_.logger->info("study {}: {}", study.record.name, what);
  recorder_->Event(&study, &*created, "trial_retry", what);
}

ResumeFolder Scheduler::ResumeFolderOf(const StudyRuntime& study, const TrialRecord& retry) const {
  RetryFolderQuery q;
  q.env = options_.env;
  q.state_dir = options_.state_dir;
  q.study = &study.record;
  q.of = *retry.retry_of_number;
  if (q.of >= 0 && static_cast<size_t>(q.of) < study.trials.size()) q.failed = &study.trials[q.of];
  q.shared = options_.storage->shared();
  q.node = options_.storage->node();
  q.as_submitter = options_.trials_as_submitters;
  return ResumeFolderForRetry(q);
}

bool Scheduler::gpu_work() const {
  if (options_.gpus == nullptr) return false;
  if (options_.gpus->draining()) return true;
  return std::any_of(running_.begin(), running_.end(),
                     [](const auto& r) { return !r.second->gpus.empty(); });
}

void Scheduler::PollDevices() {
  if (options_.gpus == nullptr) return;
  for (auto& [tid, rt] : running_) {
    if (!rt->starting) rt->gpus.Sample(rt->process->identity().pgid);
  }
  if (gpu_drains_->Collect()) Pump();
}

void Scheduler::FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& out,
                            bool own) {
  // The trial's end, its event and the study's completion are one commit, made before any
  // other trial starts.
  StorageBatch batch(options_.storage, options_.logger);
  if (!coordinator_->BeginFinish(study, number, out, own, batch)) return;
  const StudyCache::Saved before = study.Save(number);  // for the coordinator to take back
  TrialRecord& trial = study.trials[number];
  const double now = options_.clock->WallSeconds();
  Status st = options_.storage->FinishTrial(trial.id, out, now);
  if (!st.ok()) {
    if (coordinator_->KeepFailedFinish(study, number, out, own, st)) return;
    options_.logger->error("study {} trial {}: storing its end: {}", study.record.name, number,
                           st.message());
  }
  trial.state = out.state;
  trial.value = out.value;
  trial.values = out.values;
  trial.constraints = out.constraints;
  trial.resources = out.resources;
  trial.fail = out.fail;
  trial.finished_at = now;
  ++study.finished;
  const std::string what = DescribeOutcome(out);
  options_.logger->info("study {} trial {}: {}", study.record.name, number, what);
  recorder_->Event(&study, &trial, "trial_finished", what);
  MaybeRetry(study, number);  // may grow study.trials: `trial` is not used after this
  MaybeCompleteStudy(study);
  coordinator_->CommitFinish(study, number, out, own, batch, before);
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
  Status st = recorder_->SetState(study.record, nullptr,
                                  failed ? StudyState::kFailed : StudyState::kComplete,
                                  failed ? "study_failed" : "study_complete",
                                  failed ? study.failure + " (" + counts + ")" : counts);
  if (!st.ok()) {
    options_.logger->error("study {}: storing its end: {}", study.record.name, st.message());
  }
}

void Scheduler::BeginShutdown(std::function<void()> on_idle) {
  shutting_down_ = true;
  on_idle_ = std::move(on_idle);
  for (auto& [tid, rt] : running_) rt->process->Stop(StopReason::kShutdown);
  // No trial starts any more: the fork servers go (a start still pending ends never started).
  options_.launcher->ReleaseAllForkServers();
  Pump();  // runs on_idle at once when nothing is running
}

}  // namespace triald::daemon
