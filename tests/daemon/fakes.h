#pragma once
// Test doubles for the scheduler's seams: FakeClock (settable time), FakeLauncher (records
// every launch, forks nothing, and lets a test play the part of each trial process),
// ScriptedPruner (decides by a test's rule and records what it was shown), FakeGpuProbe (a
// GPU driver whose per-process memory a test sets) and FakeLeftovers (records what recovery
// asked to kill, and kills nothing). tests/daemon/scheduler_harness.h builds a scheduler on them.
//
// FakeLauncher keeps everything it knows about a launch (spec, callbacks, stop requests) in its
// own table, not in the TrialProcess it hands out: the scheduler destroys that TrialProcess
// inside on_exit, exactly as it does with the real launcher, so nothing here touches a process
// object after delivering on_exit. The launcher must outlive every TrialProcess it returned
// (declare it before the Scheduler that uses it).
//
// Misuse by a test (a message or exit after on_exit, an exit for a process the scheduler already
// destroyed) throws std::logic_error, which Catch reports as a failure.
//
// Thread-safety: none; like the real objects, used from one thread.

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/process_util.h"
#include "common/status.h"
#include "daemon/devices/gpu_probe.h"
#include "daemon/launcher/launcher.h"
#include "daemon/model/records.h"
#include "daemon/pruner/pruner.h"
#include "daemon/scheduler/leftover_processes.h"
#include "proto/report.h"

namespace triald::testing {

class FakeClock final : public common::Clock {
 public:
  double WallSeconds() const override { return wall_; }
  double MonotonicSeconds() const override { return monotonic_; }

  void SetWall(double seconds) { wall_ = seconds; }
  void SetMonotonic(double seconds) { monotonic_ = seconds; }
  // Moves both clocks forward.
  void Advance(double seconds) {
    wall_ += seconds;
    monotonic_ += seconds;
  }

