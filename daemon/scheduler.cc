#include "daemon/scheduler.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "common/json.h"
#include "common/process_util.h"
#include "common/utf8.h"
#include "daemon/objective.h"

namespace triald::daemon {
using common::Result;
using common::Status;
using launcher::StopReason;
using model::TrialRecord;
using model::TrialState;

namespace {

// Groups the storage changes made while handling one event into one commit (one fsync).
class StorageBatch {
 public:
  StorageBatch(storage::Storage* storage, const common::Logger& logger)
      : storage_(storage), logger_(logger) {
    Status st = storage_->BeginBatch();
    began_ = st.ok();
    if (!began_) logger_->error("storage: {}", st.message());
  }
  ~StorageBatch() {
    if (!began_) return;
    Status st = storage_->CommitBatch();
    if (!st.ok()) logger_->critical("storage: changes not committed: {}", st.message());
  }
  bool began() const { return began_; }
  // Commits now (the destructor then does nothing); the caller acts on the result.
  Status Commit() {
    if (!began_) return common::Unavailable("the storage batch did not begin");
    began_ = false;
    return storage_->CommitBatch();
  }
  StorageBatch(const StorageBatch&) = delete;
  StorageBatch& operator=(const StorageBatch&) = delete;

 private:
  storage::Storage* storage_;
  const common::Logger& logger_;
  bool began_ = false;
};

// Shared storage: pruning decisions use other nodes' intermediate values at most this old.
constexpr double kPruneSyncSeconds = 0.5;
// Shared storage: a node claims and starts trials only while its last heartbeat is younger than
// this fraction of the node timeout (its lease), so that a node frozen or cut off for longer
// than that first beats again; the margin covers the beat's trip and timer delays.
constexpr double kLeaseFraction = 0.75;

}  // namespace

struct Scheduler::StudyRuntime {
  model::StudyRecord record;
  config::SweepSpec spec;
  std::unique_ptr<sampler::Sampler> sampler;
  std::unique_ptr<pruner::Pruner> pruner;
  std::vector<TrialRecord> trials;  // index == trial number; mirrors storage
  std::deque<int> waiting;          // numbers of WAITING trials, oldest first
  int running = 0;
  int finished = 0;
  int retries_created = 0;   // trials that retry another (they are not new configurations)
  int retried = 0;           // finished trials a retry replaced (they do not count toward n_trials)
  bool exhausted = false;    // the sampler has nothing more to propose
  double synced_at = -1;     // shared: monotonic time of the last Sync
  int pending_finishes = 0;  // shared: ends of its trials not yet stored (the database was away)

