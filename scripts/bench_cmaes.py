#!/usr/bin/python3
"""CMA-ES benchmark: triald's kind = "cmaes" sampler against Optuna 3.1's CmaEsSampler.

Quality: Rosenbrock (5-d on [-5, 10]) and Ackley (5-d on [-32.768, 32.768]), minimised, N trials
(default 200) for each of S seeds (default 20), sequentially and with P trials in parallel
(default 4: P trials asked at once, each told as it finishes, the oldest first, then one more
asked). For every (function, parallelism) the table shows the median and the interquartile range,
over seeds, of the best value found. triald runs in-process through the C++ driver
(tests/tools/bench_samplers.cc, mode cmaes: MakeSampler + SampleParams, as the daemon calls them);
Optuna runs here with CmaEsSampler(seed=s) and default options, through study.ask()/study.tell()
in the same order.

Speed: time of one suggestion after H trials (default 1000) of a CMA-ES study on a 5-d sphere.
triald: SampleParams() in the driver (the generation replay included). Optuna: a full
study.ask() (then tell(FAIL), which CMA-ES ignores), and sampler.sample_relative() alone; wall
and CPU time, with the ratio Optuna / triald.

Figures only: nothing is asserted. Uses Debian's python3-optuna (3.1) and python3-cmaes, hence
/usr/bin/python3.

    /usr/bin/python3 scripts/bench_cmaes.py [--seeds S] [--trials N] [--parallel 1,4]
                                            [--functions rosenbrock5,ackley5] [--history 1000]
                                            [--driver build/bin/triald-bench-samplers]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_search  # noqa: E402  (objective functions, driver runner, quantiles, formatting)

FUNCTIONS = ["rosenbrock5", "ackley5"]


def optuna_best(optuna, fn, seed, trials, parallel):
    sampler = optuna.samplers.CmaEsSampler(seed=seed)
    study = optuna.create_study(sampler=sampler)
    best = float("inf")

    # Optuna samples a trial's relative parameters when it is asked, so the objective is evaluated
    # at once and its value kept until the trial's turn to finish.
    class Pending:
        def __init__(self, trial):
            self.trial = trial
            self.value = fn(trial)

    pending = []
    for _ in range(trials):
        if len(pending) >= parallel:
            p = pending.pop(0)
            study.tell(p.trial, p.value)
            best = min(best, p.value)
        pending.append(Pending(study.ask()))
    for p in pending:
        study.tell(p.trial, p.value)
        best = min(best, p.value)
    return best


def quality(args, optuna):
    ours = {}
    t0 = time.perf_counter()
    for row in bench_search.run_driver(
            args.driver, ["cmaes", "--seeds", str(args.seeds), "--trials", str(args.trials),
                          "--functions", ",".join(args.functions), "--parallel",
                          ",".join(str(p) for p in args.parallel), "--history",
                          ",".join(str(h) for h in args.history), "--repeats",
                          str(args.speed_repeats)]):
        if row["mode"] == "cmaes":
            ours.setdefault((row["function"], row["parallel"]), []).append(row["best"])
        else:
            ours[("speed", row["history"])] = (row["ms_per_suggestion"],
                                                row["cpu_ms_per_suggestion"])
    t_triald = time.perf_counter() - t0
    theirs = {}
    t0 = time.perf_counter()
    for name in args.functions:
        for p in args.parallel:
            for seed in range(args.seeds):
                theirs.setdefault((name, p), []).append(
                    optuna_best(optuna, bench_search.FUNCTIONS[name], seed, args.trials, p))
    t_optuna = time.perf_counter() - t0

    fmt = bench_search.fmt
    print(f"\n== Quality: best value after {args.trials} trials (minimised), median [q25, q75] "
          f"over {args.seeds} seeds ==")
    print(f"{'function':<12} {'parallel':>8} {'triald cmaes':>34} {'Optuna CmaEsSampler':>34}  "
          f"verdict")
    for name in args.functions:
        for p in args.parallel:
            a = bench_search.quantiles(ours[(name, p)])
            b = bench_search.quantiles(theirs[(name, p)])
            word = "better" if a[0] < b[0] else ("equal" if a[0] == b[0] else "worse")
            print(f"{name:<12} {p:>8} {fmt(a[0]):>12} [{fmt(a[1]):>8}, {fmt(a[2]):>8}] "
                  f"{fmt(b[0]):>12} [{fmt(b[1]):>8}, {fmt(b[2]):>8}]  {word}")
    print(f"(run time: triald {t_triald:.1f} s, Optuna {t_optuna:.1f} s)")
    return ours


def optuna_speed(optuna, n, repeats):
    from optuna.distributions import FloatDistribution

    dists = {f"x{i}": FloatDistribution(0, 1) for i in range(5)}
    study = optuna.create_study(sampler=optuna.samplers.CmaEsSampler(seed=7))
    study.optimize(lambda t: sum((t.suggest_float(k, 0, 1) - 0.3) ** 2 for k in dists),
                   n_trials=n)
    study.tell(study.ask(dists), state=optuna.trial.TrialState.FAIL)  # warm-up, untimed

    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        study.tell(study.ask(dists), state=optuna.trial.TrialState.FAIL)
    ask = ((time.perf_counter() - wall) / repeats * 1e3, (time.process_time() - cpu) / repeats * 1e3)

    trial = study.ask()
    frozen = study._storage.get_trial(trial._trial_id)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        study.sampler.sample_relative(study, frozen, dists)
    rel = ((time.perf_counter() - wall) / repeats * 1e3, (time.process_time() - cpu) / repeats * 1e3)
    return ask, rel


def speed(args, optuna, ours):
    fmt = bench_search.fmt
    print("\n== Speed: ms per CMA-ES suggestion, 5 float params, after H trials of a CMA-ES "
          "study (wall / CPU) ==")
    print(f"{'H':>6} {'triald':>17} {'Optuna ask()':>19} {'Optuna sample_relative':>23} "
          f"{'ratio ask/triald':>18} {'ratio rel/triald':>17}")
    for n in args.history:
        ask, rel = optuna_speed(optuna, n, args.optuna_repeats)
        w, c = ours[("speed", n)]
        print(f"{n:>6} {fmt(w):>8} / {fmt(c):>6} {fmt(ask[0]):>9} / {fmt(ask[1]):>7} "
              f"{fmt(rel[0]):>11} / {fmt(rel[1]):>9} "
              f"{ask[0] / w:>8.0f}x / {ask[1] / c:>5.0f}x {rel[0] / w:>8.0f}x / {rel[1] / c:>5.0f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--parallel", default="1,4",
                        type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--functions", default=",".join(FUNCTIONS),
                        type=lambda s: [x for x in s.split(",") if x])
    parser.add_argument("--history", default="1000",
                        type=lambda s: [int(x) for x in s.split(",") if x])
    parser.add_argument("--speed-repeats", type=int, default=50)
    parser.add_argument("--optuna-repeats", type=int, default=20)
    parser.add_argument("--driver", default=os.path.join(bench_search.REPO, "build", "bin",
                                                         "triald-bench-samplers"))
    args = parser.parse_args()
    optuna = bench_search.quiet_optuna()
    print(f"Optuna {optuna.__version__}; driver {args.driver}")
    ours = quality(args, optuna)
    speed(args, optuna, ours)


if __name__ == "__main__":
    main()
