#include "daemon/scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "common/memory.h"
#include "common/process_util.h"
#include "config/suggest.h"
#include "daemon/launcher/run_as.h"
#include "daemon/objective_command.h"
#include "daemon/sampler/pareto.h"
#include "daemon/scheduler/enqueued_params.h"
#include "daemon/scheduler/gpu_drains.h"
#include "daemon/scheduler/launch_spec.h"
#include "daemon/scheduler/measured_metrics.h"
#include "daemon/scheduler/report_caps.h"
#include "daemon/scheduler/storage_batch.h"
#include "daemon/scheduler/trial_outcome.h"

namespace triald::daemon {
using common::Result;
using common::Status;
using launcher::StopReason;
using model::TrialRecord;
using model::TrialState;

// The study cache (shared with the coordinator) and what only the scheduler needs.
struct Scheduler::StudyRuntime : StudyCache {
  config::SweepSpec spec;
  std::unique_ptr<sampler::Sampler> sampler;
  std::unique_ptr<pruner::Pruner> pruner;
  SpawnBackoff spawn;  // after trials failed to start
  // pareto_front_size(): the size last computed, and the number of finished trials then.
  int64_t front_size = 0;
  int64_t front_finished = -1;
};

struct Scheduler::RunningTrial {
  StudyRuntime* study = nullptr;
  int number = 0;
  std::unique_ptr<launcher::TrialProcess> process;
  std::vector<double> final_values;         // from the last "final" line
  std::vector<double> constraints;          // from the last "constraints" line
  std::string worker_error;                 // from the last "error" line
  bool pruned = false;                      // the pruner said stop; later reports are dropped
  std::vector<devices::GpuSlot> gpu_slots;  // held until the trial ends, then drained
  std::set<pid_t> pids;                     // its processes seen holding GPU memory
  // GPU trials: the largest sum of the GPU memory its processes held, over the samples taken
  // (PollDevices, and once more at exit); unset until a sample succeeded.
  std::optional<uint64_t> gpu_peak;
  bool taken_over = false;  // shared: another node ended it (this node was silent); stopping
  // Launched, not started yet (a fork server's fork pending): it holds its slot, but storage
  // still has it WAITING, with no process (OnStarted records it RUNNING).
  bool starting = false;
  // The trial channel's requests (define-by-run trials).
  std::optional<sampler::TrialSample> sample;  // from the first suggest (kind = "python": launch)
  bool final_seen = false;                     // a "final" line came; suggests are refused
  bool worker_pruned = false;                  // a "pruned" line came (the objective raised)
  int64_t requests = 0;                        // suggest and should_prune lines so far
  std::optional<ReportCaps> caps;              // [study] max_intermediate_steps, max_attrs...
};

namespace {
// Limits on what one trial may ask (DEFINE_BY_RUN.md).
constexpr size_t kMaxTrialParams = 1000;
constexpr int64_t kMaxTrialRequests = 1'000'000;
}  // namespace

// What the coordinator may ask of the scheduler (node_coordinator.h). Every StudyCache it is
// given is a StudyRuntime of this scheduler.
class Scheduler::Host final : public CoordinatorHost {
 public:
  explicit Host(Scheduler* s) : s_(s) {}
  void StopTrialsEndedElsewhere(StudyCache& study) override { s_->StopTrials(study, true); }
  void StopStudyTrials(StudyCache& study) override { s_->StopTrials(study, false); }
  void RecordEvent(const StudyCache& study, const TrialRecord* trial, const std::string& kind,
                   const std::string& detail) override {
    s_->RecordEvent(&static_cast<const StudyRuntime&>(study), trial, kind, detail);
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

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)), host_(std::make_unique<Host>(this)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
  if (options_.max_workers < 1) options_.max_workers = 1;
  if (options_.leftovers == nullptr) {
    own_leftovers_ = std::make_unique<ProcLeftoverProcesses>();
    options_.leftovers = own_leftovers_.get();
  }
  CoordinatorOptions co;
  co.storage = options_.storage;
  co.clock = options_.clock;
  co.logger = options_.logger;
  co.host = host_.get();
  co.node_timeout_s = options_.node_timeout_s;
  coordinator_ = MakeNodeCoordinator(std::move(co));
  if (options_.launcher != nullptr) {
    options_.launcher->SetForkServerListener(
        [this](const launcher::ForkServerEvent& ev) { OnForkServerEvent(ev); });
  }
  if (options_.gpus != nullptr) {
    gpu_drains_ = std::make_unique<GpuDrains>(
        GpuDrains::Options{options_.gpus, options_.storage, options_.clock, options_.logger});
  }
}

Scheduler::~Scheduler() {
  if (options_.launcher != nullptr) options_.launcher->SetForkServerListener(nullptr);
}

void Scheduler::RecordEvent(const StudyRuntime* study, const TrialRecord* trial,
                            const std::string& kind, const std::string& detail) {
  std::optional<int64_t> sid, tid;
  if (study) sid = study->record.id;
  if (trial) tid = trial->id;
  Status st = options_.storage->AppendEvent(sid, tid, kind, detail, options_.clock->WallSeconds());
  if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
}

void Scheduler::StopTrials(const StudyCache& study, bool ended_elsewhere) {
  for (auto& [tid, rt] : running_) {
    if (rt->study != &study) continue;
    if (ended_elsewhere) {
      const TrialRecord& stored = study.trials[rt->number];
      if (rt->taken_over || !model::IsFinished(stored.state)) continue;
      rt->taken_over = true;
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

Result<std::unique_ptr<Scheduler::StudyRuntime>> Scheduler::BuildRuntime(
    const model::StudyRecord& record, config::SweepSpec spec) {
  auto rt = std::make_unique<StudyRuntime>();
  rt->record = record;
  rt->spec = std::move(spec);
  config::SamplerConfig sc = rt->spec.sampler;
  sc.seed = record.seed;
  TRIALD_ASSIGN_OR_RETURN(rt->sampler, sampler::MakeSampler(sc, rt->spec.space));
  TRIALD_ASSIGN_OR_RETURN(rt->pruner, options_.make_pruner ? options_.make_pruner(rt->spec.pruner)
                                                           : pruner::MakePruner(rt->spec.pruner));
  return rt;
}

Result<model::StudyRecord> Scheduler::Submit(const config::SweepSource& source,
                                             const model::Submitter& submitter) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, config::ParseSweep(source));
  const std::string where = source.path.empty() ? "<sweep>" : source.path;
  TRIALD_RETURN_IF_ERROR(CheckWorkdir(spec.objective, where));
  TRIALD_RETURN_IF_ERROR(PrepareObjective(spec, options_.trial_worker, where, options_.base_env));
  TRIALD_RETURN_IF_ERROR(CheckGpus(spec, where));

  Result<std::string> exe = common::FindExecutable(spec.objective.command[0],
                                                   CommandPath(options_.base_env, spec.objective),
                                                   spec.objective.workdir);
  if (!exe.ok() && spec.objective.kind == "python") {
    return common::InvalidArgument(where + ": [objective] python = \"" + spec.objective.python +
                                   "\": " + exe.status().message() +
                                   "; expected a Python 3 interpreter");
  }
  if (!exe.ok()) {
    return common::InvalidArgument(where + ": [objective] command[0] = \"" +
                                   spec.objective.command[0] + "\": " + exe.status().message() +
                                   "; expected an executable");
  }

  model::NewStudy ns;
  ns.name = spec.study.name;
  ns.direction = spec.study.direction;
  ns.directions = spec.study.directions;
  ns.n_trials = spec.study.n_trials;
  ns.spec_toml = source.text;
  ns.spec_path = source.path;
  ns.submitter = submitter;
  ns.seed = spec.sampler.seed_given ? spec.sampler.seed
                                    : (options_.seed_source ? options_.seed_source() : 0);

  // Build the sampler and pruner before storing anything, so a bad sweep leaves no trace.
  model::StudyRecord probe;
  probe.seed = ns.seed;
  Result<std::unique_ptr<StudyRuntime>> check = BuildRuntime(probe, spec);
  if (!check.ok()) return check.status().WithContext(where);

  StorageBatch batch(options_.storage, options_.logger);
  Result<model::StudyRecord> rec = options_.storage->CreateStudy(ns, options_.clock->WallSeconds());
  if (!rec.ok()) {
    if (rec.status().code() == common::Code::kAlreadyExists) {
      return common::AlreadyExists(where + ": [study] name = \"" + ns.name +
                                   "\": a study of that name already exists; expected a new "
                                   "name (see `trialctl studies`)");
    }
    return rec.status();
  }
  auto rt = std::move(check).value();
  rt->record = *rec;
  StudyRuntime* raw = rt.get();
  studies_[rec->id] = std::move(rt);
  RecordEvent(raw, nullptr, "study_submitted",
              std::to_string(ns.n_trials) + " trials, parallelism " +
                  std::to_string(raw->spec.study.parallelism) + ", seed " +
                  std::to_string(ns.seed));
  options_.logger->info("study {} submitted: {} trials, parallelism {}", ns.name, ns.n_trials,
                        raw->spec.study.parallelism);
  model::StudyRecord result = raw->record;
  // The study is stored before any of its trials starts (Pump's transactions are its own: on a
  // shared storage one per claim, each locking one study).
  Status committed = batch.Commit();
  if (!committed.ok()) {
    studies_.erase(result.id);
    return committed.WithContext("storing study \"" + ns.name + "\"");
  }
  Pump();  // may finish the study at once (a sampler with nothing to give) and drop `raw`
  return result;
}

Result<std::unique_ptr<Scheduler::StudyRuntime>> Scheduler::LoadStudy(
    const model::StudyRecord& rec) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec,
                          config::ParseSweep({rec.spec_toml, rec.spec_path}));
  TRIALD_RETURN_IF_ERROR(
      PrepareObjective(spec, options_.trial_worker, rec.spec_path, options_.base_env));
  TRIALD_RETURN_IF_ERROR(CheckGpus(spec, rec.spec_path));
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StudyRuntime> rt, BuildRuntime(rec, std::move(spec)));
  TRIALD_ASSIGN_OR_RETURN(rt->trials, options_.storage->GetTrials(rec.id));
  rt->Recount(options_.storage->node());
  rt->synced_at = options_.clock->MonotonicSeconds();
  return rt;
}

