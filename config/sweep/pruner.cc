// [pruner]: which pruner stops unpromising trials early, and its options (only those of the
// chosen kind), as Optuna defines them. A patient pruner wraps another, [pruner.wrapped], read
// by the same rows.

#include <climits>
#include <memory>

#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::InvalidArgument;
using common::Status;
using P = PrunerConfig;
using PrunerKey = Key<P>;

PrunerKey PrunerKindKey() {
  return KindKey<P>(
      "\"nop\" (default), \"median\", \"percentile\", \"asha\", \"hyperband\", \"threshold\", "
      "\"patient\" or \"wilcoxon\"");
}

PrunerKey NStartupTrials() {
  return IntKey("n_startup_trials", Of(&P::n_startup_trials), 0, "an integer >= 0",
                "no pruning until this many trials have finished, >= 0 (default 5)");
}
PrunerKey NWarmupSteps() {
  return IntKey("n_warmup_steps", Of(&P::n_warmup_steps), 0, "an integer >= 0",
                "no pruning of a trial before this step, >= 0 (default 0)");
}
PrunerKey IntervalSteps() {
  return IntKey("interval_steps", Of(&P::interval_steps), 1, "an integer >= 1",
                "check every this many steps after the warm-up, >= 1 (default 1)");
}
PrunerKey NMinTrials() {
  return IntKey("n_min_trials", Of(&P::n_min_trials), 1, "an integer >= 1",
                "no pruning at a step fewer trials reported, >= 1 (default 1)");
}
PrunerKey MinResource() {
  return IntKey("min_resource", Of(&P::min_resource), 1,
                "an integer >= 1 (a number of steps; \"auto\" is not supported)",
                "steps, >= 1 (default 1; \"auto\" is not supported)");
}
PrunerKey ReductionFactor() {
  return IntKey("reduction_factor", Of(&P::reduction_factor), 2, "an integer >= 2",
                ">= 2 (default 3)");
}

const char* const kPercentileExpected = "a number in (0, 100)";

PrunerKey MaxResource() {
  return CustomKey<P>(
      "max_resource", "steps of a full trial, > min_resource (default: the largest step seen)",
      [](const TableContext& ctx, const Field& f, P* out) {
        int64_t v = 0;
        TRIALD_RETURN_IF_ERROR(ctx.reader.ReadInt(
            f, 1, INT_MAX,
            "an integer >= 1 (a number of steps; omit max_resource for the largest step reported)",
            &v));
        if (v <= out->min_resource) {
          return ctx.reader.ValueError(
              f, "not greater than min_resource = " + std::to_string(out->min_resource),
              "max_resource > min_resource");
        }
        out->max_resource = static_cast<int>(v);
        return Status::Ok();
      });
}

// Run after upper, given or not: a threshold pruner needs a bound, and lower <= upper.
Status CheckThresholds(const TableContext& ctx, P* out) {
  if (!out->lower && !out->upper) {
    return InvalidArgument(ctx.reader.Where(ctx.table.source()) + ": " + ctx.name +
                           " has neither lower nor upper; expected lower, upper or both with "
                           "kind = \"threshold\" (a trial is pruned when its latest value is "
                           "below lower or above upper)");
  }
  if (out->lower && out->upper && *out->lower > *out->upper) {
    return ctx.reader.ValueError({ctx.name, "upper", ctx.table.get("upper")},
                                 "less than lower = " + ctx.reader.Repr(*ctx.table.get("lower")),
                                 "upper >= lower");
  }
  return Status::Ok();
}

std::vector<PrunerKey> ThresholdKeys() {
  PrunerKey upper = NumberKey("upper", Of(&P::upper), NumberRule{}, "a finite number",
                              "prune when the latest value is above it (>= lower)");
  auto read_upper = upper.read;
  upper.read = [read_upper](const TableContext& ctx, const Field& f, P* out) {
    TRIALD_RETURN_IF_ERROR(read_upper(ctx, f, out));
    return CheckThresholds(ctx, out);
  };
  upper.absent = CheckThresholds;
  return {
      PrunerKindKey(),
      NumberKey("lower", Of(&P::lower), NumberRule{}, "a finite number",
                "prune when the latest value is below it; lower, upper or both"),
      std::move(upper),
      NWarmupSteps(),
      IntervalSteps(),
  };
}

