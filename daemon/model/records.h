#pragma once
// The records the daemon keeps about studies and trials. Plain values shared by storage,
// samplers, pruners and the scheduler; no behaviour beyond small helpers.
//
// Thread-safety: plain values.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/space.h"
#include "config/sweep.h"

namespace triald::model {

// FAILED: the study could not go on (its sampler failed, or storage refused its new trials);
// the reason is its study_failed event.
enum class StudyState { kRunning, kComplete, kCancelled, kFailed };
enum class TrialState { kWaiting, kRunning, kComplete, kPruned, kFail };

const char* StudyStateName(StudyState s);  // "RUNNING", "COMPLETE", "CANCELLED", "FAILED"
const char* TrialStateName(TrialState s);  // "WAITING", "RUNNING", "COMPLETE", "PRUNED", "FAIL"
std::optional<StudyState> ParseStudyState(const std::string& s);
std::optional<TrialState> ParseTrialState(const std::string& s);
inline bool IsFinished(TrialState s) {
  return s == TrialState::kComplete || s == TrialState::kPruned || s == TrialState::kFail;
}

// Who submitted a study: the uid the kernel reported for the control-socket client
// (SO_PEERCRED) and its passwd name at submit time. uid -1: unknown (a study stored before
// submitters were recorded, or created without a client, as tests do). Only the submitter,
// triald's own uid and root may change a study (daemon/README.md, "Security"); a root daemon
// runs its trials as the submitter.
struct Submitter {
  int64_t uid = -1;
  std::string name;  // "" when the uid had no passwd entry
  bool known() const { return uid >= 0; }
};

struct NewStudy {
  std::string name;
  config::Direction direction = config::Direction::kMinimize;  // directions[0]
  // One per objective (a multi-objective study has two or more). Empty is read as {direction}.
  std::vector<config::Direction> directions;
  int n_trials = 0;
  std::string spec_toml;  // the sweep file as submitted; re-parsed after a restart
  std::string spec_path;  // where it came from (absolute), for messages and relative paths
  uint64_t seed = 0;      // the sampler seed actually used
  Submitter submitter;
  // Chosen at submit outside the file (--name, the submitter's interpreter); re-parsed with
  // spec_toml after a restart (config::SweepSource::submit).
  config::SubmitChoices submit;
};

struct StudyRecord {
  int64_t id = 0;
  std::string name;
  config::Direction direction = config::Direction::kMinimize;  // directions[0]
  std::vector<config::Direction> directions;                   // one per objective; >= 1
  int n_trials = 0;
  StudyState state = StudyState::kRunning;
  std::string spec_toml;
  std::string spec_path;
  uint64_t seed = 0;
  double created_at = 0;   // unix seconds
  double finished_at = 0;  // 0 while running
  Submitter submitter;
  // Control after submit (trialctl pause, set): a paused study starts no trial (its state stays
  // RUNNING; running trials go on); parallelism > 0 replaces the sweep's [study] parallelism,
  // 0 keeps it. n_trials above is the current total (trialctl extend raises it).
  bool paused = false;
  int parallelism = 0;
  config::SubmitChoices submit;  // as NewStudy::submit
};

// One parameter value with the distribution it was drawn from (as Optuna stores it).
struct ParamValue {
  double internal = 0;
  config::Distribution dist;
};
using ParamMap = std::map<std::string, ParamValue>;

// Why a trial failed. `reason` is one of:
//   exit (exit_code), signal (signal, core_dumped), timeout, oom, protocol, spawn, lost,
//   cancelled, shutdown
struct FailInfo {
  std::string reason;
  int exit_code = -1;
  int signal = 0;
  bool core_dumped = false;
  std::string detail;       // human-readable account ("killed by SIGSEGV (core dumped)")
  std::string stderr_tail;  // last few KiB of the worker's stderr
};

// A failure in one line, for tables and tallies: the exception's last line when the worker sent
// a traceback ("ValueError: lr must be positive"), else the detail's own line ("killed by
// SIGSEGV", "exited with code 3", "ran past trial_timeout (60 s)"), without the "exited with
// code N; worker said:" preamble; at most kFailSummaryChars (then cut with "..."). Works on the
// tail of a detail too (ReadModel::GetRecentFailures reads only the end).
inline constexpr size_t kFailSummaryChars = 200;
std::string FailSummary(const FailInfo& fail);
// What makes two failures "the same way" ([study] max_failures_in_a_row): the reason and the
// summary with its numbers masked ("ValueError: lr # is too large" for lr 3 and lr 7).
std::string FailKey(const FailInfo& fail);

// Identifies a running process across daemon restarts: the start time (clock ticks since boot,
// field 22 of /proc/PID/stat) tells a reused pid from the trial's own.
struct ProcessIdentity {
  pid_t pid = 0;
  pid_t pgid = 0;
  uint64_t start_time = 0;
};

// What a trial consumed, measured by the daemon for its whole process tree (no user code is
// involved). A field that could not be measured is unset. Sources (recorded with the values):
//   memory_source  "cgroup2 memory.peak"                 the trial's cgroup v2 leaf (exact)
//                  "cgroup1 memory.max_usage_in_bytes"   a parallel v1 memory leaf (exact)
//                  "getrusage ru_maxrss"                 the largest single process of the main
//                                                        process and the descendants it waited
//                                                        for (a lower bound for a tree)
//   cpu_source     "cgroup2 cpu.stat"                    usage_usec of the leaf (exact)
//                  "getrusage"                           user + system of the main process and
//                                                        the descendants it waited for
// peak_gpu_memory_bytes: trials on GPU slots only; the largest sum, over the trial's
// processes, of the memory NVML shows them holding, sampled at the daemon's GPU sample
// interval and once more when the trial ends.
struct TrialResources {
  std::optional<uint64_t> peak_memory_bytes;
  std::string memory_source;  // "" when peak_memory_bytes is unset
  std::optional<uint64_t> peak_gpu_memory_bytes;
  std::optional<double> cpu_time_s;
  std::string cpu_source;        // "" when cpu_time_s is unset
  std::optional<double> wall_s;  // from the start of the main process to the end of the tree

