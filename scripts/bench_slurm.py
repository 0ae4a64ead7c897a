#!/usr/bin/python3
"""Slurm executor benchmark: what running each trial as a Slurm job costs, side by side with the
same trials run locally, in one run.

Three figures, each for an exec objective (a shell script) run locally ([executor] kind =
"local") and as Slurm jobs ([executor] kind = "slurm") through the same daemon:
  1. start overhead: from the daemon's decision to start a trial (its created_at) to the
     objective's first line (a timestamp it sends as an attribute), median and p90 over
     --start-trials trials run one at a time;
  2. throughput: --trials short trials (the objective only reports its value), parallelism
     --parallelism, trials/s from the study's own record (created_at to finished_at);
  3. the daemon's cost per running Slurm trial: its CPU time per trial over the throughput run,
     and its RSS with --hold trials running at once (each sleeping) against the same daemon
     idle, per trial; plus each trial's bridge (triald-slurm-relay submit, a local process).

For reference, Slurm's own floor in the same run: `srun true` one at a time and at the same
parallelism, without triald.

Needs a Slurm cluster: the one SLURM_CONF names, or (as root, --start-cluster) the one-node test
cluster of scripts/slurm_test_cluster.sh, started in a temporary folder and stopped at the end.
Not a test: nothing here asserts a speed.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_throughput import cpu_seconds, running_triald, submit_and_wait  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = """#!/bin/sh
echo "{\\"type\\":\\"attr\\",\\"key\\":\\"first_line\\",\\"value\\":$(date +%s.%N)}" >&3
[ -n "$HOLD" ] && sleep "$HOLD"
echo '{"type":"final","value":1}' >&3
"""


def sweep(path, name, workdir, trials, parallelism, slurm, hold=""):
    with open(path, "w") as f:
        f.write(f"""[study]
name = "{name}"
n_trials = {trials}
parallelism = {parallelism}

[objective]
kind = "exec"
command = ["/bin/sh", "worker.sh"]
workdir = "{workdir}"
env = {{ HOLD = "{hold}" }}

[space.x]
type = "float"
low = 0.0
high = 1.0
""")
        if slurm:
            f.write('\n[executor]\nkind = "slurm"\n')
    return path


def trials_json(ctl, study):
    return json.loads(subprocess.run(ctl + ["trials", study, "--json"], check=True,
                                     capture_output=True, text=True).stdout)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def daemon_cpu(pid):
    """The daemon's own user + system CPU seconds (not its children's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bridges():
    out = subprocess.run(["pgrep", "-f", "triald-slurm-relay submit"], capture_output=True,
                         text=True).stdout.split()
    return [int(p) for p in out]


