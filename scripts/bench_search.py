#!/usr/bin/python3
"""Sampler benchmark: triald's TPE and random samplers against Optuna 3.1's, side by side.

Quality: Branin (2-d), Hartmann6 (6-d), Rosenbrock (5-d on [-5, 10]), Ackley (5-d on
[-32.768, 32.768]) and a mixed space (two floats, an int, a 3-way categorical with per-choice
offsets), all minimised, N trials (default 100) for each of S seeds (default 10). For every
(function, sampler) the table shows the median and the interquartile range, over seeds, of the
best value found after 30 and after N trials (--checkpoints: other trial counts). Those are the
five development functions (--functions dev, the default); --functions wide takes five of other
characters: Rastrigin (8-d, separable, a grid of local minima), Schwefel (4-d, separable and
deceptive, the best minimum near the edge), valley6 (6-d, a narrow curved valley along a rotated
axis), plateau4 (4-d, flat but for a small basin, so most trials tie) and logscale5 (log floats
and a log int as a training run has them); --functions all takes the ten. triald's samplers run in-process through the C++
driver (tests/tools/bench_samplers.cc: MakeSampler + SampleParams, exactly as the daemon calls
them); Optuna runs here, with TPESampler(multivariate=True, seed=s) and RandomSampler(seed=s).

Speed: time of one TPE suggestion with a history of H random COMPLETE trials of 5 floats
(H = 100, 1000, 5000). triald: SampleParams() in the driver. Optuna: a full study.ask() (then
tell(FAIL), so the history stays COMPLETE trials plus failures TPE ignores), and
sampler.sample_relative() alone, both averaged over a few calls. Wall and CPU time are shown
(CPU time is the fairer figure on a shared machine), with the ratio Optuna / triald.

Conditional (define-by-run): an optimizer choice whose three branches have their own
parameters and their own best value (sgd 0, rmsprop 0.1, adam 0.2; a learning rate all branches
share but each wants elsewhere). triald's TPE with group = true (the driver's conditional mode:
StartTrial + Suggest, as the daemon answers a python objective) against Optuna's
TPESampler(multivariate=True, group=True, seed=s); median [q25, q75] best after 30 and N trials.

Dynamic speed: one define-by-run trial asking for 5 floats, with a history of H COMPLETE trials
of those 5 suggested floats (H = 100, 1000). triald: StartTrial + 5 Suggest (the sampler's share
of an answered suggest, TPE group = true). Optuna: study.ask() + 5 trial.suggest_float() in
process, same sampler options. Shown per suggest (a trial's time / 5), wall and CPU.

Figures only: nothing is asserted. Uses Debian's python3-optuna (3.1), hence /usr/bin/python3.

    /usr/bin/python3 scripts/bench_search.py [--quick] [--seeds S] [--trials N]
                                             [--functions dev|wide|all|F,...] [--checkpoints A,B]
                                             [--driver build/bin/triald-bench-samplers]
"""

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------------------------------------
# Objective functions: identical to tests/tools/bench_samplers.cc; keep them in step.

HARTMANN_ALPHA = [1.0, 1.2, 3.0, 3.2]
HARTMANN_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8],
              [17, 8, 0.05, 10, 0.1, 14]]
