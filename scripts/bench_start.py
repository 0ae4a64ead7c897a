#!/usr/bin/python3
"""Start-up benchmark: short Python+torch trials, isolated and not, side by side.

The same trial everywhere: one suggest_float and a tiny tensor computation (torch imported at
the objective file's top). Four ways to run it, at parallelism 2:

  (a) triald exec         kind = "python", fork_server = false: a fresh interpreter per trial,
                          which imports torch itself;
  (b) triald fork server  kind = "python", preload = ["torch"]: each trial a fork of the
                          study's warm server (torch and the objective's file imported once);
  (c) optuna threads      Optuna 3.1, n_jobs=2 threads in one interpreter, SQLite storage: no
                          isolation at all (torch imported before the clock starts);
  (d) optuna subprocess   Optuna 3.1, n_jobs=2, SQLite, each trial's computation in
                          `python3 -c ...` (what an Optuna user does to isolate a trial).
  (e) (only when asked: --only abcde) (b) with fork_twice = true: the fork server forks each
      trial twice, through a middle process, as it did before it cloned the trial as the
      daemon's child (proto/README.md, "One fork, step by step"): the one fork's gain, side by
      side

Prints trials/s for each, the ratio (b)/(c), and for (a) and (b) the start latency of each
trial: from the daemon's decision to start it (the trial's created_at: the scheduler creates the
record when it starts the trial) to the first line of the objective (time.time() there, sent back
as a user attribute); the JSON also has the median from started_at (for a forked trial, when the
server answered `forked`) to that line. triald's rates are the study's own
record: from its creation to its last trial's end ("end to end", which for (b) includes starting
the fork server and its `import torch`), and from the first trial's end to the last one's
("steady", the server running). Not a test: nothing here asserts a speed.
"""

import argparse
import json
import re
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from bench_throughput import running_triald, submit_and_wait  # noqa: E402

OBJECTIVE = '''\
import time

import torch


def objective(trial):
    first_line = time.time()
    x = trial.suggest_float("x", -1.0, 1.0)
    a = torch.full((8, 8), x)
    value = float((a @ a).sum())
    trial.set_user_attr("first_line", first_line)
    return value
'''

# (d): the parent suggests, the child computes (as a user isolates a trial without triald).
CHILD_CODE = ("import sys, torch; x = float(sys.argv[1]); a = torch.full((8, 8), x); "
              "print(float((a @ a).sum()))")


def write_sweep(folder, name, trials, parallelism, fork, twice=False):
    objective = os.path.join(folder, "start_objective.py")
    with open(objective, "w") as f:
        f.write(OBJECTIVE)
    server = 'preload = ["torch"]' if fork else "fork_server = false"
    if twice:
        server += "\nfork_twice = true"
    path = os.path.join(folder, name + ".toml")
    with open(path, "w") as f:
        f.write(f"""[study]
name = "{name}"
n_trials = {trials}
parallelism = {parallelism}

[objective]
kind = "python"
function = "start_objective.py:objective"
python = "/usr/bin/python3"
{server}

[sampler]
kind = "random"
seed = 1
""")
    return path


# The steps of a forked start, as triald logs them at --log-level trace (common::Span), in the
# order they happen, and what each interval is spent on.
TRACE_STEPS = [
    ("created", "request_sent",
     "the daemon: trial record, launch spec, cgroup, streams; a wait for the server's socket"),
    ("request_sent", "forked_received", "the server: its fork(s), the child's set-up, the reply"),
    ("forked_received", "go", "the daemon: pid checks, cgroup placement, prlimit, go"),
    ("go", "objective", "the child after its go, to the objective's first line"),
    ("objective", "first_line", "the objective's first report reaching the daemon"),
]


def read_spans(log_path):
    """{step: [(keys, time ms)]} from a trace log; keys are trial=N, req=ID or pid=P. The step
    fork_requested (logged once the request is queued, after it may have been sent) only joins a
    trial to its request id."""
    spans = {}
    pattern = re.compile(r" span (\w+) (.*) t=([\d.]+)$")
    with open(log_path) as f:
        for line in f:
            m = pattern.search(line.rstrip("\n"))
            if not m:
                continue
            keys = dict(kv.split("=", 1) for kv in m.group(2).split())
            spans.setdefault(m.group(1), []).append((keys, float(m.group(3))))
    return spans


