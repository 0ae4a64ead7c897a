#!/usr/bin/python3
"""Start-to-first-step of an lm trial: exec'd trial-worker against the lm fork server.

    /usr/bin/python3 scripts/bench_lm_start.py [--build build] [--repeats 10] [--model DIR]

Prints figures; asserts nothing. This script plays the daemon's side of both paths
(proto/README.md, "Fork server protocol") on the tiny fixture model (BUILD/fixtures/tiny-gpt2)
and the tiny corpus (tests/fixtures/tiny-corpus), on the CPU, and alternates the paths:

  exec  `trial-worker --objective lm --config JSON` spawned fresh per trial, its report pipe at
        TRIALD_REPORT_FD (what triald does today for kind = "lm");
  fork  one `trial-worker --fork-server --objective lm --config JSON` for the whole run, its
        channel a SOCK_SEQPACKET socketpair; per trial a fork request carrying the trial's
        channel, stdout and stderr (SCM_RIGHTS), then the go line once `forked` arrives (this
        script is the child subreaper, so it reaps the trials, as triald does). The server's own
        start (LibTorch, tokenizer, checkpoint mapping, tokenizing) is paid once and reported
        apart.

For each trial, from the request (exec: just before the spawn; fork: just before the fork
request is sent), in milliseconds:

  first line   the first report line (the attribute "params", sent once the model skeleton and
               the memory plan are made: for exec, after loading LibTorch and reading
               config.json; the checkpoint, tokenizer and texts come after it)
  first step   the first intermediate value (eval_every = 1: the evaluation after step 1, which
               follows the initial evaluation): everything a trial does before it has trained
  trial        the final line

and the median, min and max per path. The trials are the same on both paths (max_steps 2,
seq_len 32, batch_size 2, seed 0), so the difference is the start: exec loads LibTorch and
reads every input per trial, fork does neither.

    /usr/bin/python3 scripts/bench_lm_start.py --through-triald [--trials 6] [--parallelism 2]

runs the same comparison through a real triald instead (BUILD/bin/triald, a fresh state folder,
--max-workers PARALLELISM): two kind = "lm" studies of --trials trials each on the same fixture
(max_steps 2, eval_every 1, the random sampler with one seed), one exec'd and one with
[objective] fork_server = true, one after the other, the exec one first. It polls `trials`
on the control socket every 20 ms while a study runs (intermediate values carry no time
stamp in the store, so the first one's arrival is when a poll first shows it) and prints, per
path: the study's wall time (submit to COMPLETE, as this script saw it), and per trial in ms
the daemon's created_at -> started_at (queueing plus the start: for fork, the first trials also
wait for the server to be ready) and started_at -> first intermediate value seen.
"""

import argparse
import ctypes
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PR_SET_CHILD_SUBREAPER = 36


def lm_config(model, train, evalf):
    """Every field LmObjectiveFromJson requires, as config::LmObjectiveToJson writes them."""
    return json.dumps({
        "model": model, "train_file": train, "eval_file": evalf, "max_steps": 2, "seq_len": 32,
        "eval_every": 1, "checkpoint_every": 0, "device": "cpu", "memory_budget_gb": 0.0,
        "gpu_memory_fraction": 0.0,
        "learning_rate": 3e-3, "weight_decay": 0.0, "warmup_steps": 0, "batch_size": 2,
        "dropout": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "grad_clip": 1.0,
        "lr_schedule": "linear", "seed": 0})


def trial_env(trial):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TRIALD_PARAMS": "{}",
           "TRIALD_STUDY": "bench", "TRIALD_TRIAL": str(trial)}
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def read_lines(fd, start):
    """Reads report lines until EOF; returns {first_line, first_step, final} in ms from start."""
    marks = {}
    buffer = b""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            chunk = f.read(65536)
            if not chunk:
                break
            now = (time.monotonic() - start) * 1000
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                record = json.loads(line)
                marks.setdefault("first_line", now)
                if record["type"] == "report":
                    marks.setdefault("first_step", now)
                if record["type"] == "final":
                    marks["final"] = now
                if record["type"] == "error":
                    sys.exit("bench_lm_start: the trial failed: " + record["message"])
    return marks