Status Scheduler::Recover() {
  TRIALD_RETURN_IF_ERROR(coordinator_->Join());
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> running, options_.storage->GetRunningTrials());
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::StudyRecord> all, options_.storage->ListStudies());
  // One commit for the whole recovery on a storage of its own (on a shared one, every change
  // commits alone).
  std::unique_ptr<StorageBatch> pass = coordinator_->BeginPass();
  std::map<int64_t, std::string> names;
  for (const auto& s : all) names[s.id] = s.name;
  // The trials this daemon left running (on a shared storage, other nodes' trials are theirs).
  std::vector<TrialRecord> lost;
  for (TrialRecord& t : running) {
    if (coordinator_->IsOwn(t)) lost.push_back(std::move(t));
  }
  // No trial runs yet, so any process of this state directory is a leftover: a lost trial's,
  // or one whose start the previous daemon never got to record.
  std::vector<model::ProcessIdentity> identities;
  for (const TrialRecord& t : lost) identities.push_back(t.process);
  int killed = options_.leftovers->Kill(options_.state_dir, identities);
  if (killed > 0) {
    options_.logger->warn("killed {} process(es) left by the previous triald", killed);
  }
  std::set<int64_t> ended;  // the lost trials this daemon ended (retried below)
  for (const TrialRecord& t : lost) {
    model::TrialOutcome out = LostAtRestart(t.process.pid);
    Status st = options_.storage->FinishTrial(t.id, out, options_.clock->WallSeconds());
    if (coordinator_->EndedElsewhere(st)) continue;  // another node found this one silent first
    if (!st.ok()) return st.WithContext("marking trial lost");
    ended.insert(t.id);
    options_.logger->warn("study {} trial {}: lost (it was running when triald stopped)",
                          names[t.study_id], t.number);
    (void)options_.storage->AppendEvent(t.study_id, t.id, "trial_lost", out.fail.detail,
                                        options_.clock->WallSeconds());
  }
  for (const model::StudyRecord& rec : all) {
    if (rec.state != model::StudyState::kRunning) continue;
    Result<std::unique_ptr<StudyRuntime>> rt = LoadStudy(rec);
    if (!rt.ok()) {
      if (coordinator_->LeaveToOthers(rec, rt.status())) continue;  // other nodes may run it
      // The stored sweep no longer parses (e.g. an option this build dropped): keep its trials
      // and stop the study rather than refuse to start.
      options_.logger->error("study {}: cannot resume: {}", rec.name, rt.status().message());
      (void)options_.storage->SetStudyState(rec.id, model::StudyState::kCancelled,
                                            options_.clock->WallSeconds());
      continue;
    }
    StudyRuntime* raw = rt->get();
    studies_[rec.id] = std::move(rt).value();
    // Trials the previous daemon lost are retried like any other failure.
    for (const TrialRecord& t : lost) {
      if (t.study_id == rec.id && ended.count(t.id) > 0 &&
          t.number < static_cast<int>(raw->trials.size())) {
        MaybeRetry(*raw, t.number);
      }
    }
    options_.logger->info("study {} resumed: {}/{} trials finished", rec.name, raw->finished,
                          rec.n_trials);
    LockedMaybeComplete(*raw);
  }
  return Status::Ok();
}