HARTMANN_P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
              [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
              [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
              [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def branin(t):
    x1 = t.suggest_float("x0", -5, 10)
    x2 = t.suggest_float("x1", 0, 15)
    b, c, s = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - s) * math.cos(x1) + 10


def hartmann(x, a, p):
    total = 0.0
    for i in range(4):
        inner = sum(a[i][j] * (x[j] - p[i][j]) ** 2 for j in range(len(x)))
        total += HARTMANN_ALPHA[i] * math.exp(-inner)
    return -total


def hartmann6(t):
    return hartmann([t.suggest_float(f"x{i}", 0, 1) for i in range(6)], HARTMANN_A, HARTMANN_P)


def rosenbrock5(t):
    x = [t.suggest_float(f"x{i}", -5, 10) for i in range(5)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4))


def ackley(x):
    n = len(x)
    sq = sum(v * v for v in x)
    cs = sum(math.cos(2 * math.pi * v) for v in x)
    return -20 * math.exp(-0.2 * math.sqrt(sq / n)) - math.exp(cs / n) + 20 + math.e


def ackley5(t):
    return ackley([t.suggest_float(f"x{i}", -32.768, 32.768) for i in range(5)])


def mixed(t):
    x = t.suggest_float("x", -5, 5)
    y = t.suggest_float("y", -5, 5)
    n = t.suggest_int("n", 1, 20)
    c = t.suggest_categorical("c", ["a", "b", "c"])
    offset = {"a": 1.0, "b": 0.0, "c": 2.5}[c]
    return (x - 1) ** 2 + (y + 2) ** 2 + ((n - 7) / 3) ** 2 + offset


def conditional(t):
    optimizer = t.suggest_categorical("optimizer", ["adam", "sgd", "rmsprop"])
    lr = math.log10(t.suggest_float("lr", 1e-5, 1e-1, log=True))
    if optimizer == "adam":
        beta1 = t.suggest_float("beta1", 0.5, 0.999)
        wd = math.log10(t.suggest_float("weight_decay", 1e-6, 1e-2, log=True))
        return 0.2 + (lr + 3.5) ** 2 / 4 + 10 * (beta1 - 0.9) ** 2 + (wd + 4) ** 2 / 16
    if optimizer == "sgd":
        momentum = t.suggest_float("momentum", 0, 0.99)
        nesterov = t.suggest_categorical("nesterov", ["true", "false"])
        return (lr + 1.5) ** 2 / 4 + 2 * (momentum - 0.9) ** 2 + 0.1 * (nesterov == "false")
    rho = t.suggest_float("rho", 0.5, 0.99)
    units = math.log2(t.suggest_int("units", 8, 256, log=True))
    return 0.1 + (lr + 2.5) ** 2 / 4 + 4 * (rho - 0.9) ** 2 + (units - 6) ** 2 / 20


def rastrigin8(t):
    x = [t.suggest_float(f"x{i}", -5.12, 5.12) for i in range(8)]
    return 10.0 * 8 + sum(v * v - 10 * math.cos(2 * math.pi * v) for v in x)


def schwefel4(t):
    x = [t.suggest_float(f"x{i}", -500, 500) for i in range(4)]
    return 418.9828872724338 * 4 - sum(v * math.sin(math.sqrt(abs(v))) for v in x)


def valley_rotation(i, j):
    # Householder reflection about u = (1, ..., 6) / |u|: I - 2 u u^T.
    return (1.0 if i == j else 0.0) - 2.0 * (i + 1) * (j + 1) / 91.0


def valley6(t):
    x = [t.suggest_float(f"x{i}", -2, 2) for i in range(6)]
    y = [sum(valley_rotation(i, j) * x[j] for j in range(6)) for i in range(6)]
    return y[0] * y[0] + sum(100 * (y[i] - 0.5 * y[0] * y[0]) ** 2 for i in range(1, 6))


PLATEAU_CENTRE = [0.7, 0.2, 0.6, 0.35]


def plateau4(t):
    x = [t.suggest_float(f"x{i}", 0, 1) for i in range(4)]
    r2 = sum((x[i] - PLATEAU_CENTRE[i]) ** 2 for i in range(4))
    return min(1.0, r2 / (0.25 * 0.25))


def logscale5(t):
    lr = math.log10(t.suggest_float("lr", 1e-6, 1, log=True)) + 2.7
    wd = math.log10(t.suggest_float("wd", 1e-8, 1e-1, log=True)) + 4.5
    eps = math.log10(t.suggest_float("eps", 1e-10, 1e-3, log=True)) + 8
    batch = math.log2(t.suggest_int("batch", 8, 1024, log=True)) - 6
    drop = t.suggest_float("dropout", 0, 0.6) - 0.15
    return (2 * lr * lr + 0.2 * wd * wd + 0.01 * eps * eps + 0.3 * batch * batch +
            5 * drop * drop + 0.5 * lr * batch)


HARTMANN3_A = [[3, 10, 30], [0.1, 10, 35], [3, 10, 30], [0.1, 10, 35]]
HARTMANN3_P = [[0.3689, 0.1170, 0.2673], [0.4699, 0.4387, 0.7470], [0.1091, 0.8732, 0.5547],
               [0.03815, 0.5743, 0.8828]]


def hartmann3(t):
    return hartmann([t.suggest_float(f"x{i}", 0, 1) for i in range(3)], HARTMANN3_A, HARTMANN3_P)


def logrosenbrock4(t):
    x = [t.suggest_float(f"x{i}", -2.048, 2.048) for i in range(4)]
    return math.log1p(sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(3)))