  // Configurations created so far: what n_trials counts.
  int configurations() const { return static_cast<int>(trials.size()) - retries_created; }
};

struct Scheduler::RunningTrial {
  StudyRuntime* study = nullptr;
  int number = 0;
  std::unique_ptr<launcher::TrialProcess> process;
  std::vector<double> final_values;         // from the last "final" line
  std::string worker_error;                 // from the last "error" line
  bool pruned = false;                      // the pruner said stop; later reports are dropped
  std::vector<devices::GpuSlot> gpu_slots;  // held until the trial ends, then drained
  std::set<pid_t> pids;                     // its processes seen holding GPU memory
  bool taken_over = false;  // shared: another node ended it (this node was silent); stopping
};

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {
  if (!options_.logger) options_.logger = common::MakeNullLogger();
  if (options_.max_workers < 1) options_.max_workers = 1;
}

Scheduler::~Scheduler() = default;

std::string Scheduler::TrialDir(const std::string& study, int number) const {
  return model::TrialDir(options_.state_dir, study, number);
}

void Scheduler::Event(const StudyRuntime* study, const TrialRecord* trial, const std::string& kind,
                      const std::string& detail) {
  std::optional<int64_t> sid, tid;
  if (study) sid = study->record.id;
  if (trial) tid = trial->id;
  Status st = options_.storage->AppendEvent(sid, tid, kind, detail, options_.clock->WallSeconds());
  if (!st.ok()) options_.logger->error("storing event {}: {}", kind, st.message());
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

Result<model::StudyRecord> Scheduler::Submit(const config::SweepSource& source) {
  if (shutting_down_) return common::Unavailable("triald is shutting down");
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec, config::ParseSweep(source));
  const std::string where = source.path.empty() ? "<sweep>" : source.path;
  TRIALD_RETURN_IF_ERROR(PrepareObjective(spec, options_.trial_worker, where));
  TRIALD_RETURN_IF_ERROR(CheckGpus(spec, where));

  std::string path_env;
  for (const std::string& kv : options_.base_env) {
    if (kv.rfind("PATH=", 0) == 0) path_env = kv.substr(5);
  }
  if (auto it = spec.objective.env.find("PATH"); it != spec.objective.env.end()) {
    path_env = it->second;
  }
  Result<std::string> exe =
      common::FindExecutable(spec.objective.command[0], path_env, spec.objective.workdir);
  if (!exe.ok()) {
    return common::InvalidArgument(where + ": [objective] command[0] = \"" +
                                   spec.objective.command[0] + "\": " + exe.status().message() +
                                   "; expected an executable");
  }

  model::NewStudy ns;
  ns.name = spec.study.name;
  ns.direction = spec.study.direction;
  ns.n_trials = spec.study.n_trials;
  ns.spec_toml = source.text;
  ns.spec_path = source.path;
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
  Event(raw, nullptr, "study_submitted",
        std::to_string(ns.n_trials) + " trials, parallelism " +
            std::to_string(raw->spec.study.parallelism) + ", seed " + std::to_string(ns.seed));
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
  Pump();  // may finish the study at once (every spawn failing) and drop `raw`
  return result;
}

Result<std::unique_ptr<Scheduler::StudyRuntime>> Scheduler::LoadStudy(
    const model::StudyRecord& rec) {
  TRIALD_ASSIGN_OR_RETURN(config::SweepSpec spec,
                          config::ParseSweep({rec.spec_toml, rec.spec_path}));
  TRIALD_RETURN_IF_ERROR(PrepareObjective(spec, options_.trial_worker, rec.spec_path));
  TRIALD_RETURN_IF_ERROR(CheckGpus(spec, rec.spec_path));
  TRIALD_ASSIGN_OR_RETURN(std::unique_ptr<StudyRuntime> rt, BuildRuntime(rec, std::move(spec)));
  TRIALD_ASSIGN_OR_RETURN(rt->trials, options_.storage->GetTrials(rec.id));
  Recount(*rt);
  rt->synced_at = options_.clock->MonotonicSeconds();
  return rt;
}

Status Scheduler::Recover() {
  const std::string& me = options_.storage->node();
  if (shared()) {
    // A node name is one daemon's: refuse to start as a node another daemon (elsewhere: another
    // instance) still beats for. The same daemon restarted has the same instance.
    TRIALD_ASSIGN_OR_RETURN(std::vector<model::NodeRecord> nodes,
                            options_.storage->GetNodes(options_.clock->WallSeconds()));
    for (const model::NodeRecord& n : nodes) {
      if (n.name != me || n.instance == options_.storage->instance()) continue;
      if (n.AliveWithin(options_.node_timeout_s)) {
        return common::FailedPrecondition(
            "node name \"" + me + "\" is in use by another triald (" + n.instance +
            ", last heartbeat " + std::to_string(static_cast<int>(n.silent_for)) +
            " s ago); give each daemon its own --node-name (or, if that daemon is gone, start "
            "again once it has been silent for --node-timeout, " +
            std::to_string(static_cast<int>(options_.node_timeout_s)) + " s)");
      }
      options_.logger->warn("node name {} was last used by {} ({:.0f} s ago); taking it over", me,
                            n.instance, n.silent_for);
    }
    // Beat first: a node that has just started is alive, whatever its previous beats say.
    const double started = options_.clock->MonotonicSeconds();
    Status hb = options_.storage->Heartbeat(options_.clock->WallSeconds());
    if (!hb.ok()) return hb.WithContext("recording this node's heartbeat");
    lease_from_ = started;
    Status dead = RefreshDeadNodes();
    if (!dead.ok()) return dead.WithContext("reading the nodes' heartbeats");
  }
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> running, options_.storage->GetRunningTrials());
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::StudyRecord> all, options_.storage->ListStudies());
  // One commit for the whole recovery on a storage of its own; on a shared one, every change
  // commits alone, so no transaction holds locks of several studies.
  std::optional<StorageBatch> batch;
  if (!shared()) batch.emplace(options_.storage, options_.logger);
  std::map<int64_t, std::string> names;
  for (const auto& s : all) names[s.id] = s.name;
  // The trials this daemon left running (on a shared storage, other nodes' trials are theirs).
  std::vector<TrialRecord> lost;
  for (TrialRecord& t : running) {
    if (!shared() || t.node == me) lost.push_back(std::move(t));
  }
  // No trial runs yet, so any process of this state directory is a leftover: a lost trial's,
  // or one whose start the previous daemon never got to record.
  std::vector<model::ProcessIdentity> identities;
  for (const TrialRecord& t : lost) identities.push_back(t.process);
  int killed = KillLeftoverTrialProcesses(options_.state_dir, identities);
  if (killed > 0) {
    options_.logger->warn("killed {} process(es) left by the previous triald", killed);
  }
  std::set<int64_t> ended;  // the lost trials this daemon ended (retried below)
  for (const TrialRecord& t : lost) {
    model::TrialOutcome out;
    out.state = TrialState::kFail;
    out.fail.reason = "lost";
    out.fail.detail =
        "triald stopped while the trial ran (pid " + std::to_string(t.process.pid) + ")";
    Status st = options_.storage->FinishTrial(t.id, out, options_.clock->WallSeconds());
    if (shared() && st.code() == common::Code::kFailedPrecondition) {
      continue;  // another node found this one silent and ended it first
    }
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
      if (shared()) {
        // Other nodes may run it: leave it to them.
        not_loaded_[rec.name] = rt.status().message();
        options_.logger->warn("study {}: not run on this node: {}", rec.name,
                              rt.status().message());
        continue;
      }
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

void Scheduler::Recount(StudyRuntime& study) {
  const std::string& me = options_.storage->node();
  study.finished = 0;
  study.retries_created = 0;
  study.waiting.clear();
  std::set<int64_t> retried_ids;
  for (const TrialRecord& t : study.trials) {
    if (model::IsFinished(t.state)) ++study.finished;
    // Claimable: unclaimed, or claimed by this node before a restart (whose start killed any
    // process of it). Another node's claim is never taken over: that node may have started the
    // trial just before it went silent, so a dead node's claims end FAIL(lost) instead.
    if (t.state == TrialState::kWaiting && (t.node.empty() || t.node == me)) {
      study.waiting.push_back(t.number);
    }
    if (t.retry_of) {
      ++study.retries_created;
      retried_ids.insert(*t.retry_of);
    }
  }
  study.retried = static_cast<int>(retried_ids.size());
}

Status Scheduler::Sync(StudyRuntime& study) {
  if (!shared()) return Status::Ok();
  std::vector<int> open;
  for (const TrialRecord& t : study.trials) {
    if (!model::IsFinished(t.state)) open.push_back(t.number);
  }
  TRIALD_ASSIGN_OR_RETURN(std::vector<TrialRecord> changed,
                          options_.storage->GetTrialsSince(
                              study.record.id, static_cast<int>(study.trials.size()), open));
  for (TrialRecord& t : changed) {
    if (t.number < 0) continue;
    if (static_cast<size_t>(t.number) >= study.trials.size()) study.trials.resize(t.number + 1);
    study.trials[t.number] = std::move(t);
  }
  study.synced_at = options_.clock->MonotonicSeconds();
  // This node's trials that another node ended (it found this node silent): stop them; their
  // end is not this node's to record.
  for (auto& [tid, rt] : running_) {
    if (rt->study != &study || rt->taken_over) continue;
    const TrialRecord& stored = study.trials[rt->number];
    if (!model::IsFinished(stored.state)) continue;
    rt->taken_over = true;
    options_.logger->warn(
        "study {} trial {}: already ended by another node as {}({}) (this node was silent); "
        "stopping it",
        study.record.name, rt->number, model::TrialStateName(stored.state), stored.fail.reason);
    rt->process->Stop(StopReason::kCancel);
  }
  Recount(study);
  return Status::Ok();
}

void Scheduler::AdoptStudyState(StudyRuntime& study, const model::StudyRecord& stored) {
  if (stored.state == study.record.state) return;
  study.record.state = stored.state;
  study.record.finished_at = stored.finished_at;
  options_.logger->info("study {}: {} through another node", study.record.name,
                        model::StudyStateName(stored.state));
  if (stored.state != model::StudyState::kCancelled) return;
  for (auto& [tid, rt] : running_) {
    if (rt->study == &study) rt->process->Stop(StopReason::kCancel);
  }
}

Status Scheduler::LockAndSync(StudyRuntime& study) {
  Result<model::StudyRecord> rec = options_.storage->LockStudy(study.record.id);
  Status st = rec.status();
  if (st.ok()) {
    AdoptStudyState(study, *rec);
    st = Sync(study);
  }
  if (!st.ok()) {
    options_.logger->error("study {}: locking it and reading other nodes' trials: {}",
                           study.record.name, st.message());
  }
  return st;
}

void Scheduler::LockedMaybeComplete(StudyRuntime& study) {
  if (!shared()) {
    MaybeCompleteStudy(study);
    return;
  }
  StorageBatch batch(options_.storage, options_.logger);
  if (batch.began() && LockAndSync(study).ok()) MaybeCompleteStudy(study);
}

std::optional<model::ParamMap> Scheduler::DrawParams(StudyRuntime& study) {
  sampler::StudyView view{study.spec.study.direction, &study.spec.space, &study.trials};
  if (study.sampler->Exhausted(view)) {
    study.exhausted = true;
    Event(&study, nullptr, "sampler_exhausted", "no more configurations to try");
    MaybeCompleteStudy(study);
    return std::nullopt;
  }
  const int number = static_cast<int>(study.trials.size());
  Result<config::ParamValues> values = sampler::SampleParams(*study.sampler, view, number);
  if (!values.ok()) {
    options_.logger->error("study {}: sampler failed: {}", study.record.name,
                           values.status().message());
    study.exhausted = true;
    Event(&study, nullptr, "sampler_failed", values.status().message());
    MaybeCompleteStudy(study);
    return std::nullopt;
  }
  model::ParamMap params;
  for (const config::ParamSpec& p : study.spec.space) {
    params[p.name] = model::ParamValue{values->at(p.name), p.dist};
  }
  return params;
}

std::optional<int> Scheduler::ClaimNext(StudyRuntime& study) {
  // A node that may already count as dead elsewhere (it was frozen, or cut off) claims nothing
  // until its next heartbeat.
  if (!LeaseValid()) return std::nullopt;
  StorageBatch batch(options_.storage, options_.logger);
  if (!batch.began() || !LockAndSync(study).ok()) return std::nullopt;
  if (study.record.state != model::StudyState::kRunning) return std::nullopt;
  int number;
  if (!study.waiting.empty()) {
    number = study.waiting.front();
  } else {
    if (study.exhausted || study.configurations() >= study.record.n_trials) return std::nullopt;
    std::optional<model::ParamMap> params = DrawParams(study);
    if (!params) return std::nullopt;
    Result<TrialRecord> created =
        options_.storage->CreateTrial(study.record.id, *params, options_.clock->WallSeconds());
    if (!created.ok()) {
      options_.logger->error("study {}: storing a new trial: {}", study.record.name,
                             created.status().message());
      return std::nullopt;
    }
    number = created->number;
    study.trials.resize(std::max<size_t>(study.trials.size(), number + 1));
    study.trials[number] = *created;
  }
  TrialRecord& trial = study.trials[number];
  Status st = options_.storage->ClaimTrial(trial.id);
  if (!st.ok()) {
    options_.logger->error("study {} trial {}: claiming it: {}", study.record.name, number,
                           st.message());
    return std::nullopt;
  }
  trial.node = options_.storage->node();
  study.waiting.erase(std::remove(study.waiting.begin(), study.waiting.end(), number),
                      study.waiting.end());
  st = batch.Commit();
  if (!st.ok()) {
    // The claim is not durable: another node may take the trial, so this one must not run it.
    options_.logger->error("study {} trial {}: committing the claim: {}", study.record.name, number,
                           st.message());
    return std::nullopt;
  }
  return number;
}

void Scheduler::ReapDeadNodes(StudyRuntime& study) {
  // Its RUNNING trials, and those it claimed: it may have started one just before it went
  // silent, so a claimed trial is never handed to another node under the same number.
  auto on_dead = [&](const TrialRecord& t) {
    return !model::IsFinished(t.state) && !t.node.empty() && dead_nodes_.count(t.node) > 0;
  };
  if (std::none_of(study.trials.begin(), study.trials.end(), on_dead)) return;
  StorageBatch batch(options_.storage, options_.logger);
  if (!batch.began() || !LockAndSync(study).ok()) return;
  // Still silent now, under the lock: a node that has just come back keeps its trials.
  Status st = RefreshDeadNodes();
  if (!st.ok()) {
    options_.logger->error("reading the nodes' heartbeats: {}", st.message());
    return;
  }
  std::vector<int> numbers;
  for (const TrialRecord& t : study.trials) {
    if (on_dead(t)) numbers.push_back(t.number);
  }
  for (int number : numbers) {
    const TrialRecord t = study.trials[number];
    model::TrialOutcome out;
    out.state = TrialState::kFail;
    out.fail.reason = "lost";
    out.fail.detail =
        t.state == TrialState::kRunning
            ? "node " + t.node + " stopped sending heartbeats while the trial ran there (pid " +
                  std::to_string(t.process.pid) + "); ended by node " + options_.storage->node()
            : "node " + t.node +
                  " stopped sending heartbeats after claiming the trial (it may have started "
                  "it); ended by node " +
                  options_.storage->node();
    options_.logger->warn("study {} trial {}: lost with node {}", study.record.name, number,
                          t.node);
    Event(&study, &t, "trial_lost", out.fail.detail);
    FinishTrial(study, number, out, /*own=*/false);
  }
}

void Scheduler::Beat() {
  const double started = options_.clock->MonotonicSeconds();
  Status hb = options_.storage->Heartbeat(options_.clock->WallSeconds());
  if (!hb.ok()) {
    options_.logger->error("recording this node's heartbeat: {}", hb.message());
    return;
  }
  // The beat reached the server after `started`: no other node can count this one dead before
  // started + node_timeout_s.
  lease_from_ = started;
}

bool Scheduler::LeaseValid() const {
  return !shared() || options_.clock->MonotonicSeconds() - lease_from_ <
                          kLeaseFraction * options_.node_timeout_s;
}

Status Scheduler::RefreshDeadNodes() {
  const std::string& me = options_.storage->node();
  TRIALD_ASSIGN_OR_RETURN(std::vector<model::NodeRecord> nodes,
                          options_.storage->GetNodes(options_.clock->WallSeconds()));
  std::set<std::string> dead;
  for (const model::NodeRecord& n : nodes) {
    if (n.name == me || n.AliveWithin(options_.node_timeout_s)) continue;
    dead.insert(n.name);
    if (dead_nodes_.count(n.name) == 0) {
      options_.logger->warn("node {}: no heartbeat for {:.1f} s (timeout {} s): treated as dead",
                            n.name, n.silent_for, options_.node_timeout_s);
    }
  }
  for (const std::string& name : dead_nodes_) {
    if (dead.count(name) == 0) options_.logger->info("node {}: heartbeats again", name);
  }
  dead_nodes_ = std::move(dead);
  return Status::Ok();
}

void Scheduler::SharedTick() {
  if (!shared()) return;
  // Beats while shutting down too: its trials are still this node's until they end.
  Beat();
  RetryPendingFinishes();
  if (shutting_down_) return;
  Status nodes = RefreshDeadNodes();
  if (!nodes.ok()) options_.logger->error("reading the nodes' heartbeats: {}", nodes.message());
  Result<std::vector<model::StudyRecord>> stored = options_.storage->ListStudies();
  if (!stored.ok()) {
    options_.logger->error("listing studies: {}", stored.status().message());
    return;
  }
  for (const model::StudyRecord& rec : *stored) {
    auto it = studies_.find(rec.id);
    if (it != studies_.end()) {
      AdoptStudyState(*it->second, rec);
      continue;
    }
    if (rec.state != model::StudyState::kRunning || not_loaded_.count(rec.name) > 0) continue;
    Result<std::unique_ptr<StudyRuntime>> rt = LoadStudy(rec);
    if (!rt.ok()) {
      not_loaded_[rec.name] = rt.status().message();
      options_.logger->warn("study {}: not run on this node: {}", rec.name, rt.status().message());
      continue;
    }
    options_.logger->info("study {}: joined ({} trials so far)", rec.name, (*rt)->trials.size());
    studies_[rec.id] = std::move(rt).value();
  }
  for (auto& [id, study] : studies_) {
    Status st = Sync(*study);
    if (!st.ok()) {
      options_.logger->error("study {}: reading other nodes' trials: {}", study->record.name,
                             st.message());
      continue;
    }
    ReapDeadNodes(*study);
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
  if (s.running >= s.spec.study.parallelism) return false;
  if (!s.waiting.empty()) return true;
  return !s.exhausted && s.configurations() < s.record.n_trials;
}

void Scheduler::Pump() {
  if (pumping_) return;  // re-entered from a synchronous spawn failure
  pumping_ = true;
  // Every trial started in this pass is recorded (created, then RUNNING with its pid) in one
  // commit.
  // (Shared storage: each claim commits alone, before its process starts.)
  std::optional<StorageBatch> batch;
  if (!shared()) batch.emplace(options_.storage, options_.logger);
  if (gpu_reserved_for_ != 0) {
    auto held = studies_.find(gpu_reserved_for_);
    if (held == studies_.end() || !CanStart(*held->second)) gpu_reserved_for_ = 0;
  }
  // Round-robin over studies, one trial each per turn, resuming after the study served last,
  // so one big study cannot starve the others. Every StartTrial either starts a trial or uses
  // up part of its study's budget (a spawn failure is a finished trial; an exhausted sampler
  // stops the study), so this ends.
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
      started = started || ran || !shared();
    }
  }
  batch.reset();
  pumping_ = false;
  // Completed studies leave the active set.
  for (auto it = studies_.begin(); it != studies_.end();) {
    if (it->second->record.state != model::StudyState::kRunning && it->second->running == 0 &&
        it->second->pending_finishes == 0) {
      it = studies_.erase(it);
    } else {
      ++it;
    }
  }
  if (options_.on_change) options_.on_change();
  if (shutting_down_ && running_.empty() && on_idle_) {
    auto fn = std::move(on_idle_);
    on_idle_ = nullptr;
    fn();
  }
}

