"""The Python fork server (python3 -m triald fork-server) against a fake daemon.

The test process plays triald's side of proto/README.md, "Fork server protocol": it starts the
server with one end of a SOCK_SEQPACKET socketpair at fd 3, is the child subreaper (so the
double-forked trials become its children, as they become triald's), sends fork requests with
the trial's channel, stdout and stderr attached, says go on the trial channel, answers the
trial's suggests, and reaps the trial.

Run: python3 -m unittest discover -s tests/proto -p python_fork_server_test.py
     (CTest: python_fork_server)
"""

import ctypes
import errno
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "proto", "client", "python"))
FIXTURES = os.path.join(HERE, "python_fork_server")
OBJECTIVES = os.path.join(FIXTURES, "fork_objectives.py")

# How long any one exchange may take before the test fails instead of hanging (a torch import
# on a busy 2-core machine takes several seconds).
TIMEOUT_S = 120
PR_SET_CHILD_SUBREAPER = 36
GO = b'{"type":"go"}\n'

_libc = ctypes.CDLL(None, use_errno=True)

# How the server forks a trial here: once (clone with CLONE_PARENT, triald/_clone.py) on the
# machines where it is used, which the servers' `ready` says; twice elsewhere.
FORKS = 1 if os.uname().machine in ("x86_64", "aarch64") else 2


def become_subreaper():
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def collapse_refused():
    """Why this kernel does not collapse memory into huge pages (madvise MADV_COLLAPSE, Linux
    6.1) on request, tried on a mapping of this process's own; None when it does."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = 8 << 20
    address = libc.mmap(None, size, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    try:
        aligned = (address + (2 << 20) - 1) & ~((2 << 20) - 1)
        ctypes.memset(address, 1, size)
        if libc.madvise(aligned, 2 << 20, 25) != 0:
            return f"madvise(MADV_COLLAPSE): {os.strerror(ctypes.get_errno())}"
        return None
    finally:
        libc.munmap(address, size)


def proc_kib(path, key):
    """The KiB figure of line `key` ("VmRSS:") in the /proc file `path`."""
    with open(path) as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in {path}")


def anon_huge_kib(pid):
    return proc_kib(f"/proc/{pid}/smaps_rollup", "AnonHugePages:")


def vm_rss_kib(pid):
    return proc_kib(f"/proc/{pid}/status", "VmRSS:")


def wait_status(pid, timeout=TIMEOUT_S):
    """waitpid(pid) with a deadline: the raw status."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"process {pid} did not end within {timeout} s")
        time.sleep(0.002)


def base_env(extra=None):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join([CLIENT_DIR, FIXTURES]),
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    env.update(extra or {})
    return env


def trial_env(number, extra=None):
    env = base_env({"TRIALD_TRIAL": str(number), "TRIALD_STUDY": "forks",
                    "TRIALD_REPORT_FD": "3", "TRIALD_TRIAL_DIR": tempfile.gettempdir(),
                    "TRIALD_N_OBJECTIVES": "1", "TRIALD_NODE": "test-node",
                    "CUDA_VISIBLE_DEVICES": ""})
    env.update(extra or {})
    return [f"{k}={v}" for k, v in env.items()]


class Trial:
    """A forked trial, seen from the daemon: its pid, its channel, what it said."""

    def __init__(self, pid, channel, out, err):
        self.pid = pid
        self.channel = channel
        self.out = out
        self.err = err
        self.lines = []
        self.code_lines = []
        self.status = None

    def go(self):
        self.channel.sendall(GO)

    def talk(self, values=None, on_line=None):
        """Reads the trial's lines to EOF, answering suggests from `values`."""
        values = values or {}
        reader = self.channel.makefile("rb")
        for raw in reader:
            message = json.loads(raw)
            if message.get("type") == "attr" and message.get("key") == "triald.code":
                self.code_lines.append(message)  # which code the trial runs: its own tests
                continue
            self.lines.append(message)
            if on_line is not None:
                on_line(message)
            if message["type"] == "suggest":
                answer = {"type": "suggestion", "name": message["name"],
                          "value": values[message["name"]]}
                self.channel.sendall(json.dumps(answer).encode() + b"\n")
            elif message["type"] == "should_prune":
                self.channel.sendall(b'{"type":"should_prune","value":false}\n')
        reader.close()
        return self

    def close(self):
        self.channel.close()

    def release(self):
        """Closes everything of this trial's the test holds."""
        self.channel.close()
        self.out.close()
        self.err.close()

    def reap(self):
        self.status = wait_status(self.pid)
        return self.status

    def exit_code(self):
        self.assert_reaped()
        return os.waitstatus_to_exitcode(self.status)

    def assert_reaped(self):
        if self.status is None:
            self.reap()

    def attrs(self):
        return {line["key"]: line["value"] for line in self.lines if line["type"] == "attr"}

    def final(self):
        return [line for line in self.lines if line["type"] == "final"]

    def stdout(self):
        self.out.seek(0)
        return self.out.read().decode()

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode()