def ackley4(t):
    return ackley([t.suggest_float(f"x{i}", -32.768, 32.768) for i in range(4)])


def lrsweep(t):
    lr = math.log10(t.suggest_float("lr", 1e-5, 1e-1, log=True))
    w = t.suggest_int("warmup", 0, 2000, step=100) / 1000.0
    d = math.log10(t.suggest_float("weight_decay", 1e-6, 1e-1, log=True)) + 2.5
    centre = -3.5 + 0.6 * w
    over = max(0.0, lr - centre - 0.5)
    noise = 0.02 * math.sin(1e4 * (lr + 3.1 * w + 1.7 * d))
    return (1.8 + 0.5 * (lr - centre) ** 2 + 2.0 * over * over + 0.03 * d * d +
            0.05 * (w - 0.8) ** 2 + noise)


FUNCTIONS = {"branin": branin, "hartmann6": hartmann6, "rosenbrock5": rosenbrock5,
             "ackley5": ackley5, "mixed": mixed, "rastrigin8": rastrigin8,
             "schwefel4": schwefel4, "valley6": valley6, "plateau4": plateau4,
             "logscale5": logscale5, "hartmann3": hartmann3, "logrosenbrock4": logrosenbrock4,
             "ackley4": ackley4, "lrsweep": lrsweep}
# The five development functions (the default set) and the widened set of other characters.
DEV_FUNCTIONS = ["branin", "hartmann6", "rosenbrock5", "ackley5", "mixed"]
WIDE_FUNCTIONS = ["rastrigin8", "schwefel4", "valley6", "plateau4", "logscale5"]
# scripts/bench_gp.py's: small budgets, low dimensions.
GP_FUNCTIONS = ["branin", "hartmann3", "hartmann6", "logrosenbrock4", "ackley4", "lrsweep"]

SAMPLER_LABELS = [("triald", "tpe"), ("optuna", "tpe"), ("triald", "random"),
                  ("optuna", "random")]


# ------------------------------------------------------------------------------------------------

def quiet_optuna():
    import optuna
    # Optuna logs a line per trial and warns that multivariate TPE is experimental; neither
    # belongs in a benchmark's output.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.logging.disable_default_handler()
    warnings.filterwarnings("ignore")
    logging.getLogger("optuna").setLevel(logging.ERROR)
    return optuna


def run_driver(driver, args):
    try:
        out = subprocess.run([driver] + args, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"{os.path.basename(sys.argv[0])}: driver {driver} not found; build it first "
                 "(cmake --build build --target triald-bench-samplers) or pass --driver")
    except subprocess.CalledProcessError as e:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {driver} {' '.join(args)} failed "
                 f"(exit {e.returncode}): "
                 f"{e.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def quantiles(values):
    """Median, first and third quartiles (linear interpolation, as numpy.percentile)."""
    v = sorted(values)

    def q(p):
        pos = p * (len(v) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    return q(0.5), q(0.25), q(0.75)


def fmt(x):
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3e}"
    return f"{x:.4g}"