 private:
  double wall_ = 1'700'000'000.0;
  double monotonic_ = 5'000.0;
};

// "KEY=VALUE" entries as a map; a key given twice keeps its last value (see DuplicateEnvKeys).
inline std::map<std::string, std::string> EnvMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      out[kv] = "";
    } else {
      out[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return out;
}

// Keys that appear more than once in an environment (execve would pass both; which one a
// program sees depends on its libc).
inline std::vector<std::string> DuplicateEnvKeys(const std::vector<std::string>& env) {
  std::map<std::string, int> count;
  for (const std::string& kv : env) ++count[kv.substr(0, kv.find('='))];
  std::vector<std::string> dups;
  for (const auto& [k, n] : count) {
    if (n > 1) dups.push_back(k);
  }
  return dups;
}

class FakeLauncher final : public launcher::Launcher {
 public:
  // Everything known about one launch. Addresses are stable for the launcher's life.
  struct Launched {
    size_t index = 0;  // launch order, from 0
    launcher::LaunchSpec spec;
    launcher::TrialCallbacks callbacks;
    model::ProcessIdentity identity;
    std::string study;                                 // TRIALD_STUDY of the spec
    int trial = -1;                                    // TRIALD_TRIAL of the spec
    std::vector<launcher::StopReason> stops;           // every Stop() the scheduler made, in order
    std::vector<std::string> answers;                  // every Answer() line, in order
    std::vector<launcher::StopReason> deferred_stops;  // every StopAfterGrace(), in order
    std::string protocol_error;                        // the first FailProtocol() message
    model::ProcessIdentity pending_identity;           // async_start: the identity Start() gives
    bool exited = false;                               // on_exit was delivered
    bool started = true;     // with async_start: false until Start() (or never, NeverStarted())
    bool destroyed = false;  // the scheduler destroyed its TrialProcess

    bool live() const { return !exited && !destroyed; }
    std::map<std::string, std::string> env() const { return EnvMap(spec.env); }
  };

  // Pids and process groups far above any pid_max: they name no real process, should one ever
  // reach a real signal or /proc read (the scheduler harness recovers through FakeLeftovers,
  // which signals nothing).
  static constexpr pid_t kFirstFakePid = 50'000'000;
  // The first pid this launcher hands out (launchers of different nodes can be told apart).
  pid_t first_pid = kFirstFakePid;

  launcher::LaunchResult Launch(const launcher::LaunchSpec& spec,
                                launcher::TrialCallbacks callbacks) override {
    auto launch = std::make_unique<Launched>();
    launch->index = launches_.size();
    launch->spec = spec;
    launch->callbacks = std::move(callbacks);
    std::map<std::string, std::string> env = EnvMap(spec.env);
    launch->study = env["TRIALD_STUDY"];
    launch->trial = env.count("TRIALD_TRIAL") ? std::stoi(env["TRIALD_TRIAL"]) : -1;
    if (fail_all_ || fail_next_) {
      std::string message = fail_message_;
      fail_next_ = false;
      failed_.push_back(spec);
      return launcher::LaunchResult(common::IoError(message), fail_error_);
    }
    const pid_t pid = first_pid + static_cast<pid_t>(launches_.size());
    launch->identity = model::ProcessIdentity{pid, pid, 1'000'000u + launches_.size()};
    if (async_start) {
      // As a fork server's start: no process yet; Start() gives it this identity.
      launch->pending_identity = launch->identity;
      launch->identity = {};
      launch->started = false;
    }
    Launched* raw = launch.get();
    launches_.push_back(std::move(launch));
    max_live_ = std::max(max_live_, live_count());
    max_live_by_study_[raw->study] =
        std::max(max_live_by_study_[raw->study], live_count(raw->study));
    return std::unique_ptr<launcher::TrialProcess>(new Process(raw));
  }

  // The next Launch() (only that one) fails with `message` and `error`, as a failed vfork+exec
  // would.
  void FailNextLaunch(std::string message = "exec /bin/true: Permission denied",
                      launcher::SpawnError error = {launcher::SpawnStep::kExec, EACCES}) {
    fail_next_ = true;
    fail_message_ = std::move(message);
    fail_error_ = error;
  }
  // Every Launch() from now on fails, until StopFailing().
  void FailAllLaunches(std::string message = "fork: Resource temporarily unavailable",
                       launcher::SpawnError error = {launcher::SpawnStep::kFork, EAGAIN}) {
    fail_all_ = true;
    fail_message_ = std::move(message);
    fail_error_ = error;
  }
  void StopFailing() {
    fail_all_ = false;
    fail_next_ = false;
  }

  // Launches return processes that are not started yet (as a fork server's): the test starts
  // each with Start() or ends it with NeverStarted().
  bool async_start = false;

  // ---- Fork servers ----
  std::vector<std::string> released;  // ReleaseForkServer() keys, in order
  int released_all = 0;               // ReleaseAllForkServers() calls
  std::map<std::string, launcher::ForkServerStatus> fork_status;  // what fork_server_status says
  std::function<void(const launcher::ForkServerEvent&)> fork_listener;
  void SetForkServerListener(std::function<void(const launcher::ForkServerEvent&)> l) override {
    fork_listener = std::move(l);
  }
  void ReleaseForkServer(const std::string& key) override { released.push_back(key); }
  void ReleaseAllForkServers() override { ++released_all; }
  std::optional<launcher::ForkServerStatus> fork_server_status(
      const std::string& key) const override {
    auto it = fork_status.find(key);
    if (it == fork_status.end()) return std::nullopt;
    return it->second;
  }
  // Plays the launcher telling the scheduler about a fork server.
  void ForkEvent(const std::string& key, launcher::ForkServerEvent::Kind kind,
                 const std::string& detail) {
    if (!fork_listener) throw std::logic_error("no fork server listener");
    fork_listener(launcher::ForkServerEvent{key, kind, detail});
  }

  // Successful launches, in order.
  size_t launch_count() const { return launches_.size(); }
  Launched& launch(size_t i) { return *launches_.at(i); }
  // Specs of the launches that failed.
  const std::vector<launcher::LaunchSpec>& failed() const { return failed_; }

  // The latest launch of trial `number` of `study`; nullptr when there was none.
  Launched* Find(const std::string& study, int number) {
    for (auto it = launches_.rbegin(); it != launches_.rend(); ++it) {
      if ((*it)->study == study && (*it)->trial == number) return it->get();
    }
    return nullptr;
  }

  // Launches whose process has not exited (nor been destroyed), oldest first.
  std::vector<Launched*> Live(const std::string& study = "") {
    std::vector<Launched*> out;
    for (auto& l : launches_) {
      if (l->live() && (study.empty() || l->study == study)) out.push_back(l.get());
    }
    return out;
  }
  int live_count(const std::string& study = "") { return static_cast<int>(Live(study).size()); }
  // The most processes alive at once, measured at every launch.
  int max_live() const { return max_live_; }
  int max_live(const std::string& study) const {
    auto it = max_live_by_study_.find(study);
    return it == max_live_by_study_.end() ? 0 : it->second;
  }

  // ---- Playing the trial process ----

  // An async_start launch starts: on_started with its identity.
  void Start(Launched& l) {
    if (!l.live() || l.started) throw std::logic_error("Start() of a trial that is not starting");
    l.started = true;
    l.identity = l.pending_identity;
    auto on_started = l.callbacks.on_started;
    if (!on_started) throw std::logic_error("the scheduler gave no on_started");
    on_started(l.identity);
  }
  // An async_start launch fails before it started (the fork server died, ...), or its start is
  // called off after a Stop(): on_exit with never_started (the first stop reason, if any).
  void NeverStarted(Launched& l, std::string message = "the fork server exited (killed by SIGKILL)",
                    launcher::SpawnError error = {launcher::SpawnStep::kFork, EAGAIN}) {
    if (!l.live() || l.started) {
      throw std::logic_error("NeverStarted() of a trial that is not starting");
    }
    launcher::ProcessOutcome o;
    o.never_started = true;
    o.spawn_error = error;
    o.spawn_message = std::move(message);
    if (!l.stops.empty()) o.stop_reason = l.stops.front();
    l.exited = true;
    auto on_exit = l.callbacks.on_exit;
    on_exit(o);
  }

  void Message(Launched& l, const proto::ReportMessage& m) {
    if (!l.live()) throw std::logic_error("message to a trial process that is over");
    auto on_message = l.callbacks.on_message;
    on_message(m);
  }
  void Report(Launched& l, int64_t step, double value) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kReport;
    m.step = step;
    m.value = value;
    Message(l, m);
  }
  void Final(Launched& l, double value) { FinalValues(l, {value}); }
  void FinalValues(Launched& l, std::vector<double> values) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kFinal;
    m.value = values.empty() ? 0 : values.front();
    m.values = std::move(values);
    Message(l, m);
  }
  void Constraints(Launched& l, std::vector<double> values) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kConstraints;
    m.values = std::move(values);
    Message(l, m);
  }
  void Attr(Launched& l, const std::string& key, const std::string& json_value) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kAttr;
    m.key = key;
    m.json_value = json_value;
    Message(l, m);
  }
  void Suggest(Launched& l, const std::string& name, const proto::SuggestDistribution& d) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kSuggest;
    m.name = name;
    m.distribution = d;
    Message(l, m);
  }
  void ShouldPrune(Launched& l) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kShouldPrune;
    Message(l, m);
  }
  void Pruned(Launched& l) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kPruned;
    Message(l, m);
  }
  void Error(Launched& l, const std::string& message) {
    proto::ReportMessage m;
    m.type = proto::ReportType::kError;
    m.message = message;
    Message(l, m);
  }

  // Delivers on_exit. As the real launcher does, the outcome carries the first reason the
  // scheduler gave to Stop() (and the first FailProtocol() message), unless `outcome` names a
  // stop reason (a protocol error) itself. The scheduler may
  // destroy the TrialProcess and launch others from inside on_exit; nothing here touches the
  // process afterwards.
  void Exit(Launched& l, launcher::ProcessOutcome outcome) {
    if (!l.live()) throw std::logic_error("on_exit for a trial process that is over");
    if (outcome.stop_reason == launcher::StopReason::kNone && !l.stops.empty()) {
      outcome.stop_reason = l.stops.front();
    }
    if (outcome.protocol_error.empty()) outcome.protocol_error = l.protocol_error;
    l.exited = true;
    auto on_exit = l.callbacks.on_exit;
    on_exit(outcome);
  }
  void ExitCode(Launched& l, int code, std::string stderr_tail = "") {
    launcher::ProcessOutcome o;
    o.exit.code = code;
    o.stderr_tail = std::move(stderr_tail);
    Exit(l, o);
  }
  void ExitSignal(Launched& l, int signal, bool core_dumped = false) {
    launcher::ProcessOutcome o;
    o.exit.signaled = true;
    o.exit.signal = signal;
    o.exit.core_dumped = core_dumped;
    Exit(l, o);
  }
  // The worker reports `value` as its final line and exits 0.
  void Complete(Launched& l, double value) {
    Final(l, value);
    ExitCode(l, 0);
  }

 private:
  class Process final : public launcher::TrialProcess {
   public:
    explicit Process(Launched* launch) : launch_(launch) {}
    ~Process() override { launch_->destroyed = true; }
    const model::ProcessIdentity& identity() const override { return launch_->identity; }
    bool started() const override { return launch_->started; }
    void Stop(launcher::StopReason reason) override { launch_->stops.push_back(reason); }
    void StopAfterGrace(launcher::StopReason reason) override {
      launch_->deferred_stops.push_back(reason);
    }
    void Answer(const std::string& line) override { launch_->answers.push_back(line); }
    void FailProtocol(const std::string& message) override {
      if (launch_->protocol_error.empty()) launch_->protocol_error = message;
      launch_->stops.push_back(launcher::StopReason::kProtocol);
    }

   private:
    Launched* launch_;  // owned by the FakeLauncher
  };

  std::vector<std::unique_ptr<Launched>> launches_;
  std::vector<launcher::LaunchSpec> failed_;
  bool fail_next_ = false;
  bool fail_all_ = false;
  std::string fail_message_;
  launcher::SpawnError fail_error_;
  int max_live_ = 0;
  std::map<std::string, int> max_live_by_study_;
};