void Scheduler::LockedMaybeComplete(StudyRuntime& study) {
  Result<std::unique_ptr<StorageBatch>> locked = coordinator_->Lock(study);
  if (locked.ok()) MaybeCompleteStudy(study);
}

std::optional<model::ParamMap> Scheduler::DrawParams(StudyRuntime& study) {
  sampler::StudyView view{study.spec.study.direction, &study.spec.space, &study.trials,
                          study.spec.study.directions};
  if (study.sampler->Exhausted(view)) {
    study.exhausted = true;
    RecordEvent(&study, nullptr, "sampler_exhausted", "no more configurations to try");
    MaybeCompleteStudy(study);
    return std::nullopt;
  }
  const int number = static_cast<int>(study.trials.size());
  Result<config::ParamValues> values = sampler::SampleParams(*study.sampler, view, number);
  if (!values.ok()) {
    options_.logger->error("study {}: sampler failed: {}", study.record.name,
                           values.status().message());
    study.exhausted = true;
    RecordEvent(&study, nullptr, "sampler_failed", values.status().message());
    MaybeCompleteStudy(study);
    return std::nullopt;
  }
  model::ParamMap params;
  for (const config::ParamSpec& p : study.spec.space) {
    params[p.name] = model::ParamValue{values->at(p.name), p.dist};
  }
  return params;
}

std::optional<int> Scheduler::NextTrial(StudyRuntime& study) {
  // Shared storage: the claim re-read the study under its lock, so a pause by any node holds.
  if (study.record.state != model::StudyState::kRunning || study.record.paused) {
    return std::nullopt;
  }
  if (!study.waiting.empty()) return study.waiting.front();
  if (study.exhausted || study.configurations() >= study.record.n_trials) return std::nullopt;
  std::optional<model::ParamMap> params = DrawParams(study);
  if (!params) return std::nullopt;
  Result<TrialRecord> created =
      options_.storage->CreateTrial(study.record.id, *params, options_.clock->WallSeconds());
  if (!created.ok()) {
    options_.logger->error("study {}: storing a new trial: {}", study.record.name,
                           created.status().message());
    if (!coordinator_->StorageMayRecover()) {
      study.exhausted = true;  // storage is failing: start nothing more for this study
      MaybeCompleteStudy(study);
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
  return number;
}

void Scheduler::SharedTick() {
  std::optional<std::vector<model::StudyRecord>> stored = coordinator_->OnTick(shutting_down_);
  if (!stored) return;
  // A study another node deleted (none of its trials ran, so none runs here) is forgotten.
  std::set<int64_t> ids;
  for (const model::StudyRecord& rec : *stored) ids.insert(rec.id);
  for (auto it = studies_.begin(); it != studies_.end();) {
    if (ids.count(it->first) == 0 && it->second->running == 0 &&
        it->second->pending_finishes == 0) {
      options_.logger->info("study {}: deleted through another node", it->second->record.name);
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
    if (rec.state != model::StudyState::kRunning || coordinator_->LeftToOthers(rec.name)) continue;
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
    if (study->record.state == model::StudyState::kRunning && study->running == 0 &&
        std::all_of(study->trials.begin(), study->trials.end(),
                    [](const TrialRecord& t) { return model::IsFinished(t.state); }) &&
        study->configurations() >= study->record.n_trials) {
      LockedMaybeComplete(*study);
    }
  }
  Pump();
}

bool Scheduler::CanStart(const StudyRuntime& s) const {
  if (shutting_down_ || s.record.state != model::StudyState::kRunning) return false;
  if (s.record.paused) return false;
  if (s.running >= Parallelism(s)) return false;
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
      std::vector<devices::GpuSlot> slots;
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
        slots = std::move(*got);
      }
      last_served_study_ = study->record.id;
      // Shared storage: a claim can find the study full (other nodes took its last trials) or
      // the storage failing; only a started trial goes round again, so this ends too.
      const bool ran = StartTrial(*study, std::move(slots));
      started = started || ran || !coordinator_->FailedStartEndsPass();
    }
  }
  pass.reset();
  pumping_ = false;
  // Completed studies leave the active set.
  bool dropped = false;
  for (auto it = studies_.begin(); it != studies_.end();) {
    if (it->second->record.state != model::StudyState::kRunning && it->second->running == 0 &&
        it->second->pending_finishes == 0) {
      ReleaseForkServer(*it->second);  // none of its trials is starting or running
      it = studies_.erase(it);
      dropped = true;
    } else {
      ++it;
    }
  }
  WakeForBackoff();
  // A study's trials (every intermediate value and attribute) are many small blocks: give them
  // back, or the daemon's RSS stays at its peak after a large study.
  if (dropped) common::ReturnFreedMemory();
  if (options_.on_change) options_.on_change();
  if (shutting_down_ && running_.empty() && on_idle_) {
    auto fn = std::move(on_idle_);
    on_idle_ = nullptr;
    fn();
  }
}

