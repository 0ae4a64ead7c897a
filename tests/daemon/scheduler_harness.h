#pragma once
// SchedulerHarness: one daemon's worth of Scheduler over the fakes of tests/daemon/fakes.h,
// built through the scheduler's public API (daemon/scheduler.h) only. A FakeLauncher plays every
// trial process, a FakeClock gives time, FakeLeftovers stands in for the /proc scan at recovery,
// an optional GpuPool (over a FakeGpuProbe) hands out GPU slots, and the real SQLite storage
// records what a user would later read with `trialctl`. Restart() replaces the scheduler and the
// launcher as after a daemon crash, keeping the storage, the clock and the GPU pool.
//
// SchedulerCluster: several harnesses ("nodes") sharing one SQLite file opened as shared
// (SqliteOptions::shared) and one clock, each with its own launcher, leftovers and node name,
// its storage wrapped in a FlakyStorage so a test can take the database away from one node.
//
// Every scheduler test (scheduler_*_test.cc) builds its scheduler here; a test reads trial and
// study state back from storage, since that is what survives the daemon.
//
// Thread-safety: none; like the scheduler, used from the test's thread only.

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/devices/gpu_pool.h"
#include "daemon/scheduler.h"
#include "daemon/storage/sqlite_storage.h"
#include "daemon/storage/storage.h"
#include "tests/daemon/fakes.h"
#include "tests/daemon/flaky_storage.h"
#include "tests/daemon/inline_storage_reads.h"
#include "tests/support/temp_dir.h"

namespace triald::testing {

// Sweep files claim to live here; the harness creates it and its "run" folder (submit checks
// that workdir is a directory). Only the fork server tests write a file to it (the objective).
inline const std::string kSweepDir = "/tmp/triald-scheduler-test";

// Three parameters of three kinds: what a sweep searches unless it says otherwise.
inline const char* const kDefaultSpace = R"(
[space.lr]
type = "float"
low = 0.0001
high = 0.1
log = true

[space.layers]
type = "int"
low = 1
high = 8

[space.opt]
type = "categorical"
choices = ["adam", "sgd", "adamw"]
)";

// One float parameter x in [0, 1].
inline const char* const kUnitSpace = "\n[space.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n";

// A sweep file, written out as a user would.
struct Sweep {
  std::string name = "study";
  int n_trials = 5;
  int parallelism = 1;
  std::string command = R"(["/bin/true"])";
  std::string kind = "exec";    // [objective] kind; command is written for "exec" only
  std::string study_extra;      // more "key = value" lines for [study]
  std::string objective_extra;  // more lines for [objective]
  std::string space = kDefaultSpace;
  std::string sampler;          // lines of a [sampler] table; none when empty
  std::string dir = kSweepDir;  // the folder the file claims to be in (workdir's default)

  std::string Toml() const {
    std::string t = "[study]\nname = \"" + name + "\"\nn_trials = " + std::to_string(n_trials) +
                    "\nparallelism = " + std::to_string(parallelism) + "\n" + study_extra +
                    "\n[objective]\nkind = \"" + kind + "\"\n" +
                    (kind == "exec" ? "command = " + command + "\n" : std::string()) +
                    objective_extra + space;
    if (!sampler.empty()) t += "\n[sampler]\n" + sampler + "\n";
    return t;
  }
  std::string Path() const { return dir + "/" + name + ".toml"; }
  config::SweepSource Source() const { return {Toml(), Path()}; }
};

struct SchedulerHarnessOptions {
  int max_workers = 4;
  std::vector<std::string> base_env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  std::string state_dir = "/srv/triald-test";
  uint64_t drawn_seed = 7;  // what seed_source gives sweeps without a seed
  size_t log_head_bytes = 1 << 20;
  size_t log_tail_bytes = 1 << 20;
  double node_timeout_s = 30;
  // Replaces every study's pruner (see SchedulerOptions::make_pruner); empty: the real ones.
  std::function<common::Result<std::unique_ptr<pruner::Pruner>>(const config::PrunerConfig&)>
      make_pruner;