// A pruner that answers with `rule` and remembers every question (copies, so a test can check
// what the scheduler showed it at that moment). The scheduler owns the pruner; the test keeps
// the shared record.
class ScriptedPruner final : public pruner::Pruner {
 public:
  struct Question {
    std::string study;
    int number = -1;                         // the trial that reported
    std::map<int64_t, double> intermediate;  // its values at that moment
    size_t study_trials = 0;                 // how many trials the context held
    bool answer = false;
  };
  using Rule = std::function<bool(const pruner::PruneContext&)>;

  ScriptedPruner(Rule rule, std::shared_ptr<std::vector<Question>> log)
      : rule_(std::move(rule)), log_(std::move(log)) {}

  bool ShouldPrune(const pruner::PruneContext& context) override {
    Question q;
    q.study = std::string(context.study_name);
    q.number = context.trial->number;
    q.intermediate = context.trial->intermediate;
    q.study_trials = context.trials->size();
    q.answer = rule_(context);
    log_->push_back(q);
    return q.answer;
  }

 private:
  Rule rule_;
  std::shared_ptr<std::vector<Question>> log_;
};

// A GPU driver: `gpus` devices, and whatever memory per process the test says they hold.
class FakeGpuProbe final : public devices::GpuProbe {
 public:
  explicit FakeGpuProbe(int gpus) : gpus_(gpus) {}

