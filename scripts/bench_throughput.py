#!/usr/bin/python3
"""Throughput benchmark: no-op trials per second through triald's full path, side by side with
Optuna 3.1 on SQLite.

triald: one vfork+exec of build/bin/triald-noop-worker per trial, parallelism 2, reports over the
pipe, every state change committed to SQLite with synchronous=FULL. The time is the study's own
record: created_at (submit) to finished_at (last trial committed), as stored by the daemon.

Optuna: scripts/bench_optuna.py, the same number of trials with n_jobs=2 threads in one
interpreter on SQLite storage (no isolation at all).

The floor, measured in the same run: what any system that isolates each trial in a process
and stores its result durably must do per trial, and nothing else. `parallelism` threads
each start triald-noop-worker with posix_spawn (its report pipe at fd 3, TRIALD_PARAMS set),
read its line to EOF, wait for it, and commit one row to SQLite (WAL, synchronous=FULL: one
fsync per trial, where triald commits each state change). triald's rate against it says how
much of a trial's cost is triald's own. A second floor adds what a trial's process needs on
disk before it starts, as triald makes it: its folder, its log folder and its two log files
(the worker's stdout and stderr); on a file system where creating a file is slow (ext4 without
a journal scans recently deleted inodes at every creation) this is most of a no-op trial's
cost, and the two floors show how much.

Prints one line per system and the ratios. Not a test: nothing here asserts a speed.

--accounting-cost: instead of Optuna, the same triald run with and without per-trial resource
accounting (`triald --no-resource-accounting`), alternating, and the cost of accounting in %.
--isolation-cost: instead, the same triald run isolating each trial in cgroups with accounting
(the default), in cgroups without accounting (`--no-resource-accounting`) and by process group
only (`--no-cgroups`), alternating with the floor, and each one's rate against the floor: what
the host's cgroups cost a no-op trial, against what triald's own work costs.
--baseline BUILD: instead, this build's triald against BUILD's (an older commit's), alternating,
both on this build's no-op worker, and the speed-up (best runs and median of the pairs).
--trace: instead, one triald run at --log-level trace, and where its event loop's time went:
the loop logs a span at each step of a trial (common::Span: created, vfork, exec_done, launched,
started, committed, first_line, reaped, over, exited, finished); the time between two
consecutive spans is the loop's (working, or waiting for the vfork child), or idle when nothing
was due. Prints each pair of consecutive steps with its count, median and share of the run; then
each trial's own path, step by step (median and mean per trial), up to the creation of the trial
that took its slot. Tracing itself slows
the daemon (a log line per span), so the rate of this run is not comparable with the others.
"""

import argparse
import bisect
import collections
import contextlib
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
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
                   extra_args: tuple = (), info: dict = None, log_level: str = "warn"):
    """Starts build/bin/triald on `state` (log in `state`.log; `extra_args` added to its command
    line) and waits until it answers a ping (`start_tries` tries, 50 ms apart); yields the
    trialctl command line for its socket, and stops the daemon on the way out. `info`, when
    given, gets the daemon's "pid"; `log_level` is triald's --log-level."""
    bindir = os.path.join(build, "bin")
    ctl = [os.path.join(bindir, "trialctl"), "--socket", os.path.join(state, "triald.sock")]
    log = open(state + ".log", "w")
    daemon = subprocess.Popen([os.path.join(bindir, "triald"), "--state-dir", state,
                               "--max-workers", str(max_workers), "--log-level", log_level,
                               *extra_args],
                              stdout=log, stderr=log)
    if info is not None:
        info["pid"] = daemon.pid
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
               extra_args: tuple = (), worker_build: str = None, trace: bool = False) -> dict:
    """One no-op study through build/bin/triald; the worker is `worker_build`'s (default:
    `build`'s), so that two daemons can be compared on the same worker. `trace`: the daemon
    logs its spans, and the result has their breakdown (loop_breakdown) under "trace"."""
    state = os.path.join(workdir, "state")
    bindir = os.path.join(worker_build or build, "bin")
    sweep = write_noop_sweep(os.path.join(workdir, "noop.toml"), "noop", bindir, trials,
                             parallelism)
    info = {}
    with running_triald(build, state, parallelism, extra_args=extra_args, info=info,
                        log_level="trace" if trace else "warn") as ctl:
        st = submit_and_wait(ctl, sweep, "noop")
        if st["complete"] != trials:
            raise RuntimeError(f"only {st['complete']} of {trials} trials completed: {st}")
        seconds = st["finished_at"] - st["created_at"]
        out = {"system": "triald", "trials": trials, "seconds": round(seconds, 4),
               "trials_per_s": round(trials / seconds, 1),
               "cpu_ms_per_trial": round(1000 * cpu_seconds(info["pid"]) / trials, 3)}
    if trace:
        out["trace"] = loop_breakdown(state + ".log")
        out["trial_path"] = trial_path(state + ".log")
    return out