  // GPU slots: the GPUs of a GpuPool (none when empty, and then no pool at all), its slots per
  // GPU, whether it reads per-process memory from the harness's FakeGpuProbe (4 GPUs), how long
  // a slot drains at most, and the process group of each pid, for the pool's pid tracking.
  std::vector<int> gpus;
  int slots_per_gpu = 1;
  bool gpu_probe = false;
  double gpu_release_timeout_s = 30;
  std::map<pid_t, pid_t> process_groups;

  // Storage: SQLite in memory, unless `sqlite` names a file (the cluster's nodes share one).
  std::optional<storage::SqliteOptions> sqlite;
  bool flaky = false;  // wrap the storage in a FlakyStorage (flaky())
  // A clock shared with other harnesses (the cluster's); null: the harness's own.
  FakeClock* clock = nullptr;
  // Studies whose trials run elsewhere ([executor] kind = "slurm") are admitted when this says
  // so (SchedulerOptions::check_executor); empty: refused, as by a daemon without Slurm.
  std::function<common::Status(const config::SweepSpec&, const std::string&)> check_executor;
  // SchedulerOptions::post (a background sampler asks for a Pump() through it) and
  // make_sampler; empty: none, and the real samplers.
  std::function<void(std::function<void()>)> post;
  std::function<common::Result<std::unique_ptr<sampler::Sampler>>(const config::SamplerConfig&,
                                                                  const config::SearchSpace&)>
      make_sampler;
  // SchedulerOptions::trial_write_storage (the lazy writer's connection; needs `post`).
  std::shared_ptr<storage::Storage> trial_write_storage;
  // SchedulerOptions::storage_reads: an InlineStorageReads on the harness's storage (reads()),
  // as the daemon on shared storage reads off its event loop.
  bool inline_reads = false;
  // With inline_reads and a SQLite file (sqlite): the reads get a connection of their own to it,
  // as the daemon's reads' thread has (a FlakyStorage: reads_flaky()); otherwise they use the
  // harness's storage.
  bool own_reads_connection = false;
};

// The options of a harness with GPU slots (none with the defaults), 16 workers and a drawn seed
// of 1.
inline SchedulerHarnessOptions GpuHarnessOptions(std::vector<int> gpus = {}, int slots = 1,
                                                 bool probe = false, double timeout = 30) {
  SchedulerHarnessOptions o;
  o.max_workers = 16;
  o.base_env = {"PATH=/usr/bin:/bin"};
  o.drawn_seed = 1;
  o.gpus = std::move(gpus);
  o.slots_per_gpu = slots;
  o.gpu_probe = probe;
  o.gpu_release_timeout_s = timeout;
  return o;
}

class SchedulerHarness {
 public:
  explicit SchedulerHarness(SchedulerHarnessOptions options = {})
      : options_(std::move(options)), clock_(options_.clock ? options_.clock : &own_clock_) {
    std::filesystem::create_directories(kSweepDir + "/run");
    storage::SqliteOptions so;
    so.path = ":memory:";
    if (options_.sqlite) so = *options_.sqlite;
    auto opened = storage::OpenSqliteStorage(so);
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    storage_ = std::move(opened).value();
    if (options_.flaky) {
      auto flaky = std::make_unique<FlakyStorage>(std::move(storage_));
      flaky_ = flaky.get();
      storage_ = std::move(flaky);
    }
    if (options_.own_reads_connection) {
      REQUIRE(options_.sqlite.has_value());
      auto reads = storage::OpenSqliteStorage(*options_.sqlite);
      INFO(reads.status().ToString());
      REQUIRE(reads.ok());
      reads_storage_ = std::make_unique<FlakyStorage>(std::move(reads).value());
    }
    Start();
  }