launcher::LaunchSpec Scheduler::MakeLaunchSpec(
    const StudyRuntime& study, const TrialRecord& trial,
    const std::vector<devices::GpuSlot>& gpu_slots) const {
  launcher::LaunchSpec ls;
  const config::ObjectiveConfig& obj = study.spec.objective;
  ls.argv = obj.command;
  ls.workdir = obj.workdir;
  ls.log_dir = TrialDir(study.record.name, trial.number);
  ls.log_head_bytes = options_.log_head_bytes;
  ls.log_tail_bytes = options_.log_tail_bytes;
  ls.timeout_s = study.spec.study.trial_timeout;
  ls.kill_grace_s = study.spec.study.kill_grace;
  ls.memory_limit_bytes = study.spec.study.memory_limit;
  ls.pids_limit = study.spec.study.pids_limit;

  std::map<std::string, std::string> env;
  for (const std::string& kv : options_.base_env) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  env.emplace("PYTHONUNBUFFERED", "1");  // Python workers' output reaches the logs live
  for (const auto& [k, v] : obj.env) env[k] = v;
  boost::json::object params;
  for (const config::ParamSpec& p : study.spec.space) {
    auto it = trial.params.find(p.name);
    if (it == trial.params.end()) continue;
    // Exact parsing: boost::json::parse may be one ulp off (common/json.h), and the worker must
    // get the stored value, bit for bit. ExternalJson always gives valid JSON.
    Result<boost::json::value> v =
        common::ParseJsonExact(config::ExternalJson(it->second.dist, it->second.internal));
    params[p.name] = v.ok() ? std::move(*v) : boost::json::value(nullptr);
  }
  env["TRIALD_PARAMS"] = boost::json::serialize(params);
  env["TRIALD_STUDY"] = study.record.name;
  env["TRIALD_TRIAL"] = std::to_string(trial.number);
  env["TRIALD_TRIAL_DIR"] = ls.log_dir;
  env["TRIALD_REPORT_FD"] = "3";
  env["TRIALD_NODE"] = options_.storage->node();
  // The trial's GPUs by NVML index; NVML counts in PCI bus order, so CUDA must too. Empty on a
  // CPU slot: the trial sees no GPU.
  env["CUDA_VISIBLE_DEVICES"] = devices::GpuPool::CudaVisibleDevices(gpu_slots);
  if (!gpu_slots.empty()) {
    env.emplace("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    env["TRIALD_GPU_SLOTS"] = devices::GpuPool::SlotList(gpu_slots);
  }
  for (const auto& [k, v] : env) ls.env.push_back(k + "=" + v);

  std::string path_env = env.count("PATH") ? env["PATH"] : "";
  Result<std::string> exe = common::FindExecutable(obj.command[0], path_env, obj.workdir);
  ls.executable = exe.ok() ? *exe : obj.command[0];
  return ls;
}

bool Scheduler::StartTrial(StudyRuntime& study, std::vector<devices::GpuSlot> gpu_slots) {
  const double now = options_.clock->WallSeconds();
  // Slots no process ever used go straight back.
  struct GiveBack {
    devices::GpuPool* pool;
    std::vector<devices::GpuSlot>* slots;
    ~GiveBack() {
      if (pool != nullptr && !slots->empty()) pool->GiveBack(*slots);
    }
  } give_back{options_.gpus, &gpu_slots};
  int number;
  if (shared()) {
    std::optional<int> claimed = ClaimNext(study);
    // The lease again, right before the process starts; the claim stays this node's.
    if (!claimed || !LeaseValid()) return false;
    number = *claimed;
  } else if (!study.waiting.empty()) {
    number = study.waiting.front();
    study.waiting.pop_front();
  } else {
    std::optional<model::ParamMap> params = DrawParams(study);
    if (!params) return false;
    Result<TrialRecord> created = options_.storage->CreateTrial(study.record.id, *params, now);
    if (!created.ok()) {
      options_.logger->error("study {}: storing a new trial: {}", study.record.name,
                             created.status().message());
      study.exhausted = true;  // storage is failing: start nothing more for this study
      MaybeCompleteStudy(study);
      return false;
    }
    number = created->number;
    if (static_cast<int>(study.trials.size()) != number) {
      options_.logger->error("study {}: trial numbering out of step ({} vs {})", study.record.name,
                             number, study.trials.size());
    }
    study.trials.resize(std::max<size_t>(study.trials.size(), number + 1));
    study.trials[number] = *created;
  }
  TrialRecord& trial = study.trials[number];
  launcher::LaunchSpec ls = MakeLaunchSpec(study, trial, gpu_slots);
  int64_t tid = trial.id;
  launcher::TrialCallbacks cb;
  cb.on_message = [this, tid](const proto::ReportMessage& m) { OnMessage(tid, m); };
  cb.on_exit = [this, tid](const launcher::ProcessOutcome& o) { OnExit(tid, o); };
  Result<std::unique_ptr<launcher::TrialProcess>> proc =
      options_.launcher->Launch(ls, std::move(cb));
  if (!proc.ok()) {
    model::TrialOutcome out;
    out.state = TrialState::kFail;
    out.fail.reason = "spawn";
    out.fail.detail = proc.status().message();
    options_.logger->warn("study {} trial {}: spawn failed: {}", study.record.name, number,
                          out.fail.detail);
    FinishTrial(study, number, out);
    return false;
  }
  model::ProcessIdentity id = (*proc)->identity();
  Status st = options_.storage->MarkRunning(tid, id, now);
  if (!st.ok()) {
    // Not durable means we could not recover it after a crash: do not let it run.
    options_.logger->error("study {} trial {}: {}", study.record.name, number, st.message());
    proc->reset();
    model::TrialOutcome out;
    out.state = TrialState::kFail;
    out.fail.reason = "spawn";
    out.fail.detail = "could not record the running trial: " + st.message();
    FinishTrial(study, number, out);
    return false;
  }
  trial.state = TrialState::kRunning;
  trial.process = id;
  trial.started_at = now;
  auto rt = std::make_unique<RunningTrial>();
  rt->study = &study;
  rt->number = number;
  rt->process = std::move(proc).value();
  rt->gpu_slots.swap(gpu_slots);  // the trial holds them now
  rt->pids.insert(id.pid);
  running_[tid] = std::move(rt);
  ++study.running;
  options_.logger->debug("study {} trial {} started (pid {})", study.record.name, number, id.pid);
  return true;
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
      Status st = options_.storage->AddIntermediate(trial_id, m.step, m.value);
      if (!st.ok()) options_.logger->error("storing intermediate value: {}", st.message());
      if (shared() && options_.clock->MonotonicSeconds() - study.synced_at >= kPruneSyncSeconds) {
        Status synced = Sync(study);  // the other nodes' values, for the pruner
        if (!synced.ok()) {
          options_.logger->error("study {}: reading other nodes' trials: {}", study.record.name,
                                 synced.message());
        }
        if (rt.taken_over) break;
      }
      TrialRecord& trial = study.trials[rt.number];
      trial.intermediate[m.step] = m.value;
      pruner::PruneContext ctx{study.spec.study.direction, &study.trials, &trial,
                               study.record.name};
      if (study.pruner->ShouldPrune(ctx)) {
        rt.pruned = true;
        options_.logger->info("study {} trial {}: pruned at step {} (value {})", study.record.name,
                              rt.number, m.step, m.value);
        rt.process->Stop(StopReason::kPrune);
      }
      break;
    }
    case proto::ReportType::kFinal:
      rt.final_values = m.values;
      break;
    case proto::ReportType::kAttr: {
      if (rt.taken_over) break;
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
    case proto::ReportType::kShouldPrune:
    case proto::ReportType::kPruned:
      break;  // the launcher refuses these lines until the two-way channel is served
  }
}