def run_exec(worker, config, trial):
    read_end, write_end = os.pipe()
    env = trial_env(trial)
    env["TRIALD_REPORT_FD"] = str(write_end)
    start = time.monotonic()
    proc = subprocess.Popen([worker, "--objective", "lm", "--config", config], env=env,
                            pass_fds=(write_end,), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    os.close(write_end)
    marks = read_lines(read_end, start)
    err = proc.stderr.read()
    if proc.wait() != 0:
        sys.exit("bench_lm_start: exec trial failed:\n" + err.decode(errors="replace"))
    return marks


class ForkServer:
    def __init__(self, worker, config):
        self.config = config
        self.channel, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = trial_env(0)
        env["TRIALD_FORK_SERVER_FD"] = str(server_end.fileno())
        self.log = open(os.devnull, "wb")
        start = time.monotonic()
        self.proc = subprocess.Popen(
            [worker, "--fork-server", "--objective", "lm", "--config", config], env=env,
            pass_fds=(server_end.fileno(),), stdout=self.log, stderr=subprocess.PIPE)
        server_end.close()
        ready = self.receive()
        if ready.get("type") != "ready":
            sys.exit("bench_lm_start: the fork server answered {}:\n{}".format(
                ready, self.proc.stderr.read().decode(errors="replace")))
        self.ready_ms = (time.monotonic() - start) * 1000

    def receive(self):
        data = self.channel.recv(65536)
        return json.loads(data) if data else {"type": "EOF"}

    def run(self, trial):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out = os.open(os.devnull, os.O_WRONLY)
        err = os.open(os.devnull, os.O_WRONLY)
        env = trial_env(trial)
        env["TRIALD_REPORT_FD"] = "3"
        request = {"type": "fork", "id": trial,
                   "argv": ["--objective", "lm", "--config", self.config],
                   "env": ["{}={}".format(k, v) for k, v in env.items()], "cwd": os.getcwd(),
                   "daemon_pid": os.getpid()}
        start = time.monotonic()
        socket.send_fds(self.channel, [json.dumps(request).encode()],
                        [theirs.fileno(), out, err])
        theirs.close()
        os.close(out)
        os.close(err)
        forked = self.receive()
        if forked.get("type") != "forked":
            sys.exit("bench_lm_start: fork request answered {}".format(forked))
        forked_ms = (time.monotonic() - start) * 1000
        ours.sendall(b'{"type":"go"}\n')
        marks = read_lines(os.dup(ours.fileno()), start)
        ours.close()
        _, status = os.waitpid(forked["pid"], 0)
        if status != 0:
            sys.exit("bench_lm_start: forked trial ended with wait status {}".format(status))
        marks["forked"] = forked_ms
        return marks

    def stop(self):
        self.channel.send(b'{"type":"stop"}')
        self.proc.wait()


def through_triald(args, build, model, corpus):
    """--through-triald: the two paths as triald runs them (see the module's docstring)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from bench_read_verbs import Conn, start_triald, stop  # noqa: E402

    workdir = tempfile.mkdtemp(prefix="bench-lm-start-")
    state = os.path.join(workdir, "state")
    daemon = start_triald(os.path.join(build, "bin", "triald"), state, args.parallelism)
    conn = Conn(os.path.join(state, "triald.sock"))
    results = {}
    try:
        for path, fork in (("exec", False), ("fork", True)):
            results[path] = triald_study(conn, workdir, path, fork, args, model, corpus)
    finally:
        stop(daemon)
        shutil.rmtree(workdir, ignore_errors=True)

    print("lm trials through triald, CPU only ({} cores), {} trials per study, parallelism {}, "
          "model {}".format(os.cpu_count(), args.trials, args.parallelism, model))
    print("{:<36} {:>26} {:>26}".format("", "exec", "fork server"))
    print("{:<36} {:>26.0f} {:>26.0f}".format("study wall time, submit to COMPLETE (ms)",
                                              results["exec"]["wall"], results["fork"]["wall"]))
    print("{:<36} {:>26} {:>26}".format("ms per trial", "median      min      max",
                                        "median      min      max"))
    for key, label in (("queued", "created_at -> started_at"),
                       ("first_step", "started_at -> first value seen"),
                       ("ran", "started_at -> finished_at")):
        print("{:<36} {} {}".format(label, summary(results["exec"][key]),
                                    summary(results["fork"][key])))
    print("{:<36} {} {}".format("CPU time (ms, triald's accounting)",
                                summary(results["exec"]["cpu"]), summary(results["fork"]["cpu"])))
    print("{:<36} {} {}".format("peak memory (MiB, triald's)", summary(results["exec"]["peak"]),
                                summary(results["fork"]["peak"])))
    for path in ("exec", "fork"):
        print("per trial, started_at -> first value ms, {}: {}".format(
            path, " ".join("{:.0f}".format(v) for v in results[path]["first_step"])))
    return 0


def triald_study(conn, workdir, name, fork, args, model, corpus):
    """Runs one study through triald; returns its wall time and per-trial figures in ms."""
    toml = "\n".join([
        "[study]", 'name = "{}"'.format(name), "n_trials = {}".format(args.trials),
        "parallelism = {}".format(args.parallelism), "", "[objective]", 'kind = "lm"',
        'model = "{}"'.format(model), 'train_file = "{}"'.format(os.path.join(corpus, "train.txt")),
        'eval_file = "{}"'.format(os.path.join(corpus, "eval.txt")), "max_steps = 2",
        "seq_len = 32", "eval_every = 1", 'device = "cpu"', "batch_size = 2",
        "fork_server = {}".format("true" if fork else "false"), "", "[space.learning_rate]",
        'type = "float"', "low = 1e-4", "high = 1e-2", "log = true", "", "[sampler]",
        'kind = "random"', "seed = 3", ""])
    path = os.path.join(workdir, name + ".toml")
    with open(path, "w") as f:
        f.write(toml)
    first_seen = {}
    start = time.time()
    conn.call("submit", sweep=toml, path=path)
    while True:
        now = time.time()
        trials = conn.call("trials", study=name)
        for t in trials:
            if t["intermediate"] and t["number"] not in first_seen:
                first_seen[t["number"]] = now
        if conn.call("status", study=name)["state"] != "RUNNING":
            break
        time.sleep(0.02)
    wall = (time.time() - start) * 1000
    trials = conn.call("trials", study=name)
    result = {"wall": wall, "queued": [], "first_step": [], "ran": [], "peak": [], "cpu": []}
    for t in trials:
        if t["state"] != "COMPLETE":
            sys.exit("bench_lm_start: {} trial {} ended {}: {}".format(
                name, t["number"], t["state"], json.dumps(t)))
        result["queued"].append((t["started_at"] - t["created_at"]) * 1000)
        result["first_step"].append((first_seen[t["number"]] - t["started_at"]) * 1000)
        result["ran"].append((t["finished_at"] - t["started_at"]) * 1000)
        result["peak"].append(t["resources"]["peak_memory_bytes"] / 2**20)
        result["cpu"].append(t["resources"]["cpu_time_s"] * 1000)
    return result


def summary(values):
    return "{:8.1f} {:8.1f} {:8.1f}".format(statistics.median(values), min(values), max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--model", help="a GPT-2 folder (default: BUILD/fixtures/tiny-gpt2)")
    parser.add_argument("--through-triald", action="store_true",
                        help="run both paths as kind = \"lm\" studies of a real triald")
    parser.add_argument("--trials", type=int, default=6, help="--through-triald: per study")
    parser.add_argument("--parallelism", type=int, default=2, help="--through-triald")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    worker = os.path.join(build, "bin", "trial-worker")
    model = args.model or os.path.join(build, "fixtures", "tiny-gpt2")
    corpus = os.path.join(ROOT, "tests", "fixtures", "tiny-corpus")
    for need in (worker, os.path.join(model, "model.safetensors")):
        if not os.path.exists(need):
            sys.exit("bench_lm_start: {} is missing; build trial-worker and run python3 "
                     "scripts/make_fixtures.py {} --trial-worker {}".format(
                         need, os.path.join(build, "fixtures"), worker))
    if args.through_triald:
        return through_triald(args, build, model, corpus)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("bench_lm_start: prctl(PR_SET_CHILD_SUBREAPER) failed")
    config = lm_config(model, os.path.join(corpus, "train.txt"), os.path.join(corpus, "eval.txt"))

    server = ForkServer(worker, config)
    exec_runs, fork_runs = [], []
    for trial in range(args.repeats):
        exec_runs.append(run_exec(worker, config, trial))
        fork_runs.append(server.run(trial))
    server.stop()

    print("lm start-to-first-step, CPU only ({} cores), {} trials per path, model {}".format(
        os.cpu_count(), args.repeats, model))
    print("fork server start (paid once): {:.1f} ms to ready".format(server.ready_ms))
    print("ms from the request            {:>26} {:>26}".format("exec", "fork server"))
    print("{:<30} {:>26} {:>26}".format("", "median      min      max", "median      min      max"))
    for key, label in (("first_line", "first report line"), ("first_step", "first step's value"),
                       ("final", "final line")):
        print("{:<30} {} {}".format(label, summary([r[key] for r in exec_runs]),
                                    summary([r[key] for r in fork_runs])))
    print("{:<30} {:>26} {}".format("forked (fork server only)", "-",
                                    summary([r["forked"] for r in fork_runs])))
    print("per trial, first step ms: exec {}  fork {}".format(
        " ".join("{:.0f}".format(r["first_step"]) for r in exec_runs),
        " ".join("{:.0f}".format(r["first_step"]) for r in fork_runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
