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
"""

import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
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


def summary(values):
    return "{:8.1f} {:8.1f} {:8.1f}".format(statistics.median(values), min(values), max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--model", help="a GPT-2 folder (default: BUILD/fixtures/tiny-gpt2)")
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