namespace {
std::string Seconds(double s) {
  std::ostringstream o;
  o << s;
  return o.str() + " s";
}
}  // namespace

void Scheduler::OnExit(int64_t trial_id, const launcher::ProcessOutcome& o) {
  auto it = running_.find(trial_id);
  if (it == running_.end()) return;
  std::unique_ptr<RunningTrial> rt = std::move(it->second);
  running_.erase(it);
  StudyRuntime& study = *rt->study;
  --study.running;
  const TrialRecord& trial = study.trials[rt->number];

  model::TrialOutcome out;
  out.fail.stderr_tail = common::SanitizeUtf8(o.stderr_tail);
  out.fail.exit_code = o.exit.signaled ? -1 : o.exit.code;
  out.fail.signal = o.exit.signaled ? o.exit.signal : 0;
  out.fail.core_dumped = o.exit.core_dumped;
  const std::string how = o.exit.Describe() + (o.killed ? " after SIGKILL" : "");
  auto fail = [&](const std::string& reason, const std::string& detail) {
    out.state = TrialState::kFail;
    out.fail.reason = reason;
    out.fail.detail = common::SanitizeUtf8(detail);
    if (!rt->worker_error.empty()) out.fail.detail += "; worker said: " + rt->worker_error;
  };

  switch (o.stop_reason) {
    case StopReason::kPrune:
      out.state = TrialState::kPruned;
      if (!trial.intermediate.empty()) out.value = trial.intermediate.rbegin()->second;
      break;
    case StopReason::kTimeout:
      fail("timeout",
           "exceeded trial_timeout of " + Seconds(study.spec.study.trial_timeout) + "; " + how);
      break;
    case StopReason::kCancel:
      fail("cancelled", "study cancelled; " + how);
      break;
    case StopReason::kProtocol:
      fail("protocol", o.protocol_error);
      break;
    case StopReason::kShutdown:
    case StopReason::kNone:
      // A trial stopped by the daemon's shutdown is judged like any other when it finished on
      // its own terms (a result, or a broken protocol); otherwise the shutdown ended it.
      if (!o.protocol_error.empty()) {
        fail("protocol", o.protocol_error);
      } else if (o.oom && (o.exit.signaled || o.exit.code != 0)) {
        fail("oom", "out of memory: " + o.oom_detail + "; " + how);
      } else if (o.exit.signaled) {
        fail("signal", how);
      } else if (o.exit.code != 0) {
        fail("exit", how);
      } else if (rt->final_values.empty()) {
        fail("protocol", "exited with code 0 without reporting a final value");
      } else if (rt->final_values.size() != 1) {
        fail("protocol", "reported " + std::to_string(rt->final_values.size()) +
                             " objective values; this study has one objective");
      } else {
        out.state = TrialState::kComplete;
        out.value = rt->final_values.front();
      }
      if (o.stop_reason == StopReason::kShutdown && out.state == TrialState::kFail &&
          o.protocol_error.empty() && rt->final_values.size() <= 1) {
        fail("shutdown", "triald was stopped while the trial ran; " + how);
      }
      break;
  }
  if (out.state != TrialState::kFail) out.fail = model::FailInfo{};
  FinishTrial(study, rt->number, out);
  if (!rt->gpu_slots.empty() && options_.gpus != nullptr) {
    // Its slots drain: free again once the driver shows none of its processes holding memory.
    draining_study_[trial_id] = study.record.id;
    options_.gpus->Release(rt->gpu_slots, rt->pids, std::to_string(trial_id),
                           options_.clock->MonotonicSeconds());
    CollectDrainedGpus();
  }
  rt.reset();  // the process is over; its handle goes now
  Pump();
}

