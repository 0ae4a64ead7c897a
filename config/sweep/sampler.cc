// [sampler]: which sampler proposes the trials' parameters, and its options (only those of the
// chosen kind), with Optuna's defaults.

#include <limits>

#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

using common::Status;
using S = SamplerConfig;
using K = Key<S>;

K SeedKey() {
  return CustomKey<S>(
      "seed",
      "a non-negative integer; without it the daemon draws one and stores it "
      "with the study",
      [](const TableContext& ctx, const Field& f, S* out) {
        int64_t seed = 0;
        TRIALD_RETURN_IF_ERROR(ctx.reader.ReadInt(f, 0, std::numeric_limits<int64_t>::max(),
                                                  "a non-negative integer", &seed));
        out->seed = static_cast<uint64_t>(seed);
        out->seed_given = true;
        return Status::Ok();
      });
}

std::vector<K> Common() {
  return {KindKey<S>("\"random\" (default), \"grid\", \"tpe\", \"qmc\", \"nsga2\", \"cmaes\", "
                     "\"gp\" or \"auto\""),
          SeedKey()};
}

std::vector<K> With(std::vector<K> keys) {
  std::vector<K> all = Common();
  for (K& k : keys) all.push_back(std::move(k));
  return all;
}

const NumberRule kProbability = Within(0, false, 1, false);

std::vector<K> TpeKeys() {
  using T = TpeConfig;
  K group = BoolKey("group", Of(&S::tpe, &T::group),
                    "with multivariate: Optuna's group decomposition, one joint estimator per "
                    "group of parameters that occur together (default false)");
  auto read_group = group.read;
  group.read = [read_group](const TableContext& ctx, const Field& f, S* out) {
    TRIALD_RETURN_IF_ERROR(read_group(ctx, f, out));
    if (out->tpe.group && !out->tpe.multivariate) {
      return ctx.reader.ValueError(f, "group decomposition refines the multivariate estimator",
                                   "group = true only with multivariate = true (as in Optuna)");
    }
    return Status::Ok();
  };
  return With({
      IntKey("n_startup_trials", Of(&S::tpe, &T::n_startup_trials), 0, "an integer >= 0",
             "random trials before TPE takes over, >= 0 (default 10)"),
      IntKey("n_ei_candidates", Of(&S::tpe, &T::n_ei_candidates), 1, "an integer >= 1",
             "candidates drawn from l(x) and ranked by l(x)/g(x), >= 1 (default 24)"),
      BoolKey("multivariate", Of(&S::tpe, &T::multivariate),
              "one joint Parzen estimator over the whole space (default true)"),
      std::move(group),
      BoolKey("constant_liar", Of(&S::tpe, &T::constant_liar),
              "running trials count as bad results, so parallel trials differ (default true)"),
      NumberKey("prior_weight", Of(&S::tpe, &T::prior_weight), Above(0), "a number > 0",
                "> 0 (default 1.0)"),
      BoolKey("consider_endpoints", Of(&S::tpe, &T::consider_endpoints), "default false"),
      BoolKey("consider_magic_clip", Of(&S::tpe, &T::consider_magic_clip), "default true"),
      IntKey("gamma_max", Of(&S::tpe, &T::gamma_max), 1, "an integer >= 1",
             "gamma(n) = min(ceil(gamma_fraction * n), gamma_max), >= 1 (default 25)"),
      NumberKey("gamma_fraction", Of(&S::tpe, &T::gamma_fraction), Within(0, true, 1, false),
                "a number in (0, 1]", "in (0, 1] (default 0.1)"),
  });
}

std::vector<K> Nsga2Keys() {
  using N = Nsga2Config;
  return With({
      IntKey("population_size", Of(&S::nsga2, &N::population_size), 2,
             "an integer >= 2 (a crossover needs two parents)",
             "trials per generation, >= 2 (default 50)"),
      NumberKey("mutation_prob", Of(&S::nsga2, &N::mutation_prob), kProbability,
                "a number in [0, 1]", "in [0, 1] (default 1 / number of parameters)"),
      NumberKey("crossover_prob", Of(&S::nsga2, &N::crossover_prob), kProbability,
                "a number in [0, 1]", "in [0, 1] (default 0.9)"),
      NumberKey("swapping_prob", Of(&S::nsga2, &N::swapping_prob), kProbability,
                "a number in [0, 1]", "in [0, 1] (default 0.5)"),
  });
}

