#!/usr/bin/python3
"""GP sampler benchmark: triald's kind = "gp" against triald's TPE and Optuna 3.1's TPE.

Quality, side by side in one run: six low-dimensional functions (branin, hartmann3, hartmann6,
logrosenbrock4 = log(1 + Rosenbrock-4), ackley4, lrsweep = a noisy validation loss over
learning rate x warm-up x weight decay), minimised, for S seeds (default 20); the best value
after 20, 40 and 60 trials of one study per seed. Then two constrained functions (cbranin,
cquadratic4: the best feasible value) and two functions run 4 trials at a time (4 asked at
once, the oldest told first, as the daemon runs parallelism 4). Medians with the interquartile
range over seeds; "<" marks where GP's median is lower than both others', and a summary counts
those per budget.

triald runs in-process through the C++ driver (tests/tools/bench_samplers.cc, mode gp:
MakeSampler + SampleParams, as the daemon calls them). Optuna runs here with
TPESampler(multivariate=True, seed=s) (and constraints_func for the constrained ones) through
study.ask()/study.tell() in the same order; the functions are defined identically in
scripts/bench_search.py and scripts/bench_constrained.py.

Cost per suggestion: one SampleParams() of the GP (fit and acquisition search) after 50, 100 and
300 random COMPLETE trials of 5 floats, wall and CPU time (driver mode speed), TPE beside it.

Figures only: nothing is asserted. Uses Debian's python3-optuna (3.1), hence /usr/bin/python3.

    /usr/bin/python3 scripts/bench_gp.py [--seeds S] [--checkpoints 20,40,60]
                                         [--functions F,...] [--history 50,100,300]
                                         [--skip-optuna] [--driver build/bin/triald-bench-samplers]
"""

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_constrained  # noqa: E402  (the constrained functions)
import bench_search  # noqa: E402  (objective functions, driver runner, quantiles, formatting)

CONSTRAINED = ["cbranin", "cquadratic4"]
PARALLEL = ["branin", "lrsweep"]
SYSTEMS = [("triald", "gp"), ("triald", "tpe"), ("optuna", "tpe")]


def optuna_run(optuna, fn, constrained, seed, checkpoints, parallel):
    """Best (feasible) value after each checkpoint, as the driver's gp mode runs a study."""
    kwargs = {}
    if constrained:
        kwargs["constraints_func"] = lambda trial: trial.user_attrs["constraints"]
    sampler = optuna.samplers.TPESampler(multivariate=True, seed=seed, **kwargs)
    study = optuna.create_study(sampler=sampler)
    trials = max(checkpoints)
    running = []
    values = [None] * trials

    def finish_oldest():
        number, trial = running.pop(0)
        if constrained:
            value, c = fn(trial)
            trial.set_user_attr("constraints", c)
            feasible = all(v <= 0 for v in c)
        else:
            value, feasible = fn(trial), True
        study.tell(trial, value)
        values[number] = value if feasible else None

    for n in range(trials):
        if len(running) >= parallel:
            finish_oldest()
        running.append((n, study.ask()))
    while running:
        finish_oldest()
    out, best = {}, math.inf
    for i, v in enumerate(values, start=1):
        if v is not None:
            best = min(best, v)
        if i in checkpoints:
            out[str(i)] = best
    return out


def collect(args, optuna, functions, parallel, constrained):
    """(function, system, sampler) -> list over seeds of {checkpoint: best}."""
    results = {}
    cp = ",".join(str(c) for c in args.checkpoints)
    t0 = time.perf_counter()
    for row in bench_search.run_driver(args.driver, [
            "gp", "--seeds", str(args.seeds), "--checkpoints", cp, "--functions",
            ",".join(functions), "--samplers", "gp,tpe", "--parallel", str(parallel)]):
        best = {k: (math.inf if v is None else v) for k, v in row["best"].items()}
        results.setdefault((row["function"], "triald", row["sampler"]), []).append(best)
    seconds = {"triald": time.perf_counter() - t0}
    if optuna is not None:
        t0 = time.perf_counter()
        table = bench_constrained.FUNCTIONS if constrained else bench_search.FUNCTIONS
        for name in functions:
            for seed in range(args.seeds):
                results.setdefault((name, "optuna", "tpe"), []).append(
                    optuna_run(optuna, table[name], constrained, seed, set(args.checkpoints),
                               parallel))
        seconds["optuna"] = time.perf_counter() - t0
    return results, seconds


