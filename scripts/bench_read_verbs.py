#!/usr/bin/env python3
"""Read verbs under load: what `studies` costs on a large database, and how long `ping` waits
while clients poll `status` during a sweep. Figures are printed, never asserted.

  studies: triald-bench-fill writes --studies studies of --trials finished trials each (with
           --steps intermediate values per trial) straight through the Storage API; a triald on
           that state directory then answers `studies` --repeats times (and `status` of one
           study, `trials --limit 100`); prints the median and worst latency of each.
  ping:    a --sweep-trials no-op sweep (triald-noop-worker, parallelism 2) runs while
           --pollers clients each ask `status` every 0.5 s; a separate client pings every 20 ms
           for the whole sweep; prints the ping latency's median, p99 and max.

  rss:     triald-bench-fill writes --rss-studies studies of --rss-trials trials, each with
           --rss-steps intermediate values; a triald on it then serves --readers clients at
           once, each reading `trials` (the whole study, every curve) and `studies` in turn for
           --rss-seconds; prints the daemon's RSS before, its peak (VmHWM) and the bytes read.

Latencies are measured on the control socket (one JSON line each way), not through trialctl, so
process start-up is not counted. --triald runs another triald binary (e.g. one built from an
older commit) against the same database and sweep: that is how "before" figures are taken.

  /usr/bin/python3 scripts/bench_read_verbs.py                       # both parts
  /usr/bin/python3 scripts/bench_read_verbs.py --part studies --state /tmp/big   # fill, keep
  /usr/bin/python3 scripts/bench_read_verbs.py --part studies --state /tmp/big --triald OLD
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_throughput import write_noop_sweep  # noqa: E402


class Conn:
    """One control connection; reconnects when triald closed it (idle past its deadline)."""

    def __init__(self, path: str):
        self.path = path
        self.sock = None
        self.buf = b""

    def call(self, verb: str, **args) -> dict:
        for attempt in (0, 1):
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(self.path)
                self.buf = b""
            try:
                self.sock.sendall((json.dumps(dict(args, verb=verb)) + "\n").encode())
                while b"\n" not in self.buf:
                    chunk = self.sock.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError("closed")
                    self.buf += chunk
                line, self.buf = self.buf.split(b"\n", 1)
                reply = json.loads(line)
                if not reply["ok"]:
                    raise RuntimeError(f"{verb}: {reply['code']}: {reply['error']}")
                return reply["result"]
            except (ConnectionError, BrokenPipeError):
                self.sock.close()
                self.sock = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def timed(conn: Conn, verb: str, **args) -> float:
    start = time.perf_counter()
    conn.call(verb, **args)
    return time.perf_counter() - start


def start_triald(triald: str, state: str, workers: int, extra_args=(),
                 log_level: str = "warn") -> subprocess.Popen:
    log = open(state + ".log", "a")
    daemon = subprocess.Popen([triald, "--state-dir", state, "--max-workers", str(workers),
                               *extra_args, "--log-level", log_level], stdout=log, stderr=log)
    sock = os.path.join(state, "triald.sock")
    for _ in range(600):
        try:
            Conn(sock).call("ping")
            return daemon
        except (OSError, ConnectionError):
            if daemon.poll() is not None:
                raise RuntimeError("triald exited; see " + state + ".log")
            time.sleep(0.05)
    daemon.terminate()
    raise RuntimeError("triald did not start; see " + state + ".log")


def stop(daemon: subprocess.Popen) -> None:
    daemon.terminate()
    daemon.wait(timeout=120)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def percentile(values: list, p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def bench_studies(a, workdir: str) -> dict:
    state = os.path.abspath(a.state) if a.state else os.path.join(workdir, "studies-state")
    if os.path.exists(os.path.join(state, "triald.db")):
        fill = {"reused": state}
    else:
        out = subprocess.run([os.path.join(a.build, "bin", "triald-bench-fill"), state,
                              str(a.studies), str(a.trials), str(a.steps)],
                             check=True, capture_output=True, text=True).stdout
        fill = json.loads(out.strip().splitlines()[-1])
    daemon = start_triald(a.triald, state, 2)
    try:
        conn = Conn(os.path.join(state, "triald.sock"))
        studies = [timed(conn, "studies") for _ in range(a.repeats)]
        status = [timed(conn, "status", study="bench-0") for _ in range(a.repeats)]
        page = [timed(conn, "trials", study="bench-0", limit=100) for _ in range(a.repeats)]
        n = len(conn.call("studies"))
    finally:
        stop(daemon)
    return {"part": "studies", "triald": a.triald, "fill": fill, "studies_listed": n,
            "studies_ms": {"median": ms(statistics.median(studies)), "max": ms(max(studies))},
            "status_ms": {"median": ms(statistics.median(status)), "max": ms(max(status))},
            "trials_limit_100_ms": {"median": ms(statistics.median(page)), "max": ms(max(page))}}


def proc_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def read_whole(path: str, verb: str, **args) -> int:
    """Sends one request and reads its whole reply line (a streamed reply included), returning
    its size, without keeping it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    try:
        sock.sendall((json.dumps(dict(args, verb=verb)) + "\n").encode())
        size = 0
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{verb}: reply cut short after {size} bytes")
            size += len(chunk)
            if chunk.endswith(b"\n"):
                return size
    finally:
        sock.close()