  // A new daemon on the same storage: a fresh launcher and scheduler, as after a crash. (The old
  // scheduler is destroyed, which only drops its fake process handles; it writes nothing.) It
  // has not recovered yet: call Recover() or RecoverOk().
  void Restart(std::optional<uint64_t> drawn_seed = std::nullopt) {
    scheduler_.reset();
    launcher_ = std::make_unique<FakeLauncher>();
    if (drawn_seed) options_.drawn_seed = *drawn_seed;
    Start();
  }
  // Restart(), then a recovery that must succeed.
  void RestartAndRecover() {
    Restart();
    RecoverOk();
  }
  void RecoverOk() {
    common::Status st = scheduler_->Recover();
    INFO(st.ToString());
    REQUIRE(st.ok());
  }

  daemon::Scheduler& scheduler() { return *scheduler_; }
  FakeLauncher& launcher() { return *launcher_; }
  // Runs `fn` first in every submit's checks, on the thread that admits it.
  void BeforeSubmitCheck(std::function<void()> fn) { env_.before_submit_check = std::move(fn); }
  storage::Storage& storage() { return *storage_; }
  FakeClock& clock() { return *clock_; }
  FakeLeftovers& leftovers() { return leftovers_; }
  FakeGpuProbe& probe() { return probe_; }
  // The storage as a FlakyStorage; only with options.flaky.
  FlakyStorage& flaky() {
    REQUIRE(flaky_ != nullptr);
    return *flaky_;
  }
  // The reads off the event loop; only with options.inline_reads.
  InlineStorageReads& reads() {
    REQUIRE(reads_ != nullptr);
    return *reads_;
  }
  // The reads' own connection; only with options.own_reads_connection.
  FlakyStorage& reads_flaky() {
    REQUIRE(reads_storage_ != nullptr);
    return *reads_storage_;
  }
  // A heartbeat tick, as the daemon's timer makes it, with its reads' completions run.
  void Tick() {
    scheduler_->SharedTick();
    if (reads_ != nullptr) reads_->Drain();
  }
  // The node name the storage was opened with ("" unless shared).
  const std::string& node() const { return storage_->node(); }
  // Every delay the scheduler asked to be pumped after (SchedulerOptions::wake_after).
  const std::vector<double>& wakes() const { return wakes_; }

  // Lets the last wait the scheduler asked for pass, then pumps (as the daemon's timer does).
  void PassWait() {
    REQUIRE_FALSE(wakes_.empty());
    clock_->Advance(wakes_.back() + 1e-6);
    scheduler_->Pump();
  }

