// [executor]: where a study's trials run. kind = "local" (the default) runs them on this host;
// kind = "slurm" runs each as a Slurm job (daemon/README.md, "Running on Slurm"), with the keys
// below and srun options of the user's in extra_args.

#include <algorithm>
#include <cstring>

#include "config/sweep/tables.h"

namespace triald::config {

const std::vector<const char*>& SlurmReservedOptions() {
  static const std::vector<const char*> kReserved = {"job-name",
                                                     "comment",
                                                     "output",
                                                     "error",
                                                     "input",
                                                     "export",
                                                     "chdir",
                                                     "unbuffered",
                                                     "quiet",
                                                     "ntasks",
                                                     "nodes",
                                                     "pty",
                                                     "gres",
                                                     "gpus",
                                                     "gpus-per-task",
                                                     "gpus-per-node",
                                                     "mem",
                                                     "mem-per-cpu",
                                                     "mem-per-gpu",
                                                     "time",
                                                     "uid",
                                                     "gid",
                                                     "partition",
                                                     "account",
                                                     "qos",
                                                     "constraint",
                                                     "cpus-per-task",
                                                     "wrap",
                                                     "label",
                                                     "multi-prog",
                                                     "kill-on-bad-exit",
                                                     "open-mode",
                                                     "signal",
                                                     "jobid",
                                                     "overlap",
                                                     "het-group"};
  return kReserved;
}

}  // namespace triald::config

namespace triald::config::sweep {

namespace {

using common::InvalidArgument;
using common::Status;
using E = ExecutorConfig;
using ExecutorKey = Key<E>;
using SlurmConfig = SlurmExecutorConfig;

ExecutorKey ExecutorKindKey() {
  return KindKey<E>(
      "\"local\" (default: trials run on this host) or \"slurm\" (each trial a Slurm job)");
}

// A Slurm name (partition, account, QOS, constraint): printable, no space, no comma where a
// list would be read; Slurm checks that it exists (at submit, daemon/slurm/).
ExecutorKey NameKey(const char* name, std::string SlurmConfig::*m, const char* doc, bool list) {
  return CustomKey<E>(name, doc, [m, list](const TableContext& ctx, const Field& f, E* out) {
    std::string v;
    const char* expected = list ? "a Slurm name, e.g. \"gpu\" (several: \"a,b\")"
                                : "a Slurm name without spaces or commas, e.g. \"gpu\"";
    TRIALD_RETURN_IF_ERROR(ctx.reader.ReadString(f, expected, &v));
    if (v.empty()) return ctx.reader.ValueError(f, "empty", expected);
    for (unsigned char c : v) {
      if (c <= ' ' || c >= 0x7f || (c == ',' && !list)) {
        return ctx.reader.ValueError(f, "contains a space, a control character or a comma",
                                     expected);
      }
    }
    out->slurm.*m = std::move(v);
    return Status::Ok();
  });
}

Status ReadExtraArgs(const TableContext& ctx, const Field& f, E* out) {
  const SweepReader& r = ctx.reader;
  const char* const expected = "an array of srun options, each \"--name\" or \"--name=value\"";
  const toml::array* arr = f.node->as_array();
  if (arr == nullptr) return r.ValueError(f, "", expected);
  for (size_t i = 0; i < arr->size(); ++i) {
    Field ef{f.table, f.key + "[" + std::to_string(i) + "]", arr->get(i)};
    std::string arg;
    TRIALD_RETURN_IF_ERROR(r.ReadString(ef, expected, &arg));
    if (arg.find('\0') != std::string::npos) {
      return r.ValueError(ef, "contains a NUL character", expected);
    }
    // One long option per entry: a short option or a bare value could swallow the next
    // argument, or end the options and become the command.
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0 || arg[2] == '-' || arg[2] == '=') {
      return r.ValueError(ef, "not a long option", expected);
    }
    const std::string name =
        arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    for (const char* reserved : SlurmReservedOptions()) {
      // srun accepts any unambiguous prefix of a long option: a prefix of a reserved one is
      // refused too.
      if (std::strncmp(reserved, name.c_str(), name.size()) == 0) {
        return r.ValueError(ef,
                            "--" + std::string(reserved) +
                                " is set by triald (or by a key of [executor] or [study])",
                            "an option triald does not set; see config/README.md, [executor]");
      }
    }
    out->slurm.extra_args.push_back(std::move(arg));
  }
  return Status::Ok();
}

std::vector<ExecutorKey> SlurmKeys() {
  return {
      ExecutorKindKey(),
      NameKey("partition", &SlurmConfig::partition,
              "the partition (default: the cluster's default)", false),
      NameKey("account", &SlurmConfig::account, "the account charged (default: the user's default)",
              false),
      NameKey("qos", &SlurmConfig::qos, "the quality of service (default: the account's default)",
              false),
      NameKey("constraint", &SlurmConfig::constraint,
              "node features the job needs, as srun --constraint takes them (default none)", true),
      CustomKey<E>("time_limit",
                   "the job's time limit in seconds, rounded up to whole minutes (default: "
                   "[study] trial_timeout + kill_grace, else the partition's)",
                   [](const TableContext& ctx, const Field& f, E* out) {
                     TRIALD_RETURN_IF_ERROR(ctx.reader.ReadSeconds(f, &out->slurm.time_limit));
                     if (out->slurm.time_limit <= 0) {
                       return ctx.reader.ValueError(f, "", "a number of seconds > 0");
                     }
                     return Status::Ok();
                   }),
      IntKey("cpus_per_trial", Of(&E::slurm, &SlurmConfig::cpus_per_trial), 1, 4096,
             "an integer from 1 to 4096",
             "CPUs for each trial's job, srun --cpus-per-task (default: Slurm's, 1)"),
      CustomKey<E>("extra_args",
                   "srun options passed verbatim, each \"--name\" or \"--name=value\"; options "
                   "triald sets are refused (default none)",
                   ReadExtraArgs),
  };
}

}  // namespace