  // `pid` holds `bytes` on `gpu` from now on; 0 bytes: it holds nothing.
  void Hold(int gpu, pid_t pid, uint64_t bytes) {
    if (bytes == 0) {
      held_[gpu].erase(pid);
    } else {
      held_[gpu][pid] = bytes;
    }
  }
  // Every query fails with `message` ("" : answers again).
  void Fail(std::string message) { failure_ = std::move(message); }
  int queries() const { return queries_; }

  common::Result<std::vector<devices::GpuInfo>> Gpus() override {
    if (!failure_.empty()) return common::Unavailable(failure_);
    std::vector<devices::GpuInfo> out;
    for (int i = 0; i < gpus_; ++i) {
      out.push_back({i, "GPU-test-" + std::to_string(i), "Test GPU", 1ULL << 34, 0});
    }
    return out;
  }
  common::Result<devices::ProcessMemory> Processes(int index) override {
    ++queries_;
    if (!failure_.empty()) return common::Unavailable(failure_);
    if (index < 0 || index >= gpus_)
      return common::InvalidArgument("no GPU " + std::to_string(index));
    return held_[index];
  }
  std::string Describe() const override { return "fake GPU probe"; }

 private:
  int gpus_;
  std::map<int, devices::ProcessMemory> held_;
  std::string failure_;
  int queries_ = 0;
};

// Stands in for the /proc scan at recovery: records each request, signals nothing, and reports
// `found` processes.
class FakeLeftovers final : public daemon::LeftoverProcesses {
 public:
  struct Request {
    std::string state_dir;
    std::vector<model::ProcessIdentity> lost;
  };
  int Kill(const std::string& state_dir, const std::vector<model::ProcessIdentity>& lost) override {
    requests.push_back({state_dir, lost});
    return found;
  }
  std::vector<Request> requests;
  int found = 0;
};

}  // namespace triald::testing