  // Submits, then runs the reads' completions it queued, as the daemon's event loop does right
  // after the request (a claim made off the loop launches its trial there).
  common::Result<model::StudyRecord> Submit(const Sweep& sweep,
                                            const model::Submitter& submitter = {}) {
    common::Result<model::StudyRecord> r = scheduler_->Submit(sweep.Source(), submitter);
    Settle();
    return r;
  }
  // Runs the reads' completions waiting (and those they queue); nothing without inline_reads.
  void Settle() {
    if (reads_ != nullptr) reads_->Drain();
  }
  model::StudyRecord SubmitOk(const Sweep& sweep, const model::Submitter& submitter = {}) {
    common::Result<model::StudyRecord> r = Submit(sweep, submitter);
    INFO("Submit(" << sweep.name << "): " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }
  model::StudyRecord Study(const std::string& name) {
    common::Result<model::StudyRecord> r = storage_->GetStudy(name);
    INFO("GetStudy(" << name << "): " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }
  model::StudyState State(const std::string& name) { return Study(name).state; }
  std::vector<model::TrialRecord> Trials(const std::string& name) {
    common::Result<std::vector<model::TrialRecord>> r = storage_->GetTrials(Study(name).id);
    INFO("GetTrials(" << name << "): " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  }
  std::vector<std::string> StudyNames() {
    common::Result<std::vector<model::StudyRecord>> r = storage_->ListStudies();
    REQUIRE(r.ok());
    std::vector<std::string> names;
    for (const model::StudyRecord& s : *r) names.push_back(s.name);
    return names;
  }
  // The kinds and details of the study's events, oldest first.
  std::vector<std::pair<std::string, std::string>> Events(const std::string& name) {
    common::Result<std::vector<model::EventRecord>> r = storage_->GetEvents(Study(name).id);
    REQUIRE(r.ok());
    std::vector<std::pair<std::string, std::string>> out;
    for (const model::EventRecord& e : *r) out.emplace_back(e.kind, e.detail);
    return out;
  }
  // The kinds of the study's events, oldest first.
  std::vector<std::string> EventKinds(const std::string& name) {
    std::vector<std::string> kinds;
    for (const auto& [kind, detail] : Events(name)) kinds.push_back(kind);
    return kinds;
  }
  bool HasEvent(const std::string& name, const std::string& kind) {
    const std::vector<std::string> kinds = EventKinds(name);
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  }

 private:
  void Start() {
    if (!options_.gpus.empty() && !pool_) {
      devices::GpuPoolOptions po;
      po.gpus = options_.gpus;
      po.slots_per_gpu = options_.slots_per_gpu;
      po.probe = options_.gpu_probe ? &probe_ : nullptr;
      po.release_timeout_s = options_.gpu_release_timeout_s;
      std::map<pid_t, pid_t> groups = options_.process_groups;
      po.process_group_of = [groups](pid_t pid) {
        auto it = groups.find(pid);
        return it == groups.end() ? pid_t{-1} : it->second;
      };
      pool_ = std::make_unique<devices::GpuPool>(po);
    }
    daemon::SchedulerOptions so;
    so.storage = storage_.get();
    so.launcher = launcher_.get();
    so.clock = clock_;
    so.state_dir = options_.state_dir;
    so.max_workers = options_.max_workers;
    so.base_env = options_.base_env;
    so.log_head_bytes = options_.log_head_bytes;
    so.log_tail_bytes = options_.log_tail_bytes;
    uint64_t seed = options_.drawn_seed;
    so.seed_source = [seed] { return seed; };
    so.make_pruner = options_.make_pruner;
    so.gpus = pool_.get();
    so.node_timeout_s = options_.node_timeout_s;
    so.check_executor = options_.check_executor;
    so.post = options_.post;
    so.make_sampler = options_.make_sampler;
    so.trial_write_storage = options_.trial_write_storage;
    if (options_.inline_reads) {
      // A scheduler's completions are its own: a new one never runs an older one's.
      reads_ = std::make_shared<InlineStorageReads>(
          reads_storage_ != nullptr ? static_cast<storage::Storage*>(reads_storage_.get())
                                    : storage_.get());
      so.storage_reads = reads_;
    }
    so.leftovers = &leftovers_;
    so.wake_after = [this](double delay_s) { wakes_.push_back(delay_s); };
    so.env = &env_;
    scheduler_ = std::make_unique<daemon::Scheduler>(std::move(so));
  }

  SchedulerHarnessOptions options_;
  FakeClock own_clock_;
  FakeClock* clock_;
  // Declaration order is destruction order reversed: the scheduler goes before the launcher
  // whose processes it holds and the pool whose slots it holds, and all before the storage.
  std::unique_ptr<storage::Storage> storage_;
  FlakyStorage* flaky_ = nullptr;                // storage_ itself, with options.flaky
  std::unique_ptr<FlakyStorage> reads_storage_;  // with options.own_reads_connection
  std::shared_ptr<InlineStorageReads> reads_;    // with options.inline_reads
  FakeLeftovers leftovers_;
  FakeGpuProbe probe_{4};
  std::unique_ptr<devices::GpuPool> pool_;
  std::unique_ptr<FakeLauncher> launcher_ = std::make_unique<FakeLauncher>();
  // The real file system, with the daemon's own rights: the submitters the tests name need no
  // passwd entry (admission_test.cc and run_as_test.cc check the submitter's pass).
  class OwnRightsEnv final : public daemon::SchedulerEnv {
   public:
    common::Status CheckWorkdir(const config::ObjectiveConfig& o, const std::string& w) override {
      return real_->CheckWorkdir(o, w);
    }
    common::Status PrepareObjective(config::SweepSpec& s, const std::string& t,
                                    const std::string& w,
                                    const std::vector<std::string>& e) override {
      return real_->PrepareObjective(s, t, w, e);
    }
    common::Result<std::string> FindExecutable(const std::string& n, const std::string& p,
                                               const std::string& w) override {
      return real_->FindExecutable(n, p, w);
    }
    std::optional<common::Status> AsSubmitter(const model::Submitter&,
                                              const std::function<common::Status()>&) override {
      if (before_submit_check) before_submit_check();
      return std::nullopt;
    }
    // Called first by every submit's checks (from whichever thread admits it); set before
    // anything submits.
    std::function<void()> before_submit_check;
    common::Result<uid_t> TrialUid(const model::Submitter& s, bool as) override {
      return real_->TrialUid(s, as);
    }
    daemon::ResumeFolder FindResumeFolder(const std::string& d, const std::string& s, int n,
                                          uid_t u) override {
      return real_->FindResumeFolder(d, s, n, u);
    }
    common::Status RemoveTree(const std::string& p) override { return real_->RemoveTree(p); }
    void ReturnFreedMemory() override { real_->ReturnFreedMemory(); }

   private:
    std::unique_ptr<daemon::SchedulerEnv> real_ = daemon::SystemSchedulerEnv();
  };
  OwnRightsEnv env_;
  std::unique_ptr<daemon::Scheduler> scheduler_;
  std::vector<double> wakes_;
};

// Completes live trials of `study` (all studies when empty), oldest first, until none is left;
// `value` gives each trial's objective from its number. Checks `max_live` after every exit.
inline void CompleteAll(
    SchedulerHarness& h, const std::string& study, int max_live,
    const std::function<double(int)>& value = [](int n) { return n * 0.5; }) {
  FakeLauncher& l = h.launcher();
  for (int guard = 0; !l.Live(study).empty(); ++guard) {
    REQUIRE(guard < 1000);
    FakeLauncher::Launched& t = *l.Live(study).front();
    h.clock().Advance(1);
    l.Complete(t, value(t.trial));
    CHECK(l.live_count() <= max_live);
  }
}

// The `i`-th oldest live process of `study` (of any study when empty); fails the test, rather
// than crash it, when there is none.
inline FakeLauncher::Launched& LiveAt(FakeLauncher& l, const std::string& study, size_t i = 0) {
  std::vector<FakeLauncher::Launched*> live = l.Live(study);
  INFO("live processes of study \"" << study << "\": " << live.size());
  REQUIRE(i < live.size());
  return *live[i];
}

inline std::string Describe(const model::TrialRecord& t) {
  return "trial " + std::to_string(t.number) + " " + model::TrialStateName(t.state) + " (" +
         t.fail.reason + ": " + t.fail.detail + ")";
}

inline std::map<std::string, double> InternalParams(const model::TrialRecord& t) {
  std::map<std::string, double> out;
  for (const auto& [name, p] : t.params) out[name] = p.internal;
  return out;
}

// Counts the events of `kind`.
inline int CountEvents(const std::vector<std::pair<std::string, std::string>>& events,
                       const std::string& kind) {
  return static_cast<int>(
      std::count_if(events.begin(), events.end(), [&](const auto& e) { return e.first == kind; }));
}

// SQLite options for node `node` on the shared file at `path` (SqliteOptions::shared), its
// instance named after it.
inline storage::SqliteOptions SharedFileOptions(const std::string& path, const std::string& node) {
  storage::SqliteOptions so;
  so.path = path;
  so.node = node;
  so.instance = node + "-host:/srv/triald";
  so.shared = true;
  return so;
}

// Several nodes on one shared storage file, with one clock.
class SchedulerCluster {
 public:
  static constexpr double kNodeTimeout = 30;

  // `own_reads_connections`: each node's reads off the loop on a connection of their own
  // (SchedulerHarnessOptions::own_reads_connection).
  explicit SchedulerCluster(const std::vector<std::string>& names,
                            bool own_reads_connections = false) {
    for (const std::string& name : names) {
      common::Status st = AddNode(name, name + "-host:/srv/triald", own_reads_connections);
      INFO(st.ToString());
      REQUIRE(st.ok());
    }
  }

  // Starts one more node (its scheduler's Recover); kept only when that succeeds.
  // `own_reads_connection`: SchedulerHarnessOptions::own_reads_connection.
  common::Status AddNode(const std::string& name, const std::string& instance,
                         bool own_reads_connection = false) {
    SchedulerHarnessOptions o;
    storage::SqliteOptions so = SharedFileOptions(dir_.path() + "/shared.db", name);
    so.instance = instance;
    o.sqlite = so;
    o.flaky = true;
    o.clock = &clock_;
    o.state_dir = StateDir(name);
    o.max_workers = 8;
    o.base_env = {"PATH=/usr/bin:/bin"};
    o.drawn_seed = 11;
    o.node_timeout_s = kNodeTimeout;
    o.inline_reads = true;  // as the daemon on PostgreSQL
    o.own_reads_connection = own_reads_connection;
    auto node = std::make_unique<SchedulerHarness>(std::move(o));
    common::Status st = node->scheduler().Recover();
    if (st.ok()) nodes_.push_back(std::move(node));
    return st;
  }

  // A connection of its own to the shared file as node `name` (as a daemon's servers' reads
  // have: control/read_thread.h).
  std::unique_ptr<storage::Storage> Connect(const std::string& name) {
    auto opened = storage::OpenSqliteStorage(SharedFileOptions(dir_.path() + "/shared.db", name));
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    return std::move(opened).value();
  }

  SchedulerHarness& operator[](size_t i) { return *nodes_.at(i); }
  // The state directory of node `name` (its trial folders).
  std::string StateDir(const std::string& name) const { return dir_.path() + "/" + name; }
  size_t size() const { return nodes_.size(); }
  FakeClock& clock() { return clock_; }

  // Every node ticks, as their heartbeat timers would (SchedulerHarness::Tick).
  void TickAll() {
    for (auto& n : nodes_) n->Tick();
  }

  model::StudyRecord Study(const std::string& name) { return nodes_.at(0)->Study(name); }
  std::vector<model::TrialRecord> Trials(const std::string& name) {
    return nodes_.at(0)->Trials(name);
  }

  // Completes live trials on every node, round-robin, with a tick after each round, until none
  // is left anywhere. Returns how many processes each node ran.
  std::map<std::string, int> RunToEnd() {
    for (int guard = 0;; ++guard) {
      REQUIRE(guard < 2000);
      bool any = false;
      for (auto& n : nodes_) {
        std::vector<FakeLauncher::Launched*> live = n->launcher().Live();
        if (live.empty()) continue;
        any = true;
        clock_.Advance(1);
        n->launcher().Complete(*live.front(), live.front()->trial * 0.25);
      }
      TickAll();
      if (!any) break;
    }
    std::map<std::string, int> ran;
    for (auto& n : nodes_) ran[n->node()] = static_cast<int>(n->launcher().launch_count());
    return ran;
  }

 private:
  TempDir dir_;
  FakeClock clock_;
  std::vector<std::unique_ptr<SchedulerHarness>> nodes_;
};

}  // namespace triald::testing

// The names every scheduler test (scheduler_*_test.cc) uses, declared once: the tests live in
// triald::daemon and read as the scheduler's own code does.
namespace triald::daemon {
using common::Code;
using launcher::StopReason;
using model::StudyRecord;
using model::StudyState;
using model::TrialRecord;
using model::TrialState;
using testing::CompleteAll;
using testing::CountEvents;
using testing::Describe;
using testing::FakeLauncher;
using testing::InternalParams;
using testing::kDefaultSpace;
using testing::kSweepDir;
using testing::LiveAt;
using testing::SchedulerHarness;
using testing::SchedulerHarnessOptions;
using testing::ScriptedPruner;
using testing::Sweep;
using Launched = FakeLauncher::Launched;
}  // namespace triald::daemon