// x0 = { lr = 0.01, layers = 4 }: checked against [space] by CheckCmaesX0 (cross_checks.cc).
Status ReadX0(const TableContext& ctx, const Field& f, S* out) {
  const toml::table* x0 = f.node->as_table();
  if (x0 == nullptr) {
    return ctx.reader.ValueError(
        f, "", "a table of initial values such as x0 = { lr = 0.01, layers = 4 }");
  }
  for (const TomlEntry& e : InFileOrder(*x0)) {
    const std::string name(e.key->str());
    TRIALD_RETURN_IF_ERROR(ctx.reader.ReadNumber({f.table, "x0." + KeyText(name), e.node},
                                                 Within(-1e300, false, 1e300, false), "a number",
                                                 &out->cmaes.x0[name]));
  }
  return Status::Ok();
}

Status ReadRestartStrategy(const TableContext& ctx, const Field& f, S* out) {
  const std::string expected = "\"ipop\" (or no restart_strategy for no restarts)";
  std::string& strategy = out->cmaes.restart_strategy;
  TRIALD_RETURN_IF_ERROR(ctx.reader.ReadString(f, expected, &strategy));
  if (strategy != "ipop") return ctx.reader.ValueError(f, "unknown restart strategy", expected);
  return Status::Ok();
}

std::vector<K> CmaesKeys() {
  using C = CmaesConfig;
  return With({
      IntKey("n_startup_trials", Of(&S::cmaes, &C::n_startup_trials), 0, "an integer >= 0",
             "independent sampling until this many trials finished, >= 0 (default 1)"),
      NumberKey("sigma0", Of(&S::cmaes, &C::sigma0), Within(0, true, 1e300, false), "a number > 0",
                "> 0 (default: min over the parameters of (high - low) / 6, in the "
                "transformed space)"),
      IntKey("popsize", Of(&S::cmaes, &C::popsize), 2, "an integer >= 2",
             ">= 2 (default 4 + floor(3 ln n))"),
      CustomKey<S>("x0",
                   "initial values of numeric [space] parameters, e.g. x0 = { lr = 0.001 }; "
                   "parameters not named start at the centre of their range",
                   ReadX0),
      CustomKey<S>("restart_strategy",
                   "\"ipop\": restart a stopped search with a larger "
                   "population (default none)",
                   ReadRestartStrategy),
      IntKey("inc_popsize", Of(&S::cmaes, &C::inc_popsize), 1, "an integer >= 1",
             "\"ipop\": population multiplier at each restart, >= 1 (default 2)"),
      BoolKey("consider_pruned_trials", Of(&S::cmaes, &C::consider_pruned_trials),
              "PRUNED trials count, valued at their last report (default false)"),
  });
}

std::vector<K> GpKeys() {
  using G = GpConfig;
  return With({
      IntKey("n_startup_trials", Of(&S::gp, &G::n_startup_trials), 0, "an integer >= 0",
             "quasi-random (QMC) trials before the Gaussian process takes over, >= 0 "
             "(default 10)"),
      BoolKey("deterministic_objective", Of(&S::gp, &G::deterministic_objective),
              "the objective gives the same value for the same parameters: no observation "
              "noise is fitted (default false)"),
  });
}

}  // namespace

const std::vector<Kind<SamplerConfig>>& SamplerKinds() {
  static const std::vector<Kind<S>> kKinds = {
      {"random", Common()},
      {"grid", Common()},
      {"tpe", TpeKeys()},
      {"qmc", With({BoolKey("scramble", Of(&S::qmc, &QmcConfig::scramble),
                            "scrambled Sobol points (default true)")})},
      {"nsga2", Nsga2Keys()},
      {"cmaes", CmaesKeys()},
      {"gp", GpKeys()},
      {"auto", Common()},
  };
  return kKinds;
}

Status ParseSampler(const SweepReader& r, const toml::table& t, SamplerConfig* out) {
  const std::string tn = "[sampler]";
  const TableContext ctx{r, tn, t};
  const std::vector<KindNames> kinds = KindKeyNames(SamplerKinds());
  TRIALD_RETURN_IF_ERROR(
      ReadKind(ctx, kinds, "sampler", "one of " + JoinList(KindList(kinds)), &out->kind));
  TRIALD_RETURN_IF_ERROR(CheckKindKeys(ctx, kinds, &out->kind));
  return ReadKeys(ctx, FindKind(SamplerKinds(), out->kind)->keys, out);
}

}  // namespace triald::config::sweep
