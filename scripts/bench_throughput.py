#!/usr/bin/python3
"""Throughput benchmark: no-op trials per second through triald's full path, side by side with
Optuna 3.1 on SQLite.

triald: one vfork+exec of build/bin/triald-noop-worker per trial, parallelism 2, reports over the
pipe, every state change committed to SQLite with synchronous=FULL. The time is the study's own
record: created_at (submit) to finished_at (last trial committed), as stored by the daemon.

Optuna: scripts/bench_optuna.py, the same number of trials with n_jobs=2 threads in one
interpreter on SQLite storage (no isolation at all).

Prints one line per system and the ratio. Not a test: nothing here asserts a speed.

--accounting-cost: instead of Optuna, the same triald run with and without per-trial resource
accounting (`triald --no-resource-accounting`), alternating, and the cost of accounting in %.
"""

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_noop_sweep(path: str, name: str, bindir: str, trials: int, parallelism: int) -> str:
    """Writes the benchmarks' sweep: `trials` no-op trials (build/bin/triald-noop-worker) over
    one float, random sampler, seed 1. Returns `path`."""
    with open(path, "w") as f:
        f.write(f"""[study]
name = "{name}"
n_trials = {trials}
parallelism = {parallelism}

[objective]
kind = "exec"
command = ["{os.path.join(bindir, 'triald-noop-worker')}"]

[space.x]
type = "float"
low = -10.0
high = 10.0

[sampler]
kind = "random"
seed = 1
""")
    return path


@contextlib.contextmanager
def running_triald(build: str, state: str, max_workers: int, start_tries: int = 300,
                   extra_args: tuple = ()):
    """Starts build/bin/triald on `state` (log in `state`.log; `extra_args` added to its command
    line) and waits until it answers a ping (`start_tries` tries, 50 ms apart); yields the
    trialctl command line for its socket, and stops the daemon on the way out."""
    bindir = os.path.join(build, "bin")
    ctl = [os.path.join(bindir, "trialctl"), "--socket", os.path.join(state, "triald.sock")]
    log = open(state + ".log", "w")
    daemon = subprocess.Popen([os.path.join(bindir, "triald"), "--state-dir", state,
                               "--max-workers", str(max_workers), "--log-level", "warn",
                               *extra_args],
                              stdout=log, stderr=log)
    try:
        for _ in range(start_tries):
            if subprocess.run(ctl + ["ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("triald did not start; see " + state + ".log")
        yield ctl
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()


def submit_and_wait(ctl: list, sweep: str, study: str, poll_s: float = 0.05) -> dict:
    """Submits `sweep` and polls `trialctl status` every `poll_s` until the study is no longer
    RUNNING and none of its trials runs; returns that last status."""
    subprocess.run(ctl + ["submit", sweep], check=True, capture_output=True)
    while True:
        st = json.loads(subprocess.run(ctl + ["status", study, "--json"], check=True,
                                       capture_output=True, text=True).stdout)
        if st["state"] != "RUNNING" and st["running"] == 0:
            return st
        time.sleep(poll_s)


def run_triald(build: str, trials: int, parallelism: int, workdir: str,
               extra_args: tuple = ()) -> dict:
    state = os.path.join(workdir, "state")
    bindir = os.path.join(build, "bin")
    sweep = write_noop_sweep(os.path.join(workdir, "noop.toml"), "noop", bindir, trials,
                             parallelism)
    with running_triald(build, state, parallelism, extra_args=extra_args) as ctl:
        st = submit_and_wait(ctl, sweep, "noop")
        if st["complete"] != trials:
            raise RuntimeError(f"only {st['complete']} of {trials} trials completed: {st}")
        seconds = st["finished_at"] - st["created_at"]
        return {"system": "triald", "trials": trials, "seconds": round(seconds, 4),
                "trials_per_s": round(trials / seconds, 1)}


def run_optuna(trials: int, jobs: int, workdir: str) -> dict:
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "bench_optuna.py"),
                          "--trials", str(trials), "--jobs", str(jobs),
                          "--storage-dir", os.path.join(workdir, "optuna")],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def accounting_cost(a) -> int:
    """triald with and without resource accounting, alternating (which goes first alternates
    too); prints the best of each and the cost of accounting in %."""
    variants = {"accounting": (), "none": ("--no-resource-accounting",)}
    results = {k: [] for k in variants}
    for r in range(a.repeats):
        order = list(variants) if r % 2 == 0 else list(reversed(list(variants)))
        for k in order:
            with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
                results[k].append(run_triald(a.build, a.trials, a.parallelism, d, variants[k]))
        print(f"run {r + 1}: with accounting {results['accounting'][-1]['trials_per_s']} "
              f"trials/s, without {results['none'][-1]['trials_per_s']} trials/s", flush=True)
    best = {k: max(v, key=lambda x: x["trials_per_s"]) for k, v in results.items()}
    cost = 100 * (1 - best["accounting"]["trials_per_s"] / best["none"]["trials_per_s"])
    print()
    print(f"{'triald':<20} {'trials':>7} {'seconds':>9} {'trials/s':>10}")
    for k, label in (("accounting", "with accounting"), ("none", "without accounting")):
        print(f"{label:<20} {a.trials:>7} {best[k]['seconds']:>9.3f} "
              f"{best[k]['trials_per_s']:>10.1f}")
    print(f"\ncost of resource accounting: {cost:.1f}% of trials/s (target < 5%)")
    print(json.dumps({"accounting": best["accounting"], "none": best["none"],
                      "cost_percent": round(cost, 2)}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="runs of each system; best is kept")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--accounting-cost", action="store_true",
                   help="compare triald with and without resource accounting (no Optuna)")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)  # the sweep names the worker by an absolute path
    for exe in ("triald", "trialctl", "triald-noop-worker"):
        if not os.path.exists(os.path.join(a.build, "bin", exe)):
            print(f"bench: {a.build}/bin/{exe} is missing; build first (scripts/test.sh or "
                  "cmake --build build)", file=sys.stderr)
            return 1
    if a.accounting_cost:
        return accounting_cost(a)
    results = {"triald": [], "optuna": []}
    for r in range(a.repeats):
        # Alternate the two so that machine noise hits both alike.
        with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
            results["triald"].append(run_triald(a.build, a.trials, a.parallelism, d))
        with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
            results["optuna"].append(run_optuna(a.trials, a.parallelism, d))
        print(f"run {r + 1}: triald {results['triald'][-1]['trials_per_s']} trials/s, "
              f"optuna {results['optuna'][-1]['trials_per_s']} trials/s", flush=True)
    best = {k: max(v, key=lambda x: x["trials_per_s"]) for k, v in results.items()}
    print()
    print(f"{'system':<8} {'trials':>7} {'seconds':>9} {'trials/s':>10}   isolation")
    print(f"{'triald':<8} {a.trials:>7} {best['triald']['seconds']:>9.3f} "
          f"{best['triald']['trials_per_s']:>10.1f}   one process per trial, SQLite FULL sync")
    print(f"{'optuna':<8} {a.trials:>7} {best['optuna']['seconds']:>9.3f} "
          f"{best['optuna']['trials_per_s']:>10.1f}   threads in one interpreter, SQLite")
    ratio = best["triald"]["trials_per_s"] / best["optuna"]["trials_per_s"]
    print(f"\nratio triald/optuna: {ratio:.1f}x (target >= 5x)")
    print(json.dumps({"triald": best["triald"], "optuna": best["optuna"],
                      "ratio": round(ratio, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