def trace_breakdown(log_path, rows):
    """Per trial, the time of each step (ms, wall clock), joined through the request id and the
    pid; then the median and p90 of each interval over the trials that have both ends."""
    spans = read_spans(log_path)
    by = {}
    for step, entries in spans.items():
        for keys, t in entries:
            for k, v in keys.items():
                by.setdefault((step, k, v), t)
    req_of = {keys["trial"]: keys["req"] for keys, _ in spans.get("fork_requested", [])}
    pid_of = {keys["req"]: keys["pid"] for keys, _ in spans.get("forked_received", [])}
    intervals = {(a, b): [] for a, b, _ in TRACE_STEPS}
    totals = []
    for r in rows:
        trial = str(r["number"])
        req = req_of.get(trial)
        pid = pid_of.get(req) if req else None
        times = {"created": by.get(("created", "trial", trial)),
                 "fork_requested": by.get(("fork_requested", "trial", trial)),
                 "request_sent": by.get(("request_sent", "req", req)),
                 "forked_received": by.get(("forked_received", "req", req)),
                 "go": by.get(("go", "pid", pid)),
                 "objective": 1000 * r["attrs"]["first_line"],
                 "first_line": by.get(("first_line", "pid", pid))}
        for a, b, _ in TRACE_STEPS:
            if times[a] is not None and times[b] is not None:
                intervals[(a, b)].append(times[b] - times[a])
        if times["created"] is not None:
            totals.append(times["objective"] - times["created"])
    if not totals or not req_of:
        raise RuntimeError(f"{log_path}: no start spans (created, fork_requested) in the trace log")
    out = []
    for a, b, what in TRACE_STEPS:
        v = sorted(intervals[(a, b)])
        if v:
            out.append({"from": a, "to": b, "what": what, "n": len(v),
                        "median_ms": round(statistics.median(v), 2),
                        "p90_ms": round(v[int(0.9 * (len(v) - 1))], 2)})
    totals.sort()
    return {"steps": out, "created_to_objective_ms": round(statistics.median(totals), 2)
            if totals else None}


def run_triald(build, name, trials, parallelism, fork, trace=False, twice=False):
    with tempfile.TemporaryDirectory(prefix="triald-bench-start-") as d:
        sweep = write_sweep(d, name, trials, parallelism, fork, twice)
        state = os.path.join(d, "state")
        with running_triald(build, state, parallelism,
                            log_level="trace" if trace else "warn") as ctl:
            st = submit_and_wait(ctl, sweep, name)
            rows = json.loads(subprocess.run(ctl + ["trials", name, "--json"], check=True,
                                             capture_output=True, text=True).stdout)
            events = subprocess.run(ctl + ["events", name], capture_output=True,
                                    text=True).stdout
        breakdown = trace_breakdown(state + ".log", rows) if trace else None
    if st["complete"] != trials:
        raise RuntimeError(f"{name}: only {st['complete']} of {trials} trials completed: {st}"
                           f"\n{events}")
    # The daemon's decision to start a trial creates its record (created_at); started_at is
    # when its process was started (for a forked trial: once the server said `forked`).
    latencies = sorted(r["attrs"]["first_line"] - r["created_at"] for r in rows)
    after_start = sorted(r["attrs"]["first_line"] - r["started_at"] for r in rows)
    finished = sorted(r["finished_at"] for r in rows)
    steady = (trials - 1) / (finished[-1] - finished[0]) if trials > 1 else float("nan")
    return {"system": name, "trials": trials,
            "seconds": round(st["finished_at"] - st["created_at"], 3),
            "trials_per_s": round(trials / (st["finished_at"] - st["created_at"]), 2),
            "steady_trials_per_s": round(steady, 2),
            "start_latency_ms": {
                "median": round(1000 * statistics.median(latencies), 1),
                "p90": round(1000 * latencies[int(0.9 * (len(latencies) - 1))], 1),
                "first": round(1000 * (min(rows, key=lambda r: r["created_at"])["attrs"]
                                       ["first_line"] - min(r["created_at"] for r in rows)),
                               1)},
            "started_to_first_line_ms": round(1000 * statistics.median(after_start), 1),
            "fork_server_events": [line for line in events.splitlines()
                                   if "fork" in line.lower()][:5],
            **({"trace": breakdown} if breakdown else {})}


