#!/usr/bin/python3
"""Multi-objective benchmark: triald's samplers against Optuna 3.1's, side by side.

Functions (all minimised over [0, 1]^n): ZDT1 and ZDT2 (10 variables, 2 objectives) and DTLZ2
(8 variables, 3 objectives). For every (function, sampler) and each of S seeds (default 20), a
study of N trials (default 300) runs one trial at a time; the table shows the median and the
interquartile range, over seeds, of the hypervolume of the first 100 and the first N trials.

Reference point (both sides): 1.1 times the largest value each objective takes on the box, so
that every trial counts: ZDT1 and ZDT2 (1.1, 11) (f1 <= 1, f2 <= g <= 10), DTLZ2
(2.75, 2.75, 2.75) (each f <= 1 + g <= 2.5). The hypervolume is computed by one code for both
sides: triald's pareto::Hypervolume, through the driver's `hypervolume` mode for Optuna's
trials. Optuna's own WFG (optuna._hypervolume.WFG) recomputes every Optuna front as a check; the
largest relative difference is printed.

Samplers (--samplers, comma-separated):
  nsga2   triald [sampler] kind = "nsga2" (defaults)  vs  optuna NSGAIISampler(seed=s) (defaults:
          population 50, uniform crossover 0.9, swapping 0.5, mutation 1/n)
  tpe     triald [sampler] kind = "tpe" (defaults) with several objectives  vs  optuna
          TPESampler(multivariate=True, seed=s) (MOTPE); the triald row is meaningful only in a
          build whose TPE handles several objectives
  random  triald random  vs  optuna RandomSampler(seed=s)
Optuna's MOTPE is slow (about 200 s for one 300-trial ZDT1 study on a 2-core VM): --jobs J runs
J Optuna studies at once.
triald's samplers run in-process through the C++ driver (tests/tools/bench_samplers.cc, mode
`multiobjective`: MakeSampler + SampleParams over a StudyView with several directions, exactly as
the daemon calls them).

Figures only: nothing is asserted. Uses Debian's python3-optuna (3.1), hence /usr/bin/python3.

    /usr/bin/python3 scripts/bench_multiobjective.py [--quick] [--seeds S] [--trials N]
        [--samplers nsga2,tpe,random] [--functions zdt1,zdt2,dtlz2]
        [--jobs J] [--driver build/bin/triald-bench-samplers]
"""

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_search import quiet_optuna, quantiles  # noqa: E402  (shared with the other sampler benchmarks)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------------------------------------
# Objective functions: identical to tests/tools/bench_samplers.cc; keep them in step.


def zdt_g(x):
    return 1 + 9 * sum(x[1:]) / (len(x) - 1)


def zdt1(t):
    x = [t.suggest_float(f"x{i}", 0, 1) for i in range(10)]
    g = zdt_g(x)
    return x[0], g * (1 - math.sqrt(x[0] / g))


def zdt2(t):
    x = [t.suggest_float(f"x{i}", 0, 1) for i in range(10)]
    g = zdt_g(x)
    return x[0], g * (1 - (x[0] / g) ** 2)


