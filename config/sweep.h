#pragma once
// Sweep files: the TOML a user submits, parsed and validated into a SweepSpec.
//
// Every error names the file, the line and column, the key, the value given and what was
// expected, e.g.
//   quadratic.toml:7:8: [space.x] low = 5.0 is greater than high = 1.0; expected low <= high
// Parsing is pure (no I/O besides what the caller passes in), so it is safe from any thread.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/space.h"

namespace triald::config {

enum class Direction { kMinimize, kMaximize };
const char* DirectionName(Direction d);

// The largest [study] stall_timeout accepted: 7 days.
inline constexpr double kMaxStallTimeout = 7 * 24 * 3600;
// The longest duration a sweep file may give (trial_timeout, kill_grace): 365 days. Larger
// values would overflow the clocks they are converted to.
inline constexpr double kMaxSeconds = 365.0 * 24 * 3600;
inline constexpr long kMaxSecondsWhole = 365L * 24 * 3600;

// The metrics the daemon measures of every trial, by the names sweep files use:
// "peak_memory" (bytes), "peak_gpu_memory" (bytes; trials on GPU slots), "cpu_time" (seconds),
// "wall" (seconds).
const std::vector<const char*>& ResourceMetrics();
inline bool IsResourceMetric(const std::string& name) {
  for (const char* m : ResourceMetrics()) {
    if (name == m) return true;
  }
  return false;
}

// One [study] resource_constraints entry, "METRIC <= LIMIT" or "METRIC >= LIMIT". Its
// constraint value (Optuna's convention: <= 0 holds) is measured - limit for <=, limit -
// measured for >=.
struct ResourceConstraint {
  std::string metric;   // one of ResourceMetrics()
  bool at_most = true;  // "<=" (else ">=")
  double limit = 0;     // bytes for memory metrics, seconds for the others
  std::string text;     // as written, for messages
};

struct StudyConfig {
  std::string name;
  Direction direction = Direction::kMinimize;  // directions[0]
  // [study] directions = ["minimize", "maximize", ...] (two or more) for a multi-objective
  // study, or the single `direction`: after parsing always one entry per objective.
  std::vector<Direction> directions = {Direction::kMinimize};
  // [study] metric_names: one name per objective, in the order of directions (Optuna's
  // study.set_metric_names); empty: none.
  std::vector<std::string> metric_names;
  int n_trials = 0;          // >= 1
  int parallelism = 1;       // >= 1: trials of this study running at once
  double trial_timeout = 0;  // seconds; 0 = no timeout
  double kill_grace = 10.0;  // seconds between SIGTERM and SIGKILL
  // Seconds a trial may go without a line on its trial channel (report, heartbeat, attr, any
  // valid line) before it is stopped as FAIL(stalled); 0 = no stall timeout (the key absent).
  // When given: > 0 and at most kMaxStallTimeout.
  double stall_timeout = 0;
  int gpus_per_trial = 0;  // GPU slots (each on a different GPU) every trial holds; 0 = CPU
  // Retries: a trial that FAILs for a reason in retry_on is run again as a new trial with the
  // same parameters, up to `retries` times per configuration. Retries do not count toward
  // n_trials (n_trials counts configurations).
  int retries = 0;
  std::vector<std::string> retry_on;  // subset of RetryableReasons(); default kDefaultRetryOn
  // Fail-fast (daemon/scheduler/failure_streak.h): the study stops, ending FAILED, once this
  // many trials in a row (its first ones included) failed the same way; 0: never.
  int max_failures_in_a_row = 5;
  // A planned stop of triald (SIGTERM: systemctl stop or restart) loses no trial: each trial it
  // stops ends FAIL(shutdown) and a new WAITING trial with its parameters (a retry of it, which
  // resumes from its folder as retries do) runs when triald starts again; neither counts
  // against n_trials or retries. false: the FAIL(shutdown) is the trial's end (retried only by
  // retry_on = ["shutdown"]).
  bool requeue_on_shutdown = true;
  // Submitting this file again while a study of its name exists continues that study (as
  // Optuna's load_if_exists): the same space and objective are required, and the file's n_trials
  // more trials run (Scheduler::Submit). false: the name must be new (trialctl submit --resume
  // asks for the same per submission).
  bool load_if_exists = false;
  // Per-trial limits (0: none). memory_limit is written as bytes or "512M", "2G" (K/M/G/T are
  // powers of 1024): the trial cgroup's memory.max, else RLIMIT_AS; running out is FAIL(oom).
  // pids_limit: the trial cgroup's pids.max (its processes and threads), where available.
  uint64_t memory_limit = 0;
  int64_t pids_limit = 0;
  // Per-trial caps on what a trial reports (config/README.md, "Per-trial caps"): distinct steps
  // with an intermediate value; distinct attribute keys; the bytes of its attributes (keys and
  // values as stored); every byte it sends on the trial channel. Past one, the trial ends
  // FAIL(protocol) naming the cap. Each is >= 1; the daemon keeps what a trial reported in
  // memory while its study runs, so these bound that memory.
  int64_t max_intermediate_steps = 10'000;
  int64_t max_attrs = 1'000;
  uint64_t max_attr_bytes = 1u << 20;     // 1 MiB
  uint64_t max_report_bytes = 64u << 20;  // 64 MiB
  // [study] resource_constraints = ["peak_memory <= 8G", "cpu_time <= 3600"]: constraints on
  // what the daemon measured of each trial (kResourceMetrics), appended to those the objective
  // reports; a trial is feasible when all hold.
  std::vector<ResourceConstraint> resource_constraints;
  // [study] objectives = ["value", "peak_gpu_memory"]: what each direction optimizes. "value"
  // entries (the worker's own values, in the order it sends them) come first, then measured
  // metrics. Empty (the key absent): every direction is one of the worker's values.
  std::vector<std::string> objectives;