bool Scheduler::StartTrial(StudyRuntime& study, std::vector<devices::GpuSlot> gpu_slots) {
  // Slots no process ever used go straight back.
  struct GiveBack {
    devices::GpuPool* pool;
    std::vector<devices::GpuSlot>* slots;
    ~GiveBack() {
      if (pool != nullptr && !slots->empty()) pool->GiveBack(*slots);
    }
  } give_back{options_.gpus, &gpu_slots};
  std::optional<int> claimed = coordinator_->ClaimNext(study, [&] { return NextTrial(study); });
  if (!claimed) return false;
  const int number = *claimed;
  TrialRecord& trial = study.trials[number];
  LaunchSettings settings{options_.state_dir, options_.log_head_bytes, options_.log_tail_bytes,
                          options_.base_env, options_.storage->node()};
  std::optional<ResumeFolder> resume;
  if (trial.retry_of_number) resume = ResumeFolderOf(study, trial);
  launcher::LaunchSpec ls = MakeLaunchSpec(settings, study.record.name, study.spec, trial,
                                           gpu_slots, resume ? resume->dir : "");
  ls.submitter = study.record.submitter;
  int64_t tid = trial.id;
  launcher::TrialCallbacks cb;
  cb.on_started = [this, tid](const model::ProcessIdentity& id) { OnStarted(tid, id); };
  cb.on_message = [this, tid](const proto::ReportMessage& m) { OnMessage(tid, m); };
  cb.on_exit = [this, tid](const launcher::ProcessOutcome& o) { OnExit(tid, o); };
  launcher::LaunchResult proc = options_.launcher->Launch(ls, std::move(cb));
  if (!proc.ok()) {
    OnSpawnFailure(study, number, proc.spawn_error(), proc.status().message());
    return false;
  }
  if (resume) {
    const std::string what =
        resume->dir.empty()
            ? "trial " + std::to_string(number) +
                  " starts without a resume folder: " + resume->reason
            : "trial " + std::to_string(number) + " resumes from " + resume->dir + " (trial " +
                  std::to_string(*trial.retry_of_number) + "'s folder, TRIALD_RESUME_DIR)";
    options_.logger->info("study {}: {}", study.record.name, what);
    RecordEvent(&study, &trial, "resume_folder", what);
  }
  auto rt = std::make_unique<RunningTrial>();
  rt->study = &study;
  rt->number = number;
  rt->process = std::move(proc).value();
  rt->gpu_slots.swap(gpu_slots);  // the trial holds them now
  rt->caps.emplace(study.spec.study, trial);
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
    RecordEvent(&study, &trial, "spawn_recovered", "trial " + std::to_string(number) + " started");
  }
  const double now = options_.clock->WallSeconds();
  Status st = options_.storage->MarkRunning(tid, id, now);
  if (!st.ok()) {
    // Not durable means we could not recover it after a crash: do not let it run.
    options_.logger->error("study {} trial {}: {}", study.record.name, number, st.message());
    std::unique_ptr<RunningTrial> owned = std::move(it->second);
    running_.erase(it);
    --study.running;
    owned->process.reset();  // kills its group at once
    // Its slots were used by no process that ran: they go straight back.
    if (options_.gpus != nullptr && !owned->gpu_slots.empty()) {
      options_.gpus->GiveBack(owned->gpu_slots);
    }
    FinishTrial(study, number, SpawnFailed("could not record the running trial: " + st.message()));
    Pump();  // does nothing when called from inside Pump
    return false;
  }
  trial.state = TrialState::kRunning;
  trial.process = id;
  trial.started_at = now;
  rt.pids.insert(id.pid);
  if (study.spec.objective.kind == "python") StartSample(rt);
  options_.logger->debug("study {} trial {} started (pid {})", study.record.name, number, id.pid);
  return true;
}