Status Scheduler::CheckGpus(const config::SweepSpec& spec, const std::string& where) const {
  const int want = spec.study.gpus_per_trial;
  const int have = options_.gpus != nullptr ? options_.gpus->gpu_count() : 0;
  if (want <= have) return Status::Ok();
  return common::InvalidArgument(
      where + ": [study] gpus_per_trial = " + std::to_string(want) + ": triald has " +
      (have == 0 ? std::string("no GPUs (see triald --gpus, or [devices] gpus in its config)")
                 : std::to_string(have) + " GPU(s)") +
      "; expected at most " + std::to_string(have));
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
    Event(&study, &failed, "retries_exhausted",
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
  Event(&study, &*created, "trial_retry", what);
}

bool Scheduler::CollectDrainedGpus() {
  if (options_.gpus == nullptr) return false;
  std::vector<devices::GpuPool::Released> released =
      options_.gpus->Poll(options_.clock->MonotonicSeconds());
  for (const devices::GpuPool::Released& r : released) {
    const int64_t trial_id = std::stoll(r.owner);
    auto sid = draining_study_.find(trial_id);
    std::optional<int64_t> study_id;
    if (sid != draining_study_.end()) {
      study_id = sid->second;
      draining_study_.erase(sid);
    }
    if (!r.leaked) continue;
    const std::string detail = "GPU slot(s) " + devices::GpuPool::SlotList(r.slots) +
                               " given out again with memory still held: " + r.detail;
    options_.logger->warn("trial id {}: GPU memory leak: {}", trial_id, detail);
    Status st = options_.storage->AppendEvent(study_id, trial_id, "gpu_leak", detail,
                                              options_.clock->WallSeconds());
    if (!st.ok()) options_.logger->error("storing event gpu_leak: {}", st.message());
  }
  return !released.empty();
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
    if (!rt->gpu_slots.empty()) {
      options_.gpus->CollectPids(rt->gpu_slots, rt->process->identity().pgid, &rt->pids);
    }
  }
  if (CollectDrainedGpus()) Pump();
}