def optuna_best_so_far(optuna, fn, sampler_kind, seed, trials, checkpoints):
    if sampler_kind == "tpe":
        sampler = optuna.samplers.TPESampler(multivariate=True, seed=seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(sampler=sampler)
    study.optimize(fn, n_trials=trials)
    best, out = math.inf, {}
    for i, t in enumerate(study.trials, start=1):
        best = min(best, t.value)
        if i in checkpoints:
            out[str(i)] = best
    return out


def quality(args, optuna):
    checkpoints = args.checkpoints
    cp_arg = ",".join(str(c) for c in checkpoints)
    results = {}  # (function, system, sampler) -> list of {checkpoint: best}
    t0 = time.perf_counter()
    for row in run_driver(args.driver, ["quality", "--seeds", str(args.seeds), "--trials",
                                        str(args.trials), "--checkpoints", cp_arg,
                                        "--functions", ",".join(args.functions),
                                        "--samplers", ",".join(args.samplers)]):
        results.setdefault((row["function"], "triald", row["sampler"]), []).append(row["best"])
    t_triald = time.perf_counter() - t0
    t0 = time.perf_counter()
    for name in args.functions:
        fn = FUNCTIONS[name]
        for kind in args.samplers:
            for seed in range(args.seeds):
                best = optuna_best_so_far(optuna, fn, kind, seed, args.trials, set(checkpoints))
                results.setdefault((name, "optuna", kind), []).append(best)
    t_optuna = time.perf_counter() - t0

    print(f"\n== Quality: best value found (minimised), median [q25, q75] over {args.seeds} seeds, "
          f"{args.trials} trials ==")
    header = f"{'function':<12} {'sampler':<14}"
    for c in checkpoints:
        header += f" {'after ' + str(c):>32}"
    print(header)
    verdicts = []
    labels = [(system, kind) for system, kind in SAMPLER_LABELS if kind in args.samplers]
    for name in args.functions:
        medians = {}
        for i, (system, kind) in enumerate(labels):
            runs = results[(name, system, kind)]
            line = f"{name if i == 0 else '':<12} {system + ' ' + kind:<14}"
            for c in checkpoints:
                med, q1, q3 = quantiles([r[str(c)] for r in runs])
                medians[(system, kind, c)] = med
                line += f" {fmt(med):>12} [{fmt(q1):>8}, {fmt(q3):>8}]"
            print(line)
        verdicts.append(medians)
    if "tpe" not in args.samplers:
        return
    print("\ntriald TPE vs Optuna TPE (median best; lower is better):")
    for fname, medians in zip(args.functions, verdicts):
        parts = []
        for c in checkpoints:
            ours, theirs = medians[("triald", "tpe", c)], medians[("optuna", "tpe", c)]
            word = "better" if ours < theirs else ("equal" if ours == theirs else "worse")
            parts.append(f"after {c}: {word} ({fmt(ours)} vs {fmt(theirs)})")
        print(f"  {fname:<12} " + "; ".join(parts))
    print(f"(run time: triald {t_triald:.1f} s, Optuna {t_optuna:.1f} s)")


def optuna_speed(optuna, n, repeats):
    import random as pyrandom
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    dists = {f"x{i}": FloatDistribution(0, 1) for i in range(5)}
    rng = pyrandom.Random(12345)
    trials = []
    for _ in range(n):
        params = {k: rng.random() for k in dists}
        value = sum((v - 0.3) ** 2 for v in params.values())
        trials.append(create_trial(params=params, distributions=dists, value=value))
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(multivariate=True, seed=7))
    study.add_trials(trials)
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


