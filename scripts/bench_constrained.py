#!/usr/bin/python3
"""Constrained TPE benchmark: triald's TPE against Optuna 3.1's TPESampler(constraints_func=...).

Quality: two constrained functions, minimised, N trials (default 100) for each of S seeds
(default 20): cquadratic4 (sum (x_i - 1)^2 on [-3, 3]^4 with sum x_i <= 1 and x3 >= 0.5; best
7/3, about a quarter of the box feasible) and cbranin (Branin with x0 x1 >= 40 and
x0 + x1 <= 18, which makes every global minimum of Branin infeasible; best 2.6849 near
(9.78, 4.09), about 15% of the box feasible). The table shows, per (function, sampler), the
median [q25, q75] over seeds of the best feasible value after 30 and after N trials (a seed with
no feasible trial yet counts as +inf), and the median number of feasible trials. triald runs
in-process through the C++ driver (tests/tools/bench_samplers.cc, mode "constrained": TPE with
its defaults, each trial storing its constraints as a worker reports them, which turns the
constrained split on); Optuna runs here with TPESampler(multivariate=True, seed=s,
constraints_func=...) (multivariate, as triald's default and scripts/bench_search.py).

Speed (multi-objective TPE): time of one suggestion with a history of H COMPLETE trials of 5
floats (random points of DTLZ2 with 2 and 3 objectives; H = 1000 by default). triald:
SampleParams() in the driver (mode "mo-speed"). Optuna: sampler.sample_relative() of
TPESampler(multivariate=True) on a study holding the same kind of history, a few calls. Wall
and CPU time.

Figures only: nothing is asserted. Uses Debian's python3-optuna (3.1), hence /usr/bin/python3.

    /usr/bin/python3 scripts/bench_constrained.py [--quick] [--seeds S] [--trials N]
        [--history 1000] [--skip-quality] [--skip-speed]
        [--driver build/bin/triald-bench-samplers]
"""

import argparse
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_search import quiet_optuna, run_driver, quantiles  # noqa: E402  (shared with the other sampler benchmarks)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------------------------------------
# Constrained functions: identical to tests/tools/bench_samplers.cc; keep them in step. Each
# returns (value, constraints).


def cquadratic4(t):
    x = [t.suggest_float(f"x{i}", -3, 3) for i in range(4)]
    return sum((xi - 1) ** 2 for xi in x), [sum(x) - 1, 0.5 - x[3]]


def cbranin(t):
    x1 = t.suggest_float("x0", -5, 10)
    x2 = t.suggest_float("x1", 0, 15)
    b, c, s = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    value = (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - s) * math.cos(x1) + 10
    return value, [(40 - x1 * x2) / 40, (x1 + x2 - 18) / 10]


FUNCTIONS = {"cquadratic4": cquadratic4, "cbranin": cbranin}


def dtlz2(x, m):
    g = sum((xi - 0.5) ** 2 for xi in x[m - 1:])
    f = []
    for k in range(m):
        v = 1 + g
        for i in range(m - 1 - k):
            v *= math.cos(x[i] * math.pi / 2)
        if k > 0:
            v *= math.sin(x[m - 1 - k] * math.pi / 2)
        f.append(v)
    return f


# ------------------------------------------------------------------------------------------------

def fmt(x):
    if math.isinf(x):
        return "inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3e}"
    return f"{x:.4g}"


def optuna_run(optuna, fn, seed, trials, checkpoints):
    def constraints(trial):
        return trial.user_attrs["constraints"]

    sampler = optuna.samplers.TPESampler(multivariate=True, seed=seed,
                                         constraints_func=constraints)
    study = optuna.create_study(sampler=sampler)

    def objective(t):
        value, c = fn(t)
        t.set_user_attr("constraints", c)
        return value

    study.optimize(objective, n_trials=trials)
    best, feasible, out_best, out_feasible = math.inf, 0, {}, {}
    for i, t in enumerate(study.trials, start=1):
        if all(c <= 0 for c in t.user_attrs["constraints"]):
            feasible += 1
            best = min(best, t.value)
        if i in checkpoints:
            out_best[str(i)] = best
            out_feasible[str(i)] = feasible
    return out_best, out_feasible


