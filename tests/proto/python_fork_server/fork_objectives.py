"""Objectives run as forked trials by python_fork_server_test.py.

Each reports what it sees as `attr` lines (the test reads them from the trial channel)."""

import atexit
import ctypes
import os
import random
import sys
import time

# Where this module's top level ran: the fork server's pid when it was preloaded there.
LOADED_IN = os.getpid()
# Mutated by every trial; a trial that sees another's change is not isolated.
COUNTER = [0]


def value(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    return 2 * x


def _fds():
    listing = os.listdir("/proc/self/fd")
    return sorted(int(fd) for fd in listing if os.path.exists(f"/proc/self/fd/{fd}"))


def identity(trial):
    print("to the trial's stdout")
    print("to the trial's stderr", file=sys.stderr)
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("ppid", os.getppid())
    trial.set_user_attr("pgid", os.getpgid(0))
    trial.set_user_attr("sid", os.getsid(0))
    trial.set_user_attr("fds", _fds())
    trial.set_user_attr("env", {k: v for k, v in os.environ.items()
                                if k.startswith(("TRIALD_", "CUDA_", "FORK_TEST_"))})
    trial.set_user_attr("cwd", os.getcwd())
    trial.set_user_attr("argv", sys.argv)
    trial.set_user_attr("stdin", os.readlink("/proc/self/fd/0"))
    trial.set_user_attr("sigmask", sorted(int(s) for s in
                                          __import__("signal").pthread_sigmask(0, ())))
    trial.set_user_attr("dumpable", dumpable())
    return 1.0


def dumpable():
    """prctl(PR_GET_DUMPABLE) of this process: 1 for a process started by exec."""
    return ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)


def mutate(trial):
    COUNTER[0] += 1
    trial.set_user_attr("counter", COUNTER[0])
    trial.set_user_attr("loaded_in", LOADED_IN)
    return float(COUNTER[0])


def randomness(trial):
    trial.set_user_attr("random", random.random())
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        trial.set_user_attr("numpy", float(numpy.random.random()))
    torch = sys.modules.get("torch")
    if torch is not None:
        trial.set_user_attr("torch", float(torch.rand(1)[0]))
    return 0.0


def torch_seeding(trial):
    """How torch's generators start in this trial: the CPU generator's initial seed, and whether
    a seed for CUDA's generators is queued for CUDA's start (torch.cuda's lazy seeding)."""
    import torch
    trial.set_user_attr("cpu_initial_seed", str(torch.initial_seed()))
    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    trial.set_user_attr("cuda_seed_queued", tracker is not None and
                        tracker.manual_seed_all_cb is not None)
    return 0.0


def segfault(trial):
    ctypes.string_at(0)
    return 0.0


def exit7(trial):
    os._exit(7)


def marker(trial):
    with open(os.environ["FORK_TEST_MARKER"], "w") as f:
        f.write("ran\n")
    return 0.0


def marker_then_sleep(trial):
    marker(trial)
    time.sleep(600)  # never touches its channel: only a signal ends it early
    return 0.0


def allocate(trial):
    block = bytearray(8 * 1024 * 1024)  # touched: 8 MiB of the trial's own memory
    return float(len(block) > 0)


def loop_until_stopped(trial):
    for step in range(10_000):
        trial.report(1.0, step)
        time.sleep(0.02)
    return 0.0


def at_exit(trial):
    path = os.environ["FORK_TEST_MARKER"]
    atexit.register(lambda: open(path + ".trial", "w").close())
    return 0.0


def _openblas_threads():
    for line in open("/proc/self/maps"):
        path = line.split(None, 5)[-1].strip()
        if "openblas" in path:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            if hasattr(lib, "openblas_get_num_threads"):
                return lib.openblas_get_num_threads()
    return None


def threads(trial):
    """The pools' sizes, and the threads that exist once BLAS and torch have worked."""
    import numpy
    import torch
    trial.set_user_attr("tasks_at_start", len(os.listdir("/proc/self/task")))
    trial.set_user_attr("torch_threads", torch.get_num_threads())
    trial.set_user_attr("openblas_threads", _openblas_threads())
    a = numpy.ones((400, 400))
    for _ in range(3):
        a = a @ a / 400.0
    trial.set_user_attr("tasks_after_numpy", len(os.listdir("/proc/self/task")))
    t = torch.ones((400, 400))
    for _ in range(3):
        t = torch.mm(t, t) / 400.0
    trial.set_user_attr("tasks_after_torch", len(os.listdir("/proc/self/task")))
    trial.set_user_attr("thread_names", sorted(
        open(f"/proc/self/task/{tid}/comm").read().strip()
        for tid in os.listdir("/proc/self/task")))
    return float(t[0, 0]) + float(a[0, 0])


def constrained(trial):
    return trial.suggest_float("x", 0.0, 1.0)


def constraints(frozen):
    return [frozen.params["x"] - 0.5]


def _environ_entries():
    with open("/proc/self/environ", "rb") as f:
        return [e.decode() for e in f.read().split(b"\0") if e]


def proc_environ(trial):
    """What /proc shows of this trial's environment, and of a child it forks without an exec
    (a setsid daemon's way), and what a program it executes gets."""
    trial.set_user_attr("environ", _environ_entries())
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.write(write_end, "\0".join(_environ_entries()).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(child, 0)
    trial.set_user_attr("child_environ", data.decode().split("\0"))
    executed = __import__("subprocess").run(["env"], capture_output=True, check=True)
    trial.set_user_attr("executed_environ", executed.stdout.decode().splitlines())
    return 0.0