class FakeDaemon:
    """Starts a fork server and speaks the daemon's side of its channel."""

    def __init__(self, test, preload=None, objective=None, constraints=None, env=None,
                 fork_twice=False):
        self.test = test
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(TIMEOUT_S)
        self.log = tempfile.TemporaryFile()
        args = [sys.executable, "-m", "triald", "fork-server"]
        if preload:
            args += ["--preload", preload]
        if objective:
            args += ["--objective", objective]
        if constraints:
            args += ["--constraints", constraints]
        if fork_twice:
            args.append("--fork-twice")
        # As triald starts it: the channel at fd 3, the log at 1 and 2, /dev/null at 0, and no
        # other descriptor of this process.
        actions = [(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3),
                   (os.POSIX_SPAWN_DUP2, self.log.fileno(), 1),
                   (os.POSIX_SPAWN_DUP2, self.log.fileno(), 2),
                   (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        for entry in os.listdir("/proc/self/fd"):
            if int(entry) > 3:
                actions.append((os.POSIX_SPAWN_CLOSE, int(entry)))
        server_env = base_env({"TRIALD_FORK_SERVER_FD": "3", "FORK_TEST_SERVER_ONLY": "1"})
        server_env.update(env or {})
        self.pid = os.posix_spawn(sys.executable, args, server_env, file_actions=actions,
                                  setpgroup=0)
        theirs.close()
        self.status = None
        self.next_id = 0
        self.trials = []

    def receive(self):
        data = self.sock.recv(65536)
        self.test.assertTrue(data, f"the server closed its channel; its log:\n{self.output()}")
        return json.loads(data)

    def ready(self):
        message = self.receive()
        self.test.assertEqual(message["type"], "ready", self.output())
        return message

    def request(self, argv, env, cwd=None, daemon_pid=None, answered=True):
        """Sends a fork request; the trial (its channel, stdout and stderr files) and the
        server's answer (None when not `answered`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.settimeout(TIMEOUT_S)
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.next_id += 1
        request = {"type": "fork", "id": self.next_id, "argv": argv, "env": env,
                   "cwd": cwd or tempfile.gettempdir(),
                   "daemon_pid": daemon_pid or os.getpid()}
        socket.send_fds(self.sock, [json.dumps(request).encode()],
                        [theirs.fileno(), out.fileno(), err.fileno()])
        theirs.close()
        answer = self.receive() if answered else None
        trial = Trial(answer.get("pid") if answer else None, ours, out, err)
        self.trials.append(trial)
        return trial, answer

    def fork(self, function, number=0, env=None, cwd=None, args=(), **kwargs):
        trial, answer = self.request(["run", f"{OBJECTIVES}:{function}", *args],
                                     trial_env(number, env), cwd=cwd, **kwargs)
        self.test.assertEqual(answer, {"type": "forked", "id": self.next_id, "pid": trial.pid},
                              self.output())
        return trial

    def run(self, function, values=None, **kwargs):
        trial = self.fork(function, **kwargs)
        trial.go()
        trial.talk(values)
        trial.close()
        trial.reap()
        return trial

    def send(self, message):
        self.sock.send(message if isinstance(message, bytes) else json.dumps(message).encode())

    def wait(self):
        if self.status is None:
            self.status = wait_status(self.pid)
        return os.waitstatus_to_exitcode(self.status)

    def alive(self):
        return self.status is None and os.waitpid(self.pid, os.WNOHANG)[0] == 0

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self):
        self.sock.close()
        if self.status is None:
            try:
                self.status = wait_status(self.pid, 30)
            except AssertionError:
                pass
        self.log.close()
        for trial in self.trials:
            trial.release()


class ForkServerCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        become_subreaper()

    def daemon(self, **kwargs):
        daemon = FakeDaemon(self, **kwargs)
        self.addCleanup(daemon.close)
        return daemon

    def marker_path(self):
        folder = tempfile.mkdtemp(prefix="fork-server-test-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", folder], check=False))
        return os.path.join(folder, "marker")


class ReadyTest(ForkServerCase):
    def test_ready_lists_the_preload(self):
        daemon = self.daemon(preload="json,fs_atexit_preload")
        ready = daemon.ready()
        self.assertEqual(ready, {"type": "ready", "pid": daemon.pid,
                                 "preloaded": ["json", "fs_atexit_preload"],
                                 "objective_loaded": False, "forks": FORKS})

    def test_ready_says_the_objective_is_loaded(self):
        daemon = self.daemon(objective=f"{OBJECTIVES}:mutate")
        self.assertEqual(daemon.ready(), {"type": "ready", "pid": daemon.pid, "preloaded": [],
                                          "objective_loaded": True, "forks": FORKS})

    def test_asked_to_fork_twice_it_does(self):
        daemon = self.daemon(fork_twice=True)
        self.assertEqual(daemon.ready()["forks"], 2)
        trial = daemon.run("identity", number=1)
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertEqual(trial.attrs()["ppid"], os.getpid())
        self.assertEqual(trial.attrs()["sid"], trial.pid)

    def test_stop_ends_the_server(self):
        daemon = self.daemon()
        daemon.ready()
        daemon.send({"type": "stop"})
        self.assertEqual(daemon.wait(), 0, daemon.output())

    def test_eof_ends_the_server(self):
        daemon = self.daemon()
        daemon.ready()
        daemon.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(daemon.wait(), 0, daemon.output())

    def test_malformed_packets_end_the_server_with_2(self):
        for packet, said in [(b"not json", "not JSON"),
                             (b"[1, 2]", "not a JSON object"),
                             (b'{"type":"spawn"}', "unknown request type 'spawn'"),
                             (b'{"type":"stop","now":true}', "fields other than type"),
                             (json.dumps({"type": "fork", "id": 1, "argv": ["run"], "env": [],
                                          "cwd": "/"}).encode(), "missing daemon_pid"),
                             (json.dumps({"type": "fork", "id": 1, "argv": ["run"],
                                          "env": [], "cwd": "/", "daemon_pid": 1}).encode(),
                              "carries 0 descriptors; expected 3")]:
            with self.subTest(packet=packet):
                daemon = FakeDaemon(self)
                try:
                    daemon.ready()
                    daemon.send(packet)
                    self.assertEqual(daemon.wait(), 2, daemon.output())
                    self.assertIn(said, daemon.output())
                finally:
                    daemon.close()

    def test_a_bad_env_entry_is_malformed(self):
        daemon = self.daemon()
        daemon.ready()
        daemon.request(["run", f"{OBJECTIVES}:value"], ["NO_EQUALS_SIGN"], answered=False)
        self.assertEqual(daemon.wait(), 2)
        self.assertIn("env must be an array of \"KEY=VALUE\" strings", daemon.output())


class TrialTest(ForkServerCase):
    def test_a_trial_sends_its_value_and_exits_0(self):
        daemon = self.daemon()
        daemon.ready()
        trial = daemon.run("value", {"x": 0.25})
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertEqual(trial.lines[0]["type"], "suggest")
        self.assertEqual(trial.final(), [{"type": "final", "value": 0.5}])

    def test_a_forked_trial_records_the_code_the_server_loaded(self):
        # The server imported the objective before the trial: the trial runs that code, and
        # its "triald.code" line says which, even once the file has changed since.
        folder = tempfile.mkdtemp(prefix="fork-server-code-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", folder], check=False))
        path = os.path.join(folder, "fs_code_objective.py")
        source = "def objective(trial):\n    return 1.5\n"
        with open(path, "w") as f:
            f.write(source)
        daemon = self.daemon(objective=f"{path}:objective")
        daemon.ready()
        with open(path, "a") as f:
            f.write("# edited after the server loaded it\n")
        trial, answer = daemon.request(["run", f"{path}:objective"], trial_env(0, None))
        self.assertEqual(answer["type"], "forked", daemon.output())
        trial.go()
        trial.talk()
        trial.close()
        trial.reap()
        self.assertEqual(trial.final(), [{"type": "final", "value": 1.5}], trial.stderr())
        digest = hashlib.sha256(source.encode()).hexdigest()
        self.assertEqual(trial.code_lines, [{"type": "attr", "key": "triald.code",
                                             "value": {"objective": {"path": path,
                                                                     "sha256": digest}}}])

    def test_the_trial_is_its_own_process_group_and_session_child_of_the_daemon(self):
        daemon = self.daemon(preload="json")
        daemon.ready()
        cwd = tempfile.mkdtemp(prefix="fork-server-cwd-")
        self.addCleanup(os.rmdir, cwd)
        trial = daemon.run("identity", number=4, cwd=cwd,
                           env={"CUDA_VISIBLE_DEVICES": "1", "FORK_TEST_TRIAL_ONLY": "x"})
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        attrs = trial.attrs()
        self.assertNotEqual(attrs["pid"], daemon.pid)
        self.assertEqual(attrs["pid"], trial.pid)
        self.assertEqual(attrs["pgid"], trial.pid)
        self.assertEqual(attrs["sid"], trial.pid)
        self.assertEqual(attrs["ppid"], os.getpid())  # the subreaper, as triald is
        self.assertEqual(attrs["fds"], [0, 1, 2, 3])
        self.assertEqual(attrs["stdin"], "/dev/null")
        self.assertEqual(attrs["sigmask"], [])
        self.assertEqual(attrs["dumpable"], 1)  # as an exec'd trial; the server is not (below)
        self.assertEqual(attrs["cwd"], os.path.realpath(cwd))
        self.assertEqual(attrs["argv"], [OBJECTIVES])
        self.assertEqual(attrs["env"], {
            "TRIALD_TRIAL": "4", "TRIALD_STUDY": "forks", "TRIALD_REPORT_FD": "3",
            "TRIALD_TRIAL_DIR": tempfile.gettempdir(), "TRIALD_N_OBJECTIVES": "1",
            "TRIALD_NODE": "test-node", "CUDA_VISIBLE_DEVICES": "1",
            "FORK_TEST_TRIAL_ONLY": "x"})  # and not the server's FORK_TEST_SERVER_ONLY
        self.assertEqual(trial.stdout(), "to the trial's stdout\n")
        self.assertEqual(trial.stderr(), "to the trial's stderr\n")
        self.assertTrue(daemon.alive())

    def test_proc_shows_the_trials_environment_as_for_an_exec_one(self):
        # triald pads the server's environment block (TRIALD_FORK_ENV_SPACE); the trial writes
        # its environment over it, so that /proc/PID/environ of the trial and of a child it forks
        # names the trial (the daemon finds escaped processes by their TRIALD_TRIAL_DIR there).
        daemon = self.daemon(env={"TRIALD_FORK_ENV_SPACE": "." * 8192})
        daemon.ready()
        trial = daemon.run("proc_environ", number=6, env={"FORK_TEST_TRIAL_ONLY": "x"})
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        attrs = trial.attrs()
        expected = sorted(trial_env(6, {"FORK_TEST_TRIAL_ONLY": "x"}))
        self.assertEqual(sorted(attrs["environ"]), expected)
        self.assertEqual(sorted(attrs["child_environ"]), expected)
        self.assertEqual(sorted(attrs["executed_environ"]), expected)

    def test_without_room_for_all_of_it_proc_shows_the_trials_own_variables_first(self):
        daemon = self.daemon()  # a block as big as the server's environment only
        daemon.ready()
        trial = daemon.run("proc_environ", number=7, env={"FORK_TEST_BIG": "y" * 4096})
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        attrs = trial.attrs()
        for key, value in (("TRIALD_TRIAL_DIR", tempfile.gettempdir()),
                           ("TRIALD_STUDY", "forks"), ("TRIALD_TRIAL", "7")):
            self.assertIn(f"{key}={value}", attrs["environ"])
            self.assertIn(f"{key}={value}", attrs["child_environ"])
        self.assertNotIn("FORK_TEST_BIG=" + "y" * 4096, attrs["environ"])
        self.assertNotIn("FORK_TEST_SERVER_ONLY=1", attrs["environ"])
        # What a program it executes gets is the whole environment all the same.
        self.assertIn("FORK_TEST_BIG=" + "y" * 4096, attrs["executed_environ"])

    def test_constraints_are_sent_as_by_the_exec_path(self):
        daemon = self.daemon(objective=f"{OBJECTIVES}:constrained",
                             constraints=f"{OBJECTIVES}:constraints")
        daemon.ready()
        trial = daemon.run("constrained", {"x": 0.75},
                           args=("--constraints", f"{OBJECTIVES}:constraints"))
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertEqual([line["type"] for line in trial.lines],
                         ["suggest", "constraints", "final"])
        self.assertEqual(trial.lines[1]["values"], [0.25])

    def test_module_state_of_one_trial_is_not_seen_by_the_next(self):
        daemon = self.daemon(objective=f"{OBJECTIVES}:mutate")
        daemon.ready()
        for number in range(3):
            trial = daemon.run("mutate", number=number)
            self.assertEqual(trial.exit_code(), 0, trial.stderr())
            # Every trial starts from the server's state: the counter it found was 0 ...
            self.assertEqual(trial.attrs()["counter"], 1)
            # ... in the module the server imported (not imported again by the trial).
            self.assertEqual(trial.attrs()["loaded_in"], daemon.pid)

    def test_random_state_differs_between_trials(self):
        self.assertIsNotNone(importlib.util.find_spec("torch"), "python3-torch is required")
        daemon = self.daemon(preload="numpy,torch")
        daemon.ready()
        seen = [daemon.run("randomness", number=n).attrs() for n in range(3)]
        for key in ("random", "numpy", "torch"):
            values = [attrs[key] for attrs in seen]
            self.assertEqual(len(set(values)), 3, f"{key}: {values}")

    def test_a_crash_or_os_exit_does_not_disturb_the_server(self):
        daemon = self.daemon(preload="json")
        daemon.ready()
        crashed = daemon.run("segfault")
        self.assertTrue(os.WIFSIGNALED(crashed.status))
        self.assertEqual(os.WTERMSIG(crashed.status), signal.SIGSEGV)
        exited = daemon.run("exit7")
        self.assertEqual(exited.exit_code(), 7)
        self.assertTrue(daemon.alive())
        after = daemon.run("value", {"x": 0.5})
        self.assertEqual(after.exit_code(), 0, after.stderr())
        self.assertEqual(after.final(), [{"type": "final", "value": 1.0}])

    def test_sigterm_stops_a_forked_trial_as_an_exec_one(self):
        daemon = self.daemon()
        daemon.ready()
        trial = daemon.fork("loop_until_stopped")
        trial.go()
        stopped = []

        def on_line(message):
            if message["type"] == "report" and not stopped:
                stopped.append(True)
                os.killpg(trial.pid, signal.SIGTERM)
        trial.talk(on_line=on_line)
        self.assertEqual(trial.exit_code(), 143, trial.stderr())
        self.assertEqual(trial.stderr(), "")

    def test_a_trial_without_its_go_runs_nothing(self):
        daemon = self.daemon(objective=f"{OBJECTIVES}:marker")
        daemon.ready()
        marker = self.marker_path()
        for how in ("eof", "other line"):
            with self.subTest(how=how):
                trial = daemon.fork("marker", env={"FORK_TEST_MARKER": marker})
                if how == "other line":
                    trial.channel.sendall(b'{"type":"stop"}\n')
                trial.channel.shutdown(socket.SHUT_WR)
                self.assertEqual(trial.reap(), 0)
                trial.close()
                self.assertFalse(os.path.exists(marker))
        trial = daemon.run("marker", env={"FORK_TEST_MARKER": marker})  # the control
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertTrue(os.path.exists(marker))

    def test_a_trial_whose_parent_is_not_the_daemon_runs_nothing(self):
        daemon = self.daemon()
        daemon.ready()
        marker = self.marker_path()
        trial = daemon.fork("marker", env={"FORK_TEST_MARKER": marker}, daemon_pid=1)
        trial.go()
        trial.talk()
        self.assertEqual(trial.exit_code(), 0)
        self.assertFalse(os.path.exists(marker))

    def test_the_servers_exit_handlers_never_run_in_a_trial(self):
        marker = self.marker_path()
        daemon = self.daemon(preload="fs_atexit_preload",
                             env={"FORK_TEST_SERVER_ATEXIT": marker + ".server"})
        daemon.ready()
        trial = daemon.run("at_exit", env={"FORK_TEST_MARKER": marker,
                                           "FORK_TEST_SERVER_ATEXIT": marker + ".server"})
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertTrue(os.path.exists(marker + ".trial"))  # the trial's own handler ran
        self.assertFalse(os.path.exists(marker + ".server"))
        daemon.send({"type": "stop"})
        self.assertEqual(daemon.wait(), 0)
        with open(marker + ".server") as f:
            # The server's, in the server only; and the server was not dumpable.
            self.assertEqual(f.read(), f"{daemon.pid} dumpable=0\n")

    def test_the_servers_memory_stays_flat_over_500_trials(self):
        daemon = self.daemon(preload="json", objective=f"{OBJECTIVES}:allocate")
        daemon.ready()
        for number in range(20):  # warm-up: the server's first requests allocate its buffers
            self.assertEqual(daemon.run("allocate", number=number).exit_code(), 0)
        before = vm_rss_kib(daemon.pid)
        started = time.monotonic()
        for number in range(500):
            trial = daemon.run("allocate", number=number)
            self.assertEqual(trial.exit_code(), 0, trial.stderr())
            self.assertEqual(trial.final(), [{"type": "final", "value": 1.0}])
        elapsed = time.monotonic() - started
        after = vm_rss_kib(daemon.pid)
        print(f"\nfork server VmRSS over 500 trials: {before} KiB before, {after} KiB after "
              f"({after - before:+d} KiB); {500 / elapsed:.1f} trials/s", file=sys.stderr)
        self.assertLess(after - before, 5 * 1024)


class SafetyCheckTest(ForkServerCase):
    def test_a_preload_that_starts_a_thread_is_unsafe(self):
        daemon = self.daemon(preload="fs_thread_preload")
        message = daemon.receive()
        self.assertEqual(message["type"], "unsafe", daemon.output())
        self.assertRegex(message["reason"], r"^2 threads: \d+ \(python3?[^)]*\), \d+ \(")
        self.assertEqual(daemon.wait(), 0)

    def test_a_preload_that_keeps_a_file_open_is_unsafe(self):
        daemon = self.daemon(preload="fs_file_preload")
        message = daemon.receive()
        self.assertEqual(message["type"], "unsafe", daemon.output())
        self.assertRegex(message["reason"],
                         r"^descriptor \d+ \(/.*fork-server-kept-.*\.bin\) is open$")
        self.assertEqual(daemon.wait(), 0)

    def test_a_preload_that_initialises_cuda_is_unsafe(self):
        fake = os.path.join(FIXTURES, "fake_cuda")  # a torch whose CUDA is initialised
        daemon = self.daemon(preload="torch", env={
            "PYTHONPATH": os.pathsep.join([CLIENT_DIR, fake, FIXTURES])})
        message = daemon.receive()
        self.assertEqual(message, {"type": "unsafe", "reason": "CUDA is initialised"},
                         daemon.output())
        self.assertEqual(daemon.wait(), 0)

    def test_a_thread_started_after_ready_is_found_before_the_next_fork(self):
        daemon = self.daemon(preload="fs_late_thread_preload")
        daemon.ready()
        self.assertEqual(daemon.run("value", {"x": 0.5}).exit_code(), 0)
        os.kill(daemon.pid, signal.SIGUSR1)
        deadline = time.monotonic() + TIMEOUT_S
        while len(os.listdir(f"/proc/{daemon.pid}/task")) < 2:
            self.assertLess(time.monotonic(), deadline, "the preload's thread never started")
            time.sleep(0.01)
        trial, answer = daemon.request(["run", f"{OBJECTIVES}:value"], trial_env(1))
        self.assertEqual(answer["type"], "unsafe", daemon.output())
        self.assertEqual(answer["id"], daemon.next_id)
        self.assertRegex(answer["reason"], r"^2 threads: ")
        self.assertEqual(daemon.wait(), 0)
        self.assertEqual(trial.channel.recv(1), b"")  # no trial holds the channel's other end

    def test_a_preload_that_raises_is_an_error_with_the_traceback(self):
        daemon = self.daemon(preload="json,fs_raising_preload")
        message = daemon.receive()
        self.assertEqual(message["type"], "error", daemon.output())
        self.assertIn("--preload fs_raising_preload: importing it raised", message["message"])
        self.assertIn("fs_raising_preload.py", message["message"])
        self.assertIn("_load_dataset", message["message"])
        self.assertTrue(message["message"].endswith(
            "RuntimeError: the data set is missing: /nonexistent/train.bin"))
        self.assertEqual(daemon.wait(), 1)

    def test_an_objective_that_raises_at_import_is_an_error(self):
        daemon = self.daemon(objective=f"{FIXTURES}/fs_raising_preload.py:objective")
        message = daemon.receive()
        self.assertEqual(message["type"], "error", daemon.output())
        self.assertIn("importing it raised", message["message"])
        self.assertIn("RuntimeError: the data set is missing", message["message"])
        self.assertEqual(daemon.wait(), 1)

    def test_a_missing_preload_module_is_an_error(self):
        daemon = self.daemon(preload="no_such_module_here")
        message = daemon.receive()
        self.assertEqual(message["type"], "error")
        self.assertIn("No module named 'no_such_module_here'", message["message"])
        self.assertEqual(daemon.wait(), 1)


# A daemon of its own for test_a_forked_trial_dies_with_its_daemon: a subreaper that starts a
# server, has it fork `marker_then_sleep`, says go, prints the trial's and the server's pids, and
# waits to be killed.
MINI_DAEMON = """
import sys, time, unittest
sys.path.insert(0, {here!r})
import python_fork_server_test as t


class Probe(unittest.TestCase):
    def runTest(self):
        pass


t.become_subreaper()
daemon = t.FakeDaemon(Probe(), objective={objective!r})
daemon.ready()
trial = daemon.fork("marker_then_sleep", env={{"FORK_TEST_MARKER": {marker!r}}})
trial.go()
print(trial.pid, daemon.pid, flush=True)
time.sleep(600)
"""


class FailureTest(ForkServerCase):
    """What the server and its trials do when something around them fails."""

    def test_a_failed_fork_is_fork_failed_and_the_server_goes_on(self):
        # The server's clone of the trial (or its fork of the middle process, when it forks
        # twice) and the middle process's fork of the trial.
        for where, twice in (("server", False), ("server", True), ("middle", True)):
            with self.subTest(where=where, twice=twice):
                marker = self.marker_path()
                env = {"FORK_TEST_FAIL_FORK": where, "FORK_TEST_FAIL_MARKER": marker}
                daemon = self.daemon(preload="fs_fork_fails_preload", env=env, fork_twice=twice)
                self.assertEqual(daemon.ready()["forks"], 2 if twice else FORKS)
                trial, answer = daemon.request(["run", f"{OBJECTIVES}:value"], trial_env(0))
                self.assertEqual(answer, {"type": "fork_failed", "id": 1,
                                          "message": os.strerror(errno.EAGAIN)},
                                 daemon.output())
                self.assertTrue(os.path.exists(marker))  # the fork really was refused
                self.assertTrue(daemon.alive())
                after = daemon.run("value", {"x": 0.25}, number=1)
                self.assertEqual(after.exit_code(), 0, after.stderr())
                self.assertEqual(after.final(), [{"type": "final", "value": 0.5}])

    def test_a_refused_clone_turns_the_server_to_two_forks(self):
        # A seccomp filter or a kernel that refuses clone(CLONE_PARENT) (EINVAL, ENOSYS, EPERM):
        # that trial and every later one are forked twice; nothing fails.
        if FORKS != 1:
            self.skipTest(f"clone(CLONE_PARENT) is not used on {os.uname().machine}")
        marker = self.marker_path()
        daemon = self.daemon(preload="fs_fork_fails_preload",
                             env={"FORK_TEST_FAIL_FORK": "server", "FORK_TEST_FAIL_MARKER": marker,
                                  "FORK_TEST_FAIL_ERRNO": "EINVAL"})
        self.assertEqual(daemon.ready()["forks"], 1)
        for number in range(2):
            trial = daemon.run("identity", number=number)
            self.assertEqual(trial.exit_code(), 0, trial.stderr())
            self.assertEqual(trial.attrs()["ppid"], os.getpid())
        self.assertTrue(os.path.exists(marker))
        self.assertEqual(daemon.output().count("clone(CLONE_PARENT) failed (Invalid argument): "
                                               "forking each trial twice from now on"), 1,
                         daemon.output())
        self.assertTrue(daemon.alive())

    def test_a_trial_that_never_reports_its_pid_is_reported_after_the_deadline(self):
        sys.path.insert(0, CLIENT_DIR)
        self.addCleanup(sys.path.remove, CLIENT_DIR)
        from triald import _forkserver
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        saved = _forkserver.PID_REPORT_TIMEOUT_S
        _forkserver.PID_REPORT_TIMEOUT_S = 0.2
        self.addCleanup(setattr, _forkserver, "PID_REPORT_TIMEOUT_S", saved)
        started = time.monotonic()
        self.assertEqual(_forkserver._read_pid(read_end),
                         "the trial process did not report its pid within 0.2 s")
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        os.close(write_end)  # and one that ends without a word
        self.assertEqual(_forkserver._read_pid(read_end),
                         "the trial process ended before it reported its pid")

    def test_a_forked_trial_dies_with_its_daemon(self):
        # PR_SET_PDEATHSIG, set by the trial after its go: a daemon killed with no chance to
        # clean up (SIGKILL) still takes its forked trials with it, as it does its exec'd ones.
        marker = self.marker_path()
        code = MINI_DAEMON.format(here=HERE, objective=f"{OBJECTIVES}:marker_then_sleep",
                                  marker=marker)
        mini = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                env=base_env())
        self.addCleanup(mini.stdout.close)
        line = mini.stdout.readline().decode()
        self.assertTrue(line, "the mini daemon printed no pids")
        trial_pid, server_pid = (int(word) for word in line.split())
        deadline = time.monotonic() + TIMEOUT_S
        while not os.path.exists(marker):  # past its go and its prctl: the objective runs
            self.assertLess(time.monotonic(), deadline, "the forked trial never ran")
            time.sleep(0.01)
        mini.kill()
        mini.wait()
        # Both are re-parented to this process (the subreaper above the mini daemon).
        status = wait_status(trial_pid, 10)
        self.assertTrue(os.WIFSIGNALED(status), f"status {status:#x}")
        self.assertEqual(os.WTERMSIG(status), signal.SIGKILL)
        # The server sees EOF on its channel and ends by itself.
        self.assertEqual(os.waitstatus_to_exitcode(wait_status(server_pid, 30)), 0)


CLONE_CHILD = """
import ctypes, json, os, random, signal, sys, threading
from triald._clone import CloneParent, _SYSCALLS

libc = ctypes.CDLL(None, use_errno=True)
libc.pthread_self.restype = ctypes.c_void_p
libc.syscall.restype = ctypes.c_long
hooks = []
os.register_at_fork(after_in_child=lambda: hooks.append("after_in_child"))
clone = CloneParent.probe()
assert not isinstance(clone, str), clone
random.seed(7)  # the child's at-fork reseed must change what comes next
expected = random.random()
random.seed(7)
server = os.getpid()
pid = clone()
if pid:
    print(pid, flush=True)
    sys.exit(0)
# The child: what glibc's and CPython's own fork would have left it.
offset = (ctypes.c_uint32 * 3).in_dll(libc, "_thread_db_pthread_tid")[2]
head, length = ctypes.c_void_p(), ctypes.c_size_t()
libc.syscall(ctypes.c_long(_SYSCALLS[os.uname().machine][1]), ctypes.c_long(0),
             ctypes.byref(head), ctypes.byref(length))
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append("SIGUSR1"))
errors = []

def poke():
    try:
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
    except OSError as e:
        errors.append(str(e))

worker = threading.Thread(target=poke)
worker.start()
worker.join()
report = {
    "ppid": os.getppid(), "server": server,
    "glibc_tid": ctypes.c_int32.from_address(libc.pthread_self() + offset).value,
    "native_id": threading.get_native_id(), "pid": os.getpid(),
    "robust_list": head.value == clone._robust_head and length.value == clone._robust_len,
    "hooks": hooks, "reseeded": random.random() != expected,
    "signal_to_main_thread": got, "errors": errors,
}
with open(sys.argv[1], "w") as f:
    json.dump(report, f)
"""


class CloneTest(ForkServerCase):
    """triald._clone.CloneParent on its own: the child is its caller's parent's, and glibc's and
    CPython's state in it is what a fork would have left."""

    def test_the_clone_is_the_grandparents_child_with_its_own_thread_state(self):
        if FORKS != 1:
            self.skipTest(f"clone(CLONE_PARENT) is not used on {os.uname().machine}")
        folder = tempfile.mkdtemp(prefix="clone-test-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", folder], check=False))
        out = os.path.join(folder, "report.json")
        server = subprocess.run([sys.executable, "-c", CLONE_CHILD, out], env=base_env(),
                                capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(server.returncode, 0, server.stderr)
        child = int(server.stdout)
        # The clone is this process's child (it waits for it here), not the server's.
        status = wait_status(child)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        with open(out) as f:
            report = json.load(f)
        self.assertEqual(report["ppid"], os.getpid())
        self.assertEqual(report["pid"], child)
        self.assertNotEqual(report["server"], child)
        self.assertEqual(report["glibc_tid"], child)  # not the server's id
        self.assertEqual(report["native_id"], child)
        self.assertTrue(report["robust_list"])
        self.assertEqual(report["hooks"], ["after_in_child"])
        self.assertTrue(report["reseeded"])
        # pthread_kill of the main thread from another thread goes by glibc's stored id.
        self.assertEqual(report["errors"], [])
        self.assertEqual(report["signal_to_main_thread"], ["SIGUSR1"])


class TorchTest(ForkServerCase):
    """torch and numpy preloaded (Debian's OpenBLAS starts its threads at import)."""

    def setUp(self):
        self.assertIsNotNone(importlib.util.find_spec("torch"), "python3-torch is required")
        self.assertIsNotNone(importlib.util.find_spec("numpy"), "python3-numpy is required")

    def exec_attrs(self, objective, env):
        """What `objective` reports in an exec'd interpreter (the runner's replay by hand, which
        prints the lines it would send)."""
        full = base_env(env)
        out = subprocess.run([sys.executable, "-m", "triald", "run", f"{OBJECTIVES}:{objective}",
                              "--params", "{}"], env=full, capture_output=True, check=True,
                             timeout=TIMEOUT_S, cwd=tempfile.gettempdir()).stdout
        lines = [json.loads(line) for line in out.decode().splitlines()]
        return {line["key"]: line["value"] for line in lines if line["type"] == "attr"}

    def exec_threads(self, env):
        """What the `threads` objective reports in an exec'd interpreter."""
        return self.exec_attrs("threads", env)

    def test_torch_preload_passes_the_check_and_trials_get_their_threads_back(self):
        daemon = self.daemon(preload="torch,numpy")
        ready = daemon.ready()
        self.assertEqual(ready["preloaded"], ["torch", "numpy"])
        cpus = len(os.sched_getaffinity(0))
        for env in ({}, {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"},
                    {"OPENBLAS_NUM_THREADS": "1"}):
            with self.subTest(env=env):
                trial = daemon.run("threads", env=env)
                self.assertEqual(trial.exit_code(), 0, trial.stderr())
                forked = trial.attrs()
                execd = self.exec_threads(env)
                print(f"\n{env or 'default env'}: exec'd {execd}\n   forked {forked}",
                      file=sys.stderr)
                # The same pool sizes, and the same threads once BLAS and torch have worked.
                self.assertEqual(forked, execd)
        if cpus > 1:
            # The server preloaded with OPENBLAS_NUM_THREADS=1; the default trial above had the
            # machine's count back, so the restore was measured, not assumed.
            self.assertGreater(self.exec_threads({})["openblas_threads"], 1)
            self.assertGreater(self.exec_threads({})["tasks_after_numpy"], 1)
        self.assertTrue(daemon.alive())

    def test_torch_generators_start_as_in_an_exec_d_trial(self):
        # The CPU generator from a seed of its own, different in every trial; CUDA's from CUDA's
        # fixed default, as in an exec'd interpreter (no seed queued for CUDA's start).
        daemon = self.daemon(preload="torch")
        daemon.ready()
        forked = [daemon.run("torch_seeding", number=n).attrs() for n in range(2)]
        execd = self.exec_attrs("torch_seeding", {})
        self.assertNotEqual(forked[0]["cpu_initial_seed"], forked[1]["cpu_initial_seed"])
        for attrs in forked:
            self.assertEqual(attrs["cuda_seed_queued"], execd["cuda_seed_queued"], attrs)
        self.assertFalse(execd["cuda_seed_queued"])

    def test_the_servers_memory_is_in_huge_pages_before_the_first_fork(self):
        # triald._clone.collapse_to_huge_pages: a fork then copies one entry per 2 MiB.
        refused = collapse_refused()
        if refused is not None:
            self.skipTest(f"this kernel does not collapse memory on request: {refused}")
        daemon = self.daemon(preload="torch,numpy")
        daemon.ready()
        self.assertIn("MiB of memory in huge pages (MADV_COLLAPSE", daemon.output())
        huge = anon_huge_kib(daemon.pid)
        self.assertGreater(huge, 16 << 10, daemon.output())  # torch's heap: about 90 MiB
        trial = daemon.run("threads")
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertTrue(daemon.alive())

    def test_a_study_asking_for_blas_threads_keeps_its_server(self):
        # OPENBLAS_NUM_THREADS=2 in the server's environment would start OpenBLAS's threads at
        # `import numpy` (unsafe: the study would fall back to exec); the server preloads with 1
        # whatever it says, and the trial gets the 2 it asked for.
        env = {"OPENBLAS_NUM_THREADS": "2"}
        daemon = self.daemon(preload="torch,numpy", env=env)
        self.assertEqual(daemon.ready()["type"], "ready")
        trial = daemon.run("threads", env=env)
        self.assertEqual(trial.exit_code(), 0, trial.stderr())
        self.assertEqual(trial.attrs(), self.exec_threads(env))
        self.assertTrue(daemon.alive())

    def test_fork_latency(self):
        daemon = self.daemon(preload="torch,numpy", objective=f"{OBJECTIVES}:value")
        daemon.ready()
        latencies = []
        for number in range(20):
            started = time.monotonic()
            trial = daemon.fork("value", number=number)
            latencies.append(time.monotonic() - started)
            trial.go()
            trial.talk({"x": 0.5})
            trial.close()
            self.assertEqual(trial.exit_code(), 0, trial.stderr())
        latencies.sort()
        print(f"\nfork request -> forked, torch preloaded: median "
              f"{latencies[len(latencies) // 2] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f}"
              f" ms (server VmRSS {vm_rss_kib(daemon.pid)} KiB)", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
