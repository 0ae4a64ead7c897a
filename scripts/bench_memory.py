#!/usr/bin/python3
"""Daemon memory under a chatty trial: triald's RSS before, at the peak of, and after a study whose
one trial writes N report lines (one intermediate value per step).

Runs twice: with [study] max_intermediate_steps raised to N (the trial completes; its values are
held in the daemon's memory while the study runs, and must leave it when the study ends), and
with the default cap (the trial ends FAIL(protocol) at the cap). Prints one line per run:
baseline, peak and after-end RSS in MiB, the trial's state and the failure detail. Not a test:
nothing here asserts a figure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(build: str, lines: int, raise_cap: bool, workdir: str) -> str:
    bindir = os.path.join(build, "bin")
    state = os.path.join(workdir, "state")
    sock = os.path.join(state, "triald.sock")
    ctl = [os.path.join(bindir, "trialctl"), "--socket", sock]
    worker = os.path.join(workdir, "chatty.sh")
    with open(worker, "w") as f:
        # awk writes the lines faster than a shell loop; fd 3 is the trial channel.
        f.write(f"""#!/bin/sh
awk 'BEGIN {{ for (i = 0; i < {lines}; i++) printf "{{\\"type\\":\\"report\\",\\"step\\":%d,\\"value\\":%d.5}}\\n", i, i }}' >&3 || exit 3
echo '{{"type":"final","value":1}}' >&3
""")
    os.chmod(worker, 0o755)
    cap = f"max_intermediate_steps = {lines}\nmax_report_bytes = \"1G\"\n" if raise_cap else ""
    sweep = os.path.join(workdir, "chatty.toml")
    with open(sweep, "w") as f:
        f.write(f"""[study]
name = "chatty"
n_trials = 1
{cap}
[objective]
kind = "exec"
command = ["{worker}"]

[space.x]
type = "float"
low = 0.0
high = 1.0
""")
    log = open(state + ".log", "w")
    daemon = subprocess.Popen([os.path.join(bindir, "triald"), "--state-dir", state,
                               "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            if subprocess.run(ctl + ["ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        baseline = rss_mib(daemon.pid)
        subprocess.run(ctl + ["submit", sweep], check=True, capture_output=True)
        peak = baseline
        while True:
            peak = max(peak, rss_mib(daemon.pid))
            status = json.loads(subprocess.run(ctl + ["status", "chatty", "--json"], check=True,
                                               capture_output=True, text=True).stdout)
            if status["state"] != "RUNNING":
                break
            time.sleep(0.1)
        time.sleep(1.0)
        after = rss_mib(daemon.pid)
        trials = json.loads(subprocess.run(ctl + ["trials", "chatty", "--json"], check=True,
                                           capture_output=True, text=True).stdout)
        t = trials[0]
        what = t["state"] + (f" ({t['fail_reason']}: {t.get('fail_detail', '')})"
                             if t.get("fail_reason") else "")
        return (f"{'cap raised to ' + str(lines) if raise_cap else 'default cap':>24}: "
                f"baseline {baseline:.1f} MiB, peak {peak:.1f} MiB, after the study "
                f"{after:.1f} MiB; trial {what}")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--lines", type=int, default=2_000_000)
    a = p.parse_args()
    build = os.path.abspath(a.build)
    for raise_cap in (True, False):
        with tempfile.TemporaryDirectory(prefix="triald-mem-") as d:
            print(run(build, a.lines, raise_cap, d), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
