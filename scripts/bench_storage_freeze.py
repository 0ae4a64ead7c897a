#!/usr/bin/env python3
"""A frozen PostgreSQL server under a running daemon: how long the daemon's control socket
waits. Figures are printed, never asserted.

A throwaway server (scripts/pg_test_server.sh) holds a fresh database per run; a triald on it
(--storage, node timeout --node-timeout) runs a sweep of short sleeping trials (parallelism 2).
Once trials run, every process of the server is stopped with SIGSTOP for --freeze seconds (a
stalled disk or a hung failover: the kernel still accepts what the daemon sends, nothing
answers), then continued. One client pings every 20 ms and another asks `status STUDY` every
100 ms for the whole run, each on its own connection, each call timed to its reply (an error
reply counts: it came back). Prints, per binary, the longest and the 99th-percentile wait of
each during the freeze, and whether the study went on after it.

--before runs another triald binary (e.g. one built from an older commit) in the same run,
against its own fresh database, so the two lines compare side by side:

  /usr/bin/python3 scripts/bench_storage_freeze.py --before /path/to/old/triald
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_read_verbs import Conn, percentile, start_triald, stop  # noqa: E402


def server_pids(cluster_root: str) -> list:
    """The postmaster of the cluster and every process it started."""
    with open(os.path.join(cluster_root, "data", "postmaster.pid")) as f:
        postmaster = int(f.readline())
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(postmaster)],
                              capture_output=True, text=True).stdout.split()
    return [postmaster] + [int(p) for p in children]


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-qAtc", sql], check=True, capture_output=True)


class Poller(threading.Thread):
    """Calls `verb` every `every` s on its own connection; records (start, seconds) per call."""

    def __init__(self, sock: str, verb: str, every: float, **args):
        super().__init__(daemon=True)
        self.conn, self.verb, self.every, self.args = Conn(sock), verb, every, args
        self.samples, self.errors, self.done = [], 0, False

    def run(self):
        while not self.done:
            start = time.monotonic()
            try:
                self.conn.call(self.verb, **self.args)
            except RuntimeError:
                self.errors += 1  # an error reply: it still came back
            except (OSError, ConnectionError):
                self.errors += 1
            self.samples.append((start, time.monotonic() - start))
            time.sleep(max(0.0, self.every - (time.monotonic() - start)))


def completed(sock: str, wait_s: float = 60) -> int:
    """The study's COMPLETE count, once `status` answers without an error (the daemon may still
    count the server as unresponsive for a moment after the thaw)."""
    until = time.monotonic() + wait_s
    while True:
        try:
            return Conn(sock).call("status", study="freeze")["complete"]
        except RuntimeError:
            if time.monotonic() > until:
                raise
            time.sleep(0.1)


def run_one(label: str, triald: str, admin_url: str, cluster_root: str, a, workdir: str) -> dict:
    db = "freeze_" + label.replace("-", "_")
    psql(admin_url, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    psql(admin_url, f"CREATE DATABASE {db} TEMPLATE template0 ENCODING 'UTF8'")
    url = admin_url.rsplit("/", 1)[0] + "/" + db
    state = os.path.join(workdir, "state-" + label)
    os.makedirs(state)
    sweep = os.path.join(workdir, label + ".toml")
    with open(sweep, "w") as f:
        f.write(f"""[study]
name = "freeze"
n_trials = 100000
parallelism = 2

[objective]
kind = "exec"
command = ["sh", "-c", "sleep 0.2; echo '{{\\"type\\":\\"final\\",\\"value\\":1}}' >&3"]

[space.x]
type = "float"
low = 0.0
high = 1.0
""")
    daemon = start_triald(triald, state, 2, ["--storage", url, "--node-name", label,
                                             "--node-timeout", str(a.node_timeout)])
    sock = os.path.join(state, "triald.sock")
    try:
        with open(sweep) as f:
            Conn(sock).call("submit", sweep=f.read(), path=sweep)
        time.sleep(3)
        pingers = [Poller(sock, "ping", 0.02), Poller(sock, "status", 0.1, study="freeze")]
        for p in pingers:
            p.start()
        time.sleep(2)
        pids = server_pids(cluster_root)
        frozen_at = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(a.freeze)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        before = completed(sock)
        time.sleep(a.after)
        after = completed(sock)
        for p in pingers:
            p.done = True
        for p in pingers:
            p.join(timeout=a.freeze + 60)
        out = {"binary": triald, "went_on": after > before, "completed_after_thaw": after - before}
        for p in pingers:
            during = [s for (t, s) in p.samples if frozen_at <= t + s and t <= thawed_at]
            out[p.verb] = {
                "calls_during_freeze": len(during),
                "max_ms": round(max(during) * 1000, 1) if during else None,
                "p99_ms": round(percentile(during, 99) * 1000, 1) if during else None,
                "errors": p.errors,
            }
        return out
    finally:
        stop(daemon)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--before", help="another triald binary, run first in the same run")
    ap.add_argument("--freeze", type=float, default=30, help="seconds the server is stopped")
    ap.add_argument("--after", type=float, default=10, help="seconds watched after the thaw")
    ap.add_argument("--node-timeout", type=float, default=30)
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="triald-freeze-")
    pg_dir = os.path.join(workdir, "pg")
    script = os.path.join(ROOT, "scripts", "pg_test_server.sh")
    admin_url = subprocess.run(["bash", script, "start", pg_dir], check=True,
                               capture_output=True, text=True).stdout.strip()
    cluster_root = open(os.path.join(pg_dir, "cluster-root")).read().strip()
    try:
        runs = []
        if a.before:
            runs.append(("before", a.before))
        runs.append(("after", os.path.join(a.build, "bin", "triald")))
        results = {label: run_one(label, binary, admin_url, cluster_root, a, workdir)
                   for label, binary in runs}
        print(json.dumps({"freeze_s": a.freeze, "node_timeout_s": a.node_timeout,
                          "runs": results}, indent=2))
    finally:
        subprocess.run(["bash", script, "stop", pg_dir], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
