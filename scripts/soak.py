#!/usr/bin/env python3
"""Soak test (not run in CI): many trials with random crash injection through a real triald.

Runs --trials trials (default 10,000) at --parallelism 2, as --studies studies (default 10)
one after another, whose worker is a tiny static C program (compiled here with cc) that, for 5%
of trials, dies by a real segfault, by abort() or by _exit(3), and otherwise reports a final
value at once. Which trials crash, and how, follows from a hash of (seed, trial number), so the
script knows the expected outcome of every trial and checks it against what triald recorded.

While it runs it samples the daemon every --sample-interval seconds for zombie children (a
zombie seen in two consecutive samples is a leak; a single sighting is a child between its exit
and the daemon's reap) and open descriptors, and after each study reads its resident memory
(VmRSS). The studies run one after another because an active study keeps its trials in memory
(the samplers need the history) and frees them when it ends: a leak shows as RSS that keeps
growing from study to study. It exits non-zero if any check fails:
  - no zombie ever persists between two samples;
  - open descriptors after every study equal those at the start;
  - RSS after the last study is within --rss-slack-kib (2 MiB) of RSS after the middle one
    (the first studies grow SQLite's bounded page cache and the heap to their working size);
  - every trial finished, with exactly the expected state and failure reason.

Usage: scripts/soak.py [--trials N] [--studies K] [--parallelism P] [--crash-rate R]
                      [--build-dir build]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

WORKER_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int main(void) {
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);  /* 500 crashes must not write 500 core files */
  uint64_t trial = strtoull(getenv("TRIALD_TRIAL"), NULL, 10);
  uint64_t seed = strtoull(getenv("SOAK_SEED"), NULL, 10);
  double rate = strtod(getenv("SOAK_CRASH_RATE"), NULL);
  int fd = atoi(getenv("TRIALD_REPORT_FD"));
  uint64_t h = splitmix64(seed ^ splitmix64(trial));
  double u = (double)(h >> 11) * 0x1.0p-53;
  if (u < rate) {
    switch (h % 3) {
      case 0: *(volatile int*)(uintptr_t)8 = 1; break;  /* SIGSEGV */
      case 1: abort();                                 /* SIGABRT */
      default: _exit(3);
    }
  }
  dprintf(fd, "{\"type\":\"final\",\"value\":%.17g}\n", u);
  return 0;
}
"""

MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def expected_outcome(seed, trial, rate):
    """(state, fail_reason, signal or exit code) the worker produces for this trial."""
    h = splitmix64(seed ^ splitmix64(trial))
    u = (h >> 11) * 2.0**-53
    if u < rate:
        mode = h % 3
        if mode == 0:
            return ("FAIL", "signal", signal.SIGSEGV)
        if mode == 1:
            return ("FAIL", "signal", signal.SIGABRT)
        return ("FAIL", "exit", 3)
    return ("COMPLETE", None, None)


