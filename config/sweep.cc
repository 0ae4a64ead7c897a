#include "config/sweep.h"

#include <toml++/toml.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

#include "config/sweep/key_table.h"
#include "config/sweep/tables.h"
#include "config/toml_diag.h"

// ParseSweep: the top level of a sweep file. Each table is read by its own file under
// config/sweep/ from its descriptor rows (config/sweep/key_table.h); the checks between tables
// are in config/sweep/cross_checks.cc.

namespace triald::config {

namespace {

using common::InvalidArgument;
using common::Result;
using common::Status;
using sweep::SweepReader;

const char* const kTopLevelTables =
    "[study], [objective], [space], [sampler], [pruner], [executor]";

Result<SweepSpec> Parse(const SweepReader& r) {
  TRIALD_ASSIGN_OR_RETURN(toml::table root, r.diag().Parse("invalid TOML: "));

  for (const TomlEntry& e : InFileOrder(root)) {
    const std::string name(e.key->str());
    const bool known =
        Contains({"study", "objective", "space", "sampler", "pruner", "executor"}, name);
    if (!known && e.node->is_table()) {
      return InvalidArgument(r.Where(e.node->source()) + ": unknown table [" + KeyText(name) +
                             "]; expected one of " + kTopLevelTables);
    }
    if (!known) {
      return InvalidArgument(r.Where(e.key->source()) + ": unknown key " + Quoted(name) +
                             " outside any table; expected one of the tables " + kTopLevelTables);
    }
    if (!e.node->is_table()) {
      return InvalidArgument(r.Where(e.node->source()) + ": " + name + " = " + r.Repr(*e.node) +
                             ": expected a [" + name + "] table");
    }
  }

  SweepSpec spec;
  auto required = [&](const char* name, const char* expected) -> Result<const toml::table*> {
    const toml::table* t = root.get_as<toml::table>(name);
    if (t == nullptr) {
      return InvalidArgument(r.diag().path() + ":1:1: missing required table [" + name +
                             "]; expected " + expected);
    }
    return t;
  };
  TRIALD_ASSIGN_OR_RETURN(const toml::table* study,
                          required("study", "a [study] table with at least name and n_trials"));
  TRIALD_RETURN_IF_ERROR(sweep::ParseStudy(r, *study, &spec.study));
  TRIALD_ASSIGN_OR_RETURN(
      const toml::table* objective,
      required("objective", "an [objective] table with kind (and command for kind = \"exec\")"));
  TRIALD_RETURN_IF_ERROR(sweep::ParseObjective(r, *objective, &spec.objective));
  TRIALD_RETURN_IF_ERROR(sweep::CheckLmDevice(r, *objective, spec));
  TRIALD_RETURN_IF_ERROR(sweep::CheckLmObjectives(r, *objective, spec));
  // kind = "python" and "client": the objective suggests its own parameters; [space] adds ones
  // drawn up front.
  if (!spec.objective.define_by_run() || root.get("space") != nullptr) {
    TRIALD_ASSIGN_OR_RETURN(const toml::table* space,
                            required("space", "at least one [space.NAME] parameter table"));
    TRIALD_RETURN_IF_ERROR(sweep::ParseSpace(r, *space, spec.objective.kind == "lm", &spec.space));
  }
  if (const toml::table* t = root.get_as<toml::table>("sampler")) {
    TRIALD_RETURN_IF_ERROR(sweep::ParseSampler(r, *t, &spec.sampler));
    TRIALD_RETURN_IF_ERROR(sweep::CheckCmaesX0(r, *t, spec));
  }
  if (const toml::table* t = root.get_as<toml::table>("pruner")) {
    TRIALD_RETURN_IF_ERROR(sweep::ParsePruner(r, *t, &spec.pruner));
  }
  TRIALD_RETURN_IF_ERROR(sweep::CheckMultiObjective(r, root, spec));
  if (const toml::table* t = root.get_as<toml::table>("executor")) {
    TRIALD_RETURN_IF_ERROR(sweep::ParseExecutor(r, *t, &spec.executor));
    TRIALD_RETURN_IF_ERROR(sweep::CheckExecutor(r, *t, spec));
  }
  TRIALD_RETURN_IF_ERROR(sweep::CheckClientObjective(r, root, spec));
  return spec;
}

}  // namespace

const char* DirectionName(Direction d) {
  switch (d) {
    case Direction::kMinimize:
      return "minimize";
    case Direction::kMaximize:
      return "maximize";
  }
  return "unknown";
}

const std::vector<const char*>& MultiObjectiveSamplerKinds() {
  static const std::vector<const char*> kKinds = {"random", "qmc", "grid", "tpe", "nsga2", "auto"};
  return kKinds;
}

const std::vector<const char*>& ResourceMetrics() {
  static const std::vector<const char*> kMetrics = {"peak_memory", "peak_gpu_memory", "cpu_time",
                                                    "wall"};
  return kMetrics;
}

size_t StudyConfig::worker_objectives() const {
  if (objectives.empty()) return directions.size();
  size_t n = 0;
  for (const std::string& o : objectives) n += o == "value" ? 1 : 0;
  return n;
}

const std::vector<const char*>& RetryableReasons() {
  // The last five: Slurm ended the trial's job ([executor] kind = "slurm").
  static const std::vector<const char*> kReasons = {
      "lost",    "signal",    "oom",          "timeout",          "exit",      "shutdown",
      "stalled", "preempted", "node_failure", "slurm_time_limit", "slurm_oom", "slurm_cancelled"};
  return kReasons;
}

Result<SweepSpec> ParseSweep(const SweepSource& source) {
  TRIALD_ASSIGN_OR_RETURN(SweepSpec spec, Parse(SweepReader(source)));
  const SubmitChoices& c = source.submit;
  const std::string where = source.path.empty() ? "<sweep>" : source.path;
  if (!c.name.empty()) {
    if (!IsStudyName(c.name)) {
      return common::InvalidArgument(where + ": submit --name \"" + c.name +
                                     "\": not a valid study name; expected " + kStudyNameExpected);
    }
    spec.study.name = c.name;
  }
  if (!c.python.empty() && spec.objective.kind == "python") {
    if (c.python[0] != '/' || c.python.find('\0') != std::string::npos) {
      return common::InvalidArgument(where + ": the submitter's interpreter \"" + c.python +
                                     "\" is not an absolute path; expected one such as "
                                     "/usr/bin/python3");
    }
    spec.objective.python = c.python;
  }
  return spec;
}

Result<SweepSpec> ParseSweepFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return common::ErrnoError("cannot open sweep file " + path, errno);
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  // fread reports errors (EISDIR for a directory) only through ferror and errno.
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err != 0) return common::ErrnoError("cannot read sweep file " + path, err);
  return ParseSweep(SweepSource{std::move(text), path});
}

}  // namespace triald::config