# What the event loop does between two consecutive spans of an exec'd trial's life (the pairs
# that are the loop's work; any other pair is time the loop spent on something else between
# trials, or idle).
LOOP_STEPS = {
    ("created", "vfork"): "the launch: spec, trial and log folders, log files, cgroup leaf, pipes",
    ("vfork", "exec_done"): "vfork until the child has exec'd (cgroup joins, set-up, execve); "
                            "the loop waits",
    ("exec_done", "launched"): "the reaper's watch, the trial's channel",
    ("launched", "started"): "the trial RUNNING with its pid (statement)",
    ("started", "committed"): "the pass's commit (the trial created and RUNNING)",
    ("committed", "first_line"): "the worker runs: from the commit until its line reaches the loop",
    ("first_line", "reaped"): "the worker's exit noticed (SIGCHLD, wait4)",
    ("reaped", "over"): "its group and cgroup found empty, its pipes at EOF",
    ("over", "exited"): "accounting reads, the cgroup leaf given back, the end posted",
    ("exited", "finished"): "the trial's end: outcome, its commit",
    ("finished", "created"): "the next trial: sampler, the insert of its record",
}
# A trial's own steps, in the order of its life: the spans the event loop logs (common::Span;
# the others come from other processes' threads).
TRIAL_STEPS = ["created", "vfork", "exec_done", "launched", "started", "committed", "first_line",
               "reaped", "over", "exited", "finished"]
LOOP_SPANS = set(TRIAL_STEPS)


def loop_breakdown(log_path: str) -> dict:
    """Where the event loop's time went in a traced run: the spans it logged, in time order, and
    the time between each two consecutive ones, grouped by the pair of steps."""
    pattern = re.compile(r" span (\w+) .*t=([\d.]+)$")
    spans = []
    with open(log_path) as f:
        for line in f:
            m = pattern.search(line.rstrip("\n"))
            if m and m.group(1) in LOOP_SPANS:
                spans.append((float(m.group(2)), m.group(1)))
    if len(spans) < 2:
        raise RuntimeError(f"{log_path}: no spans of the event loop in the trace log")
    spans.sort()
    gaps = collections.defaultdict(list)
    for (t0, a), (t1, b) in zip(spans, spans[1:]):
        gaps[(a, b)].append(t1 - t0)
    total = spans[-1][0] - spans[0][0]
    rows = [{"from": a, "to": b, "what": LOOP_STEPS.get((a, b), ""), "n": len(v),
             "median_us": round(1000 * statistics.median(v), 1),
             "share": round(sum(v) / total, 3)}
            for (a, b), v in gaps.items()]
    rows.sort(key=lambda r: -r["share"])
    return {"span_ms": round(total, 1), "steps": rows}