def speed(args, optuna):
    sizes = args.history
    rows = run_driver(args.driver, ["speed", "--history", ",".join(str(s) for s in sizes),
                                    "--repeats", str(args.speed_repeats), "--samplers", "tpe"])
    ours = {r["history"]: (r["ms_per_suggestion"], r["cpu_ms_per_suggestion"]) for r in rows}
    print("\n== Speed: ms per TPE suggestion, 5 float params, history of H random COMPLETE "
          "trials (wall / CPU) ==")
    print(f"{'H':>6} {'triald':>17} {'Optuna ask()':>19} {'Optuna sample_relative':>23} "
          f"{'ratio ask/triald':>18} {'ratio rel/triald':>17}")
    for n in sizes:
        repeats = max(2, args.optuna_repeats if n <= 1000 else args.optuna_repeats // 2)
        ask, rel = optuna_speed(optuna, n, repeats)
        w, c = ours[n]
        print(f"{n:>6} {fmt(w):>8} / {fmt(c):>6} {fmt(ask[0]):>9} / {fmt(ask[1]):>7} "
              f"{fmt(rel[0]):>11} / {fmt(rel[1]):>9} "
              f"{ask[0] / w:>8.0f}x / {ask[1] / c:>5.0f}x {rel[0] / w:>8.0f}x / {rel[1] / c:>5.0f}x")


def conditional_quality(args, optuna):
    checkpoints = sorted({30, args.trials} if args.trials > 30 else {args.trials})
    cp_arg = ",".join(str(c) for c in checkpoints)
    t0 = time.perf_counter()
    ours = [row["best"] for row in run_driver(
        args.driver, ["conditional", "--seeds", str(args.seeds), "--trials", str(args.trials),
                      "--checkpoints", cp_arg, "--samplers", "tpe-group"])]
    t_triald = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = []
    for seed in range(args.seeds):
        sampler = optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed)
        study = optuna.create_study(sampler=sampler)
        study.optimize(conditional, n_trials=args.trials)
        best, out = math.inf, {}
        for i, t in enumerate(study.trials, start=1):
            best = min(best, t.value)
            if i in checkpoints:
                out[str(i)] = best
        theirs.append(out)
    t_optuna = time.perf_counter() - t0
    print(f"\n== Conditional (define-by-run, 3 branches): best value (minimised; optimum 0), "
          f"median [q25, q75] over {args.seeds} seeds, {args.trials} trials ==")
    header = f"{'sampler':<30}"
    for c in checkpoints:
        header += f" {'after ' + str(c):>32}"
    print(header)
    medians = {}
    for label, runs in (("triald tpe group", ours), ("optuna tpe multivariate+group", theirs)):
        line = f"{label:<30}"
        for c in checkpoints:
            med, q1, q3 = quantiles([r[str(c)] for r in runs])
            medians[(label, c)] = med
            line += f" {fmt(med):>12} [{fmt(q1):>8}, {fmt(q3):>8}]"
        print(line)
    parts = []
    for c in checkpoints:
        a, b = medians[("triald tpe group", c)], medians[("optuna tpe multivariate+group", c)]
        word = "better" if a < b else ("equal" if a == b else "worse")
        parts.append(f"after {c}: {word} ({fmt(a)} vs {fmt(b)})")
    print("triald vs Optuna (median best; lower is better): " + "; ".join(parts))
    print(f"(run time: triald {t_triald:.1f} s, Optuna {t_optuna:.1f} s)")


def optuna_dynamic_speed(optuna, n, repeats):
    import random as pyrandom
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    names = [f"x{i}" for i in range(5)]
    dists = {k: FloatDistribution(0, 1) for k in names}
    rng = pyrandom.Random(12345)
    trials = []
    for _ in range(n):
        params = {k: rng.random() for k in names}
        value = sum((v - 0.3) ** 2 for v in params.values())
        trials.append(create_trial(params=params, distributions=dists, value=value))
    study = optuna.create_study(
        sampler=optuna.samplers.TPESampler(multivariate=True, group=True, seed=7))
    study.add_trials(trials)

    def one_trial():
        trial = study.ask()
        for k in names:
            trial.suggest_float(k, 0, 1)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)  # FAIL: the history stays n

    one_trial()  # warm-up, untimed
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        one_trial()
    return ((time.perf_counter() - wall) / repeats * 1e3 / len(names),
            (time.process_time() - cpu) / repeats * 1e3 / len(names))


