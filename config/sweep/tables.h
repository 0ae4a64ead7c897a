#pragma once
// The tables of a sweep file, one source file each (config/sweep/*.cc): the rows of each table
// (config/sweep/key_table.h) and the function that reads the table with them. ParseSweep
// (config/sweep.cc) calls them in this order, whatever the file's: [study], [objective], [space],
// [sampler], [pruner], [executor]; each check that involves several tables (cross_checks.cc) runs
// as soon as the tables it reads are read.
//
// Thread-safety: the row tables are built once and never changed; the Parse functions are pure.

#include <toml++/toml.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "config/sweep.h"
#include "config/sweep/key_table.h"

namespace triald::config::sweep {

// [study] (study.cc).
const std::vector<Key<StudyConfig>>& StudyKeys();
common::Status ParseStudy(const SweepReader& r, const toml::table& t, StudyConfig* out);

// [objective], one kind per file: objective_exec.cc, objective_python.cc, objective_lm.cc;
// objective.cc reads the kind and the keys every kind shares (env, workdir).
const std::vector<Kind<ObjectiveConfig>>& ObjectiveKinds();
common::Status ParseObjective(const SweepReader& r, const toml::table& t, ObjectiveConfig* out);
// The rows of each kind, `kind` first (ObjectiveKinds() lists them).
std::vector<Key<ObjectiveConfig>> ExecObjectiveKeys();
std::vector<Key<ObjectiveConfig>> PythonObjectiveKeys();
std::vector<Key<ObjectiveConfig>> LmObjectiveKeys();
// The rows every kind has: `kind`, `env` (added to the worker's environment) and `workdir` (the
// worker's folder; absent: the sweep file's).
Key<ObjectiveConfig> ObjectiveKindKey();
Key<ObjectiveConfig> EnvKey();
Key<ObjectiveConfig> WorkdirKey();
// `fork_twice` (python, lm): after fork_server, which it needs.
Key<ObjectiveConfig> ForkTwiceKey();

// [space] and its [space.NAME] tables (space.cc): a parameter's keys depend on its type, as a
// kinded table's on its kind. With `lm`, each parameter must be one of the lm worker's tunable
// hyperparameters, with values it accepts.
const std::vector<Kind<Distribution>>& ParamTypes();
common::Status ParseSpace(const SweepReader& r, const toml::table& t, bool lm, SearchSpace* out);

// [sampler] (sampler.cc).
const std::vector<Kind<SamplerConfig>>& SamplerKinds();
common::Status ParseSampler(const SweepReader& r, const toml::table& t, SamplerConfig* out);

// [pruner] (pruner.cc). `tn` names the table in messages: "[pruner]", or "[pruner.wrapped]" for
// the pruner a patient pruner wraps (read by the same function).
const std::vector<Kind<PrunerConfig>>& PrunerKinds();
common::Status ParsePruner(const SweepReader& r, const toml::table& t, PrunerConfig* out,
                           const std::string& tn = "[pruner]");

// [executor] (executor.cc).
const std::vector<Kind<ExecutorConfig>>& ExecutorKinds();
common::Status ParseExecutor(const SweepReader& r, const toml::table& t, ExecutorConfig* out);

// The checks between tables (cross_checks.cc), each OK when it does not apply.
// [executor] kind = "slurm" runs no fork server ([objective] fork_server).
common::Status CheckExecutor(const SweepReader& r, const toml::table& executor,
                             const SweepSpec& spec);
// [objective] kind = "client": trials run in the asking program, so nothing that triald does
// to a process of its own applies: no [executor] other than local, no GPU slots, no measured
// metrics.
common::Status CheckClientObjective(const SweepReader& r, const toml::table& root,
                                    const SweepSpec& spec);
// [objective] kind = "lm", device = "cuda" needs [study] gpus_per_trial >= 1.
common::Status CheckLmDevice(const SweepReader& r, const toml::table& objective,
                             const SweepSpec& spec);
// [objective] kind = "lm": objectives names one metric per [study] direction.
common::Status CheckLmObjectives(const SweepReader& r, const toml::table& objective,
                                 const SweepSpec& spec);
// [sampler] kind = "cmaes": every x0 entry names a numeric [space] parameter, within its range.
common::Status CheckCmaesX0(const SweepReader& r, const toml::table& sampler,
                            const SweepSpec& spec);
// A study with several objectives: its [sampler] kind must be one of
// MultiObjectiveSamplerKinds() and it may have no pruner (as in Optuna).
common::Status CheckMultiObjective(const SweepReader& r, const toml::table& root,
                                   const SweepSpec& spec);

// The key reference (config/README.md, "Every key"): one line per key of every table, from the
// rows above; a key several kinds share with the same text is one line naming those kinds.
struct KeyDoc {
  std::string table;  // "[study]", "[space.NAME]"
  std::string key;
  std::string kinds;  // "tpe, cmaes"; empty for a table without kinds
  std::string doc;
};
std::vector<KeyDoc> SweepKeyReference();
// SweepKeyReference() as the Markdown table config/README.md holds.
std::string SweepKeyReferenceMarkdown();

}  // namespace triald::config::sweep