def trial_path(log_path: str) -> dict:
    """Where each trial's own time went in a traced run, from its creation to its end: for every
    trial its spans (TRIAL_STEPS, the first of each), the time between its consecutive ones,
    and from its end to the creation of the next trial (the one that took its slot: the next
    `created` span on the loop). At parallelism p, p trials follow their paths at once, so a
    slot's cycle (creation to the next creation), not the loop's time, bounds the rate when the
    loop has idle time."""
    pattern = re.compile(r" span (\w+) .*trial=(\d+).*t=([\d.]+)$")
    per = collections.defaultdict(dict)
    created = []
    with open(log_path) as f:
        for line in f:
            m = pattern.search(line.rstrip("\n"))
            if not m or m.group(1) not in TRIAL_STEPS:
                continue
            step, number, t = m.group(1), int(m.group(2)), float(m.group(3))
            per[number].setdefault(step, t)
            if step == "created":
                created.append(t)
    created.sort()
    gaps = collections.defaultdict(list)
    cycles = []
    for spans in per.values():
        seq = sorted((t, s) for s, t in spans.items())
        for (t0, a), (t1, b) in zip(seq, seq[1:]):
            gaps[(a, b)].append(t1 - t0)
        if "created" in spans and "finished" in spans:
            cycles.append(spans["finished"] - spans["created"])
            i = bisect.bisect_right(created, spans["finished"])
            if i < len(created):
                gaps[("finished", "next created")].append(created[i] - spans["finished"])
    if not cycles:
        raise RuntimeError(f"{log_path}: no trial with both a created and a finished span")
    order = {s: i for i, s in enumerate(TRIAL_STEPS + ["next created"])}
    rows = [{"from": a, "to": b, "n": len(v), "median_us": round(1000 * statistics.median(v), 1),
             "mean_us": round(1000 * statistics.mean(v), 1)}
            for (a, b), v in gaps.items() if len(v) >= len(cycles) // 10]
    rows.sort(key=lambda r: (order.get(r["from"], 99), order.get(r["to"], 99)))
    return {"created_to_finished_median_us": round(1000 * statistics.median(cycles), 1),
            "steps": rows}


def print_trial_path(t: dict) -> None:
    print(f"\na trial's own path (median {t['created_to_finished_median_us']:.0f} us from "
          "created to finished; steps taken by at least a tenth of the trials):")
    print(f"  {'from':>10} -> {'to':<12} {'n':>6} {'median us':>10} {'mean us':>9}")
    for r in t["steps"]:
        print(f"  {r['from']:>10} -> {r['to']:<12} {r['n']:>6} {r['median_us']:>10.1f} "
              f"{r['mean_us']:>9.1f}  {LOOP_STEPS.get((r['from'], r['to']), '')}")


def print_loop_breakdown(t: dict) -> None:
    print(f"\nthe event loop's time, {t['span_ms']:.0f} ms from its first span to its last "
          "(steps with at least 1% of it):")
    print(f"  {'from':>10} -> {'to':<10} {'n':>6} {'median us':>10} {'share':>6}")
    for r in t["steps"]:
        if r["share"] >= 0.01:
            print(f"  {r['from']:>10} -> {r['to']:<10} {r['n']:>6} {r['median_us']:>10.1f} "
                  f"{100 * r['share']:>5.1f}%  {r['what']}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` and of the children it reaped (its trials, the
    setup of each in the vfork child included), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command: state is field 3, utime..cstime are fields 14..17 (1-based).
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_floor(build: str, trials: int, parallelism: int, workdir: str,
              files: bool = False) -> dict:
    """The floor (module docstring): spawn, read, wait and one durable commit per trial; with
    `files`, also the trial's folder, log folder and two log files (its stdout and stderr)."""
    worker = os.path.join(build, "bin", "triald-noop-worker")
    db = sqlite3.connect(os.path.join(workdir, "floor.db"), check_same_thread=False,
                         isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE trials (number INTEGER PRIMARY KEY, value TEXT)")
    if files:
        os.mkdir(os.path.join(workdir, "trials"))
        os.mkdir(os.path.join(workdir, "logs"))
    lock = threading.Lock()
    numbers = iter(range(trials))
    failures = []

    def one(number: int) -> None:
        read_end, write_end = os.pipe()
        env = {"TRIALD_PARAMS": json.dumps({"x": number * 0.001}), "TRIALD_REPORT_FD": "3"}
        actions = [(os.POSIX_SPAWN_DUP2, write_end, 3)]
        logs = []
        if files:
            os.mkdir(os.path.join(workdir, "trials", str(number)), 0o750)
            log_dir = os.path.join(workdir, "logs", str(number))
            os.mkdir(log_dir, 0o750)
            for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
                logs.append(os.open(os.path.join(log_dir, name), os.O_WRONLY | os.O_CREAT |
                                    os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640))
                actions.append((os.POSIX_SPAWN_DUP2, logs[-1], fd))
        try:
            pid = os.posix_spawn(worker, [worker], env, file_actions=actions)
        finally:
            os.close(write_end)
            for fd in logs:
                os.close(fd)
        line = b""
        while True:
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            line += chunk
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        if status != 0 or b"final" not in line:
            failures.append((number, status, line))
        with lock:
            db.execute("BEGIN")
            db.execute("INSERT INTO trials VALUES (?, ?)", (number, line.decode()))
            db.execute("COMMIT")

    def loop() -> None:
        while True:
            with lock:
                number = next(numbers, None)
            if number is None:
                return
            one(number)

    started = time.perf_counter()
    threads = [threading.Thread(target=loop) for _ in range(parallelism)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    db.close()
    if failures:
        raise RuntimeError(f"floor: {len(failures)} no-op workers failed, e.g. {failures[0]}")
    return {"system": "floor+files" if files else "floor", "trials": trials,
            "seconds": round(seconds, 4),
            "trials_per_s": round(trials / seconds, 1)}


def run_optuna(trials: int, jobs: int, workdir: str) -> dict:
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "bench_optuna.py"),
                          "--trials", str(trials), "--jobs", str(jobs),
                          "--storage-dir", os.path.join(workdir, "optuna")],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(a, variants: dict) -> dict:
    """Runs the no-op study once per variant per repeat ({name: (build, extra_args)}, or
    {name: None} for the floor), in alternating order (which goes first alternates too), each
    with a.build's worker; prints every run. Returns {name: [runs]}."""
    results = {k: [] for k in variants}
    for r in range(a.repeats):
        order = list(variants) if r % 2 == 0 else list(reversed(list(variants)))
        for k in order:
            with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
                if variants[k] is None:
                    results[k].append(run_floor(a.build, a.trials, a.parallelism, d))
                    continue
                build, extra = variants[k]
                results[k].append(run_triald(build, a.trials, a.parallelism, d, extra,
                                             worker_build=a.build))
        print(f"run {r + 1}: " + ", ".join(
            f"{k} {v[-1]['trials_per_s']} trials/s" +
            (f" ({v[-1]['cpu_ms_per_trial']} CPU ms/trial)" if "cpu_ms_per_trial" in v[-1] else "")
            for k, v in results.items()), flush=True)
    return results


def summarize(a, results: dict, labels: dict) -> dict:
    """Prints the best run and the median CPU per trial of each variant; returns both."""
    best = {k: max(v, key=lambda x: x["trials_per_s"]) for k, v in results.items()}
    cpu = {k: statistics.median(x["cpu_ms_per_trial"] for x in v) for k, v in results.items()}
    print()
    print(f"{'triald':<20} {'trials':>7} {'seconds':>9} {'trials/s':>10} {'CPU ms/trial':>13}")
    for k, label in labels.items():
        print(f"{label:<20} {a.trials:>7} {best[k]['seconds']:>9.3f} "
              f"{best[k]['trials_per_s']:>10.1f} {cpu[k]:>13.3f}")
    return {"best": best, "cpu": cpu}


def paired_ratio(xs: list, ys: list) -> float:
    """The median over the runs side by side of x's trials/s over y's: robust to a machine
    whose load changes from one run to the next."""
    return statistics.median(x["trials_per_s"] / y["trials_per_s"] for x, y in zip(xs, ys))


def accounting_cost(a) -> int:
    """triald with and without resource accounting, alternating; prints the best of each and
    the cost of accounting in %."""
    results = compare(a, {"accounting": (a.build, ()),
                          "none": (a.build, ("--no-resource-accounting",))})
    s = summarize(a, results, {"accounting": "with accounting", "none": "without accounting"})
    best, cpu = s["best"], s["cpu"]
    cost = 100 * (1 - best["accounting"]["trials_per_s"] / best["none"]["trials_per_s"])
    cpu_cost = 100 * (cpu["accounting"] / cpu["none"] - 1)
    paired = 100 * (1 - paired_ratio(results["accounting"], results["none"]))
    print(f"\ncost of resource accounting (target < 5%): {cost:.1f}% of trials/s, best runs; "
          f"{paired:.1f}% of trials/s, median of the {a.repeats} pairs; "
          f"{cpu_cost:.1f}% CPU per trial, medians")
    print(json.dumps({"accounting": best["accounting"], "none": best["none"],
                      "cost_percent": round(cost, 2), "paired_cost_percent": round(paired, 2),
                      "cpu_cost_percent": round(cpu_cost, 2),
                      "cpu_ms_per_trial": cpu}))
    return 0


def isolation_cost(a) -> int:
    """triald as it isolates by default (a cgroup leaf per trial, and a v1 memory leaf where
    accounting needs one), with cgroups but without resource accounting, and with process
    groups only, alternating with the floor; prints each one's rate against the floor."""
    variants = {"cgroups+accounting": (a.build, ()),
                "cgroups": (a.build, ("--no-resource-accounting",)),
                "process groups": (a.build, ("--no-cgroups",)),
                "floor": None}
    results = compare(a, variants)
    floor_best = max(x["trials_per_s"] for x in results["floor"])
    print()
    print(f"{'triald isolating by':<20} {'best trials/s':>14} {'of floor':>9} {'median of pairs':>16}")
    summary = {}
    for k in variants:
        if k == "floor":
            continue
        best = max(x["trials_per_s"] for x in results[k])
        paired = paired_ratio(results[k], results["floor"])
        summary[k] = {"trials_per_s": best, "of_floor": round(best / floor_best, 3),
                      "of_floor_paired": round(paired, 3)}
        print(f"{k:<20} {best:>14.1f} {100 * best / floor_best:>8.0f}% {100 * paired:>15.0f}%")
    print(f"{'floor':<20} {floor_best:>14.1f}")
    summary["floor"] = {"trials_per_s": floor_best}
    print(json.dumps(summary))
    return 0


def against_baseline(a) -> int:
    """This build's triald against another build's (--baseline), on this build's worker,
    alternating; prints the speed-up (best runs and median of the pairs) and CPU per trial."""
    results = compare(a, {"this": (a.build, ()), "baseline": (a.baseline, ())})
    s = summarize(a, results, {"this": "this build", "baseline": "baseline build"})
    best, cpu = s["best"], s["cpu"]
    speedup = best["this"]["trials_per_s"] / best["baseline"]["trials_per_s"]
    paired = paired_ratio(results["this"], results["baseline"])
    print(f"\nthis build / baseline ({a.baseline}): x{speedup:.3f} trials/s, best runs; "
          f"x{paired:.3f}, median of the {a.repeats} pairs; CPU per trial x"
          f"{cpu['this'] / cpu['baseline']:.3f}, medians")
    print(json.dumps({"this": best["this"], "baseline": best["baseline"],
                      "speedup": round(speedup, 3), "paired_speedup": round(paired, 3),
                      "cpu_ms_per_trial": cpu}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="runs of each system; best is kept")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--no-optuna", action="store_true",
                   help="triald and the floor only (Optuna's run takes the longest)")
    p.add_argument("--accounting-cost", action="store_true",
                   help="compare triald with and without resource accounting (no Optuna)")
    p.add_argument("--isolation-cost", action="store_true",
                   help="triald with cgroups and accounting (the default), with cgroups only, "
                        "and with process groups only, each against the floor (no Optuna)")
    p.add_argument("--baseline", metavar="BUILD",
                   help="compare this build's triald with BUILD's (its bin/triald and "
                        "bin/trialctl; e.g. a worktree of an older commit built with `make "
                        "triald trialctl`), on this build's worker (no floor, no Optuna)")
    p.add_argument("--trace", action="store_true",
                   help="one triald run at --log-level trace and where its event loop's time "
                        "went, step by step (no floor, no Optuna)")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)  # the sweep names the worker by an absolute path
    needed = [(a.build, exe) for exe in ("triald", "trialctl", "triald-noop-worker")]
    if a.baseline:
        a.baseline = os.path.abspath(a.baseline)
        needed += [(a.baseline, exe) for exe in ("triald", "trialctl")]
    for build, exe in needed:
        if not os.path.exists(os.path.join(build, "bin", exe)):
            print(f"bench: {build}/bin/{exe} is missing; build first (scripts/test.sh or "
                  "cmake --build build)", file=sys.stderr)
            return 1
    if a.trace:
        with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
            r = run_triald(a.build, a.trials, a.parallelism, d, trace=True)
        print(f"triald (traced): {r['trials_per_s']} trials/s")
        print_loop_breakdown(r["trace"])
        print_trial_path(r["trial_path"])
        print(json.dumps(r))
        return 0
    if a.accounting_cost:
        return accounting_cost(a)
    if a.isolation_cost:
        return isolation_cost(a)
    if a.baseline:
        return against_baseline(a)
    results = {"triald": [], "floor": [], "floor+files": [], "optuna": []}
    for r in range(a.repeats):
        # Alternate them so that machine noise hits all alike.
        with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
            results["triald"].append(run_triald(a.build, a.trials, a.parallelism, d))
        with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
            results["floor"].append(run_floor(a.build, a.trials, a.parallelism, d))
        with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
            results["floor+files"].append(run_floor(a.build, a.trials, a.parallelism, d, True))
        if not a.no_optuna:
            with tempfile.TemporaryDirectory(prefix="triald-bench-") as d:
                results["optuna"].append(run_optuna(a.trials, a.parallelism, d))
        print(f"run {r + 1}: " + ", ".join(f"{k} {v[-1]['trials_per_s']} trials/s"
                                           for k, v in results.items() if v), flush=True)
    best = {k: max(v, key=lambda x: x["trials_per_s"]) for k, v in results.items() if v}
    print()
    print(f"{'system':<11} {'trials':>7} {'seconds':>9} {'trials/s':>10}   isolation")
    labels = {"triald": "one process per trial, SQLite FULL sync",
              "floor": "posix_spawn + wait + one FULL-sync SQLite commit per trial, nothing else",
              "floor+files": "the floor + the trial's folder, log folder and 2 log files",
              "optuna": "threads in one interpreter, SQLite"}
    for k in best:
        print(f"{k:<11} {a.trials:>7} {best[k]['seconds']:>9.3f} "
              f"{best[k]['trials_per_s']:>10.1f}   {labels[k]}")
    of_floor = best["triald"]["trials_per_s"] / best["floor"]["trials_per_s"]
    paired = statistics.median(t["trials_per_s"] / f["trials_per_s"]
                               for t, f in zip(results["triald"], results["floor"]))
    of_files = best["triald"]["trials_per_s"] / best["floor+files"]["trials_per_s"]
    paired_files = statistics.median(t["trials_per_s"] / f["trials_per_s"]
                                     for t, f in zip(results["triald"], results["floor+files"]))
    print(f"\ntriald/floor: {100 * of_floor:.0f}% best runs, {100 * paired:.0f}% median of the "
          f"{a.repeats} pairs (target >= 50%)")
    print(f"triald/(floor+files): {100 * of_files:.0f}% best runs, {100 * paired_files:.0f}% "
          f"median of the pairs; the files alone take the floor to "
          f"{100 * best['floor+files']['trials_per_s'] / best['floor']['trials_per_s']:.0f}% "
          f"on this file system")
    out = {"triald": best["triald"], "floor": best["floor"], "floor+files": best["floor+files"],
           "of_floor": round(of_floor, 3), "of_floor_paired": round(paired, 3),
           "of_floor_files": round(of_files, 3), "of_floor_files_paired": round(paired_files, 3)}
    if "optuna" in best:
        ratio = best["triald"]["trials_per_s"] / best["optuna"]["trials_per_s"]
        print(f"ratio triald/optuna: {ratio:.1f}x (target >= 5x)")
        out.update({"optuna": best["optuna"], "ratio": round(ratio, 2)})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