  bool empty() const {
    return !peak_memory_bytes && !peak_gpu_memory_bytes && !cpu_time_s && !wall_s;
  }
  bool operator==(const TrialResources& o) const {
    return peak_memory_bytes == o.peak_memory_bytes && memory_source == o.memory_source &&
           peak_gpu_memory_bytes == o.peak_gpu_memory_bytes && cpu_time_s == o.cpu_time_s &&
           cpu_source == o.cpu_source && wall_s == o.wall_s;
  }
};

// Whether a trial attribute is triald's own rather than the objective's: keys starting with
// "triald." ("triald.code", "triald.slurm", "triald.enqueued"). Exports show them as system
// attributes.
inline bool IsSystemAttr(const std::string& key) { return key.rfind("triald.", 0) == 0; }

// A measured metric by the name sweep files use (config::kResourceMetrics): "peak_memory"
// (bytes), "peak_gpu_memory" (bytes), "cpu_time" (seconds), "wall" (seconds). Unset when it was
// not measured or the name is unknown.
std::optional<double> MeasuredMetric(const TrialResources& resources, const std::string& name);

struct TrialOutcome {
  TrialState state = TrialState::kFail;  // kComplete, kPruned or kFail
  std::optional<double> value;           // COMPLETE: the objective; PRUNED: last intermediate
                                         // (single-objective studies; unset with several)
  std::vector<double> values;            // COMPLETE: one per objective (single: {value})
  // As the trial reported them, then one per [study] resource_constraints entry (COMPLETE and
  // PRUNED); empty: none.
  std::vector<double> constraints;
  FailInfo fail;  // FAIL only
  // What the trial consumed (every state); unset when it never ran as a process of this daemon.
  std::optional<TrialResources> resources;
};

// Feasible as Optuna defines it: every constraint value <= 0 (no constraints: feasible).
bool Feasible(const std::vector<double>& constraints);

struct TrialRecord {
  int64_t id = 0;
  int64_t study_id = 0;
  int number = 0;  // 0-based, dense within a study
  TrialState state = TrialState::kWaiting;
  // Single-objective studies: COMPLETE, the objective; PRUNED, the last intermediate value.
  // Unset in a study with several objectives (as Optuna's trial.value).
  std::optional<double> value;
  // COMPLETE: one value per objective, in the study's order of directions; a single-objective
  // trial has {value}. Empty otherwise.
  std::vector<double> values;
  // The constraint values the trial reported (Optuna's system attr "constraints"), then one per
  // [study] resource_constraints entry; feasible when every one is <= 0. Empty: none (feasible).
  std::vector<double> constraints;
  ParamMap params;
  std::map<int64_t, double> intermediate;  // step -> value
  // Intermediate values stored but not loaded (a read that counts them instead: summaries, pages
  // of trials without curves); 0 when `intermediate` holds them all. IntermediateSteps() is the
  // trial's number of steps either way.
  int64_t intermediate_not_loaded = 0;
  std::map<std::string, std::string> attrs;  // key -> JSON text
  FailInfo fail;
  ProcessIdentity process;
  double created_at = 0;
  double started_at = 0;               // 0 until RUNNING
  double finished_at = 0;              // 0 until finished
  std::optional<int64_t> retry_of;     // trial id this one retries
  std::optional<int> retry_of_number;  // that trial's number (a retry is in the same study)
  std::string node;                    // the daemon that claimed or ran it; "" while unclaimed
  int64_t IntermediateSteps() const {
    return static_cast<int64_t>(intermediate.size()) + intermediate_not_loaded;
  }
  // What it consumed; unset while it runs and for trials stored before accounting existed.
  std::optional<TrialResources> resources;