void Scheduler::OnNeverStarted(int64_t trial_id, const launcher::ProcessOutcome& o) {
  auto it = running_.find(trial_id);
  if (it == running_.end()) return;
  std::unique_ptr<RunningTrial> rt = std::move(it->second);
  running_.erase(it);
  StudyRuntime& study = *rt->study;
  const int number = rt->number;
  --study.running;
  // No process of it ran: its slots go straight back.
  if (options_.gpus != nullptr && !rt->gpu_slots.empty()) options_.gpus->GiveBack(rt->gpu_slots);
  rt.reset();
  if (model::IsFinished(study.trials[number].state)) {
    // Already ended with the study's WAITING trials (a cancel gathers every one of them).
  } else if (study.record.state == model::StudyState::kCancelled) {
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
    RecordEvent(study.get(), nullptr, kind, ev.detail);
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
  std::ostringstream delay;
  delay << f.delay_s;
  const std::string what = "trial " + std::to_string(number) + " could not start (" +
                           SpawnCauseName(f.cause) + ", " + std::to_string(f.failures) +
                           " in a row): " + message + "; next attempt in " + delay.str() + " s";
  if (was_held) {
    options_.logger->debug("study {}: {}", study.record.name, what);
  } else {
    options_.logger->warn("study {}: {}", study.record.name, what);
  }
  RecordEvent(&study, &study.trials[number], "spawn_failed", what);
  if (f.held_now) {
    options_.logger->error(
        "study {}: held: trials cannot start: {} (retried every {} s at most until they do)",
        study.record.name, message, SpawnBackoff::kMaxDelay);
    RecordEvent(&study, nullptr, "study_held",
                "trials cannot start: " + message + " (" + std::to_string(f.failures) +
                    " failures in a row; retried with back-off until one starts)");
  }
}

void Scheduler::WakeForBackoff() {
  if (!options_.wake_after || shutting_down_) return;
  std::optional<double> earliest;
  for (const auto& [id, study] : studies_) {
    if (!study->spawn.backing_off() || study->record.state != model::StudyState::kRunning) {
      continue;
    }
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
    out.push_back({rt->study->record.id, rt->number, devices::GpuPool::SlotList(rt->gpu_slots)});
  }
  return out;
}

std::optional<int64_t> Scheduler::pareto_front_size(int64_t study_id) {
  auto it = studies_.find(study_id);
  if (it == studies_.end()) return std::nullopt;
  StudyRuntime& study = *it->second;
  if (study.spec.study.directions.size() < 2) return std::nullopt;
  int64_t finished = 0;
  for (const TrialRecord& t : study.trials) {
    if (t.state == TrialState::kComplete || t.state == TrialState::kPruned ||
        t.state == TrialState::kFail) {
      ++finished;
    }
  }
  if (finished != study.front_finished) {
    study.front_size = static_cast<int64_t>(
        sampler::pareto::ParetoFront(study.trials, study.spec.study.directions).size());
    study.front_finished = finished;
  }
  return study.front_size;
}

void Scheduler::OnMessage(int64_t trial_id, const proto::ReportMessage& m) {
  auto it = running_.find(trial_id);
  if (it == running_.end()) return;
  RunningTrial& rt = *it->second;
  StudyRuntime& study = *rt.study;
  switch (m.type) {
    case proto::ReportType::kReport: {
      // A pruned trial ends at the step it was pruned at, as in Optuna (where the objective
      // raises TrialPruned and reports nothing more): what it sends during its grace period
      // would otherwise change its value and the other trials' pruning decisions.
      if (rt.pruned || rt.taken_over) break;
      if (auto over = rt.caps->Admit(study.trials[rt.number], m)) {
        rt.process->FailProtocol(*over);
        break;
      }
      Status st = options_.storage->AddIntermediate(trial_id, m.step, m.value);
      if (!st.ok()) options_.logger->error("storing intermediate value: {}", st.message());
      coordinator_->RefreshForPruning(study);  // the other nodes' values, for the pruner
      if (rt.taken_over) break;
      TrialRecord& trial = study.trials[rt.number];
      trial.intermediate[m.step] = m.value;
      if (DecidePrune(study, trial)) {
        rt.pruned = true;
        options_.logger->info("study {} trial {}: pruned at step {} (value {})", study.record.name,
                              rt.number, m.step, m.value);
        if (study.spec.objective.kind == "python") {
          // Cooperative first: the objective learns it through should_prune and raises; it is
          // stopped as for other kinds only if it has not ended within kill_grace.
          rt.process->StopAfterGrace(StopReason::kPrune);
        } else {
          rt.process->Stop(StopReason::kPrune);
        }
      }
      break;
    }
    case proto::ReportType::kFinal:
      rt.final_values = m.values;
      rt.final_seen = true;
      break;
    case proto::ReportType::kAttr: {
      if (rt.taken_over) break;
      if (auto over = rt.caps->Admit(study.trials[rt.number], m)) {
        rt.process->FailProtocol(*over);
        break;
      }
      Status st = options_.storage->SetAttr(trial_id, m.key, m.json_value);
      if (!st.ok()) options_.logger->error("storing attribute: {}", st.message());
      study.trials[rt.number].attrs[m.key] = m.json_value;
      break;
    }
    case proto::ReportType::kError:
      rt.worker_error = m.message;
      break;
    case proto::ReportType::kHeartbeat:
      break;
    case proto::ReportType::kSuggest:
      if (CountRequest(rt)) AnswerSuggest(trial_id, rt, m);
      break;
    case proto::ReportType::kShouldPrune:
      if (CountRequest(rt)) rt.process->Answer(proto::EncodeShouldPruneAnswer(rt.pruned));
      break;
    case proto::ReportType::kPruned:
      rt.worker_pruned = true;
      break;
    case proto::ReportType::kConstraints:
      // Constraints describe the result: they come before it (the last such line counts).
      if (rt.final_seen) {
        rt.process->FailProtocol(
            "a constraints line after the final line; send constraints "
            "before final");
        break;
      }
      rt.constraints = m.values;
      break;
  }
}

bool Scheduler::DecidePrune(StudyRuntime& study, TrialRecord& trial) {
  pruner::PruneContext ctx{study.spec.study.direction, &study.trials, &trial, study.record.name};
  return study.pruner->ShouldPrune(ctx);
}

void Scheduler::RefuseRequest(RunningTrial& rt, const std::string& message) {
  // The answer first, so a worker waiting for one learns why it is stopped.
  rt.process->Answer(proto::EncodeErrorAnswer(message));
  rt.process->FailProtocol(message);
}

bool Scheduler::CountRequest(RunningTrial& rt) {
  if (++rt.requests <= kMaxTrialRequests) return true;
  if (rt.requests == kMaxTrialRequests + 1) {
    RefuseRequest(rt, "more than " + std::to_string(kMaxTrialRequests) +
                          " requests (suggest, should_prune) in one trial");
  }
  return false;
}

void Scheduler::StartSample(RunningTrial& rt) {
  StudyRuntime& study = *rt.study;
  const TrialRecord& trial = study.trials[rt.number];
  sampler::StudyView view{study.spec.study.direction, &study.spec.space, &study.trials,
                          study.spec.study.directions};
  Result<sampler::TrialSample> sample = sampler::StartRelative(*study.sampler, view, rt.number);
  if (!sample.ok()) {
    // Every suggest is then sampled independently, which is always valid.
    options_.logger->warn("study {} trial {}: relative sampling failed: {}", study.record.name,
                          rt.number, sample.status().message());
    sample = sampler::TrialSample{};
    sample->trial_number = rt.number;
  }
  // The parameters the trial already holds (its [space] values, drawn up front, or enqueued
  // ones) answer suggests for their names.
  for (const auto& [name, value] : trial.params) {
    sampler::Hold(*sample, name, value.internal, value.dist);
  }
  rt.sample = std::move(sample).value();
}

void Scheduler::AnswerSuggest(int64_t trial_id, RunningTrial& rt, const proto::ReportMessage& m) {
  StudyRuntime& study = *rt.study;
  if (rt.final_seen) {
    RefuseRequest(rt, "suggest \"" + m.name + "\" after the final value; suggests come before it");
    return;
  }
  Result<config::Distribution> dist = config::DistributionFromSuggest(m.name, m.distribution);
  if (!dist.ok()) {
    RefuseRequest(rt, dist.status().message());
    return;
  }
  if (!rt.sample) StartSample(rt);
  sampler::TrialSample& sample = *rt.sample;
  auto known = sample.answered.find(m.name);
  if (known != sample.answered.end() && !(known->second.dist == *dist)) {
    RefuseRequest(rt, config::DistributionConflictMessage(m.name, known->second.dist, *dist));
    return;
  }
  if (known == sample.answered.end() && sample.answered.size() >= kMaxTrialParams) {
    RefuseRequest(rt, "suggest \"" + m.name + "\": more than " + std::to_string(kMaxTrialParams) +
                          " distinct parameters in one trial");
    return;
  }
  sampler::StudyView view{study.spec.study.direction, &study.spec.space, &study.trials,
                          study.spec.study.directions};
  Result<double> value = sampler::Suggest(*study.sampler, view, sample, {m.name, *dist});
  if (!value.ok()) {
    options_.logger->warn("study {} trial {}: suggest \"{}\": {}", study.record.name, rt.number,
                          m.name, value.status().message());
    RefuseRequest(rt, "suggest \"" + m.name + "\": " + value.status().message());
    return;
  }
  TrialRecord& trial = study.trials[rt.number];
  if (known == sample.answered.end() || trial.params.count(m.name) == 0) {
    model::ParamValue pv{*value, *dist};
    if (!rt.taken_over) {
      Status st = options_.storage->AddTrialParam(trial_id, m.name, pv);
      if (!st.ok()) options_.logger->error("storing parameter {}: {}", m.name, st.message());
    }
    trial.params[m.name] = pv;
  }
  rt.process->Answer(proto::EncodeSuggestionAnswer(m.name, config::ExternalJson(*dist, *value)));
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
  const TrialRecord& trial = study.trials[rt->number];
  TrialObservation seen;
  seen.process = o;
  if (!rt->gpu_slots.empty()) {
    // The driver still shows the just-exited processes' memory for a while: one more sample,
    // of the pids seen so far. Unset when no sample of the trial ever succeeded.
    SampleGpuMemory(*rt, /*pgid=*/0);
    seen.process.resources.peak_gpu_memory_bytes = rt->gpu_peak;
  }
  seen.final_values = rt->final_values;
  // The values the worker sends: measured objectives are added below.
  seen.n_objectives = study.spec.study.worker_objectives();
  seen.measured_objectives = study.spec.study.directions.size() - seen.n_objectives;
  seen.constraints = rt->constraints;
  seen.worker_error = rt->worker_error;
  seen.worker_pruned = rt->worker_pruned;
  if (!trial.intermediate.empty()) seen.last_intermediate = trial.intermediate.rbegin()->second;
  seen.trial_timeout_s = study.spec.study.trial_timeout;
  seen.stall_timeout_s = study.spec.study.stall_timeout;
  model::TrialOutcome outcome = ClassifyExit(seen);
  ApplyMeasured(study.spec.study, &outcome);
  FinishTrial(study, rt->number, outcome);
  if (!rt->gpu_slots.empty() && gpu_drains_) {
    // Its slots drain: free again once the driver shows none of its processes holding memory.
    gpu_drains_->Start(trial_id, study.record.id, rt->gpu_slots, rt->pids);
  }
  rt.reset();  // the process is over; its handle goes now
  Pump();
}

Status Scheduler::CheckGpus(const config::SweepSpec& spec, const std::string& where) const {
  const int want = spec.study.gpus_per_trial;
  const int have = options_.gpus != nullptr ? options_.gpus->gpu_count() : 0;
  if (want <= have) return CheckGpuMetrics(spec, where);
  return common::InvalidArgument(
      where + ": [study] gpus_per_trial = " + std::to_string(want) + ": triald has " +
      (have == 0 ? std::string("no GPUs (see triald --gpus, or [devices] gpus in its config)")
                 : std::to_string(have) + " GPU(s)") +
      "; expected at most " + std::to_string(have));
}

Status Scheduler::CheckGpuMetrics(const config::SweepSpec& spec, const std::string& where) const {
  if (options_.gpus != nullptr && options_.gpus->measures_memory()) return Status::Ok();
  std::string uses;
  for (const config::ResourceConstraint& c : spec.study.resource_constraints) {
    if (c.metric == "peak_gpu_memory") {
      uses = "resource_constraints entry \"" + c.text + "\"";
      break;
    }
  }
  for (const std::string& o : spec.study.objectives) {
    if (uses.empty() && o == "peak_gpu_memory") uses = "objectives entry \"peak_gpu_memory\"";
  }
  if (uses.empty()) return Status::Ok();
  return common::InvalidArgument(
      where + ": [study] " + uses +
      ": triald cannot measure GPU memory (no NVML to report each process's memory; GPUs "
      "given by hand are not watched); expected a daemon with NVML, or no peak_gpu_memory");
}

void Scheduler::MaybeRetry(StudyRuntime& study, int number) {
  const TrialRecord failed = study.trials[number];  // a copy: trials grows below
  const config::StudyConfig& cfg = study.spec.study;
  if (failed.state != TrialState::kFail || cfg.retries == 0 ||
      study.record.state != model::StudyState::kRunning) {
    return;
  }
  if (std::find(cfg.retry_on.begin(), cfg.retry_on.end(), failed.fail.reason) ==
      cfg.retry_on.end()) {
    return;
  }
  // How many retries this configuration has had: the length of the retry_of chain behind it.
  int attempts = 0;
  for (std::optional<int64_t> prev = failed.retry_of; prev;) {
    ++attempts;
    auto it = std::find_if(study.trials.begin(), study.trials.end(),
                           [&](const TrialRecord& t) { return t.id == *prev; });
    prev = it == study.trials.end() ? std::nullopt : it->retry_of;
  }
  if (attempts >= cfg.retries) {
    RecordEvent(&study, &failed, "retries_exhausted",
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
  RecordEvent(&study, &*created, "trial_retry", what);
}

ResumeFolder Scheduler::ResumeFolderOf(const StudyRuntime& study, const TrialRecord& retry) const {
  const int of = *retry.retry_of_number;
  if (of >= 0 && static_cast<size_t>(of) < study.trials.size()) {
    const TrialRecord& failed = study.trials[of];
    // Shared storage: the attempt may have run on another node, whose folders are its own.
    if (options_.storage->shared() && !failed.node.empty() &&
        failed.node != options_.storage->node()) {
      return ResumeFolder{"", "trial " + std::to_string(of) + " ran on node " + failed.node +
                                  ", and its folder is there, not on this node (" +
                                  options_.storage->node() + ")"};
    }
  }
  uid_t uid = ::geteuid();
  if (options_.trials_as_submitters && study.record.submitter.known()) {
    Result<launcher::RunAs> user = launcher::LookUpRunAs(study.record.submitter);
    if (!user.ok()) return ResumeFolder{"", user.status().message()};
    uid = user->uid;
  }
  return FindResumeFolder(options_.state_dir, study.record.name, of, uid);
}

bool Scheduler::gpu_work() const {
  if (options_.gpus == nullptr) return false;
  if (options_.gpus->draining()) return true;
  for (const auto& [tid, rt] : running_) {
    if (!rt->gpu_slots.empty()) return true;
  }
  return false;
}

void Scheduler::PollDevices() {
  if (options_.gpus == nullptr) return;
  for (auto& [tid, rt] : running_) {
    if (!rt->gpu_slots.empty() && !rt->starting) {
      SampleGpuMemory(*rt, rt->process->identity().pgid);
    }
  }
  if (gpu_drains_->Collect()) Pump();
}

void Scheduler::SampleGpuMemory(RunningTrial& rt, pid_t pgid) {
  if (options_.gpus == nullptr) return;
  std::optional<uint64_t> bytes = options_.gpus->SampleMemory(rt.gpu_slots, pgid, &rt.pids);
  if (bytes && (!rt.gpu_peak || *bytes > *rt.gpu_peak)) rt.gpu_peak = bytes;
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
  std::string what = model::TrialStateName(out.state);
  if (out.state == TrialState::kFail) what += "(" + out.fail.reason + "): " + out.fail.detail;
  if (out.value) {
    what += " value=" + std::to_string(*out.value);
  } else if (!out.values.empty()) {
    what += " values=";
    for (size_t i = 0; i < out.values.size(); ++i) {
      what += (i > 0 ? "," : "") + std::to_string(out.values[i]);
    }
  }
  if (!out.constraints.empty())
    what += model::Feasible(out.constraints) ? " feasible" : " infeasible";
  options_.logger->info("study {} trial {}: {}", study.record.name, number, what);
  RecordEvent(&study, &trial, "trial_finished", what);
  MaybeRetry(study, number);  // may grow study.trials: `trial` is not used after this
  MaybeCompleteStudy(study);
  coordinator_->CommitFinish(study, number, out, own, batch, before);
}

void Scheduler::MaybeCompleteStudy(StudyRuntime& study) {
  if (study.record.state != model::StudyState::kRunning) return;
  if (study.running > 0 || !study.waiting.empty()) return;
  // Shared storage: nothing may be waiting or running on any node either.
  if (coordinator_->OpenElsewhere(study)) return;
  if (study.finished - study.retried < study.record.n_trials && !study.exhausted) return;
  const double now = options_.clock->WallSeconds();
  Status st = options_.storage->SetStudyState(study.record.id, model::StudyState::kComplete, now);
  if (!st.ok()) {
    options_.logger->error("study {}: storing completion: {}", study.record.name, st.message());
    return;
  }
  study.record.state = model::StudyState::kComplete;
  study.record.finished_at = now;
  options_.logger->info("study {} complete: {} trials ({} retried)", study.record.name,
                        study.finished, study.retried);
  RecordEvent(
      &study, nullptr, "study_complete",
      std::to_string(study.finished) + " trials finished" +
          (study.retried > 0 ? ", " + std::to_string(study.retried) + " of them retried" : ""));
}

Status Scheduler::Cancel(const std::string& name) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, options_.storage->GetStudy(name));
  if (rec.state != model::StudyState::kRunning) {
    return common::FailedPrecondition("study \"" + name + "\" is already " +
                                      model::StudyStateName(rec.state));
  }
  const double now = options_.clock->WallSeconds();
  StorageBatch batch(options_.storage, options_.logger);
  // Shared storage: under the study's lock, so no node claims a trial of it meanwhile, and a
  // second cancel sees the first.
  TRIALD_ASSIGN_OR_RETURN(rec, coordinator_->LockForCancel(rec));
  if (rec.state != model::StudyState::kRunning) {
    return common::FailedPrecondition("study \"" + name + "\" is already " +
                                      model::StudyStateName(rec.state));
  }
  TRIALD_RETURN_IF_ERROR(
      options_.storage->SetStudyState(rec.id, model::StudyState::kCancelled, now));
  auto sit = studies_.find(rec.id);
  if (sit == studies_.end()) return Status::Ok();
  StudyRuntime& study = *sit->second;
  study.record.state = model::StudyState::kCancelled;
  RecordEvent(&study, nullptr, "study_cancelled", "");
  // Every WAITING trial, whichever node claimed it. Running trials of other nodes stop at their
  // next tick.
  TRIALD_RETURN_IF_ERROR(coordinator_->GatherWaiting(study));
  while (!study.waiting.empty()) {
    int number = study.waiting.front();
    study.waiting.pop_front();
    FinishTrial(study, number, CancelledBeforeStart(), /*own=*/false);
  }
  StopTrials(study, /*ended_elsewhere=*/false);
  options_.logger->info("study {} cancelled", name);
  // Committed before Pump, whose transactions are its own (each locking one study).
  Status committed = batch.Commit();
  Pump();
  return committed.ok() ? Status::Ok() : committed.WithContext("storing the cancel");
}

int Scheduler::Parallelism(const StudyRuntime& study) {
  return study.record.parallelism > 0 ? study.record.parallelism : study.spec.study.parallelism;
}

Result<model::StudyRecord> Scheduler::StudyForControl(const std::string& name) const {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  Result<model::StudyRecord> found = options_.storage->GetStudy(name);
  if (!found.ok() && found.status().code() == common::Code::kNotFound) {
    return common::NotFound("no study named \"" + name + "\" (see `trialctl studies`)");
  }
  return found;
}

Status Scheduler::StoreControl(const model::StudyRecord& rec, const std::string& kind,
                               const std::string& detail) {
  TRIALD_RETURN_IF_ERROR(
      options_.storage->SetStudyControl(rec.id, rec.paused, rec.n_trials, rec.parallelism));
  auto sit = studies_.find(rec.id);
  if (sit != studies_.end()) {
    sit->second->record.paused = rec.paused;
    sit->second->record.n_trials = rec.n_trials;
    sit->second->record.parallelism = rec.parallelism;
  }
  Status st = options_.storage->AppendEvent(rec.id, std::nullopt, kind, detail,
                                            options_.clock->WallSeconds());
  if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
  options_.logger->info("study {}: {} ({})", rec.name, kind, detail);
  return Status::Ok();
}

Result<model::StudyRecord> Scheduler::Pause(const std::string& name, bool paused) {
  const char* verb = paused ? "pause" : "resume";
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyForControl(name));
  StorageBatch batch(options_.storage, options_.logger);
  // Shared storage: under the study's lock, as a claim is, so no node starts a trial of a
  // study it has not seen paused.
  TRIALD_ASSIGN_OR_RETURN(rec, coordinator_->LockForCancel(rec));
  if (rec.state != model::StudyState::kRunning) {
    return common::FailedPrecondition("cannot " + std::string(verb) + " study \"" + name +
                                      "\": it is " + model::StudyStateName(rec.state) +
                                      "; expected a RUNNING study");
  }
  if (rec.paused == paused) {
    return common::FailedPrecondition("study \"" + name + "\" is " +
                                      (paused ? "already paused" : "not paused"));
  }
  rec.paused = paused;
  TRIALD_RETURN_IF_ERROR(
      StoreControl(rec, paused ? "study_paused" : "study_resumed",
                   paused ? "no new trials start; running ones go on" : "trials start again"));
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the " + std::string(verb));
  Pump();
  return rec;
}

