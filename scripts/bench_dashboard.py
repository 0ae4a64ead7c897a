#!/usr/bin/env python3
"""Dashboard viewers against trial launches: the launch rate of a no-op sweep with 0 and with
--viewers dashboard viewers polling, side by side. Figures are printed, never asserted.

Each round runs a fresh --trials no-op sweep (triald-noop-worker, parallelism --parallelism) on
one triald started with --http 127.0.0.1:0 --socket-read-open and --max-workers --parallelism,
and measures launches per second from the study's first trial start to its last trial's end
(the trials' own started_at/finished_at), and triald's own CPU time over the round (from
/proc/PID/stat; the viewers' and trials' CPU is not in it), per trial. In the viewers round, each viewer is a thread with
its own keep-alive HTTP connection that asks, every --interval seconds, for what the study page
asks (GET /api/studies/NAME) and, every fifth time, the studies list (GET /api/studies), as the
page's poll does. The HTTP answers' latencies and sizes are printed too. The rounds alternate
(0, N, 0, N, ...) --rounds times each, so a drift of the machine's load touches both.

  /usr/bin/python3 scripts/bench_dashboard.py                    # 0 vs 50 viewers, 500 trials
  /usr/bin/python3 scripts/bench_dashboard.py --viewers 50 --trials 1000 --rounds 3
"""
import argparse
import http.client
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import subprocess  # noqa: E402

from bench_read_verbs import Conn, percentile, stop  # noqa: E402
from bench_read_verbs import start_triald as start_read_verbs_triald  # noqa: E402
from bench_throughput import write_noop_sweep  # noqa: E402


def start_triald(triald: str, state: str, workers: int) -> subprocess.Popen:
    """triald with the dashboard on a free loopback port, logging at info (the port's line)."""
    return start_read_verbs_triald(triald, state, workers,
                                   ("--http", "127.0.0.1:0", "--socket-read-open"), "info")


def dashboard_port(log_path: str) -> int:
    for _ in range(200):
        with open(log_path) as f:
            m = re.search(r"dashboard: http://127\.0\.0\.1:(\d+)/", f.read())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise RuntimeError("no dashboard line in " + log_path)


def viewer(port: int, study: str, interval: float, stop_event, stats: dict, lock) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    n = 0
    while not stop_event.is_set():
        paths = ["/api/studies/" + study] + (["/api/studies"] if n % 5 == 0 else [])
        for path in paths:
            start = time.perf_counter()
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                body = r.read()
                took = time.perf_counter() - start
                with lock:
                    stats["latency"].append(took)
                    stats["bytes"] += len(body)
                    stats["status"][r.status] = stats["status"].get(r.status, 0) + 1
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    stats["errors"].append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        n += 1
        stop_event.wait(interval)
    conn.close()


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time of process `pid` so far (its reaped children not counted)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_round(a, sock: str, port: int, workdir: str, name: str, viewers: int, pid: int) -> dict:
    sweep = write_noop_sweep(os.path.join(workdir, name + ".toml"), name,
                             os.path.join(a.build, "bin"), a.trials, a.parallelism)
    stop_event = threading.Event()
    lock = threading.Lock()
    stats = {"latency": [], "bytes": 0, "status": {}, "errors": []}
    conn = Conn(sock)
    cpu_before = cpu_seconds(pid)
    with open(sweep) as f:
        conn.call("submit", sweep=f.read(), path=sweep)
    threads = [threading.Thread(target=viewer, args=(port, name, a.interval, stop_event, stats, lock))
               for _ in range(viewers)]
    for t in threads:
        t.start()
    try:
        while True:
            st = conn.call("status", study=name)
            if st["state"] != "RUNNING" and st["running"] == 0:
                break
            time.sleep(0.2)
    finally:
        stop_event.set()
        for t in threads:
            t.join()
    cpu = cpu_seconds(pid) - cpu_before
    trials = conn.call("trials", study=name)
    starts = [t["started_at"] for t in trials if t["started_at"]]
    ends = [t["finished_at"] for t in trials if t["finished_at"]]
    span = max(ends) - min(starts)
    out = {"viewers": viewers, "trials": len(trials), "complete": st["complete"],
           "span_s": round(span, 2), "launches_per_s": round(len(starts) / span, 1),
           "triald_cpu_s": round(cpu, 2), "triald_cpu_ms_per_trial": round(1000 * cpu / len(trials), 2)}
    if viewers:
        lat = stats["latency"]
        out.update({"http_requests": len(lat), "http_status": stats["status"],
                    "http_errors": stats["errors"][:3],
                    "http_ms_median": round(statistics.median(lat) * 1000, 2) if lat else None,
                    "http_ms_p95": round(percentile(lat, 95) * 1000, 2) if lat else None,
                    "bytes_per_answer": stats["bytes"] // max(1, len(lat))})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build", help="build folder (default build)")
    p.add_argument("--viewers", type=int, default=50)
    p.add_argument("--trials", type=int, default=500, help="per round (default 500)")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--interval", type=float, default=1.0,
                   help="seconds between a viewer's polls (the page's default is 2)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of each kind (default 2)")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    workdir = tempfile.mkdtemp(prefix="triald-bench-dashboard-")
    state = os.path.join(workdir, "state")
    triald = os.path.join(a.build, "bin", "triald")
    os.makedirs(state)
    daemon = start_triald(triald, state, a.parallelism)
    results = []
    try:
        port = dashboard_port(state + ".log")
        sock = os.path.join(state, "triald.sock")
        for r in range(a.rounds):
            for viewers in (0, a.viewers):
                res = run_round(a, sock, port, workdir, "r%d-v%d" % (r, viewers), viewers,
                                daemon.pid)
                print(json.dumps(res), flush=True)
                results.append(res)
    finally:
        stop(daemon)
    rate = {v: [x["launches_per_s"] for x in results if x["viewers"] == v] for v in (0, a.viewers)}
    print("\nlaunches/s of %d no-op trials (parallelism %d), %d rounds each:" %
          (a.trials, a.parallelism, a.rounds))
    print("  %3d viewers: %s  (median %.1f)" % (0, rate[0], statistics.median(rate[0])))
    print("  %3d viewers: %s  (median %.1f), each polling every %.1f s" %
          (a.viewers, rate[a.viewers], statistics.median(rate[a.viewers]), a.interval))
    print("  ratio: %.3f" % (statistics.median(rate[a.viewers]) / statistics.median(rate[0])))
    cpu = {v: [x["triald_cpu_ms_per_trial"] for x in results if x["viewers"] == v]
           for v in (0, a.viewers)}
    print("triald CPU per trial (ms): %d viewers %s, %d viewers %s" %
          (0, cpu[0], a.viewers, cpu[a.viewers]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