def measure(a, work, slurm):
    label = "slurm" if slurm else "local"
    state = os.path.join(work, "state-" + label)
    info = {}
    res = {"executor": label}
    with running_triald(a.build, state, max(a.parallelism, a.hold), info=info) as ctl:
        pid = info["pid"]
        # 1. start overhead, one at a time.
        st = submit_and_wait(ctl, sweep(os.path.join(work, f"start-{label}.toml"),
                                        f"start-{label}", work, a.start_trials, 1, slurm),
                             f"start-{label}")
        rows = trials_json(ctl, f"start-{label}")
        lat = sorted(r["attrs"]["first_line"] - r["created_at"] for r in rows)
        res["start_median_ms"] = round(1000 * statistics.median(lat), 1)
        res["start_p90_ms"] = round(1000 * lat[int(0.9 * (len(lat) - 1))], 1)
        # 2. throughput.
        cpu0 = daemon_cpu(pid)
        st = submit_and_wait(ctl, sweep(os.path.join(work, f"many-{label}.toml"),
                                        f"many-{label}", work, a.trials, a.parallelism, slurm),
                             f"many-{label}")
        if st["complete"] != a.trials:
            raise RuntimeError(f"{label}: {st['complete']} of {a.trials} trials completed")
        res["trials_per_s"] = round(a.trials / (st["finished_at"] - st["created_at"]), 1)
        res["daemon_cpu_ms_per_trial"] = round(1000 * (daemon_cpu(pid) - cpu0) / a.trials, 2)
        # 3. memory with `hold` trials running at once.
        idle = rss_kib(pid)
        subprocess.run(ctl + ["submit", sweep(os.path.join(work, f"hold-{label}.toml"),
                                              f"hold-{label}", work, a.hold, a.hold, slurm,
                                              hold="20")],
                       check=True, capture_output=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            rows = trials_json(ctl, f"hold-{label}")
            if sum(1 for r in rows if "first_line" in (r.get("attrs") or {})) == a.hold:
                break
            time.sleep(0.2)
        busy = rss_kib(pid)
        res["daemon_rss_kib_per_running_trial"] = round((busy - idle) / a.hold, 1)
        if slurm:
            b = bridges()
            res["bridge_rss_kib"] = round(statistics.median(rss_kib(p) for p in b), 1) if b else None
        subprocess.run(ctl + ["cancel", f"hold-{label}"], capture_output=True)
        time.sleep(1)
    return res


def bare_srun(a):
    """Slurm's own floor: `srun true` one at a time (median wall time) and --trials of them at
    --parallelism (jobs/s), without triald."""
    walls = []
    for _ in range(a.start_trials):
        t = time.time()
        subprocess.run(["srun", "--quiet", "--ntasks=1", "true"], check=True)
        walls.append(time.time() - t)
    t = time.time()
    running = []
    for _ in range(a.trials):
        running.append(subprocess.Popen(["srun", "--quiet", "--ntasks=1", "true"]))
        while sum(p.poll() is None for p in running) >= a.parallelism:
            time.sleep(0.005)
    for p in running:
        p.wait()
    return {"executor": "bare srun", "start_median_ms": round(1000 * statistics.median(walls), 1),
            "trials_per_s": round(a.trials / (time.time() - t), 1)}


@contextlib.contextmanager
def cluster(a, work):
    if os.environ.get("SLURM_CONF"):
        yield os.environ["SLURM_CONF"]
        return
    if not a.start_cluster:
        raise SystemExit("bench_slurm: set SLURM_CONF, or run as root with --start-cluster")
    script = os.path.join(ROOT, "scripts", "slurm_test_cluster.sh")
    folder = os.path.join(work, "cluster")
    env = dict(os.environ, SLURM_TEST_PORT=str(a.port))
    conf = subprocess.run(["bash", script, "start", folder], check=True, capture_output=True,
                          text=True, env=env).stdout.strip().splitlines()[-1]
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        subprocess.run(["bash", script, "stop", folder], capture_output=True)
        del os.environ["SLURM_CONF"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--parallelism", type=int, default=4)
    p.add_argument("--start-trials", type=int, default=20)
    p.add_argument("--hold", type=int, default=8, help="trials running at once for memory")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--start-cluster", action="store_true")
    p.add_argument("--port", type=int, default=17417)
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    with tempfile.TemporaryDirectory(prefix="triald-bench-slurm-") as work:
        os.chmod(work, 0o755)
        with open(os.path.join(work, "worker.sh"), "w") as f:
            f.write(WORKER)
        with cluster(a, work):
            local = measure(a, work, False)
            slurm = measure(a, work, True)
            floor = bare_srun(a)
    print(f"{'executor':<8} {'start median':>13} {'start p90':>10} {'trials/s':>9} "
          f"{'daemon CPU/trial':>17} {'daemon RSS/running trial':>25}")
    for r in (local, slurm):
        print(f"{r['executor']:<8} {r['start_median_ms']:>10.1f} ms {r['start_p90_ms']:>7.1f} ms "
              f"{r['trials_per_s']:>9.1f} {r['daemon_cpu_ms_per_trial']:>14.2f} ms "
              f"{r['daemon_rss_kib_per_running_trial']:>21.1f} KiB")
    print(f"{'bare srun':<8} {floor['start_median_ms']:>10.1f} ms {'':>10} "
          f"{floor['trials_per_s']:>9.1f}   (srun true: a whole job, no triald)")
    print(f"\nSlurm against local: start overhead x{slurm['start_median_ms'] / local['start_median_ms']:.1f} "
          f"(+{slurm['start_median_ms'] - local['start_median_ms']:.1f} ms median), throughput "
          f"{slurm['trials_per_s'] / local['trials_per_s']:.2f}; each Slurm trial's bridge "
          f"holds {slurm.get('bridge_rss_kib')} KiB RSS on this host; throughput against bare "
          f"srun {slurm['trials_per_s'] / floor['trials_per_s']:.2f}")
    print(json.dumps({"local": local, "slurm": slurm, "bare_srun": floor}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