def dynamic_speed(args, optuna):
    sizes = [h for h in args.history if h <= 1000] or [100, 1000]
    rows = run_driver(args.driver, ["dynamic-speed", "--history", ",".join(str(s) for s in sizes),
                                    "--repeats", str(args.speed_repeats)])
    ours = {r["history"]: (r["ms_per_suggest"], r["cpu_ms_per_suggest"]) for r in rows}
    print("\n== Dynamic speed: ms per answered suggest, a trial asking for 5 floats, history of H "
          "COMPLETE trials (TPE multivariate + group; wall / CPU) ==")
    print(f"{'H':>6} {'triald StartTrial+Suggest':>26} {'Optuna ask+suggest_float':>26} "
          f"{'ratio Optuna/triald':>21}")
    for n in sizes:
        repeats = max(2, args.optuna_repeats)
        w_o, c_o = optuna_dynamic_speed(optuna, n, repeats)
        w, c = ours[n]
        print(f"{n:>6} {fmt(w):>15} / {fmt(c):>8} {fmt(w_o):>15} / {fmt(c_o):>8} "
              f"{w_o / w:>11.0f}x / {c_o / c:>5.0f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="short run: 3 seeds, histories 100 and 1000, fewer timing repeats")
    parser.add_argument("--seeds", type=int, help="seeds per (function, sampler); default 10")
    parser.add_argument("--trials", type=int, default=100, help="trials per study; default 100")
    parser.add_argument("--history", help="comma-separated history sizes for the speed test; "
                        "default 100,1000,5000")
    parser.add_argument("--driver", default=os.path.join(REPO, "build", "bin",
                                                         "triald-bench-samplers"),
                        help="path of triald-bench-samplers (default build/bin/...)")
    parser.add_argument("--functions", default="dev",
                        help="comma-separated subset of " + ", ".join(FUNCTIONS) +
                        "; 'dev' stands for the first five (the default), 'wide' for the "
                        "other five, 'all' for all ten")
    parser.add_argument("--checkpoints",
                        help="comma-separated trial counts at which the quality table shows "
                        "the best value so far (default 30 and --trials); --trials is raised "
                        "to the largest")
    parser.add_argument("--samplers", default="tpe,random",
                        help="comma-separated subset of tpe, random (quality table)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-conditional", action="store_true",
                        help="skip the define-by-run quality and speed sections")
    parser.add_argument("--only-conditional", action="store_true",
                        help="run only the define-by-run sections (with --skip-quality or "
                        "--skip-speed, only one of them)")
    args = parser.parse_args()
    if args.seeds is None:
        args.seeds = 3 if args.quick else 10
    if args.seeds < 1 or args.trials < 1:
        parser.error("--seeds and --trials must be >= 1")
    try:
        args.history = [int(h) for h in (args.history or
                                         ("100,1000" if args.quick else "100,1000,5000")).split(",")]
    except ValueError:
        parser.error(f"--history: expected comma-separated integers, got {args.history!r}")
    if any(h < 1 for h in args.history):
        parser.error("--history sizes must be >= 1")
    sets = {"dev": DEV_FUNCTIONS, "wide": WIDE_FUNCTIONS, "all": list(FUNCTIONS)}
    args.functions = [g for f in args.functions.split(",") if f for g in sets.get(f, [f])]
    try:
        args.checkpoints = sorted({int(c) for c in args.checkpoints.split(",") if c}
                                  if args.checkpoints else {min(30, args.trials), args.trials})
    except ValueError:
        parser.error(f"--checkpoints: expected comma-separated integers, got {args.checkpoints!r}")
    if not args.checkpoints or args.checkpoints[0] < 1:
        parser.error("--checkpoints must be >= 1")
    args.trials = max(args.trials, args.checkpoints[-1])
    args.samplers = [k for k in args.samplers.split(",") if k]
    unknown = [f for f in args.functions if f not in FUNCTIONS]
    unknown += [k for k in args.samplers if k not in ("tpe", "random")]
    if unknown or not args.functions or not args.samplers:
        parser.error(f"unknown or missing --functions/--samplers entries: {unknown}")
    args.speed_repeats = 10 if args.quick else 40
    args.optuna_repeats = 3 if args.quick else 6

    try:
        optuna = quiet_optuna()
    except ImportError:
        sys.exit("bench_search: optuna is not installed (apt-get install python3-optuna)")
    print(f"Optuna {optuna.__version__}; driver {args.driver}")
    if not args.skip_quality and not args.only_conditional:
        quality(args, optuna)
    if not args.skip_speed and not args.only_conditional:
        speed(args, optuna)
    if not args.skip_conditional:
        if not args.skip_quality:
            conditional_quality(args, optuna)
        if not args.skip_speed:
            dynamic_speed(args, optuna)
    return 0


if __name__ == "__main__":
    sys.exit(main())