void Scheduler::FinishTrial(StudyRuntime& study, int number, const model::TrialOutcome& out,
                            bool own) {
  // The trial's end, its event and the study's completion are one commit, made before any
  // other trial starts.
  StorageBatch batch(options_.storage, options_.logger);
  // Shared storage: when the database cannot be reached, the end is kept and recorded at a later
  // tick (the trial stays unfinished in the cache meanwhile, so the study cannot complete
  // without it).
  auto keep_for_later = [&](const std::string& why) {
    options_.logger->warn("study {} trial {}: its end ({}) is kept until the database answers: {}",
                          study.record.name, number, model::TrialStateName(out.state), why);
    pending_finishes_.push_back({study.record.id, number, out, own});
    ++study.pending_finishes;
  };
  if (shared()) {
    Status locked = batch.began() ? LockAndSync(study) : common::Unavailable("no transaction");
    if (!locked.ok()) {
      keep_for_later(locked.message());
      return;
    }
    const TrialRecord& stored = study.trials[number];
    if (model::IsFinished(stored.state) ||
        (own && !stored.node.empty() && stored.node != options_.storage->node())) {
      // Another node ended it, or took it over, while this one was silent: it is theirs now,
      // and nothing is reported twice.
      options_.logger->warn(
          "study {} trial {}: {} by another node ({}); this node's outcome "
          "({}) is dropped",
          study.record.name, number,
          model::IsFinished(stored.state)
              ? std::string("ended as ") + model::TrialStateName(stored.state)
              : std::string("taken over"),
          stored.node, model::TrialStateName(out.state));
      return;
    }
  }
  // What the cache looked like before, to restore it if a shared commit fails.
  const size_t size_before = study.trials.size();
  const TrialRecord record_before = study.trials[number];
  const model::StudyRecord study_before = study.record;
  TrialRecord& trial = study.trials[number];
  const double now = options_.clock->WallSeconds();
  Status st = options_.storage->FinishTrial(trial.id, out, now);
  if (!st.ok()) {
    if (shared() && st.code() != common::Code::kFailedPrecondition) {
      keep_for_later(st.message());
      return;
    }
    options_.logger->error("study {} trial {}: storing its end: {}", study.record.name, number,
                           st.message());
  }
  trial.state = out.state;
  trial.value = out.value;
  trial.fail = out.fail;
  trial.finished_at = now;
  ++study.finished;
  std::string what = model::TrialStateName(out.state);
  if (out.state == TrialState::kFail) what += "(" + out.fail.reason + "): " + out.fail.detail;
  if (out.value) what += " value=" + std::to_string(*out.value);
  options_.logger->info("study {} trial {}: {}", study.record.name, number, what);
  Event(&study, &trial, "trial_finished", what);
  MaybeRetry(study, number);  // may grow study.trials: `trial` is not used after this
  MaybeCompleteStudy(study);
  if (shared()) {
    st = batch.Commit();
    if (!st.ok()) {
      // Nothing of it is stored: the cache forgets the end, the retry and the completion.
      study.trials.resize(size_before);
      study.trials[number] = record_before;
      study.record = study_before;
      Recount(study);
      keep_for_later(st.message());
    }
  }
}