  bool Feasible() const { return model::Feasible(constraints); }
  double DurationSeconds() const {
    if (started_at <= 0) return 0;
    return (finished_at > 0 ? finished_at : started_at) - started_at;
  }
};

// A daemon sharing the storage (see Storage::Heartbeat).
struct NodeRecord {
  std::string name;
  // Where the daemon of that name runs ("HOST:STATE_DIR"): a second daemon started with a name
  // in use elsewhere is told apart from the same daemon restarted.
  std::string instance;
  double first_beat = 0;  // unix seconds of its first heartbeat, by the storage's clock
  double last_beat = 0;   // unix seconds of its latest heartbeat
  double silent_for = 0;  // seconds since last_beat, by the same clock

  // The one liveness rule: a node silent for longer than the node timeout is dead (the
  // scheduler ends its trials; `trialctl nodes` shows it dead).
  bool AliveWithin(double node_timeout_s) const { return silent_for <= node_timeout_s; }
};

struct EventRecord {
  int64_t id = 0;
  double at = 0;
  std::optional<int64_t> study_id;
  std::optional<int64_t> trial_id;
  std::string kind;  // e.g. "study_created", "trial_started", "trial_finished", "daemon_started"
  std::string detail;
};

// The layout of a state directory's study folders, spelled here only:
//   STATE_DIR/studies/                          StudiesDir
//   STATE_DIR/studies/STUDY/                    StudyDir (removed with the study)
//   STATE_DIR/studies/STUDY/trials/NUMBER/      TrialDir
//   STATE_DIR/studies/STUDY/logs/NUMBER/        TrialLogDir
//   STATE_DIR/studies/STUDY/fork-server.log     ForkServerLog
// The *RelativeDir forms are the same paths relative to STATE_DIR, for code that opens them
// from a descriptor of the state directory, one component at a time.

// The name of the folder below STATE_DIR that holds the studies ("studies").
extern const char kStudiesFolder[];
// Where a trial's folder is: STATE_DIR/studies/STUDY/trials/NUMBER (its working files,
// TRIALD_TRIAL_DIR; the trial's to write).
std::string TrialDir(const std::string& state_dir, const std::string& study, int number);
// TrialDir relative to the state directory, as its components: {"studies", STUDY, "trials",
// NUMBER}.
std::vector<std::string> TrialDirComponents(const std::string& study, int number);
// "studies/STUDY/trials/NUMBER" and "studies/STUDY/logs/NUMBER".
std::string TrialRelativeDir(const std::string& study, int number);
std::string TrialLogRelativeDir(const std::string& study, int number);
// STATE_DIR/studies/STUDY: the study's folder, with its trial folders, logs and fork server log.
std::string StudyDir(const std::string& state_dir, const std::string& study);
// Where the daemon keeps a trial's captured stdout.log and stderr.log:
// STATE_DIR/studies/STUDY/logs/NUMBER, beside the trial folders and out of the trial's reach
// (created by the daemon, never writable by the trial), so that a trial cannot replace its logs
// with a FIFO or a link that `trialctl logs` would then follow.
std::string TrialLogDir(const std::string& state_dir, const std::string& study, int number);
// The log of the study's fork server (stdout and stderr, capped; the daemon's):
// STATE_DIR/studies/STUDY/fork-server.log.
std::string ForkServerLog(const std::string& state_dir, const std::string& study);
// STATE_DIR/studies/: every trial folder is below it.
std::string StudiesDir(const std::string& state_dir);

}  // namespace triald::model
