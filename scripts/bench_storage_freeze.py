#!/usr/bin/env python3
"""A frozen PostgreSQL server under a running daemon: how long the daemon's control socket,
dashboard and trial channels wait. Figures are printed, never asserted.

A throwaway server (scripts/pg_test_server.sh) holds a fresh database per run; a triald on it
(--storage, node timeout --node-timeout) runs a sweep of Python trials (parallelism 2) that each,
for 8 s, report a value and ask should_prune every 10 ms, timing each answer (the trial channel:
the daemon's event loop answers it) and writing the times to a file when they end.
Once trials run, every process of the server is stopped with SIGSTOP for --freeze seconds (a
stalled disk or a hung failover: the kernel still accepts what the daemon sends, nothing
answers), then continued. One client pings every 20 ms, another asks `status STUDY` every
100 ms and a third GETs the dashboard's /api/studies/STUDY every 100 ms (the daemon runs with
--http on a free loopback port and --socket-read-open, so reading needs no token) for the whole
run, each on its own connection, each call timed to its reply (an error reply counts: it came
back). Prints, per binary, the longest and the 99th-percentile wait of
each during the freeze (the trials' should_prune answers among them, as "channel"), and whether
the study went on after it.

--before runs another triald binary (e.g. one built from an older commit) in the same run,
against its own fresh database, so the two lines compare side by side:

  /usr/bin/python3 scripts/bench_storage_freeze.py --before /path/to/old/triald

--control-every S adds a client that sends a control change every S seconds (`set` of the
study's parallelism to the 2 it has: an event each time, nothing else changes), timed and
reported as "set" like the pollers above.

--delay-ms D puts the server D ms away: the daemon reaches it through a proxy on loopback that
holds every chunk for D ms in each direction (a round trip of 2D ms more; the order of the
bytes kept, nothing else limited). With --freeze 0 that is a slow database alone. The channel's
figures are then also given over the whole run ("channel_all": its median, 99th percentile and
longest answer; each poller's "all": its median and longest), not only during the freeze:

  /usr/bin/python3 scripts/bench_storage_freeze.py --freeze 0 --delay-ms 2 --before OLD/triald
"""
import asyncio
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_read_verbs import Conn, percentile, start_triald, stop  # noqa: E402


# A trial that talks to the daemon for 8 s (the freeze begins 5 s after the submit, while the
# first trials run): a report and a should_prune every 10 ms, each should_prune timed from its
# request to its answer; the (start, seconds) pairs go to a file of its own in ANSWERS when it
# ends (written by the trial, so a daemon that cannot store them does not lose them).
CHANNEL_OBJECTIVE = """
import json
import os
import time


def objective(trial):
    samples = []
    end = time.time() + 8.0
    step = 0
    while time.time() < end:
        trial.report(float(step), step)
        t0 = time.time()
        trial.should_prune()
        samples.append((t0, time.time() - t0))
        step += 1
        time.sleep(0.01)
    with open(os.path.join(ANSWERS, str(os.getpid()) + ".json"), "w") as f:
        json.dump(samples, f)
    return 1.0
"""


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
    """Calls `call` every `every` s; records (start, seconds) per call. `verb` names it."""

    def __init__(self, verb: str, every: float, call):
        super().__init__(daemon=True)
        self.verb, self.every, self.call = verb, every, call
        self.samples, self.errors, self.done, self.first_error = [], 0, False, None

    def run(self):
        while not self.done:
            start = time.monotonic()
            try:
                self.call()
            except (RuntimeError, OSError, ConnectionError, http.client.HTTPException) as e:
                self.errors += 1  # an error reply still came back; a lost connection did not
                self.first_error = self.first_error or f"{type(e).__name__}: {e}"
            self.samples.append((start, time.monotonic() - start))
            time.sleep(max(0.0, self.every - (time.monotonic() - start)))


def verb_poller(sock: str, verb: str, every: float, **args) -> Poller:
    """`verb` with `args` on a control connection of its own."""
    conn = Conn(sock)
    return Poller(verb, every, lambda: conn.call(verb, **args))


def dashboard_poller(port: int, target: str, every: float) -> Poller:
    """GET `target` from the dashboard (keep-alive, reconnecting when closed)."""
    conn = [None]

    def get():
        if conn[0] is None:
            conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn[0].request("GET", target)
            answer = conn[0].getresponse()
            answer.read()
        except (OSError, http.client.HTTPException):
            conn[0].close()
            conn[0] = None
            raise
        if answer.status != 200:
            raise RuntimeError(f"dashboard: {answer.status}")

    return Poller("dashboard", every, get)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


class DelayProxy(threading.Thread):
    """Forwards loopback TCP connections to `target_port`, each chunk `delay_s` late in each
    direction (its time of arrival plus the delay; order kept). Listens on .port."""

    def __init__(self, target_port: int, delay_s: float):
        super().__init__(daemon=True)
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = free_port()
        self.ready = threading.Event()

    async def pipe(self, reader, writer):
        queue = asyncio.Queue()

        async def send():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(65536)
                await queue.put((time.monotonic() + self.delay_s, data or None))
                if not data:
                    break
        except ConnectionError:
            await queue.put((0, None))
        await sender

    async def serve_one(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self.pipe(reader, up_writer), self.pipe(up_reader, writer),
                             return_exceptions=True)

    def run(self):
        async def main():
            server = await asyncio.start_server(self.serve_one, "127.0.0.1", self.port)
            self.ready.set()
            async with server:
                await server.serve_forever()
        asyncio.run(main())