Result<model::StudyRecord> Scheduler::Extend(const std::string& name, int n_trials) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyForControl(name));
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, coordinator_->LockForCancel(rec));
  if (rec.state == model::StudyState::kCancelled) {
    return common::FailedPrecondition("cannot extend study \"" + name +
                                      "\": it is CANCELLED; expected a RUNNING or COMPLETE study");
  }
  TRIALD_ASSIGN_OR_RETURN(storage::TrialCounts counts, options_.storage->CountTrials(rec.id));
  const int64_t finished = counts.finished();
  const int64_t configurations = counts.total() - counts.retries;
  if (n_trials <= finished) {
    return common::InvalidArgument(
        "study \"" + name + "\": --n-trials " + std::to_string(n_trials) + " is not above its " +
        std::to_string(finished) + " finished trials; expected more than " +
        std::to_string(finished));
  }
  if (n_trials < configurations) {
    return common::InvalidArgument(
        "study \"" + name + "\": --n-trials " + std::to_string(n_trials) + " is below its " +
        std::to_string(configurations) + " trials finished, running or waiting; expected " +
        std::to_string(configurations) + " or more");
  }
  const int before = rec.n_trials;
  const bool reopen = rec.state == model::StudyState::kComplete;
  rec.n_trials = n_trials;
  if (reopen) {
    TRIALD_RETURN_IF_ERROR(options_.storage->SetStudyState(rec.id, model::StudyState::kRunning,
                                                           options_.clock->WallSeconds()));
    rec.state = model::StudyState::kRunning;
    rec.finished_at = 0;
    rec.paused = false;  // a study paused as it completed: extending it is asking it to run
  }
  TRIALD_RETURN_IF_ERROR(StoreControl(rec, "study_extended",
                                      "n_trials " + std::to_string(before) + " -> " +
                                          std::to_string(n_trials) +
                                          (reopen ? " (COMPLETE -> RUNNING)" : "")));
  auto sit = studies_.find(rec.id);
  if (sit != studies_.end()) {
    sit->second->record.state = rec.state;
    sit->second->record.finished_at = rec.finished_at;
  } else if (reopen) {
    // Loaded again like a study joined at a tick (its trials read from storage).
    Result<std::unique_ptr<StudyRuntime>> rt = LoadStudy(rec);
    if (!rt.ok() && !coordinator_->LeaveToOthers(rec, rt.status())) {
      return rt.status().WithContext("study \"" + name + "\" extended, but cannot run here");
    }
    if (rt.ok()) studies_[rec.id] = std::move(rt).value();
  }
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the extension");
  Pump();
  return rec;
}