const std::vector<Kind<ExecutorConfig>>& ExecutorKinds() {
  static const std::vector<Kind<E>> kKinds = {
      {"local", {ExecutorKindKey()}},
      {"slurm", SlurmKeys()},
  };
  return kKinds;
}

Status ParseExecutor(const SweepReader& r, const toml::table& t, ExecutorConfig* out) {
  const TableContext ctx{r, "[executor]", t};
  const std::vector<KindNames> kinds = KindKeyNames(ExecutorKinds());
  TRIALD_RETURN_IF_ERROR(
      ReadKind(ctx, kinds, "executor", "one of " + JoinList(KindList(kinds)), &out->kind));
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(ctx, kinds, &out->kind));
  return ReadKeys(ctx, FindKind(ExecutorKinds(), out->kind)->keys, out);
}

Status CheckExecutor(const SweepReader& r, const toml::table& executor, const SweepSpec& spec) {
  if (spec.executor.kind != "slurm") return Status::Ok();
  const std::string where = r.Where(executor.source());
  if (spec.objective.fork_server) {
    return InvalidArgument(where +
                           ": [executor] kind = \"slurm\" with [objective] fork_server: a fork "
                           "server runs on this host, and each Slurm trial starts on its node; "
                           "remove fork_server (and preload) or run the study locally");
  }
  if (!spec.study.resource_constraints.empty() ||
      std::any_of(spec.study.objectives.begin(), spec.study.objectives.end(),
                  [](const std::string& o) { return o != "value"; })) {
    return InvalidArgument(where +
                           ": [executor] kind = \"slurm\" with measured metrics ([study] "
                           "resource_constraints or objectives naming a metric): triald measures "
                           "them on this host, where a Slurm trial does not run");
  }
  return Status::Ok();
}

}  // namespace triald::config::sweep
