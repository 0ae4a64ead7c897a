#!/usr/bin/python3
"""Answered-suggest latency through a real triald, side by side with Optuna 3.1's suggest_float.

A define-by-run objective (`[objective] kind = "python"`) asks for 5 floats per trial. triald
runs H history trials of it (TPE, parallelism 2), then timed trials, each timing its 5
`trial.suggest_float` calls from inside the worker: the round trip over the trial's socket (the
runner writes the request, the daemon answers on its event loop, the runner reads and checks the
answer). The timed trials end FAIL (they return NaN), so TPE's history stays the H COMPLETE
trials; two "fence" trials between the history and the timed trials wait until every history
trial has finished, so no timed trial starts beside a history trial.

Optuna runs in this process on the same history (the H trials triald ran, read back with
`trialctl export`, added with study.add_trials): study.ask(), then the same 5 suggest_float
calls, each timed, then tell(FAIL). Two sampler setups, the same on both sides:

  independent  TPE with multivariate = false: each suggest fits TPE over the history for that
               parameter (in the daemon for triald, inside suggest_float for Optuna).
  group        TPE with multivariate = true, group = true: the joint sample over the 5 is drawn
               when the trial starts (triald: before the process starts; Optuna: in ask()), and
               each suggest returns its share. For Optuna, (ask + 5 suggests) / 5 is shown too.

Figures only, nothing asserted; medians over the timed suggests. Uses Debian's python3-optuna
(3.1), hence /usr/bin/python3 (the trials' runner needs only the standard library).

    /usr/bin/python3 scripts/bench_suggest.py [--history 100,1000] [--timed 20]
                                              [--modes independent,group] [--build build]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_throughput import running_triald, submit_and_wait  # noqa: E402

NAMES = [f"x{i}" for i in range(5)]
FENCE = 2  # = parallelism: enough fence trials that no timed trial overlaps a history trial

# The objective every trial runs. History trials suggest, score and mark themselves done; fence
# trials wait for every history trial; timed trials time their suggests and return NaN (FAIL).
OBJECTIVE = '''
import fcntl, json, math, os, time

HISTORY = int(os.environ["BENCH_HISTORY"])
FENCE = int(os.environ["BENCH_FENCE"])
OUT = os.environ["BENCH_OUT"]
NAMES = ["x0", "x1", "x2", "x3", "x4"]


def objective(trial):
    done = os.path.join(OUT, "done")
    if trial.number < HISTORY:
        value = sum((trial.suggest_float(k, 0.0, 1.0) - 0.3) ** 2 for k in NAMES)
        with open(done, "ab") as f:
            f.write(b".")
        return value
    if trial.number < HISTORY + FENCE:
        while not os.path.exists(done) or os.path.getsize(done) < HISTORY:
            time.sleep(0.01)
        time.sleep(0.3)  # the daemon records the last history trials
        return math.nan
    # One timed trial at a time, even at parallelism 2.
    with open(os.path.join(OUT, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        times = []
        for k in NAMES:
            t0 = time.perf_counter()
            trial.suggest_float(k, 0.0, 1.0)
            times.append(time.perf_counter() - t0)
        with open(os.path.join(OUT, "timed-%d.json" % trial.number), "w") as f:
            json.dump(times, f)
    return math.nan
'''


def sampler_toml(mode):
    if mode == "independent":
        return "multivariate = false\n"
    return "multivariate = true\ngroup = true\n"


def run_triald(build, mode, history, timed, workdir):
    """Runs the study; returns (triald's per-suggest seconds, the COMPLETE history trials)."""
    state = os.path.join(workdir, "state")
    out = os.path.join(workdir, "out")
    os.makedirs(out)
    with open(os.path.join(workdir, "bench_objective.py"), "w") as f:
        f.write(OBJECTIVE)
    sweep = os.path.join(workdir, "bench.toml")
    with open(sweep, "w") as f:
        f.write(f"""[study]
name = "suggest"
direction = "minimize"
n_trials = {history + FENCE + timed}
parallelism = {FENCE}

[objective]
kind = "python"
python = "/usr/bin/python3"
function = "bench_objective.py:objective"
env = {{ BENCH_HISTORY = "{history}", BENCH_FENCE = "{FENCE}", BENCH_OUT = "{out}" }}

[sampler]
kind = "tpe"
seed = 1
{sampler_toml(mode)}""")
    with running_triald(build, state, FENCE, start_tries=600) as ctl:
        submit_and_wait(ctl, sweep, "suggest", poll_s=0.2)
        data = json.loads(subprocess.run(ctl + ["export", "suggest", "--format", "json"],
                                         check=True, capture_output=True, text=True).stdout)
    complete = [t for t in data["trials"] if t["state"] == "COMPLETE"]
    if len(complete) != history:
        raise RuntimeError(f"{len(complete)} of {history} history trials completed; "
                           f"see {state}.log")
    times = []
    for name in sorted(os.listdir(out)):
        if name.startswith("timed-"):
            with open(os.path.join(out, name)) as f:
                times += json.load(f)
    if len(times) != timed * len(NAMES):
        raise RuntimeError(f"{len(times)} timed suggests, expected {timed * len(NAMES)}")
    return times, complete


def run_optuna(optuna, mode, history_trials, timed):
    """Optuna on the same history: (per-suggest seconds, per-suggest seconds of ask + 5)."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    dists = {k: FloatDistribution(0.0, 1.0) for k in NAMES}
    sampler = optuna.samplers.TPESampler(seed=1, multivariate=mode != "independent",
                                         group=mode == "group")
    study = optuna.create_study(sampler=sampler)
    study.add_trials([create_trial(params={k: t["params"][k] for k in NAMES},
                                   distributions=dists, value=t["value"])
                      for t in history_trials])
    suggests, whole = [], []
    for r in range(timed + 1):
        t0 = time.perf_counter()
        trial = study.ask()
        ask = time.perf_counter() - t0
        times = []
        for k in NAMES:
            t1 = time.perf_counter()
            trial.suggest_float(k, 0.0, 1.0)
            times.append(time.perf_counter() - t1)
        study.tell(trial, state=TrialState.FAIL)  # the history stays the same
        if r == 0:
            continue  # warm-up
        suggests += times
        whole.append((ask + sum(times)) / len(NAMES))
    return suggests, whole


def ms(seconds):
    return f"{seconds * 1e3:.3f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--history", default="100,1000",
                   help="comma-separated history sizes (COMPLETE trials); default 100,1000")
    p.add_argument("--timed", type=int, default=20,
                   help="timed trials per setup (5 suggests each); default 20")
    p.add_argument("--modes", default="independent,group",
                   help="comma-separated subset of independent, group")
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="the build folder holding bin/triald and bin/trialctl")
    a = p.parse_args()
    try:
        sizes = [int(h) for h in a.history.split(",")]
    except ValueError:
        p.error(f"--history: expected comma-separated integers, got {a.history!r}")
    modes = [m for m in a.modes.split(",") if m]
    if any(h < 1 for h in sizes) or a.timed < 1:
        p.error("--history sizes and --timed must be >= 1")
    if not modes or any(m not in ("independent", "group") for m in modes):
        p.error(f"--modes: expected a subset of independent, group; got {a.modes!r}")
    a.build = os.path.abspath(a.build)
    for exe in ("triald", "trialctl"):
        if not os.path.exists(os.path.join(a.build, "bin", exe)):
            sys.exit(f"bench_suggest: {a.build}/bin/{exe} is missing; build first")
    try:
        import optuna
    except ImportError:
        sys.exit("bench_suggest: optuna is not installed (apt-get install python3-optuna)")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")

    print(f"Optuna {optuna.__version__}; {a.timed} timed trials x 5 suggests per row; "
          "medians, ms per suggest")
    print(f"{'H':>5} {'mode':<12} {'triald answered':>16} {'Optuna suggest':>15} "
          f"{'Optuna (ask+5)/5':>17} {'ratio':>16}")
    rows = []
    for h in sizes:
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix="triald-bench-suggest-") as d:
                t0 = time.time()
                ours, history = run_triald(a.build, mode, h, a.timed, d)
                took = time.time() - t0
            theirs, whole = run_optuna(optuna, mode, history, a.timed)
            ours_m, theirs_m = statistics.median(ours), statistics.median(theirs)
            whole_m = statistics.median(whole)
            # The ratio against Optuna's full cost per suggest: the suggest itself where TPE
            # runs in it (independent), ask's share as well where TPE runs in ask() (group).
            ref = theirs_m if mode == "independent" else whole_m
            print(f"{h:>5} {mode:<12} {ms(ours_m):>16} {ms(theirs_m):>15} {ms(whole_m):>17} "
                  f"{ref / ours_m:>10.1f}x ({'suggest' if mode == 'independent' else 'ask+5'})"
                  f"   [triald run {took:.0f} s]", flush=True)
            rows.append({"history": h, "mode": mode, "triald_ms": ours_m * 1e3,
                         "optuna_suggest_ms": theirs_m * 1e3, "optuna_ask5_ms": whole_m * 1e3,
                         "ratio": ref / ours_m})
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