class Client:
    def __init__(self, path):
        self.path = path

    def call(self, verb, **args):
        args["verb"] = verb
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.path)
            s.sendall((json.dumps(args) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
        reply = json.loads(buf)
        if not reply["ok"]:
            raise RuntimeError(f"{verb}: {reply['code']}: {reply['error']}")
        return reply["result"]


def proc_children_zombies(pid):
    zombies = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if rest[0] == "Z" and int(rest[1]) == pid:
            zombies.add(int(entry))
    return zombies


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Sampler:
    """Samples the daemon's zombie children and descriptors every `interval` seconds."""

    def __init__(self, pid, interval):
        self.pid, self.interval = pid, interval
        self.previous = set()
        self.persistent = set()
        self.sightings = 0
        self.samples = 0
        self.max_fds = 0

    def sample_for(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(self.interval)
            zombies = proc_children_zombies(self.pid)
            self.sightings += len(zombies)
            # A zombie still there one interval later was not reaped: a leak.
            self.persistent |= zombies & self.previous
            self.previous = zombies
            self.max_fds = max(self.max_fds, open_fds(self.pid))
            self.samples += 1


def check_outcomes(client, study, n, seed, rate):
    """Compares every recorded trial with what the worker was meant to do; returns failures."""
    trials = client.call("trials", study=study)
    counts, mismatches = {}, 0
    for t in trials:
        want = expected_outcome(seed, t["number"], rate)
        code = t.get("signal") if t.get("fail_reason") == "signal" else t.get("exit_code")
        got = (t["state"], t.get("fail_reason"), code if t["state"] == "FAIL" else None)
        key = got[0] if got[1] is None else f"{got[0]}({got[1]} {got[2]})"
        counts[key] = counts.get(key, 0) + 1
        if got != want:
            mismatches += 1
            if mismatches <= 5:
                print(f"  {study} trial {t['number']}: expected {want}, recorded {got}")
    print(f"  {study} outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    failures = []
    if len(trials) != n:
        failures.append(f"{study}: {len(trials)} trials recorded, expected {n}")
    if mismatches:
        failures.append(f"{study}: {mismatches} trials recorded another outcome than expected")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--crash-rate", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--studies", type=int, default=10,
                    help="the trials run as this many studies, one after another")
    ap.add_argument("--sample-interval", type=float, default=0.5)
    ap.add_argument("--rss-slack-kib", type=int, default=2048)
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--keep", action="store_true", help="keep the temporary state directory")
    args = ap.parse_args()

    triald = os.path.join(os.path.abspath(args.build_dir), "bin", "triald")
    if not os.access(triald, os.X_OK):
        sys.exit(f"soak: {triald} not found; build first (scripts/test.sh or cmake --build)")
    work = tempfile.mkdtemp(prefix="triald-soak-")
    state = os.path.join(work, "state")
    sock = os.path.join(state, "triald.sock")
    worker = os.path.join(work, "crashy-worker")
    with open(worker + ".c", "w") as f:
        f.write(WORKER_C)
    subprocess.run(["cc", "-O2", "-static", "-o", worker, worker + ".c"], check=True)

    log = open(os.path.join(work, "triald.log"), "w")
    daemon = subprocess.Popen([triald, "--state-dir", state, "--max-workers",
                               str(args.parallelism), "--log-level", "warn"],
                              stdout=log, stderr=subprocess.STDOUT)
    client = Client(sock)
    for _ in range(300):
        try:
            client.call("ping")
            break
        except (OSError, ValueError, RuntimeError):
            if daemon.poll() is not None:
                sys.exit(f"soak: triald exited during start-up; see {work}/triald.log")
            time.sleep(0.05)
    pid = daemon.pid
    failures = []
    try:
        time.sleep(1)  # let the daemon close the start-up ping's connection
        start_rss, start_fds = rss_kib(pid), open_fds(pid)
        print(f"start:   rss {start_rss} KiB, fds {start_fds}", flush=True)

        sampler = Sampler(pid, args.sample_interval)
        per_study = args.trials // args.studies
        after = []  # (rss, fds) after each study
        t0 = time.monotonic()
        for i in range(args.studies):
            seed = args.seed + i
            name = f"soak-{i}"
            sweep = f"""[study]
name = "{name}"
n_trials = {per_study}
parallelism = {args.parallelism}
kill_grace = 2

[objective]
kind = "exec"
command = ["{worker}"]
env = {{ SOAK_SEED = "{seed}", SOAK_CRASH_RATE = "{args.crash_rate}" }}

[space.x]
type = "float"
low = 0.0
high = 1.0

[sampler]
kind = "random"
seed = 1
"""
            path = os.path.join(work, name + ".toml")
            with open(path, "w") as f:
                f.write(sweep)
            client.call("submit", sweep=sweep, path=path)
            while True:
                sampler.sample_for(2.0)
                st = client.call("status", study=name)
                if st["state"] != "RUNNING" and st["running"] == 0:
                    break
                if daemon.poll() is not None:
                    raise RuntimeError("triald exited during the run")
            failures += check_outcomes(client, name, per_study, seed, args.crash_rate)
            sampler.sample_for(1.0)  # let the last trial's descriptors close
            after.append((rss_kib(pid), open_fds(pid)))
            print(f"study {i + 1}/{args.studies} ({per_study} trials) done at "
                  f"{time.monotonic() - t0:.0f} s: rss {after[-1][0]} KiB, fds {after[-1][1]}, "
                  f"zombie sightings {sampler.sightings}, persistent {len(sampler.persistent)}",
                  flush=True)
        elapsed = time.monotonic() - t0
        end_rss, end_fds = after[-1]
        total = per_study * args.studies
        print(f"end:     rss {end_rss} KiB, fds {end_fds} (max fds seen {sampler.max_fds})")
        print(f"{total} trials in {elapsed:.0f} s ({total / elapsed:.0f} trials/s); "
              f"{sampler.samples} samples; zombie sightings {sampler.sightings} (transient, "
              f"between exit and reap); zombies persisting across samples: "
              f"{len(sampler.persistent)}")
        if sampler.persistent:
            failures.append(f"zombies persisted: {sorted(sampler.persistent)}")
        if any(fds != start_fds for _, fds in after):
            failures.append(f"open fds {start_fds} at start, after each study: "
                            f"{[fds for _, fds in after]}")
        # The first studies grow SQLite's page cache (bounded: 2 MB by default) and the heap to
        # their working size; from the middle of the run on, RSS must stay flat.
        mid = (args.studies - 1) // 2
        if end_rss > after[mid][0] + args.rss_slack_kib:
            failures.append(f"rss grew from {after[mid][0]} KiB (after study {mid + 1}) to "
                            f"{end_rss} KiB (after the last)")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    if failures:
        for f in failures:
            print("FAIL: " + f)
        return 1
    print("soak: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