void Scheduler::RetryPendingFinishes() {
  std::vector<PendingFinish> pending;
  pending.swap(pending_finishes_);
  for (const PendingFinish& p : pending) {
    auto it = studies_.find(p.study_id);
    if (it == studies_.end()) continue;
    --it->second->pending_finishes;
    FinishTrial(*it->second, p.number, p.outcome, p.own);
  }
}

void Scheduler::MaybeCompleteStudy(StudyRuntime& study) {
  if (study.record.state != model::StudyState::kRunning) return;
  if (study.running > 0 || !study.waiting.empty()) return;
  // Shared storage: nothing may be waiting or running on any node either.
  if (shared() && std::any_of(study.trials.begin(), study.trials.end(),
                              [](const TrialRecord& t) { return !model::IsFinished(t.state); })) {
    return;
  }
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
  Event(&study, nullptr, "study_complete",
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
  if (shared()) {
    // Under the lock: no node claims a trial of it meanwhile, and a second cancel sees the first.
    TRIALD_ASSIGN_OR_RETURN(rec, options_.storage->LockStudy(rec.id));
    if (rec.state != model::StudyState::kRunning) {
      return common::FailedPrecondition("study \"" + name + "\" is already " +
                                        model::StudyStateName(rec.state));
    }
  }
  TRIALD_RETURN_IF_ERROR(
      options_.storage->SetStudyState(rec.id, model::StudyState::kCancelled, now));
  auto sit = studies_.find(rec.id);
  if (sit == studies_.end()) return Status::Ok();
  StudyRuntime& study = *sit->second;
  study.record.state = model::StudyState::kCancelled;
  Event(&study, nullptr, "study_cancelled", "");
  if (shared()) {
    // Every WAITING trial, whichever node claimed it: a node about to start one then fails to
    // mark it RUNNING and stops it. Running trials of other nodes stop at their next tick.
    TRIALD_RETURN_IF_ERROR(Sync(study));
    study.waiting.clear();
    for (const TrialRecord& t : study.trials) {
      if (t.state == TrialState::kWaiting) study.waiting.push_back(t.number);
    }
  }
  while (!study.waiting.empty()) {
    int number = study.waiting.front();
    study.waiting.pop_front();
    model::TrialOutcome out;
    out.state = TrialState::kFail;
    out.fail.reason = "cancelled";
    out.fail.detail = "study cancelled before the trial started";
    FinishTrial(study, number, out, /*own=*/false);
  }
  for (auto& [tid, rt] : running_) {
    if (rt->study == &study) rt->process->Stop(StopReason::kCancel);
  }
  options_.logger->info("study {} cancelled", name);
  // Committed before Pump, whose transactions are its own (each locking one study).
  Status committed = batch.Commit();
  Pump();
  return committed.ok() ? Status::Ok() : committed.WithContext("storing the cancel");
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
  std::optional<StorageBatch> locked;
  if (shared()) {
    locked.emplace(options_.storage, options_.logger);
    TRIALD_RETURN_IF_ERROR(LockAndSync(study));
    if (study.record.state != model::StudyState::kRunning) {
      return common::FailedPrecondition("study \"" + name + "\" is " +
                                        model::StudyStateName(study.record.state) +
                                        "; expected a RUNNING study");
    }
  }
  const int number = static_cast<int>(study.trials.size());
  if (study.configurations() >= study.record.n_trials) {
    return common::FailedPrecondition("study \"" + name + "\" already has its n_trials = " +
                                      std::to_string(study.record.n_trials) + " trials");
  }

  // Every given value first, so a mistake costs nothing (not even a sampler draw).
  std::string known;
  for (const config::ParamSpec& p : study.spec.space) known += (known.empty() ? "" : ", ") + p.name;
  config::ParamValues fixed;
  for (const auto& [param, text] : given) {
    auto spec = std::find_if(study.spec.space.begin(), study.spec.space.end(),
                             [&](const config::ParamSpec& p) { return p.name == param; });
    if (spec == study.spec.space.end()) {
      return common::InvalidArgument("study \"" + name + "\" has no parameter \"" + param +
                                     "\"; expected one of: " + known);
    }
    Result<double> v = config::InternalFromText(spec->dist, text);
    if (!v.ok()) return common::InvalidArgument("parameter " + param + ": " + v.status().message());
    fixed[param] = *v;
  }

  config::ParamValues values;
  if (fixed.size() < study.spec.space.size()) {
    sampler::StudyView view{study.spec.study.direction, &study.spec.space, &study.trials};
    Result<config::ParamValues> sampled = sampler::SampleParams(*study.sampler, view, number);
    if (!sampled.ok()) {
      return sampled.status().WithContext("drawing the parameters not given for study \"" + name +
                                          "\"");
    }
    values = std::move(sampled).value();
  }
  for (const auto& [param, v] : fixed) values[param] = v;
  model::ParamMap params;
  for (const config::ParamSpec& p : study.spec.space) {
    params[p.name] = model::ParamValue{values.at(p.name), p.dist};
  }

  TrialRecord trial;
  {
    StorageBatch batch(options_.storage, options_.logger);
    TRIALD_ASSIGN_OR_RETURN(trial, options_.storage->CreateTrial(study.record.id, params,
                                                                 options_.clock->WallSeconds()));
    study.trials.resize(std::max<size_t>(study.trials.size(), trial.number + 1));
    study.trials[trial.number] = trial;
    study.waiting.push_back(trial.number);
    std::string what;
    for (const auto& [param, v] : fixed) {
      what += (what.empty() ? "" : " ") + param + "=" + config::ExternalJson(params[param].dist, v);
    }
    Event(&study, &trial, "trial_enqueued", what);
    options_.logger->info("study {} trial {} enqueued: {}", name, trial.number, what);
  }
  if (locked) {
    TRIALD_RETURN_IF_ERROR(locked->Commit());
    locked.reset();
  }
  Pump();
  return trial;
}

void Scheduler::BeginShutdown(std::function<void()> on_idle) {
  shutting_down_ = true;
  on_idle_ = std::move(on_idle);
  for (auto& [tid, rt] : running_) rt->process->Stop(StopReason::kShutdown);
  Pump();  // runs on_idle at once when nothing is running
}

namespace {

bool IsZombie(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// Field 5 (pgrp) and field 22 (starttime) of /proc/PID/stat.
bool ReadStat(pid_t pid, pid_t* pgrp, uint64_t* start) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> f)) return false;
    if (i == 5) *pgrp = static_cast<pid_t>(std::stol(f));
  }
  *start = std::stoull(f);
  return true;
}

