// [sampler] and [pruner]: every kind, its options, their defaults and every class of mistake.

#include <catch2/catch.hpp>
#include <string>

#include "config/sweep.h"
#include "tests/config/sweep_test_util.h"

namespace triald::config {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using testing::ErrorOf;
using testing::kMinimal;
using testing::Parsed;

// kMinimal plus a table: its header is on line 13 and `body` starts on line 14.
std::string WithTable(const std::string& table, const std::string& body) {
  return std::string(kMinimal) + "[" + table + "]\n" + body;
}
std::string WithSampler(const std::string& body) { return WithTable("sampler", body); }
std::string WithPruner(const std::string& body) { return WithTable("pruner", body); }

TEST_CASE("a tpe sampler parses with every option", "[config]") {
  const SweepSpec s = Parsed(WithSampler(R"(kind = "tpe"
seed = 42
n_startup_trials = 0
n_ei_candidates = 64
multivariate = false
constant_liar = false
prior_weight = 2.5
consider_endpoints = true
consider_magic_clip = false
gamma_max = 7
gamma_fraction = 1
)"));
  CHECK(s.sampler.kind == "tpe");
  CHECK(s.sampler.seed == 42);
  CHECK(s.sampler.seed_given);
  const TpeConfig& t = s.sampler.tpe;
  CHECK(t.n_startup_trials == 0);
  CHECK(t.n_ei_candidates == 64);
  CHECK_FALSE(t.multivariate);
  CHECK_FALSE(t.constant_liar);
  CHECK(t.prior_weight == 2.5);
  CHECK(t.consider_endpoints);
  CHECK_FALSE(t.consider_magic_clip);
  CHECK(t.gamma_max == 7);
  CHECK(t.gamma_fraction == 1.0);
}

TEST_CASE("sampler options left out take Optuna's defaults", "[config]") {
  const SweepSpec tpe = Parsed(WithSampler("kind = \"tpe\"\n"));
  CHECK(tpe.sampler.kind == "tpe");
  CHECK_FALSE(tpe.sampler.seed_given);
  const TpeConfig& t = tpe.sampler.tpe;
  CHECK(t.n_startup_trials == 10);
  CHECK(t.n_ei_candidates == 24);
  CHECK(t.multivariate);
  CHECK(t.constant_liar);
  CHECK(t.prior_weight == 1.0);
  CHECK_FALSE(t.consider_endpoints);
  CHECK(t.consider_magic_clip);
  CHECK(t.gamma_max == 25);
  CHECK(t.gamma_fraction == 0.1);

  const SweepSpec qmc = Parsed(WithSampler("kind = \"qmc\"\n"));
  CHECK(qmc.sampler.kind == "qmc");
  CHECK(qmc.sampler.qmc.scramble);
  CHECK_FALSE(
      Parsed(WithSampler("kind = \"qmc\"\nscramble = false\nseed = 3\n")).sampler.qmc.scramble);

  // A [sampler] table without kind is the random sampler, and takes a seed.
  const SweepSpec random = Parsed(WithSampler("seed = 9\n"));
  CHECK(random.sampler.kind == "random");
  CHECK(random.sampler.seed == 9);
  CHECK(Parsed(WithSampler("kind = \"grid\"\nseed = 1\n")).sampler.kind == "grid");
}

TEST_CASE("a sampler option of another kind names the kind it belongs to", "[config]") {
  CHECK(ErrorOf(WithSampler("kind = \"random\"\nn_startup_trials = 5\n")) ==
        "sweep.toml:15:1: [sampler] n_startup_trials = 5: an option of kind = \"tpe\", "
        "\"cmaes\" or \"gp\", not of kind = \"random\"; expected kind = \"tpe\", \"cmaes\" or "
        "\"gp\" to use it, or only kind, seed with kind = \"random\"");
  // Without kind the sampler is random, so the same holds.
  CHECK_THAT(ErrorOf(WithSampler("gamma_max = 3\n")),
             StartsWith("sweep.toml:14:1: [sampler] gamma_max = 3: an option of kind = \"tpe\", "
                        "not of kind = \"random\""));
  CHECK_THAT(ErrorOf(WithSampler("kind = \"tpe\"\nscramble = true\n")),
             StartsWith("sweep.toml:15:1: [sampler] scramble = true: an option of kind = \"qmc\", "
                        "not of kind = \"tpe\"; expected kind = \"qmc\" to use it, or only kind, "
                        "seed, n_startup_trials,"));
  CHECK_THAT(ErrorOf(WithSampler("kind = \"grid\"\nmultivariate = true\n")),
             StartsWith("sweep.toml:15:1: [sampler] multivariate = true: an option of kind = "
                        "\"tpe\", not of kind = \"grid\""));
  CHECK_THAT(ErrorOf(WithSampler("kind = \"qmc\"\nprior_weight = 1.0\n")),
             Contains("an option of kind = \"tpe\", not of kind = \"qmc\"; expected kind = "
                      "\"tpe\" to use it, or only kind, seed, scramble with kind = \"qmc\""));
}

TEST_CASE("unknown sampler kinds and keys list what is allowed", "[config]") {
  CHECK(ErrorOf(WithSampler("kind = \"bayes\"\n")) ==
        "sweep.toml:14:8: [sampler] kind = \"bayes\": unknown sampler kind; expected one of "
        "random, grid, tpe, qmc, nsga2, cmaes, gp, auto");
  CHECK_THAT(ErrorOf(WithSampler("kind = 3\n")),
             StartsWith("sweep.toml:14:8: [sampler] kind = 3: expected one of random, grid"));
  CHECK(ErrorOf(WithSampler("kind = \"tpe\"\nn_startup = 3\n")) ==
        "sweep.toml:15:1: [sampler] unknown key \"n_startup\" for kind = \"tpe\"; expected one "
        "of kind, seed, n_startup_trials, n_ei_candidates, multivariate, group, constant_liar, "
        "prior_weight, consider_endpoints, consider_magic_clip, gamma_max, gamma_fraction");
  CHECK(ErrorOf(WithSampler("kind = \"qmc\"\nscrambled = true\n")) ==
        "sweep.toml:15:1: [sampler] unknown key \"scrambled\" for kind = \"qmc\"; expected one "
        "of kind, seed, scramble");
  CHECK_THAT(ErrorOf(WithSampler("kind = \"tpe\"\nseed = -1\n")),
             StartsWith("sweep.toml:15:8: [sampler] seed = -1: expected a non-negative integer"));
}

TEST_CASE("sampler option values are checked", "[config]") {
  struct Case {
    const char* line;
    const char* error;
  };
  const Case cases[] = {
      {"n_startup_trials = -1",
       "sweep.toml:15:20: [sampler] n_startup_trials = -1: expected an "
       "integer >= 0"},
      {"n_startup_trials = 1.5",
       "sweep.toml:15:20: [sampler] n_startup_trials = 1.5: expected an "
       "integer >= 0"},
      {"n_ei_candidates = 0",
       "sweep.toml:15:19: [sampler] n_ei_candidates = 0: expected an integer >= 1"},
      {"n_ei_candidates = 3000000000",
       "sweep.toml:15:19: [sampler] n_ei_candidates = 3000000000: "
       "too large; expected an integer >= 1 and <= 2147483647"},
      {"multivariate = \"yes\"",
       "sweep.toml:15:16: [sampler] multivariate = \"yes\": expected true or false"},
      {"constant_liar = 1",
       "sweep.toml:15:17: [sampler] constant_liar = 1: expected true or false"},
      {"consider_endpoints = \"no\"",
       "sweep.toml:15:22: [sampler] consider_endpoints = \"no\": expected true or false"},
      {"consider_magic_clip = 0",
       "sweep.toml:15:23: [sampler] consider_magic_clip = 0: expected true or false"},
      {"prior_weight = 0", "sweep.toml:15:16: [sampler] prior_weight = 0: expected a number > 0"},
      {"prior_weight = -1.0",
       "sweep.toml:15:16: [sampler] prior_weight = -1.0: expected a number > 0"},
      {"prior_weight = inf",
       "sweep.toml:15:16: [sampler] prior_weight = inf: expected a number > 0"},
      {"prior_weight = nan",
       "sweep.toml:15:16: [sampler] prior_weight = nan: expected a number > 0"},
      {"gamma_max = 0", "sweep.toml:15:13: [sampler] gamma_max = 0: expected an integer >= 1"},
      {"gamma_fraction = 0",
       "sweep.toml:15:18: [sampler] gamma_fraction = 0: expected a number in (0, 1]"},
      {"gamma_fraction = 1.01",
       "sweep.toml:15:18: [sampler] gamma_fraction = 1.01: expected a number in (0, 1]"},
      {"gamma_fraction = \"10%\"",
       "sweep.toml:15:18: [sampler] gamma_fraction = \"10%\": expected a number in (0, 1]"},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    CHECK(ErrorOf(WithSampler("kind = \"tpe\"\n" + std::string(c.line) + "\n")) == c.error);
  }
  CHECK(ErrorOf(WithSampler("kind = \"qmc\"\nscramble = \"on\"\n")) ==
        "sweep.toml:15:12: [sampler] scramble = \"on\": expected true or false");
  // The edges that are allowed.
  const SweepSpec s = Parsed(
      WithSampler("kind = \"tpe\"\nprior_weight = 1e-300\ngamma_fraction = 1e-9\ngamma_max = 1\n"
                  "n_ei_candidates = 1\n"));
  CHECK(s.sampler.tpe.prior_weight == 1e-300);
  CHECK(s.sampler.tpe.gamma_fraction == 1e-9);
  CHECK(s.sampler.tpe.gamma_max == 1);
  CHECK(s.sampler.tpe.n_ei_candidates == 1);
}

TEST_CASE("a gp sampler parses with Optuna's defaults and every option, bad ones name the key",
          "[config]") {
  const SweepSpec defaults = Parsed(WithSampler("kind = \"gp\"\n"));
  CHECK(defaults.sampler.kind == "gp");
  CHECK(defaults.sampler.gp.n_startup_trials == 10);
  CHECK_FALSE(defaults.sampler.gp.deterministic_objective);
  const SweepSpec set = Parsed(WithSampler(
      "kind = \"gp\"\nseed = 4\nn_startup_trials = 3\ndeterministic_objective = true\n"));
  CHECK(set.sampler.gp.n_startup_trials == 3);
  CHECK(set.sampler.gp.deterministic_objective);
  CHECK(set.sampler.seed == 4);
  CHECK(ErrorOf(WithSampler("kind = \"gp\"\nn_startup_trials = -2\n")) ==
        "sweep.toml:15:20: [sampler] n_startup_trials = -2: expected an integer >= 0");
  CHECK(ErrorOf(WithSampler("kind = \"gp\"\ndeterministic_objective = \"yes\"\n")) ==
        "sweep.toml:15:27: [sampler] deterministic_objective = \"yes\": expected true or false");
  CHECK_THAT(ErrorOf(WithSampler("kind = \"gp\"\nn_ei_candidates = 8\n")),
             StartsWith("sweep.toml:15:1: [sampler] n_ei_candidates = 8: an option of kind = "
                        "\"tpe\", not of kind = \"gp\""));
  CHECK(ErrorOf(WithSampler("kind = \"gp\"\nacquisition = \"ei\"\n")) ==
        "sweep.toml:15:1: [sampler] unknown key \"acquisition\" for kind = \"gp\"; expected one "
        "of kind, seed, n_startup_trials, deterministic_objective");
  // "auto" takes no option of its own.
  CHECK(Parsed(WithSampler("kind = \"auto\"\nseed = 1\n")).sampler.kind == "auto");
  CHECK_THAT(ErrorOf(WithSampler("kind = \"auto\"\nn_startup_trials = 5\n")),
             Contains("not of kind = \"auto\""));
}

TEST_CASE("an nsga2 sampler parses with Optuna's defaults and every option", "[config]") {
  const SweepSpec d = Parsed(WithSampler("kind = \"nsga2\"\n"));
  CHECK(d.sampler.kind == "nsga2");
  CHECK(d.sampler.nsga2.population_size == 50);
  CHECK_FALSE(d.sampler.nsga2.mutation_prob.has_value());
  CHECK(d.sampler.nsga2.crossover_prob == 0.9);
  CHECK(d.sampler.nsga2.swapping_prob == 0.5);

  const SweepSpec s = Parsed(WithSampler(R"(kind = "nsga2"
seed = 5
population_size = 2
mutation_prob = 0
crossover_prob = 1
swapping_prob = 0.25
)"));
  CHECK(s.sampler.seed == 5);
  CHECK(s.sampler.nsga2.population_size == 2);
  CHECK(s.sampler.nsga2.mutation_prob == 0.0);
  CHECK(s.sampler.nsga2.crossover_prob == 1.0);
  CHECK(s.sampler.nsga2.swapping_prob == 0.25);
}

TEST_CASE("nsga2 option values are checked", "[config]") {
  struct Case {
    const char* line;
    const char* error;
  };
  const Case cases[] = {
      {"population_size = 1",
       "sweep.toml:15:19: [sampler] population_size = 1: expected an integer >= 2 (a crossover "
       "needs two parents)"},
      {"population_size = 10.5",
       "sweep.toml:15:19: [sampler] population_size = 10.5: expected an integer >= 2 (a "
       "crossover needs two parents)"},
      {"mutation_prob = 1.5",
       "sweep.toml:15:17: [sampler] mutation_prob = 1.5: expected a number in [0, 1]"},
      {"mutation_prob = -0.1",
       "sweep.toml:15:17: [sampler] mutation_prob = -0.1: expected a number in [0, 1]"},
      {"crossover_prob = nan",
       "sweep.toml:15:18: [sampler] crossover_prob = nan: expected a number in [0, 1]"},
      {"swapping_prob = \"half\"",
       "sweep.toml:15:17: [sampler] swapping_prob = \"half\": expected a number in [0, 1]"},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    CHECK(ErrorOf(WithSampler("kind = \"nsga2\"\n" + std::string(c.line) + "\n")) == c.error);
  }
  CHECK_THAT(ErrorOf(WithSampler("kind = \"tpe\"\npopulation_size = 10\n")),
             StartsWith("sweep.toml:15:1: [sampler] population_size = 10: an option of kind = "
                        "\"nsga2\", not of kind = \"tpe\""));
}

TEST_CASE("every pruner kind parses with its options", "[config]") {
  const SweepSpec median = Parsed(WithPruner(R"(kind = "median"
n_startup_trials = 0
n_warmup_steps = 3
interval_steps = 2
n_min_trials = 4
)"));
  CHECK(median.pruner.kind == "median");
  CHECK(median.pruner.n_startup_trials == 0);
  CHECK(median.pruner.n_warmup_steps == 3);
  CHECK(median.pruner.interval_steps == 2);
  CHECK(median.pruner.n_min_trials == 4);
  CHECK(median.pruner.percentile == 50);

  const SweepSpec pct = Parsed(WithPruner(R"(kind = "percentile"
percentile = 25.5
n_startup_trials = 1
n_warmup_steps = 0
interval_steps = 1
n_min_trials = 1
)"));
  CHECK(pct.pruner.kind == "percentile");
  CHECK(pct.pruner.percentile == 25.5);
  CHECK(pct.pruner.n_startup_trials == 1);
  CHECK(Parsed(WithPruner("kind = \"percentile\"\npercentile = 90\n")).pruner.percentile == 90);

  const SweepSpec asha = Parsed(WithPruner(R"(kind = "asha"
min_resource = 2
reduction_factor = 4
min_early_stopping_rate = 1
bootstrap_count = 3
)"));
  CHECK(asha.pruner.kind == "asha");
  CHECK(asha.pruner.min_resource == 2);
  CHECK(asha.pruner.reduction_factor == 4);
  CHECK(asha.pruner.min_early_stopping_rate == 1);
  CHECK(asha.pruner.bootstrap_count == 3);

  const SweepSpec hb = Parsed(WithPruner(R"(kind = "hyperband"
min_resource = 1
max_resource = 81
reduction_factor = 3
)"));
  CHECK(hb.pruner.kind == "hyperband");
  CHECK(hb.pruner.min_resource == 1);
  CHECK(hb.pruner.max_resource == 81);
  CHECK(hb.pruner.reduction_factor == 3);

  CHECK(Parsed(WithPruner("kind = \"nop\"\n")).pruner.kind == "nop");
}

TEST_CASE("pruner options left out take Optuna's defaults", "[config]") {
  for (const char* kind : {"nop", "median", "asha", "hyperband"}) {
    INFO(kind);
    const PrunerConfig p = Parsed(WithPruner("kind = \"" + std::string(kind) + "\"\n")).pruner;
    CHECK(p.kind == kind);
    CHECK(p.n_startup_trials == 5);
    CHECK(p.n_warmup_steps == 0);
    CHECK(p.interval_steps == 1);
    CHECK(p.n_min_trials == 1);
    CHECK(p.percentile == 50);
    CHECK(p.min_resource == 1);
    CHECK(p.reduction_factor == 3);
    CHECK(p.min_early_stopping_rate == 0);
    CHECK(p.max_resource == 0);  // hyperband: the largest step reported
    CHECK(p.bootstrap_count == 0);
  }
  // An empty [pruner] table is the no-op pruner.
  CHECK(Parsed(std::string(kMinimal) + "[pruner]\n").pruner.kind == "nop");
}

TEST_CASE("a pruner option of another kind names the kinds it belongs to", "[config]") {
  CHECK(ErrorOf(WithPruner("kind = \"median\"\npercentile = 25\n")) ==
        "sweep.toml:15:1: [pruner] percentile = 25: an option of kind = \"percentile\", not of "
        "kind = \"median\"; expected kind = \"percentile\" to use it, or only kind, "
        "n_startup_trials, n_warmup_steps, interval_steps, n_min_trials with kind = \"median\"");
  CHECK_THAT(ErrorOf(WithPruner("kind = \"asha\"\nn_warmup_steps = 2\n")),
             StartsWith("sweep.toml:15:1: [pruner] n_warmup_steps = 2: an option of kind = "
                        "\"median\", \"percentile\" or \"threshold\", not of kind = \"asha\"; "
                        "expected kind = \"median\", \"percentile\" or \"threshold\" to use it, "
                        "or only kind, min_resource,"));
  CHECK_THAT(ErrorOf(WithPruner("kind = \"median\"\nreduction_factor = 2\n")),
             StartsWith("sweep.toml:15:1: [pruner] reduction_factor = 2: an option of kind = "
                        "\"asha\" or \"hyperband\", not of kind = \"median\""));
  CHECK_THAT(ErrorOf(WithPruner("kind = \"asha\"\nmax_resource = 10\n")),
             StartsWith("sweep.toml:15:1: [pruner] max_resource = 10: an option of kind = "
                        "\"hyperband\", not of kind = \"asha\""));
  CHECK_THAT(ErrorOf(WithPruner("kind = \"hyperband\"\nbootstrap_count = 1\n")),
             StartsWith("sweep.toml:15:1: [pruner] bootstrap_count = 1: an option of kind = "
                        "\"asha\", not of kind = \"hyperband\""));
  // Without kind the pruner is nop, which takes no option.
  CHECK(ErrorOf(WithPruner("n_startup_trials = 3\n")) ==
        "sweep.toml:14:1: [pruner] n_startup_trials = 3: an option of kind = \"median\" or "
        "\"percentile\", not of kind = \"nop\"; expected kind = \"median\" or \"percentile\" to "
        "use it, or only kind with kind = \"nop\"");
}

TEST_CASE("unknown pruner kinds and keys list what is allowed", "[config]") {
  CHECK(ErrorOf(WithPruner("kind = \"never\"\n")) ==
        "sweep.toml:14:8: [pruner] kind = \"never\": unknown pruner kind; expected one of nop, "
        "median, percentile, asha, hyperband, threshold, patient, wilcoxon");
  CHECK(ErrorOf(WithPruner("kind = \"hyperband\"\nmax_resources = 9\n")) ==
        "sweep.toml:15:1: [pruner] unknown key \"max_resources\" for kind = \"hyperband\"; "
        "expected one of kind, min_resource, max_resource, reduction_factor");
  CHECK_THAT(ErrorOf(WithPruner("kind = \"median\"\npatient = 1\n")),
             StartsWith("sweep.toml:15:1: [pruner] unknown key \"patient\" for kind = "
                        "\"median\"; expected one of kind, n_startup_trials"));
}

TEST_CASE("pruner option values are checked", "[config]") {
  struct Case {
    const char* kind;
    const char* line;
    const char* error;
  };
  const Case cases[] = {
      {"median", "n_startup_trials = -1",
       "sweep.toml:15:20: [pruner] n_startup_trials = -1: expected an integer >= 0"},
      {"median", "n_warmup_steps = -1",
       "sweep.toml:15:18: [pruner] n_warmup_steps = -1: expected an integer >= 0"},
      {"median", "interval_steps = 0",
       "sweep.toml:15:18: [pruner] interval_steps = 0: expected an integer >= 1"},
      {"percentile", "n_min_trials = 0",
       "sweep.toml:15:16: [pruner] n_min_trials = 0: expected an integer >= 1"},
      {"asha", "min_resource = 0",
       "sweep.toml:15:16: [pruner] min_resource = 0: expected an integer >= 1 (a number of "
       "steps; \"auto\" is not supported)"},
      {"hyperband", "min_resource = \"auto\"",
       "sweep.toml:15:16: [pruner] min_resource = \"auto\": expected an integer >= 1 (a number "
       "of steps; \"auto\" is not supported)"},
      {"asha", "reduction_factor = 1",
       "sweep.toml:15:20: [pruner] reduction_factor = 1: expected an integer >= 2"},
      {"asha", "min_early_stopping_rate = -1",
       "sweep.toml:15:27: [pruner] min_early_stopping_rate = -1: expected an integer >= 0"},
      {"asha", "bootstrap_count = -2",
       "sweep.toml:15:19: [pruner] bootstrap_count = -2: expected an integer >= 0"},
      {"hyperband", "max_resource = 0",
       "sweep.toml:15:16: [pruner] max_resource = 0: expected an integer >= 1 (a number of "
       "steps; omit max_resource for the largest step reported)"},
      {"hyperband", "max_resource = 1",
       "sweep.toml:15:16: [pruner] max_resource = 1: not greater than min_resource = 1; "
       "expected max_resource > min_resource"},
  };
  for (const Case& c : cases) {
    INFO(c.kind << ": " << c.line);
    if (std::string(c.kind) == "percentile") {
      CHECK(ErrorOf(WithPruner("kind = \"percentile\"\n" + std::string(c.line) +
                               "\npercentile = 10\n")) == c.error);
    } else {
      CHECK(ErrorOf(WithPruner("kind = \"" + std::string(c.kind) + "\"\n" + c.line + "\n")) ==
            c.error);
    }
  }
  // max_resource is compared with the min_resource given, wherever it is in the table.
  CHECK(ErrorOf(WithPruner("kind = \"hyperband\"\nmax_resource = 8\nmin_resource = 8\n")) ==
        "sweep.toml:15:16: [pruner] max_resource = 8: not greater than min_resource = 8; "
        "expected max_resource > min_resource");
  CHECK(Parsed(WithPruner("kind = \"hyperband\"\nmax_resource = 9\nmin_resource = 8\n"))
            .pruner.max_resource == 9);

  // percentile is required for kind = "percentile" and must lie strictly between 0 and 100.
  CHECK(ErrorOf(WithPruner("kind = \"percentile\"\n")) ==
        "sweep.toml:13:1: [pruner] missing required key \"percentile\"; expected a number in "
        "(0, 100) with kind = \"percentile\" (kind = \"median\" is percentile = 50)");
  for (const char* bad : {"0", "100", "-5", "100.5", "\"50%\"", "nan"}) {
    INFO(bad);
    CHECK(ErrorOf(WithPruner("kind = \"percentile\"\npercentile = " + std::string(bad) + "\n")) ==
          "sweep.toml:15:14: [pruner] percentile = " + std::string(bad) +
              ": expected a number in (0, 100)");
  }
  CHECK(Parsed(WithPruner("kind = \"percentile\"\npercentile = 99.9\n")).pruner.percentile == 99.9);
  CHECK(Parsed(WithPruner("kind = \"percentile\"\npercentile = 0.1\n")).pruner.percentile == 0.1);
}

TEST_CASE("threshold, patient and wilcoxon pruners parse with their options and defaults",
          "[config]") {
  const PrunerConfig th = Parsed(WithPruner(R"(kind = "threshold"
lower = -1
upper = 2.5
n_warmup_steps = 3
interval_steps = 2
)"))
                              .pruner;
  CHECK(th.kind == "threshold");
  CHECK(th.lower == -1.0);
  CHECK(th.upper == 2.5);
  CHECK(th.n_warmup_steps == 3);
  CHECK(th.interval_steps == 2);
  const PrunerConfig upper = Parsed(WithPruner("kind = \"threshold\"\nupper = 1\n")).pruner;
  CHECK_FALSE(upper.lower.has_value());
  CHECK(upper.upper == 1.0);
  CHECK(upper.n_warmup_steps == 0);
  CHECK(upper.interval_steps == 1);
  CHECK(Parsed(WithPruner("kind = \"threshold\"\nlower = 2\nupper = 2\n")).pruner.lower == 2.0);

  const PrunerConfig alone = Parsed(WithPruner("kind = \"patient\"\npatience = 0\n")).pruner;
  CHECK(alone.kind == "patient");
  CHECK(alone.patience == 0);
  CHECK(alone.min_delta == 0);
  CHECK(alone.wrapped == nullptr);
  const PrunerConfig patient = Parsed(WithPruner(R"(kind = "patient"
patience = 3
min_delta = 0.01
[pruner.wrapped]
kind = "percentile"
percentile = 25
n_warmup_steps = 2
)"))
                                   .pruner;
  CHECK(patient.patience == 3);
  CHECK(patient.min_delta == 0.01);
  REQUIRE(patient.wrapped != nullptr);
  CHECK(patient.wrapped->kind == "percentile");
  CHECK(patient.wrapped->percentile == 25);
  CHECK(patient.wrapped->n_warmup_steps == 2);
  CHECK(patient.wrapped->n_startup_trials == 5);
  // The inline form, and a patient pruner wrapping another.
  const PrunerConfig nested = Parsed(WithPruner("kind = \"patient\"\npatience = 1\nwrapped = { "
                                                "kind = \"patient\", patience = 2, wrapped = "
                                                "{ kind = \"threshold\", upper = 9 } }\n"))
                                  .pruner;
  REQUIRE(nested.wrapped != nullptr);
  CHECK(nested.wrapped->patience == 2);
  REQUIRE(nested.wrapped->wrapped != nullptr);
  CHECK(nested.wrapped->wrapped->upper == 9.0);

  const PrunerConfig w = Parsed(WithPruner("kind = \"wilcoxon\"\n")).pruner;
  CHECK(w.kind == "wilcoxon");
  CHECK(w.p_threshold == 0.1);  // Optuna's defaults
  CHECK(w.n_startup_steps == 2);
  const PrunerConfig w2 =
      Parsed(WithPruner("kind = \"wilcoxon\"\np_threshold = 0\nn_startup_steps = 0\n")).pruner;
  CHECK(w2.p_threshold == 0);
  CHECK(w2.n_startup_steps == 0);
  CHECK(Parsed(WithPruner("kind = \"wilcoxon\"\np_threshold = 1\n")).pruner.p_threshold == 1);
}

TEST_CASE("threshold, patient and wilcoxon option mistakes name the key and its place",
          "[config]") {
  const std::pair<const char*, const char*> cases[] = {
      {"kind = \"threshold\"\n",
       "sweep.toml:13:1: [pruner] has neither lower nor upper; expected lower, upper or both "
       "with kind = \"threshold\" (a trial is pruned when its latest value is below lower or "
       "above upper)"},
      {"kind = \"threshold\"\nupper = 1\nlower = 2\n",
       "sweep.toml:15:9: [pruner] upper = 1: less than lower = 2; expected upper >= lower"},
      {"kind = \"threshold\"\nlower = \"a\"\n",
       "sweep.toml:15:9: [pruner] lower = \"a\": expected a finite number"},
      {"kind = \"threshold\"\nupper = nan\n",
       "sweep.toml:15:9: [pruner] upper = nan: expected a finite number"},
      {"kind = \"threshold\"\nupper = 1\ninterval_steps = 0\n",
       "sweep.toml:16:18: [pruner] interval_steps = 0: expected an integer >= 1"},
      {"kind = \"threshold\"\nupper = 1\nn_warmup_steps = -1\n",
       "sweep.toml:16:18: [pruner] n_warmup_steps = -1: expected an integer >= 0"},
      {"kind = \"patient\"\n",
       "sweep.toml:13:1: [pruner] missing required key \"patience\"; expected an integer >= 0 "
       "with kind = \"patient\" (steps without improvement before the wrapped pruner decides)"},
      {"kind = \"patient\"\npatience = -1\n",
       "sweep.toml:15:12: [pruner] patience = -1: expected an integer >= 0"},
      {"kind = \"patient\"\npatience = 1\nmin_delta = -0.1\n",
       "sweep.toml:16:13: [pruner] min_delta = -0.1: expected a number >= 0"},
      {"kind = \"patient\"\npatience = 1\nwrapped = \"median\"\n",
       "sweep.toml:16:11: [pruner] wrapped = \"median\": expected a table [pruner.wrapped] with "
       "the kind and options of the pruner to wrap, e.g. kind = \"median\"; leave it out to "
       "prune on patience alone"},
      {"kind = \"patient\"\npatience = 1\n[pruner.wrapped]\nkind = \"median\"\n"
       "n_warmup_steps = -1\n",
       "sweep.toml:18:18: [pruner.wrapped] n_warmup_steps = -1: expected an integer >= 0"},
      {"kind = \"patient\"\npatience = 1\n[pruner.wrapped]\nkind = \"mean\"\n",
       "sweep.toml:17:8: [pruner.wrapped] kind = \"mean\": unknown pruner kind; expected one of "
       "nop, median, percentile, asha, hyperband, threshold, patient, wilcoxon"},
      {"kind = \"patient\"\npatience = 1\n[pruner.wrapped]\nkind = \"patient\"\n",
       "sweep.toml:16:1: [pruner.wrapped] missing required key \"patience\"; expected an integer "
       ">= 0 with kind = \"patient\" (steps without improvement before the wrapped pruner "
       "decides)"},
      {"kind = \"wilcoxon\"\np_threshold = 1.5\n",
       "sweep.toml:15:15: [pruner] p_threshold = 1.5: expected a number in [0, 1]"},
      {"kind = \"wilcoxon\"\np_threshold = -0.1\n",
       "sweep.toml:15:15: [pruner] p_threshold = -0.1: expected a number in [0, 1]"},
      {"kind = \"wilcoxon\"\nn_startup_steps = -1\n",
       "sweep.toml:15:19: [pruner] n_startup_steps = -1: expected an integer >= 0"},
  };
  for (const auto& [body, error] : cases) {
    INFO(body);
    CHECK(ErrorOf(WithPruner(body)) == error);
  }
  // Options of the new kinds on other kinds, and the other way round.
  CHECK_THAT(ErrorOf(WithPruner("kind = \"median\"\nupper = 1\n")),
             StartsWith("sweep.toml:15:1: [pruner] upper = 1: an option of kind = "
                        "\"threshold\", not of kind = \"median\""));
  CHECK_THAT(ErrorOf(WithPruner("kind = \"wilcoxon\"\nn_warmup_steps = 1\n")),
             StartsWith("sweep.toml:15:1: [pruner] n_warmup_steps = 1: an option of kind = "
                        "\"median\", \"percentile\" or \"threshold\", not of kind = \"wilcoxon\""));
  CHECK_THAT(ErrorOf(WithPruner("kind = \"median\"\n[pruner.wrapped]\nkind = \"median\"\n")),
             StartsWith("sweep.toml:15:9: [pruner] wrapped = <table>: an option of kind = "
                        "\"patient\", not of kind = \"median\""));
}

}  // namespace
}  // namespace triald::config