def report(title, args, results, seconds, functions, wins):
    print(f"\n== {title}: best value (minimised), median [q25, q75] over {args.seeds} seeds")
    print("   " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
    systems = [s for s in SYSTEMS if (functions[0], s[0], s[1]) in results]
    header = f"{'function':<15}{'trials':>7}" + "".join(
        f"{f'{sys_} {kind}':>34}" for sys_, kind in systems)
    print(header)
    for name in functions:
        for c in args.checkpoints:
            medians, cells = {}, []
            for sys_, kind in systems:
                vals = [r[str(c)] for r in results[(name, sys_, kind)]]
                med, q1, q3 = bench_search.quantiles(vals)
                medians[(sys_, kind)] = med
                cells.append(f"{bench_search.fmt(med)} [{bench_search.fmt(q1)}, "
                             f"{bench_search.fmt(q3)}]")
            gp = medians[("triald", "gp")]
            others = [v for k, v in medians.items() if k != ("triald", "gp")]
            better = all(gp < v for v in others)
            wins.setdefault(c, []).append(better)
            print(f"{name:<15}{c:>7}" + "".join(f"{cell:>34}" for cell in cells) +
                  ("  <" if better else ""))


def speed(args):
    print("\n== Cost per suggestion (5 floats, random COMPLETE history), one SampleParams()")
    print(f"{'history':>8}{'sampler':>9}{'ms wall':>10}{'ms CPU':>10}")
    for row in bench_search.run_driver(args.driver, [
            "speed", "--history", ",".join(str(h) for h in args.history), "--samplers",
            "gp,tpe", "--repeats", "5"]):
        print(f"{row['history']:>8}{row['sampler']:>9}{row['ms_per_suggestion']:>10.2f}"
              f"{row['cpu_ms_per_suggestion']:>10.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--checkpoints", default="20,40,60")
    parser.add_argument("--functions", default=",".join(bench_search.GP_FUNCTIONS))
    parser.add_argument("--history", default="50,100,300")
    parser.add_argument("--skip-optuna", action="store_true")
    parser.add_argument("--driver", default=os.path.join(bench_search.REPO, "build", "bin",
                                                         "triald-bench-samplers"))
    args = parser.parse_args()
    args.checkpoints = sorted(int(c) for c in args.checkpoints.split(","))
    args.history = [int(h) for h in args.history.split(",")]
    functions = args.functions.split(",")
    unknown = [f for f in functions if f not in bench_search.FUNCTIONS]
    if unknown:
        sys.exit(f"bench_gp.py: unknown function(s) {', '.join(unknown)}")
    optuna = None if args.skip_optuna else bench_search.quiet_optuna()

    wins = {}
    results, seconds = collect(args, optuna, functions, 1, False)
    report("Quality, one trial at a time", args, results, seconds, functions, wins)
    summary = {c: (sum(w), len(w)) for c, w in wins.items()}
    other = {}
    results, seconds = collect(args, optuna, CONSTRAINED, 1, True)
    report("Constrained, one trial at a time (best feasible value)", args, results, seconds,
           CONSTRAINED, other)
    results, seconds = collect(args, optuna, PARALLEL, 4, False)
    report("Four trials at a time", args, results, seconds, PARALLEL, other)
    print("\n== GP's median lower than both others' (the six functions, one at a time):")
    for c, (won, total) in sorted(summary.items()):
        print(f"   after {c} trials: {won} of {total}")
    print("   (constrained and parallel variants: "
          + ", ".join(f"after {c}: {sum(w)} of {len(w)}" for c, w in sorted(other.items()))
          + ")")
    speed(args)


if __name__ == "__main__":
    main()