// The value of TRIALD_TRIAL_DIR in a process's environment ("" when absent or unreadable).
std::string TrialDirOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return "";
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "TRIALD_TRIAL_DIR=";
  for (size_t pos = 0; pos < env.size();) {
    size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    if (env.compare(pos, key.size(), key) == 0)
      return env.substr(pos + key.size(), end - pos - key.size());
    pos = end + 1;
  }
  return "";
}

}  // namespace

int KillLeftoverTrialProcesses(const std::string& state_dir,
                               const std::vector<model::ProcessIdentity>& lost) {
  const std::string prefix = model::StudiesDir(state_dir);
  std::vector<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return 0;
  while (dirent* ent = ::readdir(dir)) {
    char* end;
    long pid = std::strtol(ent->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == ::getpid()) continue;
    pid_t pgrp = 0;
    uint64_t start = 0;
    if (!ReadStat(static_cast<pid_t>(pid), &pgrp, &start)) continue;
    bool ours = TrialDirOf(static_cast<pid_t>(pid)).rfind(prefix, 0) == 0;
    for (const model::ProcessIdentity& id : lost) {
      // A member of a lost trial's group, while that group's leader is provably the trial's.
      uint64_t leader_start = 0;
      pid_t leader_pgrp = 0;
      ours =
          ours || (id.pgid > 1 && pgrp == id.pgid && start >= id.start_time &&
                   ReadStat(id.pid, &leader_pgrp, &leader_start) && leader_start == id.start_time);
    }
    if (ours) found.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(dir);
  for (pid_t pid : found) ::kill(pid, SIGKILL);
  // Wait (bounded) until they are gone, so the restarted study does not overlap them.
  for (int i = 0; i < 250; ++i) {
    bool any = false;
    for (pid_t pid : found) {
      pid_t pgrp;
      uint64_t start;
      // A zombie waiting for its new parent to reap it holds nothing any more.
      any = any || (::kill(pid, 0) == 0 && ReadStat(pid, &pgrp, &start) && !IsZombie(pid));
    }
    if (!any) break;
    ::usleep(20 * 1000);
  }
  return static_cast<int>(found.size());
}

}  // namespace triald::daemon