Status ReadWrapped(const TableContext& ctx, const Field& f, P* out) {
  const std::string inner = ctx.name.substr(0, ctx.name.size() - 1) + ".wrapped]";
  const toml::table* w = f.node->as_table();
  if (w == nullptr) {
    return ctx.reader.ValueError(f, "",
                                 "a table " + inner +
                                     " with the kind and options of the pruner to wrap, e.g. "
                                     "kind = \"median\"; leave it out to prune on patience alone");
  }
  auto wrapped = std::make_shared<PrunerConfig>();
  TRIALD_RETURN_IF_ERROR(ParsePruner(ctx.reader, *w, wrapped.get(), inner));
  out->wrapped = std::move(wrapped);
  return Status::Ok();
}

std::vector<PrunerKey> PatientKeys() {
  return {
      PrunerKindKey(),
      Required(IntKey("patience", Of(&P::patience), 0, "an integer >= 0",
                      "required: steps without improvement before the wrapped pruner decides, "
                      ">= 0"),
               "an integer >= 0 with kind = \"patient\" (steps without improvement before the "
               "wrapped pruner decides)"),
      NumberKey("min_delta", Of(&P::min_delta), AtLeast(0), "a number >= 0",
                "an improvement is one by more than this, >= 0 (default 0)"),
      CustomKey<P>("wrapped",
                   "the pruner that decides once the trial stalls, a [pruner.wrapped] table "
                   "with its kind and options (default none: prune as soon as it stalls)",
                   ReadWrapped),
  };
}

}  // namespace

const std::vector<Kind<PrunerConfig>>& PrunerKinds() {
  static const std::vector<Kind<P>> kKinds = {
      {"nop", {PrunerKindKey()}},
      // As in Optuna, the median pruner is the 50th-percentile pruner (PrunerConfig's default).
      {"median",
       {PrunerKindKey(), NStartupTrials(), NWarmupSteps(), IntervalSteps(), NMinTrials()}},
      {"percentile",
       {PrunerKindKey(),
        Required(NumberKey("percentile", Of(&P::percentile), Within(0, true, 100, true),
                           kPercentileExpected, "required: in (0, 100)"),
                 std::string(kPercentileExpected) +
                     " with kind = \"percentile\" (kind = \"median\" is percentile = 50)"),
        NStartupTrials(), NWarmupSteps(), IntervalSteps(), NMinTrials()}},
      {"asha",
       {PrunerKindKey(), MinResource(), ReductionFactor(),
        IntKey("min_early_stopping_rate", Of(&P::min_early_stopping_rate), 0, "an integer >= 0",
               ">= 0 (default 0)"),
        IntKey("bootstrap_count", Of(&P::bootstrap_count), 0, "an integer >= 0",
               ">= 0 (default 0)")}},
      {"hyperband", {PrunerKindKey(), MinResource(), MaxResource(), ReductionFactor()}},
      {"threshold", ThresholdKeys()},
      {"patient", PatientKeys()},
      {"wilcoxon",
       {PrunerKindKey(),
        NumberKey("p_threshold", Of(&P::p_threshold), Within(0, false, 1, false),
                  "a number in [0, 1]",
                  "prune when the test gives p below it, in [0, 1] "
                  "(default 0.1)"),
        IntKey("n_startup_steps", Of(&P::n_startup_steps), 0, "an integer >= 0",
               "steps in common with the best trial before any test, >= 0 (default 2)")}},
  };
  return kKinds;
}

Status ParsePruner(const SweepReader& r, const toml::table& t, PrunerConfig* out,
                   const std::string& tn) {
  const TableContext ctx{r, tn, t};
  const std::vector<KindNames> kinds = KindKeyNames(PrunerKinds());
  TRIALD_RETURN_IF_ERROR(
      ReadKind(ctx, kinds, "pruner", "one of " + JoinList(KindList(kinds)), &out->kind));
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(ctx, kinds, &out->kind));
  return ReadKeys(ctx, FindKind(PrunerKinds(), out->kind)->keys, out);
}

}  // namespace triald::config::sweep