Result<model::StudyRecord> Scheduler::SetParallelism(const std::string& name, int parallelism) {
  if (parallelism < 1) {
    return common::InvalidArgument("parallelism " + std::to_string(parallelism) + " for study \"" +
                                   name + "\"; expected 1 or more");
  }
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyForControl(name));
  StorageBatch batch(options_.storage, options_.logger);
  TRIALD_ASSIGN_OR_RETURN(rec, coordinator_->LockForCancel(rec));
  if (rec.state == model::StudyState::kCancelled) {
    return common::FailedPrecondition("cannot set the parallelism of study \"" + name +
                                      "\": it is CANCELLED");
  }
  std::string before = rec.parallelism > 0 ? std::to_string(rec.parallelism) : "the sweep's";
  auto sit = studies_.find(rec.id);
  if (sit != studies_.end()) before = std::to_string(Parallelism(*sit->second));
  rec.parallelism = parallelism;
  TRIALD_RETURN_IF_ERROR(StoreControl(
      rec, "study_parallelism",
      "parallelism " + before + " -> " + std::to_string(parallelism) + " (at the next launch)"));
  Status committed = batch.Commit();
  if (!committed.ok()) return committed.WithContext("storing the parallelism");
  Pump();
  return rec;
}

Result<int64_t> Scheduler::Delete(const std::string& name, bool purge) {
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, StudyForControl(name));
  int64_t deleted = 0;
  {
    StorageBatch batch(options_.storage, options_.logger);
    TRIALD_ASSIGN_OR_RETURN(rec, coordinator_->LockForCancel(rec));
    TRIALD_ASSIGN_OR_RETURN(storage::TrialCounts counts, options_.storage->CountTrials(rec.id));
    int64_t here = 0;
    for (const auto& [tid, rt] : running_) here += rt->study->record.id == rec.id;
    const int64_t running = std::max(counts.running, here);
    if (running > 0) {
      return common::FailedPrecondition(
          "cannot delete study \"" + name + "\": " + std::to_string(running) + " of its trials " +
          (running == 1 ? "is" : "are") +
          " running; expected none (wait for them, or `trialctl cancel` it first)");
    }
    auto sit = studies_.find(rec.id);
    if (sit != studies_.end() && sit->second->pending_finishes > 0) {
      return common::FailedPrecondition("cannot delete study \"" + name +
                                        "\": its last trials' ends are still being stored; "
                                        "try again in a moment");
    }
    deleted = counts.total();
    TRIALD_RETURN_IF_ERROR(options_.storage->DeleteStudy(rec.id));
    Status st = options_.storage->AppendEvent(
        std::nullopt, std::nullopt, "study_deleted",
        "study " + name + " (" + model::StudyStateName(rec.state) + ", " + std::to_string(deleted) +
            " trials)" + (purge ? ", its folder purged" : ""),
        options_.clock->WallSeconds());
    if (!st.ok()) options_.logger->error("storing event study_deleted: {}", st.message());
    Status committed = batch.Commit();
    if (!committed.ok()) return committed.WithContext("storing the deletion");
    if (sit != studies_.end()) {
      ReleaseForkServer(*sit->second);
      studies_.erase(sit);
    }
    if (gpu_reserved_for_ == rec.id) gpu_reserved_for_ = 0;
  }
  options_.logger->info("study {} deleted ({} trials)", name, deleted);
  if (purge) {
    // Study names are checked at submit (letters, digits, '_', '.', '-', starting with a letter
    // or digit), so this is the study's own folder; remove_all removes links themselves, never
    // what they point to.
    const std::filesystem::path folder = model::StudyDir(options_.state_dir, name);
    std::error_code ec;
    std::filesystem::remove_all(folder, ec);
    if (ec) {
      return common::IoError("study \"" + name + "\" deleted, but removing " + folder.string() +
                             ": " + ec.message());
    }
  }
  Pump();
  return deleted;
}