def bench_rss(a, workdir: str) -> dict:
    state = os.path.join(workdir, "rss-state")
    out = subprocess.run([os.path.join(a.build, "bin", "triald-bench-fill"), state,
                          str(a.rss_studies), str(a.rss_trials), str(a.rss_steps)],
                         check=True, capture_output=True, text=True).stdout
    fill = json.loads(out.strip().splitlines()[-1])
    # The fill tool's caps are the storage's: a daemon that would refuse such reports still reads
    # them (they are stored).
    daemon = start_triald(a.triald, state, 2)
    sock = os.path.join(state, "triald.sock")
    done = threading.Event()
    read = []
    errors = []

    def reader(k: int):
        n = 0
        while not done.is_set():
            try:
                read.append(read_whole(sock, "trials", study=f"bench-{(k + n) % a.rss_studies}"))
                read.append(read_whole(sock, "studies"))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
            n += 1

    try:
        before = proc_kib(daemon.pid, "VmRSS")
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(a.readers)]
        for t in threads:
            t.start()
        time.sleep(a.rss_seconds)
        done.set()
        for t in threads:
            t.join()
        peak = proc_kib(daemon.pid, "VmHWM")
        after = proc_kib(daemon.pid, "VmRSS")
        studies_bytes = read_whole(sock, "studies")
    finally:
        done.set()
        stop(daemon)
    return {"part": "rss", "triald": a.triald, "fill": fill, "readers": a.readers,
            "replies": len(read), "bytes_read": sum(read), "errors": errors[:5],
            "studies_reply_bytes": studies_bytes,
            "rss_mib": {"before": round(before / 1024, 1), "peak": round(peak / 1024, 1),
                        "after": round(after / 1024, 1)}}


def bench_ping(a, workdir: str) -> dict:
    state = os.path.join(workdir, "ping-state")
    bindir = os.path.join(a.build, "bin")
    sweep = write_noop_sweep(os.path.join(workdir, "noop.toml"), "noop", bindir,
                             a.sweep_trials, 2)
    daemon = start_triald(a.triald, state, 2)
    sock = os.path.join(state, "triald.sock")
    done = threading.Event()
    errors = []

    def poll_status():
        conn = Conn(sock)
        while not done.is_set():
            try:
                conn.call("status", study="noop")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
            done.wait(0.5)

    try:
        with open(sweep) as f:
            Conn(sock).call("submit", sweep=f.read(), path=sweep)
        pollers = [threading.Thread(target=poll_status) for _ in range(a.pollers)]
        for t in pollers:
            t.start()
        conn = Conn(sock)
        pings = []
        start = time.monotonic()
        while True:
            pings.append(timed(conn, "ping"))
            if len(pings) % 25 == 0:
                st = conn.call("status", study="noop")
                if st["state"] != "RUNNING" and st["running"] == 0:
                    break
            time.sleep(0.02)
        elapsed = time.monotonic() - start
        done.set()
        for t in pollers:
            t.join()
    finally:
        done.set()
        stop(daemon)
    return {"part": "ping", "triald": a.triald, "sweep_trials": a.sweep_trials,
            "pollers": a.pollers, "sweep_s": round(elapsed, 1), "pings": len(pings),
            "complete": st["complete"], "poll_errors": errors[:5],
            "ping_ms": {"median": ms(statistics.median(pings)), "p99": ms(percentile(pings, 99)),
                        "max": ms(max(pings))}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build", help="build folder (default build)")
    p.add_argument("--triald", help="the triald binary to measure (default BUILD/bin/triald)")
    p.add_argument("--part", choices=["studies", "ping", "rss", "both"], default="both")
    p.add_argument("--studies", type=int, default=50)
    p.add_argument("--trials", type=int, default=10000, help="per study (default 10000)")
    p.add_argument("--steps", type=int, default=10, help="intermediate values per trial")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--state", help="the studies part's state folder: filled if it has no "
                   "database, reused (and kept) otherwise; default: a temporary one")
    p.add_argument("--sweep-trials", type=int, default=1000)
    p.add_argument("--pollers", type=int, default=5)
    p.add_argument("--rss-studies", type=int, default=50)
    p.add_argument("--rss-trials", type=int, default=4, help="per study (default 4)")
    p.add_argument("--rss-steps", type=int, default=10000, help="per trial (default 10000)")
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--rss-seconds", type=float, default=20)
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    a.triald = os.path.abspath(a.triald or os.path.join(a.build, "bin", "triald"))
    workdir = tempfile.mkdtemp(prefix="triald-bench-read-")
    try:
        if a.part in ("studies", "both"):
            print(json.dumps(bench_studies(a, workdir)), flush=True)
        if a.part in ("ping", "both"):
            print(json.dumps(bench_ping(a, workdir)), flush=True)
        if a.part == "rss":
            print(json.dumps(bench_rss(a, workdir)), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