def quality(args, optuna):
    checkpoints = sorted({30, args.trials} if args.trials > 30 else {args.trials})
    cp_arg = ",".join(str(c) for c in checkpoints)
    results = {}  # (function, system) -> list of (best, feasible) dicts
    t0 = time.perf_counter()
    for row in run_driver(args.driver, ["constrained", "--seeds", str(args.seeds), "--trials",
                                        str(args.trials), "--checkpoints", cp_arg,
                                        "--functions", ",".join(args.functions)]):
        best = {k: (math.inf if v is None else v) for k, v in row["best"].items()}
        results.setdefault((row["function"], "triald"), []).append((best, row["feasible"]))
    t_triald = time.perf_counter() - t0
    t0 = time.perf_counter()
    for name in args.functions:
        for seed in range(args.seeds):
            results.setdefault((name, "optuna"), []).append(
                optuna_run(optuna, FUNCTIONS[name], seed, args.trials, set(checkpoints)))
    t_optuna = time.perf_counter() - t0

    print(f"\n== Constrained quality: best feasible value (minimised), median [q25, q75] over "
          f"{args.seeds} seeds, {args.trials} trials; median feasible trials ==")
    header = f"{'function':<12} {'sampler':<12}"
    for c in checkpoints:
        header += f" {'after ' + str(c):>32} {'feas':>5}"
    print(header)
    verdicts = {}
    for name in args.functions:
        for i, system in enumerate(("triald", "optuna")):
            runs = results[(name, system)]
            line = f"{name if i == 0 else '':<12} {system + ' tpe':<12}"
            for c in checkpoints:
                med, q1, q3 = quantiles([b[str(c)] for b, _ in runs])
                feas, _, _ = quantiles([f[str(c)] for _, f in runs])
                verdicts[(name, system, c)] = med
                line += f" {fmt(med):>12} [{fmt(q1):>8}, {fmt(q3):>8}] {feas:>5.0f}"
            print(line)
    print("\ntriald constrained TPE vs Optuna's (median best feasible; lower is better):")
    for name in args.functions:
        parts = []
        for c in checkpoints:
            ours, theirs = verdicts[(name, "triald", c)], verdicts[(name, "optuna", c)]
            word = "better" if ours < theirs else ("equal" if ours == theirs else "worse")
            parts.append(f"after {c}: {word} ({fmt(ours)} vs {fmt(theirs)})")
        print(f"  {name:<12} " + "; ".join(parts))
    print(f"(run time: triald {t_triald:.1f} s, Optuna {t_optuna:.1f} s)")


def optuna_mo_speed(optuna, m, n, repeats):
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    dists = {f"x{i}": FloatDistribution(0, 1) for i in range(5)}
    rng = random.Random(12345)
    sampler = optuna.samplers.TPESampler(multivariate=True, seed=7)
    study = optuna.create_study(directions=["minimize"] * m, sampler=sampler)
    for _ in range(n):
        x = [rng.random() for _ in range(5)]
        study.add_trial(create_trial(params={f"x{i}": v for i, v in enumerate(x)},
                                     distributions=dists, values=dtlz2(x, m)))
    trial = study.ask()
    space = sampler.infer_relative_search_space(study, trial)
    frozen = study._storage.get_trial(trial._trial_id)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        sampler.sample_relative(study, frozen, space)
    return (1e3 * (time.perf_counter() - wall) / repeats,
            1e3 * (time.process_time() - cpu) / repeats)


def speed(args, optuna):
    print(f"\n== Multi-objective TPE: time per suggestion (ms), history of COMPLETE trials of "
          "5 floats (DTLZ2) ==")
    print(f"{'objectives':>10} {'history':>8} {'triald wall':>12} {'triald cpu':>11} "
          f"{'optuna wall':>12} {'optuna cpu':>11} {'ratio (cpu)':>12}")
    rows = run_driver(args.driver, ["mo-speed", "--history",
                                    ",".join(str(h) for h in args.history), "--repeats",
                                    str(args.speed_repeats), "--objectives", "2,3"])
    for row in rows:
        m, n = row["objectives"], row["history"]
        if args.skip_optuna_speed:
            ow = oc = math.nan
        else:
            ow, oc = optuna_mo_speed(optuna, m, n, args.optuna_repeats)
        ratio = oc / row["cpu_ms_per_suggestion"] if row["cpu_ms_per_suggestion"] > 0 else 0
        print(f"{m:>10} {n:>8} {row['ms_per_suggestion']:>12.3f} "
              f"{row['cpu_ms_per_suggestion']:>11.3f} {ow:>12.1f} {oc:>11.1f} {ratio:>11.0f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 seeds, fewer timing repeats")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per function (20)")
    parser.add_argument("--trials", type=int, default=100, help="trials per study (100)")
    parser.add_argument("--history", default="1000", help="MO speed history sizes (1000)")
    parser.add_argument("--driver", default=os.path.join(REPO, "build", "bin",
                                                         "triald-bench-samplers"),
                        help="path of triald-bench-samplers (default build/bin/...)")
    parser.add_argument("--functions", default=",".join(FUNCTIONS),
                        help="comma-separated subset of " + ", ".join(FUNCTIONS))
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-optuna-speed", action="store_true",
                        help="time triald only in the speed section")
    args = parser.parse_args()
    if args.seeds is None:
        args.seeds = 5 if args.quick else 20
    if args.seeds < 1 or args.trials < 1:
        parser.error("--seeds and --trials must be >= 1")
    try:
        args.history = [int(h) for h in args.history.split(",")]
    except ValueError:
        parser.error(f"--history: expected comma-separated integers, got {args.history!r}")
    if any(h < 1 for h in args.history):
        parser.error("--history sizes must be >= 1")
    args.functions = [f for f in args.functions.split(",") if f]
    unknown = [f for f in args.functions if f not in FUNCTIONS]
    if unknown or not args.functions:
        parser.error(f"unknown or missing --functions entries: {unknown}")
    args.speed_repeats = 5 if args.quick else 20
    args.optuna_repeats = 2 if args.quick else 3

    try:
        optuna = quiet_optuna()
    except ImportError:
        sys.exit("bench_constrained: optuna is not installed (apt-get install python3-optuna)")
    print(f"Optuna {optuna.__version__}; driver {args.driver}")
    if not args.skip_quality:
        quality(args, optuna)
    if not args.skip_speed:
        speed(args, optuna)
    return 0


if __name__ == "__main__":
    sys.exit(main())