Result<TrialRecord> Scheduler::Enqueue(const std::string& name,
                                       const std::map<std::string, std::string>& given) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  Result<model::StudyRecord> found = options_.storage->GetStudy(name);
  if (!found.ok() && found.status().code() == common::Code::kNotFound) {
    return common::NotFound("no study named \"" + name + "\" (see `trialctl studies`)");
  }
  TRIALD_ASSIGN_OR_RETURN(model::StudyRecord rec, std::move(found));
  if (rec.state != model::StudyState::kRunning) {
    return common::FailedPrecondition("study \"" + name + "\" is " +
                                      model::StudyStateName(rec.state) +
                                      "; expected a RUNNING study");
  }
  auto sit = studies_.find(rec.id);
  if (sit == studies_.end()) {
    // Stored as RUNNING but not resumed (its sweep no longer builds): nothing could run it.
    return common::FailedPrecondition("study \"" + name + "\" is not loaded by this triald");
  }
  StudyRuntime& study = *sit->second;
  // Shared storage: the count, the draw and the new trial are decided under the study's lock.
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StorageBatch> locked, coordinator_->Lock(study));
  if (study.record.state != model::StudyState::kRunning) {
    return common::FailedPrecondition("study \"" + name + "\" is " +
                                      model::StudyStateName(study.record.state) +
                                      "; expected a RUNNING study");
  }
  if (study.configurations() >= study.record.n_trials) {
    return common::FailedPrecondition("study \"" + name + "\" already has its n_trials = " +
                                      std::to_string(study.record.n_trials) + " trials");
  }
  TRIALD_ASSIGN_OR_RETURN(
      EnqueuedParams params,
      ResolveEnqueuedParams(name, study.spec, *study.sampler, study.trials, given));

  TrialRecord trial;
  {
    StorageBatch batch(options_.storage, options_.logger);
    TRIALD_ASSIGN_OR_RETURN(trial, options_.storage->CreateTrial(study.record.id, params.params,
                                                                 options_.clock->WallSeconds()));
    study.trials.resize(std::max<size_t>(study.trials.size(), trial.number + 1));
    study.trials[trial.number] = trial;
    study.waiting.push_back(trial.number);
    RecordEvent(&study, &trial, "trial_enqueued", params.given);
    options_.logger->info("study {} trial {} enqueued: {}", name, trial.number, params.given);
  }
  // Shared: committed (releasing the lock) before Pump, whose claims lock the study again.
  if (locked) TRIALD_RETURN_IF_ERROR(locked->Commit());
  Pump();
  return trial;
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