  // How many values the worker sends in its final line: the "value" entries of `objectives`,
  // or one per direction when `objectives` is empty.
  size_t worker_objectives() const;
};

// The largest values the caps above may be raised to.
inline constexpr int64_t kMaxCapSteps = 10'000'000;
inline constexpr int64_t kMaxCapAttrs = 100'000;
inline constexpr uint64_t kMaxCapAttrBytes = uint64_t{64} << 20;    // 64 MiB
inline constexpr uint64_t kMaxCapReportBytes = uint64_t{64} << 30;  // 64 GiB

// The [sampler] kinds that accept a study with several objectives ([study] directions):
// "random", "qmc", "grid", "tpe", "nsga2", "auto" (which picks TPE for them). A multi-objective
// sweep with another kind is refused.
const std::vector<const char*>& MultiObjectiveSamplerKinds();

// The FAIL reasons [study] retry_on may name: "lost", "signal", "oom", "timeout", "exit",
// "shutdown", "stalled", and where Slurm ended a trial's job "preempted", "node_failure",
// "slurm_time_limit", "slurm_oom", "slurm_cancelled" (not "protocol", "spawn" or "cancelled":
// those do not go away by running again).
const std::vector<const char*>& RetryableReasons();
// retry_on when a sweep sets retries but not retry_on.
inline const std::vector<std::string>& DefaultRetryOn() {
  // A preempted trial and one whose node failed are lost through no fault of their own.
  static const std::vector<std::string> kDefault = {"lost", "signal", "oom", "preempted",
                                                    "node_failure"};
  return kDefault;
}

// [objective] kind = "lm": fine-tune a GPT-2-family model with the built-in trial-worker.
// Paths are absolute after parsing (relative ones are resolved against the sweep file's
// folder). The hyperparameters below are the defaults for any that [space] does not tune.
struct LmObjectiveConfig {
  std::string model;               // HF-format GPT-2 folder: config.json, model.safetensors,
                                   // vocab.json, merges.txt
  std::string train_file;          // plain text
  std::string eval_file;           // plain text
  int max_steps = 100;             // optimizer steps
  int seq_len = 128;               // tokens per sequence (<= the model's n_positions)
  int eval_every = 0;              // steps between evaluations (reported as intermediate values);
                                   // 0 = only at the end
  int checkpoint_every = 0;        // steps between checkpoints in the trial folder, which a
                                   // retry resumes from; 0 = none
  std::string device = "auto";     // "auto" | "cpu" | "cuda"
  double memory_budget_gb = 0;     // refuse a trial whose planned memory exceeds this; 0 = none
  double gpu_memory_fraction = 0;  // per-process CUDA memory fraction; 0 = unlimited
  // Tunable hyperparameters and their defaults.
  double learning_rate = 5e-4;
  double weight_decay = 0.0;
  int warmup_steps = 0;
  int batch_size = 8;
  double dropout = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double grad_clip = 1.0;              // max gradient norm; 0 = no clipping
  std::string lr_schedule = "linear";  // "constant" | "linear" | "cosine"
  int64_t seed = 0;
  // `objectives = ["eval_loss", "planned_memory_bytes"]`: the metrics the worker sends as the
  // trial's values, in the order of [study] directions (LmObjectiveMetrics()); empty: the
  // evaluation loss alone, as a single-objective study has it.
  std::vector<std::string> objectives;
};

struct ObjectiveConfig {
  std::string kind = "exec";               // "exec" | "lm" | "python" | "client"
  std::vector<std::string> command;        // argv; command[0] looked up in PATH if no '/'
                                           // (kind = "lm", "python": filled in by the daemon)
  std::map<std::string, std::string> env;  // added to the worker's environment
  std::string workdir;                     // absolute after parsing; default: sweep file dir
  LmObjectiveConfig lm;                    // kind = "lm" only
  // kind = "python": a define-by-run objective, `function = "PATH.py:NAME"` (PATH relative to
  // the sweep file's folder) or `function = "package.module:NAME"` (importable from workdir or
  // PYTHONPATH), run by `python -m triald run SPEC` (daemon/objective/objective_command.h).
  std::string function;            // as written
  std::string function_file;       // PATH.py form: the file, absolute; empty for the module form
  std::string function_module;     // module form: "package.module"; empty for the file form
  std::string function_name;       // NAME
  std::string function_at;         // "PATH:L:C" of the function value, for errors found at submit
  std::string python = "python3";  // the interpreter: looked up in PATH if no '/'
  // kind = "python", optional: `constraints = "PATH.py:NAME"` (or "package.module:NAME"), a
  // function the runner calls with the finished trial (params, values, user_attrs); it returns
  // the constraint values (feasible when every one is <= 0). Resolved and checked as function.
  std::string constraints;         // as written; empty: none
  std::string constraints_file;    // PATH.py form: the file, absolute
  std::string constraints_module;  // module form: "package.module"
  std::string constraints_name;    // NAME
  std::string constraints_at;      // "PATH:L:C" of the constraints value
  // The study's fork server (daemon/README.md, "Fork server"): kind = "python" and "lm".
  // preload (python): modules the server imports once, e.g. ["torch", "numpy"] (dotted names).
  // preload_objective (python): the server also imports the objective's file once (default:
  // true when preload is given). fork_server: start each trial as a fork of that server
  // (python: default true when preload is given; lm: default false).
  std::vector<std::string> preload;
  bool preload_objective = false;
  bool fork_server = false;
  // fork_twice: the server forks each trial through a middle process instead of cloning it as
  // the daemon's child (proto/README.md, "One fork, step by step"); needs fork_server.
  bool fork_twice = false;
  // Filled in by the daemon (daemon/objective/objective_command.h) when fork_server is on: the
  // server's command, and the arguments a fork request carries (what the exec path runs after the
  // interpreter, or after trial-worker).
  std::vector<std::string> fork_server_command;
  std::vector<std::string> fork_request_argv;
  // Whether the objective suggests its own parameters as it runs (define-by-run): kind =
  // "python", and kind = "client" (a client program asks for each trial and tells its result:
  // the control verb `ask`, proto/README.md "Ask and tell"; triald starts no process).
  bool define_by_run() const { return kind == "python" || kind == "client"; }
};

// TPE as Optuna defines it (optuna.samplers.TPESampler), with Optuna's current defaults.
struct TpeConfig {
  int n_startup_trials = 10;  // random sampling before TPE takes over
  int n_ei_candidates = 24;   // candidates drawn from l(x) and ranked by l(x)/g(x)
  bool multivariate = true;   // one joint Parzen estimator over the whole space
  // With multivariate: Optuna's group decomposition. The parameters are split into groups that
  // always occur together in finished trials, and each group gets its own joint estimator, fed
  // by the trials that hold that group; so conditional branches of a define-by-run objective are
  // modelled per branch. Without it the joint estimator covers the intersection of the finished
  // trials' parameters and the rest is sampled independently.
  bool group = false;         // needs multivariate (as Optuna)
  bool constant_liar = true;  // running trials count as bad results, so parallel trials differ
  double prior_weight = 1.0;
  bool consider_endpoints = false;
  bool consider_magic_clip = true;
  int gamma_max = 25;  // gamma(n) = min(ceil(gamma_fraction * n), gamma_max)
  double gamma_fraction = 0.1;
};

// Scrambled Sobol sequence.
struct QmcConfig {
  bool scramble = true;
};

// NSGA-II as Optuna defines it (optuna.samplers.NSGAIISampler), with its defaults; uniform
// crossover (Optuna's default crossover).
struct Nsga2Config {
  int population_size = 50;             // trials per generation, >= 2
  std::optional<double> mutation_prob;  // unset: 1 / number of parameters
  double crossover_prob = 0.9;
  double swapping_prob = 0.5;
};

// CMA-ES as Optuna defines it (optuna.samplers.CmaEsSampler), with Optuna's defaults.
struct CmaesConfig {
  int n_startup_trials = 1;  // independent sampling until this many trials have finished
  double sigma0 = 0;         // 0: min over the parameters of (high - low) / 6, transformed space
  int popsize = 0;           // 0: 4 + floor(3 ln n); the first population under "ipop"
  std::string restart_strategy;         // "" (none) or "ipop"
  int inc_popsize = 2;                  // "ipop": population multiplier at each restart
  bool consider_pruned_trials = false;  // PRUNED trials count, valued at their last report
  // Initial mean by parameter name (internal values of numeric parameters); a parameter not
  // named starts at the centre of its range.
  std::map<std::string, double> x0;
};

// Gaussian-process Bayesian optimisation as Optuna's GPSampler does it
// (daemon/sampler/gp_sampler.h).
struct GpConfig {
  int n_startup_trials = 10;             // quasi-random (QMC) trials before the GP takes over
  bool deterministic_objective = false;  // no observation noise is fitted
};

struct SamplerConfig {
  // "random" | "grid" | "tpe" | "qmc" | "nsga2" | "cmaes" | "gp" | "auto" ("auto" becomes "gp"
  // or "tpe" when the study is loaded: daemon/sampler/auto_sampler.h)
  std::string kind = "random";
  uint64_t seed = 0;
  bool seed_given = false;  // when false the daemon draws a seed and stores it
  TpeConfig tpe;            // kind = "tpe"
  QmcConfig qmc;            // kind = "qmc"
  Nsga2Config nsga2;        // kind = "nsga2"
  CmaesConfig cmaes;        // kind = "cmaes"
  GpConfig gp;              // kind = "gp"
};

// Pruners as Optuna defines them. Only the options of the chosen kind may appear in the file.
struct PrunerConfig {
  std::string kind = "nop";  // "nop" | "median" | "percentile" | "asha" | "hyperband" |
                             // "threshold" | "patient" | "wilcoxon"
  // median, percentile
  int n_startup_trials = 5;  // no pruning until this many trials have finished
  int n_warmup_steps = 0;    // no pruning of a trial before this step
  int interval_steps = 1;    // check every this many steps after warm-up
  int n_min_trials = 1;      // fewer trials reported at a step than this: no pruning
  double percentile = 50;    // percentile only (median is percentile 50), in (0, 100)
  // asha (successive halving), hyperband
  int min_resource = 1;  // "auto" is not supported: give a number of steps
  int reduction_factor = 3;
  int min_early_stopping_rate = 0;  // asha only
  int max_resource = 0;     // hyperband: steps of a full trial; 0 = the study's max step seen
  int bootstrap_count = 0;  // asha only
  // threshold (also n_warmup_steps and interval_steps above): at least one of lower and upper
  std::optional<double> lower;  // prune when the latest value is below it
  std::optional<double> upper;  // prune when the latest value is above it
  // patient: `wrapped` decides once the trial has not improved (by more than min_delta) for
  // `patience` steps; no wrapped pruner prunes then.
  int patience = -1;  // required (>= 0); -1 until parsed
  double min_delta = 0;
  std::shared_ptr<const PrunerConfig> wrapped;  // [pruner.wrapped]; null: none
  // wilcoxon
  double p_threshold = 0.1;  // [0, 1]
  int n_startup_steps = 2;   // steps in common with the best trial before any test
};

// [executor]: where a study's trials run (daemon/README.md, "Running on Slurm").
struct SlurmExecutorConfig {
  // Slurm's own names; empty: Slurm's default (the default partition, the user's default
  // account and QOS, no constraint).
  std::string partition;
  std::string account;
  std::string qos;
  std::string constraint;
  // The job's time limit in seconds (Slurm counts whole minutes: rounded up). 0: [study]
  // trial_timeout plus kill_grace when the study has a trial_timeout, else the partition's.
  double time_limit = 0;
  int cpus_per_trial = 0;  // --cpus-per-task; 0: Slurm's default (1)
  // Passed to srun verbatim, each one "--name" or "--name=value"; the options triald sets
  // itself (SlurmReservedOptions()) are refused.
  std::vector<std::string> extra_args;
};

struct ExecutorConfig {
  std::string kind = "local";  // "local" | "slurm"
  SlurmExecutorConfig slurm;   // kind = "slurm"
};

// The srun options an [executor] extra_args entry may not name: triald sets them itself (the
// job's name, I/O, task layout, environment and folder) or the sweep has a key for them.
const std::vector<const char*>& SlurmReservedOptions();

struct SweepSpec {
  StudyConfig study;
  ObjectiveConfig objective;
  SearchSpace space;
  SamplerConfig sampler;
  PrunerConfig pruner;
  ExecutorConfig executor;
};

// What a submitter chose when submitting, outside the file (trialctl submit sends them; the
// study keeps them with its sweep, so a restart parses the same spec).
// A file of the objective's as trialctl read it at submit, as the submitter
// (daemon/ctl/submit_code.h): kept with the study so that `status` can say whether it changed
// since, and what it was.
struct CodeFile {
  std::string path;    // absolute
  std::string sha256;  // 64 lowercase hex digits
  uint64_t bytes = 0;
  std::string source;  // its text when UTF-8 of at most kMaxKeptSourceBytes; else ""
  // Whether `source` is the file's text (an empty file's included).
  bool source_kept() const { return !source.empty() || bytes == 0; }
  bool operator==(const CodeFile& o) const {
    return path == o.path && sha256 == o.sha256 && bytes == o.bytes && source == o.source;
  }
};
inline constexpr size_t kMaxCodeFiles = 8;
inline constexpr size_t kMaxKeptSourceBytes = 256 * 1024;

struct SubmitChoices {
  std::string name;            // --name: replaces [study] name ("": the file's)
  std::string python;          // kind = "python": the interpreter trialctl resolved in the
                               // submitter's environment, absolute; replaces [objective] python
  std::string python_version;  // its version as it reported it ("3.11.7"; "" when unknown)
  std::vector<CodeFile> code;  // the objective's files at submit (none: not recorded)
  // Carried with them, so that views need not parse the sweep: its [study] metric_names.
  std::vector<std::string> metric_names;
  bool empty() const {
    return name.empty() && python.empty() && python_version.empty() && code.empty() &&
           metric_names.empty();
  }
};

struct SweepSource {
  std::string text;  // the TOML document
  std::string path;  // shown in messages; its directory anchors relative paths
  SubmitChoices submit = {};
  // trialctl submit --resume: continue the study of this name when there is one (as [study]
  // load_if_exists = true). Not stored: a choice of this submission only.
  bool resume = false;
};

// Whether `name` may name a study ([study] name, trialctl submit --name), and what one may be.
bool IsStudyName(std::string_view name);
// Whether `name` may name an objective ([study] metric_names, trialctl set metric_names=...):
// 1 to 64 characters of UTF-8 on one line.
bool IsMetricName(std::string_view name);
extern const char* const kStudyNameExpected;

// Parses and validates a sweep file, then applies source.submit (a name or interpreter that is
// not one is refused, naming the choice). On error nothing is returned and the Status message is
// the full user-facing text (one line per problem is not required: the first problem suffices).
common::Result<SweepSpec> ParseSweep(const SweepSource& source);

// Reads `path` and parses it.
common::Result<SweepSpec> ParseSweepFile(const std::string& path);

// The LM objective as one JSON object whose keys are exactly LmObjectiveConfig's field names, in
// declaration order; the daemon hands it to trial-worker with --config. Doubles are written in
// their shortest exact form, so LmObjectiveFromJson gives back the identical struct. A
// non-finite double (which ParseSweep never produces) is written as null, which
// LmObjectiveFromJson refuses.
std::string LmObjectiveToJson(const LmObjectiveConfig& config);

// Parses what LmObjectiveToJson writes. Every field must be present with its JSON type (a
// whole number is accepted for a double field) and pass the same checks as in a sweep file
// (e.g. dropout in [0, 1), device "auto", "cpu" or "cuda"); paths are taken as given, since the
// daemon already made them absolute. Unknown, missing or ill-typed fields are errors naming the
// field and what was expected.
common::Result<LmObjectiveConfig> LmObjectiveFromJson(std::string_view json);

}  // namespace triald::config