def dtlz2(t):
    x = [t.suggest_float(f"x{i}", 0, 1) for i in range(8)]
    g = sum((v - 0.5) ** 2 for v in x[2:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return ((1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b),
            (1 + g) * math.sin(a))


# name -> (objective, reference point)
FUNCTIONS = {"zdt1": (zdt1, [1.1, 11.0]), "zdt2": (zdt2, [1.1, 11.0]),
             "dtlz2": (dtlz2, [2.75, 2.75, 2.75])}
SAMPLERS = ("nsga2", "tpe", "random")

# ------------------------------------------------------------------------------------------------


def run_driver(driver, args, stdin=None):
    try:
        out = subprocess.run([driver] + args, check=True, capture_output=True, text=True,
                             input=stdin)
    except FileNotFoundError:
        sys.exit(f"bench_multiobjective: driver {driver} not found; build it first "
                 "(cmake --build build --target triald-bench-samplers) or pass --driver")
    except subprocess.CalledProcessError as e:
        return None, e.stderr.strip()
    return out.stdout.splitlines(), None


def rank_sum_p(a, b):
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, ties averaged): how
    likely two samples this far apart are when both come from one distribution."""
    pooled = sorted((v, i) for i, v in enumerate(a + b))
    ranks = [0.0] * len(pooled)
    k = 0
    while k < len(pooled):
        end = k
        while end + 1 < len(pooled) and pooled[end + 1][0] == pooled[k][0]:
            end += 1
        for j in range(k, end + 1):
            ranks[pooled[j][1]] = (k + end) / 2 + 1
        k = end + 1
    n1, n2 = len(a), len(b)
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    sigma = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    if sigma == 0:
        return 1.0
    return math.erfc(abs(u - n1 * n2 / 2) / sigma / math.sqrt(2))


def non_dominated(points):
    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
    return [p for p in points if not any(dominates(q, p) for q in points)]


def optuna_sampler(optuna, kind, seed):
    if kind == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if kind == "tpe":
        return optuna.samplers.TPESampler(multivariate=True, seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def optuna_study(run):
    """One Optuna study (function, sampler, seed, trials); its trials' values in order."""
    name, kind, seed, trials = run
    optuna = quiet_optuna()
    fn, reference = FUNCTIONS[name]
    study = optuna.create_study(directions=["minimize"] * len(reference),
                                sampler=optuna_sampler(optuna, kind, seed))
    study.optimize(fn, n_trials=trials)
    return [t.values for t in study.trials]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 100 trials")
    parser.add_argument("--seeds", type=int, help="seeds per (function, sampler); default 20")
    parser.add_argument("--trials", type=int, help="trials per study; default 300")
    parser.add_argument("--samplers", default="nsga2",
                        help="comma-separated subset of " + ", ".join(SAMPLERS) + "; default nsga2")
    parser.add_argument("--functions", default=",".join(FUNCTIONS),
                        help="comma-separated subset of " + ", ".join(FUNCTIONS))
    parser.add_argument("--driver", default=os.path.join(REPO, "build", "bin",
                                                         "triald-bench-samplers"),
                        help="path of triald-bench-samplers (default build/bin/...)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="Optuna studies run in this many processes at once; default 1")
    args = parser.parse_args()
    seeds = args.seeds if args.seeds is not None else (3 if args.quick else 20)
    trials = args.trials if args.trials is not None else (100 if args.quick else 300)
    if seeds < 1 or trials < 1:
        parser.error("--seeds and --trials must be >= 1")
    functions = [f for f in args.functions.split(",") if f]
    samplers = [s for s in args.samplers.split(",") if s]
    unknown = [f for f in functions if f not in FUNCTIONS]
    unknown += [s for s in samplers if s not in SAMPLERS]
    if unknown or not functions or not samplers:
        parser.error(f"unknown or missing --functions/--samplers entries: {unknown}")
    checkpoints = sorted({100, trials} if trials > 100 else {trials})
    try:
        optuna = quiet_optuna()
    except ImportError:
        sys.exit("bench_multiobjective: optuna is not installed (apt-get install python3-optuna)")
    from optuna._hypervolume import WFG
    import numpy as np
    print(f"Optuna {optuna.__version__}; driver {args.driver}; {seeds} seeds, {trials} trials")

    results = {}  # (function, system, sampler) -> list of {checkpoint: hypervolume}
    failed = {}   # (function, sampler) -> why the triald row could not run
    timing = {}
    t0 = time.perf_counter()
    for kind in samplers:
        lines, err = run_driver(args.driver, [
            "multiobjective", "--seeds", str(seeds), "--checkpoints",
            ",".join(str(c) for c in checkpoints), "--functions", ",".join(functions),
            "--samplers", kind])
        if lines is None:
            for f in functions:
                failed[(f, kind)] = err
            continue
        for row in map(json.loads, lines):
            results.setdefault((row["function"], "triald", row["sampler"]), []).append(
                {int(c): v for c, v in row["hypervolume"].items()})
    timing["triald"] = time.perf_counter() - t0

    # Optuna: run every study, then measure every checkpoint's front with the driver.
    t0 = time.perf_counter()
    requests, keys, wfg_checks = [], [], []
    runs = [(name, kind, seed, trials) for name in functions for kind in samplers
            for seed in range(seeds)]
    if args.jobs > 1:
        with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
            all_values = list(pool.map(optuna_study, runs))
    else:
        all_values = [optuna_study(run) for run in runs]
    for (name, kind, seed, _), values in zip(runs, all_values):
        reference = FUNCTIONS[name][1]
        for c in checkpoints:
            points = values[:c]
            requests.append(" ".join(repr(r) for r in reference) + " | " +
                            " | ".join(" ".join(repr(v) for v in p) for p in points))
            keys.append((name, kind, seed, c))
            front = [p for p in non_dominated(points)
                     if all(v < r for v, r in zip(p, reference))]
            wfg = (WFG().compute(np.array(front), np.array(reference)) if front else 0.0)
            wfg_checks.append(wfg)
    timing["optuna"] = time.perf_counter() - t0
    lines, err = run_driver(args.driver, ["hypervolume"], stdin="\n".join(requests) + "\n")
    if lines is None:
        sys.exit(f"bench_multiobjective: the driver's hypervolume mode failed: {err}")
    worst = 0.0
    by_run = {}
    for (name, kind, seed, c), hv, wfg in zip(keys, map(float, lines), wfg_checks):
        by_run.setdefault((name, kind, seed), {})[c] = hv
        worst = max(worst, abs(hv - wfg) / max(abs(wfg), 1e-300))
    for (name, kind, seed), hv in sorted(by_run.items()):
        results.setdefault((name, "optuna", kind), []).append(hv)

    print(f"\n== Hypervolume (larger is better), median [q25, q75] over {seeds} seeds ==")
    print("reference points: " + "; ".join(f"{n} {tuple(FUNCTIONS[n][1])}" for n in functions))
    header = f"{'function':<8} {'sampler':<14}"
    for c in checkpoints:
        header += f" {'after ' + str(c):>34}"
    print(header)
    verdicts = []
    for name in functions:
        first = True
        for kind in samplers:
            for system in ("triald", "optuna"):
                label = f"{system} {kind}"
                line = f"{name if first else '':<8} {label:<14}"
                first = False
                runs = results.get((name, system, kind))
                if not runs:
                    print(line + "  n/a: " + failed.get((name, kind), "no result"))
                    continue
                for c in checkpoints:
                    med, q1, q3 = quantiles([r[c] for r in runs])
                    line += f" {med:>12.5g} [{q1:>9.5g}, {q3:>9.5g}]"
                print(line)
            ours, theirs = results.get((name, "triald", kind)), results.get((name, "optuna", kind))
            if ours and theirs:
                parts = []
                for c in checkpoints:
                    a = quantiles([r[c] for r in ours])[0]
                    b = quantiles([r[c] for r in theirs])[0]
                    p = rank_sum_p([r[c] for r in ours], [r[c] for r in theirs])
                    word = "better" if a > b else ("equal" if a == b else "worse")
                    parts.append(f"after {c}: {word} ({a:.5g} vs {b:.5g}, {a / b - 1:+.2%}, "
                                 f"p = {p:.2f})")
                verdicts.append(f"  {name:<6} {kind:<7} " + "; ".join(parts))
    if verdicts:
        print("\ntriald vs Optuna (median hypervolume; larger is better; p: two-sided "
              "Mann-Whitney U over the seeds, large p = no detectable difference):")
        print("\n".join(verdicts))
    print(f"\nhypervolume check: pareto::Hypervolume vs optuna._hypervolume.WFG on every Optuna "
          f"front, largest relative difference {worst:.2e}")
    print(f"(run time: triald {timing['triald']:.1f} s, Optuna {timing['optuna']:.1f} s)")


if __name__ == "__main__":
    main()
