#!/usr/bin/python3
"""Scale-out benchmark: no-op trials per second with 1, 2 and 3 triald daemons sharing one
PostgreSQL database, and one daemon on its embedded SQLite, side by side.

Every daemon has its own state directory and node name and runs `--parallelism` trials at once
(one vfork+exec of build/bin/triald-noop-worker per trial); the study is submitted through the
first daemon and the others join it at their next heartbeat. PostgreSQL is a private server
started by scripts/pg_test_server.sh with fsync on (PG_TEST_DURABLE=1), so that its commits are
as durable as SQLite's synchronous=FULL. The time is the study's own record: created_at (submit)
to finished_at (the last trial committed).

All daemons share this machine's cores, so the figures show the coordination cost of the
shared database (row locks, one round trip per state change, claims serialised per study), not
what several hosts would add. Not a test: nothing here asserts a speed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_throughput import write_noop_sweep  # noqa: E402  (the same no-op sweep)


def ctl(bindir: str, state: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(bindir, "trialctl"), "--socket",
                           os.path.join(state, "triald.sock"), *args],
                          capture_output=True, text=True)


def run(build: str, storage_url: str, daemons: int, trials: int, parallelism: int,
        workdir: str, tag: str) -> dict:
    bindir = os.path.join(build, "bin")
    sweep = write_noop_sweep(os.path.join(workdir, f"{tag}.toml"), tag, bindir, trials,
                             parallelism)
    procs, states, logs = [], [], []
    try:
        for i in range(daemons):
            state = os.path.join(workdir, f"{tag}-state-{i}")
            log = open(state + ".log", "w")
            args = [os.path.join(bindir, "triald"), "--state-dir", state, "--max-workers",
                    str(parallelism), "--log-level", "warn", "--node-name", f"node-{i}",
                    "--heartbeat-interval", "0.5", "--node-timeout", "10"]
            if storage_url:
                args += ["--storage", storage_url]
            procs.append(subprocess.Popen(args, stdout=log, stderr=log))
            states.append(state)
            logs.append(log)
        for state in states:
            for _ in range(300):
                if ctl(bindir, state, "ping").returncode == 0:
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("triald did not start; see " + state + ".log")
        r = ctl(bindir, states[0], "submit", sweep)
        if r.returncode != 0:
            raise RuntimeError("submit failed: " + r.stderr)
        while True:
            st = json.loads(ctl(bindir, states[0], "status", tag, "--json").stdout)
            if st["state"] != "RUNNING" and st["running"] == 0:
                break
            time.sleep(0.05)
        if st["complete"] != trials:
            raise RuntimeError(f"only {st['complete']} of {trials} trials completed: {st}")
        per_node = {}
        for t in json.loads(ctl(bindir, states[0], "trials", tag, "--json").stdout):
            per_node[t["node"]] = per_node.get(t["node"], 0) + 1
        seconds = st["finished_at"] - st["created_at"]
        return {"storage": "postgresql" if storage_url else "sqlite", "daemons": daemons,
                "trials": trials, "seconds": round(seconds, 3),
                "trials_per_s": round(trials / seconds, 1), "per_node": per_node}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        for log in logs:
            log.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=600)
    p.add_argument("--parallelism", type=int, default=2, help="trials at once per daemon")
    p.add_argument("--repeats", type=int, default=2, help="runs of each setup; best is kept")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    for exe in ("triald", "trialctl", "triald-noop-worker"):
        if not os.path.exists(os.path.join(a.build, "bin", exe)):
            print(f"bench: {a.build}/bin/{exe} is missing; build first", file=sys.stderr)
            return 1
    setups = [("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 3)]
    best = {}
    with tempfile.TemporaryDirectory(prefix="triald-bench-cluster-") as d:
        pgdir = os.path.join(d, "pg")
        env = dict(os.environ, PG_TEST_DURABLE="1")
        url = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg_test_server.sh"),
                              "start", pgdir], check=True, capture_output=True, text=True,
                             env=env).stdout.strip().splitlines()[-1]
        try:
            db = 0
            for r in range(a.repeats):
                # Round-robin over the setups, so machine noise hits all alike.
                for storage, n in setups:
                    db += 1
                    storage_url = ""
                    if storage == "postgresql":
                        # A fresh database per run: each starts from empty tables.
                        name = f"bench{db}"
                        subprocess.run(["psql", url, "-qc", f"CREATE DATABASE {name}"],
                                       check=True, capture_output=True)
                        storage_url = url.rsplit("/", 1)[0] + "/" + name
                    res = run(a.build, storage_url, n, a.trials, a.parallelism, d,
                              f"s{db}")
                    key = (storage, n)
                    if key not in best or res["trials_per_s"] > best[key]["trials_per_s"]:
                        best[key] = res
                    print(f"run {r + 1}: {storage} x{n}: {res['trials_per_s']} trials/s "
                          f"(per node {res['per_node']})", flush=True)
        finally:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg_test_server.sh"), "stop",
                            pgdir], capture_output=True)
    print()
    base = best[("sqlite", 1)]["trials_per_s"]
    print(f"{'storage':<11} {'daemons':>7} {'trials':>7} {'seconds':>9} {'trials/s':>9} "
          f"{'vs sqlite':>9}")
    for storage, n in setups:
        b = best[(storage, n)]
        print(f"{storage:<11} {n:>7} {b['trials']:>7} {b['seconds']:>9.3f} "
              f"{b['trials_per_s']:>9.1f} {b['trials_per_s'] / base:>8.2f}x")
    print(json.dumps({f"{s}x{n}": best[(s, n)] for s, n in setups}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