def run_one(label: str, triald: str, admin_url: str, cluster_root: str, a, workdir: str) -> dict:
    db = "freeze_" + label.replace("-", "_")
    psql(admin_url, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    psql(admin_url, f"CREATE DATABASE {db} TEMPLATE template0 ENCODING 'UTF8'")
    url = admin_url.rsplit("/", 1)[0] + "/" + db
    if a.delay_ms > 0:
        # The daemon's every connection to the server goes through the proxy.
        host_port = url.split("@", 1)[1].split("/", 1)[0]
        proxy = DelayProxy(int(host_port.rsplit(":", 1)[1]), a.delay_ms / 1000)
        proxy.start()
        proxy.ready.wait(10)
        url = url.replace(host_port, f"127.0.0.1:{proxy.port}")
    state = os.path.join(workdir, "state-" + label)
    os.makedirs(state)
    sweep = os.path.join(workdir, label + ".toml")
    answers = os.path.join(workdir, "answers-" + label)
    os.makedirs(answers)
    with open(os.path.join(workdir, label + "_objective.py"), "w") as f:
        f.write(CHANNEL_OBJECTIVE.replace("ANSWERS", repr(answers)))
    with open(sweep, "w") as f:
        f.write(f"""[study]
name = "freeze"
n_trials = 100000
parallelism = 2

[objective]
kind = "python"
function = "{label}_objective.py:objective"
python = "/usr/bin/python3"
fork_server = false

[space.x]
type = "float"
low = 0.0
high = 1.0
""")
    port = free_port()
    daemon = start_triald(triald, state, 2, ["--storage", url, "--node-name", label,
                                             "--node-timeout", str(a.node_timeout),
                                             "--http", f"127.0.0.1:{port}", "--socket-read-open"])
    sock = os.path.join(state, "triald.sock")
    try:
        with open(sweep) as f:
            Conn(sock).call("submit", sweep=f.read(), path=sweep)
        time.sleep(3)
        pingers = [verb_poller(sock, "ping", 0.02)]
        if a.readers:
            pingers += [verb_poller(sock, "status", 0.1, study="freeze"),
                        dashboard_poller(port, "/api/studies/freeze", 0.1)]
        if a.control_every > 0:
            # A change that changes nothing the sweep does: its parallelism set to what it is.
            pingers.append(verb_poller(sock, "set", a.control_every, study="freeze",
                                       parallelism=2))
        for p in pingers:
            p.start()
        time.sleep(2)
        pids = server_pids(cluster_root)
        frozen_at = time.monotonic()
        frozen_wall = time.time()
        if a.freeze > 0:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(a.freeze)
        finally:
            if a.freeze > 0:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
        thawed_at = time.monotonic()
        thawed_wall = time.time()
        before = completed(sock)
        time.sleep(a.after)
        after = completed(sock)
        for p in pingers:
            p.done = True
        for p in pingers:
            p.join(timeout=a.freeze + 60)
        out = {"binary": triald, "went_on": after > before, "completed_after_thaw": after - before}
        # The trials' should_prune answers (wall clock: the trials' own) that overlap the freeze.
        channel = []
        channel_all = []
        for name in os.listdir(answers):
            with open(os.path.join(answers, name)) as f:
                pairs = json.load(f)
            channel += [s for (t, s) in pairs if frozen_wall <= t + s and t <= thawed_wall]
            channel_all += [s for (t, s) in pairs]
        out["channel_all"] = {
            "calls": len(channel_all),
            "p50_ms": round(percentile(channel_all, 50) * 1000, 2) if channel_all else None,
            "p99_ms": round(percentile(channel_all, 99) * 1000, 2) if channel_all else None,
            "max_ms": round(max(channel_all) * 1000, 1) if channel_all else None,
        }
        out["channel"] = {
            "calls_during_freeze": len(channel),
            "max_ms": round(max(channel) * 1000, 1) if channel else None,
            "p99_ms": round(percentile(channel, 99) * 1000, 1) if channel else None,
        }
        for p in pingers:
            during = [s for (t, s) in p.samples if frozen_at <= t + s and t <= thawed_at]
            out[p.verb] = {
                "calls_during_freeze": len(during),
                "max_ms": round(max(during) * 1000, 1) if during else None,
                "p99_ms": round(percentile(during, 99) * 1000, 1) if during else None,
                "errors": p.errors,
                "first_error": p.first_error,
            }
            every = [s for (t, s) in p.samples]
            out[p.verb]["all"] = {
                "calls": len(every),
                "p50_ms": round(percentile(every, 50) * 1000, 2) if every else None,
                "max_ms": round(max(every) * 1000, 1) if every else None,
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
    ap.add_argument("--delay-ms", type=float, default=0,
                    help="the server this many ms away in each direction (a delaying proxy)")
    ap.add_argument("--control-every", type=float, default=0,
                    help="also a client that sets the study's parallelism (to the 2 it has) "
                    "every this many seconds: a control change ('set' in the figures)")
    ap.add_argument("--no-readers", dest="readers", action="store_false",
                    help="no status and dashboard polling (the loop runs those verbs)")
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
                          "delay_ms": a.delay_ms, "readers": a.readers,
                          "runs": results}, indent=2))
    finally:
        subprocess.run(["bash", script, "stop", pg_dir], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