def run_optuna(trials, jobs, subprocess_per_trial):
    """(c) or (d) in a fresh /usr/bin/python3 (Debian's python3-optuna 3.1)."""
    code = f'''
import json, logging, os, subprocess, sys, tempfile, time, warnings
import optuna
import torch
optuna.logging.set_verbosity(optuna.logging.ERROR)
optuna.logging.disable_default_handler()
logging.getLogger("sqlalchemy").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")
CHILD = {CHILD_CODE!r}

def in_threads(trial):
    x = trial.suggest_float("x", -1.0, 1.0)
    a = torch.full((8, 8), x)
    return float((a @ a).sum())

def in_subprocess(trial):
    x = trial.suggest_float("x", -1.0, 1.0)
    out = subprocess.run(["/usr/bin/python3", "-c", CHILD, repr(x)], check=True,
                         capture_output=True, text=True).stdout
    return float(out)

with tempfile.TemporaryDirectory() as d:
    start = time.perf_counter()
    study = optuna.create_study(storage="sqlite:///" + os.path.join(d, "optuna.db"))
    study.optimize(in_subprocess if {subprocess_per_trial!r} else in_threads,
                   n_trials={trials}, n_jobs={jobs})
    seconds = time.perf_counter() - start
    done = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
print(json.dumps({{"trials": {trials}, "complete": done, "seconds": seconds}}))
'''
    out = subprocess.run(["/usr/bin/python3", "-c", code], check=True, capture_output=True,
                         text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    if r["complete"] != trials:
        raise RuntimeError(f"optuna: only {r['complete']} of {trials} trials completed")
    return {"trials": trials, "seconds": round(r["seconds"], 3),
            "trials_per_s": round(trials / r["seconds"], 2)}


def run_system(a, k):
    """One run of system `k` (a, b, c, d or e) with the command line's settings."""
    if k == "a":
        return run_triald(a.build, "start-exec", a.slow_trials, a.parallelism, False)
    if k == "b":
        return run_triald(a.build, "start-fork", a.fast_trials, a.parallelism, True,
                          trace=a.trace)
    if k == "e":
        return run_triald(a.build, "start-fork-twice", a.fast_trials, a.parallelism, True,
                          twice=True)
    if k == "c":
        return run_optuna(a.fast_trials, a.parallelism, False)
    return run_optuna(a.slow_trials, a.parallelism, True)


def ratio_text(runs):
    """(b)/(c) and (b)/(e) from {k: [run, ...]}, the i-th runs of each system side by side: the
    median of the rounds' ratios (of one round, its ratios)."""
    def ratios(key_b, key_o, field_b, field_o):
        return statistics.median(b[field_b] / o[field_o] for b, o in zip(runs[key_b], runs[key_o]))

    lines = []
    if runs.get("b") and runs.get("c"):
        lines.append(f"ratio (b)/(c): {ratios('b', 'c', 'trials_per_s', 'trials_per_s'):.2f} end "
                     f"to end (target >= 1.0), "
                     f"{ratios('b', 'c', 'steady_trials_per_s', 'trials_per_s'):.2f} steady "
                     f"(target >= 1.2)")
    if runs.get("b") and runs.get("e"):
        lines.append(f"ratio (b)/(e), one fork against two: "
                     f"{ratios('b', 'e', 'trials_per_s', 'trials_per_s'):.2f} end to end, "
                     f"{ratios('b', 'e', 'steady_trials_per_s', 'steady_trials_per_s'):.2f} "
                     f"steady")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slow-trials", type=int, default=30,
                   help="trials of (a) and (d), an interpreter and `import torch` each")
    p.add_argument("--fast-trials", type=int, default=200, help="trials of (b) and (c)")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--only", default="abcd",
                   help="which of a, b, c, d, e to run (default abcd)")
    p.add_argument("--repeats", type=int, default=1,
                   help="rounds of every system, in alternating order; prints each system's "
                        "median run and the medians of the rounds' ratios")
    p.add_argument("--trace", action="store_true",
                   help="run (b)'s daemon at --log-level trace and print where a forked "
                        "start's time goes, step by step (the tracing itself costs a little)")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    if any(k in a.only for k in "abe"):
        for exe in ("triald", "trialctl"):
            if not os.path.exists(os.path.join(a.build, "bin", exe)):
                print(f"bench_start: {a.build}/bin/{exe} is missing; build first",
                      file=sys.stderr)
                return 1
    runs = {k: [] for k in "abecd"}
    load_before = os.getloadavg()[0]
    for r in range(a.repeats):
        # Rounds alternate the order, so that a machine getting slower (or faster) over the
        # session weighs on every system alike.
        order = [k for k in "abecd" if k in a.only]
        if r % 2 == 1:
            order.reverse()
        for k in order:
            runs[k].append(run_system(a, k))
            print(f"({k})", json.dumps(runs[k][-1]), flush=True)
        if a.repeats > 1:
            print(f"round {r + 1}: " + ratio_text({k: v[-1:] for k, v in runs.items()}),
                  flush=True)
    # Each system's median run (by trials/s); ratios are the medians of the rounds' ratios.
    results = {k: sorted(v, key=lambda x: x["trials_per_s"])[len(v) // 2]
               for k, v in runs.items() if v}
    if a.trace and "b" in results:
        t = results["b"]["trace"]
        print("\n(b) a forked start, step by step (ms; median and p90 over the trials):")
        for st in t["steps"]:
            print(f"  {st['from']:>15} -> {st['to']:<15} {st['median_ms']:>8.2f} "
                  f"{st['p90_ms']:>8.2f}   {st['what']}")
        print(f"  {'created':>15} -> {'objective':<15} {t['created_to_objective_ms']:>8.2f}"
              "            in all (the daemon's decision to the objective's first line)")

    load_after = os.getloadavg()[0]
    labels = {"a": "(a) triald exec", "b": "(b) triald fork server",
              "e": "(e) fork server, twice", "c": "(c) optuna threads",
              "d": "(d) optuna subprocess"}
    isolation = {"a": "process per trial", "b": "process per trial (fork)",
                 "e": "process per trial (2 forks)", "c": "none (threads)",
                 "d": "process per trial"}
    print()
    print(f"{'system':<24} {'trials':>6} {'seconds':>8} {'trials/s':>9} {'steady/s':>9} "
          f"{'start ms (median, p90, first)':>30}   isolation")
    for k in "abecd":
        if k not in results:
            continue
        r = results[k]
        steady = f"{r['steady_trials_per_s']:>9.2f}" if "steady_trials_per_s" in r else \
            f"{'':>9}"
        lat = r.get("start_latency_ms")
        lat_text = f"{lat['median']:.1f}, {lat['p90']:.1f}, {lat['first']:.1f}" if lat else ""
        print(f"{labels[k]:<24} {r['trials']:>6} {r['seconds']:>8.2f} "
              f"{r['trials_per_s']:>9.2f} {steady} {lat_text:>30}   {isolation[k]}")
    print()
    if a.repeats > 1:
        print(f"(median run of {a.repeats} per system; ratios: medians of the rounds' ratios)")
    print(ratio_text(runs))
    if "b" in results and "e" in results:
        print(f"median start: {results['b']['start_latency_ms']['median']:.1f} ms with one fork, "
              f"{results['e']['start_latency_ms']['median']:.1f} ms with two (median runs)")
    print(f"machine: {os.cpu_count()} CPUs, load average {load_before:.1f} before, "
          f"{load_after:.1f} after (other work on the machine slows every column)")
    print(json.dumps(results if a.repeats == 1 else
                     {"median_runs": results, "runs": {k: v for k, v in runs.items() if v}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
