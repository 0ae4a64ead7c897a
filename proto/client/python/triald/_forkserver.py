"""python3 -m triald fork-server: a study's warm Python process, forked once per trial.

    python3 -m triald fork-server [--preload MOD,MOD...] [--objective SPEC [--constraints SPEC]]
                                  [--fork-twice]

The daemon starts it with one end of a SOCK_SEQPACKET socketpair at TRIALD_FORK_SERVER_FD (3).
It imports the --preload modules (and, with --objective, the objective's module: its top-level
code runs here, once), checks that forking is safe and says `ready`; then, for each `fork`
request, it forks the trial as the daemon's child (once: triald._clone; or twice, through a
middle process), which reports its pid, waits for the daemon's `go` on its trial channel and
then runs exactly what `python3 -m triald run ...` would run, with the request's environment
and working directory. The wire contract is proto/README.md, "Fork server
protocol"; this module is its Python side.

What runs once (in the server) and what runs per trial:
- once: the interpreter's start, the preloaded imports, the objective module's top level;
- per trial (in the forked process T): descriptors, signals, environment, working directory,
  thread-pool sizes, random seeds, then the runner (`run SPEC ...`) with its usual lines and exit
  codes. The server never runs trial code: an exception or a crash in T cannot reach it.
"""

from __future__ import annotations

import _signal  # type: ignore[import]  # (no stubs) the signal module without its enum wrappers
import atexit
import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import traceback
from typing import (AbstractSet, Any, Callable, List, Mapping, NamedTuple, NoReturn, Optional,
                    Sequence, Tuple, Union)

from triald import _runner
from triald._clone import UNSUPPORTED_ERRNOS, CloneParent, collapse_to_huge_pages
from triald._loading import ImportFailed, SpecError, preload_objective, traceback_tail
from triald._wire import Message, shortened_error

# prctl(2) options (linux/prctl.h).
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4

# A packet is at most 64 KiB; a bigger one arrives truncated (MSG_TRUNC) and is refused.
MAX_PACKET_BYTES = 64 * 1024
# How long the server waits for a forked trial to report its pid.
PID_REPORT_TIMEOUT_S = 5.0
# The first line a trial reads on its channel; at most this many bytes are read for it.
GO_LINE = b'{"type":"go"}'
MAX_GO_LINE_BYTES = 4096

EXIT_OK = 0
EXIT_PRELOAD_FAILED = 1
EXIT_PROTOCOL = 2

FORK_FIELDS = {"type", "id", "argv", "env", "cwd", "daemon_pid"}

# The daemon's padding of the server's environment block (proto/README.md, "The trial's
# environment in /proc"); not part of the environment the server or a trial sees.
ENV_SPACE = "TRIALD_FORK_ENV_SPACE"
# The variables that tie a process to its trial, written first into that block.
TRIAL_KEYS = ("TRIALD_TRIAL_DIR", "TRIALD_STUDY", "TRIALD_TRIAL", "TRIALD_NODE")


# The command line a trial's argv goes to when it is not a plain `run` (triald._cli.main).
Command = Callable[[Sequence[str]], int]
# A signal and its disposition: a handler, or _signal's SIG_DFL or SIG_IGN.
Signals = List[Tuple[int, Any]]


class ServeOptions(NamedTuple):
    """What `python3 -m triald fork-server` was given (triald._cli)."""

    preload: Optional[str]  # --preload: module names, comma-separated
    objective: Optional[str]  # --objective SPEC
    constraints: Optional[str]  # --constraints SPEC (only with objective)
    fork_twice: bool = False  # --fork-twice: through a middle process, never clone


class ProtocolError(Exception):
    """The daemon sent something the contract does not allow; the server exits 2."""


def _log(message: str) -> None:
    print(f"triald fork-server: {message}", file=sys.stderr, flush=True)


# -- the safety check ---------------------------------------------------------------------------

def _thread_names() -> List[str]:
    names = []
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f"{tid} ({f.read().strip()})")
        except OSError:
            names.append(tid)
    return names


def _fd_target(fd: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def unsafe_reason(allowed_fds: AbstractSet[int]) -> Optional[str]:
    """Why forking now would not be safe (threads, open descriptors, CUDA), or None.

    Only descriptors in `allowed_fds` may be open; the listing's own descriptor (gone by the
    time its entries are looked at) is not counted."""
    reasons = []
    tasks = os.listdir("/proc/self/task")
    if len(tasks) != 1:
        reasons.append(f"{len(tasks)} threads: " + ", ".join(_thread_names()))
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd in allowed_fds:
            continue
        target = _fd_target(fd)
        if target is None:
            continue  # the directory listing's own descriptor, closed since
        reasons.append(f"descriptor {fd} ({target}) is open")
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and cuda.is_initialized():
        reasons.append("CUDA is initialised")
    return "; ".join(reasons) if reasons else None


# -- thread pools -------------------------------------------------------------------------------

def _positive_int(text: Optional[str]) -> Optional[int]:
    """The first number of an OMP-style count ("4", "4,2"), or None when not a positive int."""
    if not text:
        return None
    try:
        n = int(text.split(",")[0].strip())
    except ValueError:
        return None
    return n if n > 0 else None


def _loaded_functions(path_words: Sequence[str], names: Sequence[str]) -> List[Any]:
    """The functions `names` (the first found of each library) of every loaded library whose
    path contains one of `path_words` (found in /proc/self/maps), as ctypes functions taking an
    int: the server looks them up once, after the preload, and each trial calls them."""
    paths = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6:
                path = fields[5].strip()
                if any(word in path.lower() for word in path_words) and path not in paths:
                    paths.append(path)
    functions, seen = [], set()
    for path in paths:
        try:
            # Already loaded: dlopen returns the loaded library and loads nothing.
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        for name in names:
            function = getattr(lib, name, None)
            if function is None:
                continue
            address = ctypes.cast(function, ctypes.c_void_p).value
            if address in seen:
                continue  # libblas.so.3 and libopenblasp-*.so resolve to one function
            seen.add(address)
            function.argtypes = [ctypes.c_int]
            function.restype = None
            functions.append(function)
            break
    return functions


class ThreadPools:
    """Gives a trial's thread pools the size an exec'd trial would have had.

    OpenBLAS sizes its pool from OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS
    (the first set), capped by the CPUs the process may run on, or those CPUs. torch's intra-op
    pool (OpenMP) from OMP_NUM_THREADS or MKL_NUM_THREADS, else its own default (what it chose
    in the server when neither was set there); it is set with OpenMP's omp_set_num_threads,
    as torch's own start-up does: torch.set_num_threads would also start a pthreadpool that an
    exec'd trial does not have (used only when OpenMP's library is not found)."""

    def __init__(self, preload_env: Mapping[str, str]) -> None:
        self.openblas = _loaded_functions(
            ("openblas",), ("openblas_set_num_threads", "openblas_set_num_threads64_"))
        self.torch_default: Optional[int] = None
        self.omp = []
        torch = sys.modules.get("torch")
        if torch is not None:
            self.omp = _loaded_functions(("libgomp", "libomp", "libiomp"),
                                         ("omp_set_num_threads",))
            if not any(_positive_int(preload_env.get(k))
                       for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
                self.torch_default = torch.get_num_threads()

    def restore(self, env: Mapping[str, str]) -> None:
        cpus: Optional[int] = None
        if self.openblas:
            cpus = len(os.sched_getaffinity(0))
            wanted = next((n for n in (_positive_int(env.get(k)) for k in
                           ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"))
                           if n is not None), None)
            n = min(wanted, cpus) if wanted is not None else cpus
            for setter in self.openblas:
                setter(n)
        torch = sys.modules.get("torch")
        if torch is not None:
            threads = _positive_int(env.get("OMP_NUM_THREADS")) or \
                _positive_int(env.get("MKL_NUM_THREADS")) or self.torch_default
            if threads is None:
                threads = cpus if cpus is not None else len(os.sched_getaffinity(0))
            if self.omp:
                for setter in self.omp:
                    setter(threads)
            elif torch.get_num_threads() != threads:
                torch.set_num_threads(threads)


# -- the trial (process T) ----------------------------------------------------------------------

def _reseed() -> None:
    """Fresh random state from the OS for the generators loaded (Python's `random` reseeds
    itself in every fork: CPython registers that at-fork handler)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        # The CPU generator, as an exec'd interpreter's starts from a seed of its own. Not
        # torch.seed(): it also queues a seed for CUDA's generators (with a formatted stack, read
        # from the source files: most of a millisecond per trial), which an exec'd trial's start
        # from CUDA's fixed default seed.
        torch.default_generator.seed()


def _exit_status(code: object) -> int:
    """The exit status Python gives `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run(argv: List[str], command: Command) -> int:
    """`python3 -m triald ARGV` in this process: the runner's exit status. The common forms
    (`run SPEC`, `run SPEC --constraints SPEC`) go straight to the runner, as the command line
    (`command`, triald._cli.main) would send them; anything else is parsed by it."""
    if argv[0] == "run" and all(not a.startswith("-") for a in argv[1:2]):
        if len(argv) == 2:
            return _runner.run(argv[1])
        if len(argv) == 4 and argv[2] == "--constraints" and not argv[3].startswith("-"):
            return _runner.run(argv[1], None, argv[3])
    return command(argv)


def _read_go(fd: int) -> bool:
    """True when the first line on `fd` is the go line; False on EOF or anything else. Reads
    byte by byte, so nothing past that line is taken from the runner (the line is short)."""
    line = bytearray()
    while len(line) <= MAX_GO_LINE_BYTES:
        try:
            byte = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            return False
        if not byte:
            return False
        if byte == b"\n":
            break
        line += byte
    else:
        return False
    if line == GO_LINE:
        return True
    try:
        return bool(json.loads(line) == {"type": "go"})
    except ValueError:
        return False


def _environment_block() -> Optional[Tuple[int, int]]:
    """The address and size of this process's initial environment block (what
    /proc/PID/environ shows), from /proc/self/stat's env_start and env_end; None if unknown."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()  # fields[0] is the third field, state
        start, end = int(fields[47]), int(fields[48])
    except (OSError, ValueError, IndexError):
        return None
    return (start, end - start) if 0 < start < end else None


def _show_environment(libc: ctypes.CDLL, env: Mapping[str, str]) -> None:
    """Makes /proc/self/environ, and that of every process this one forks without an exec, show
    `env` (a dict), as an exec'd trial's shows its own: the kernel reads it from the block the
    server was started with, so the trial's entries are written over that block (the daemon made
    it big enough with ENV_SPACE). The daemon finds a trial's processes that left its process group
    (a setsid daemon) by their TRIALD_TRIAL_DIR there, and the next triald start kills what a lost
    trial left by it. libc's environment must no longer point into the block: the caller cleared
    it (clearenv) and set `env` anew, which copied every entry. Entries that do not fit are left
    out, the trial's own first; the rest of the block is NUL bytes (empty entries)."""
    block = _environment_block()
    if block is None:
        return
    start, size = block
    entries = [f"{k}={env[k]}" for k in TRIAL_KEYS if k in env]
    entries += [f"{k}={v}" for k, v in env.items() if k not in TRIAL_KEYS]
    data = bytearray()
    for entry in entries:
        encoded = os.fsencode(entry) + b"\0"
        if len(data) + len(encoded) <= size:
            data += encoded
    data += bytes(size - len(data))
    ctypes.memmove(start, bytes(data), size)


def _clear_server_exit_handlers() -> None:
    """The server's atexit handlers never run in a trial; the interpreter's own clean-ups that
    act on this process's state only (logging, multiprocessing's children, weakref.finalize of
    objects the trial makes) are registered again, as an exec'd trial would have them."""
    atexit._clear()
    logging = sys.modules.get("logging")
    if logging is not None:
        atexit.register(logging.shutdown)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None and hasattr(mp_util, "_exit_function"):
        atexit.register(mp_util._exit_function)
    weakref = sys.modules.get("weakref")
    finalize = getattr(weakref, "finalize", None)
    if finalize is not None and getattr(finalize, "_registered_with_atexit", False):
        for info in list(getattr(finalize, "_registry", {}).values()):
            info.atexit = False  # the server's objects are not the trial's to finalise
        atexit.register(finalize._exitfunc)


def _trial(server: socket.socket, request: Message, fds: Sequence[int], pid_pipe: int,
           pools: ThreadPools, signals: Signals, libc: ctypes.CDLL, command: Command) -> NoReturn:
    """Process T, the daemon's child (cloned, or orphaned by the middle process); never
    returns."""
    status = 1
    try:
        # The server is not dumpable (serve()); a trial is, as an exec'd one: its owner can read
        # its /proc files, attach a debugger to it and get its core dumps.
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.setsid()
        os.write(pid_pipe, str(os.getpid()).encode())
        os.close(pid_pipe)
        # 1. descriptors: the trial channel at 3, stdout 1, stderr 2, /dev/null 0, nothing else.
        server.detach()  # fd 3 is about to be the trial's channel, not the server's
        channel, out, err = fds
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(channel, 3)
        null = os.open(os.devnull, os.O_RDONLY)
        if null != 0:
            os.dup2(null, 0)
        os.closerange(4, max(os.sysconf("SC_OPEN_MAX"), null + 1))
        # 2. signals: a fresh interpreter's dispositions, an empty mask (through _signal: the
        # signal module's wrappers would build an enum member per call).
        for signum, handler in signals:
            _signal.signal(signum, handler)
        _signal.pthread_sigmask(signal.SIG_SETMASK, ())
        _clear_server_exit_handlers()
        # 3. the go, or nothing at all.
        if not _read_go(3):
            os._exit(0)
        # 4. tied to the daemon, then the trial's own world.
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != request["daemon_pid"]:
            os._exit(0)
        env = dict(entry.split("=", 1) for entry in request["env"])
        os.environ.clear()
        libc.clearenv()  # nothing of libc's environment is left in the server's block
        for key, value in env.items():
            os.environ[key] = value
        _show_environment(libc, env)
        os.chdir(request["cwd"])
        pools.restore(env)
        _reseed()
        try:
            status = _run(request["argv"], command)
        except SystemExit as e:
            status = _exit_status(e.code)
        else:
            status = _exit_status(status)
        # As at an exec'd interpreter's exit: non-daemon threads joined, then atexit handlers.
        shutdown = getattr(__import__("threading"), "_shutdown", None)
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: B036  (T must end here, whatever happened)
        try:
            traceback.print_exc()
        except BaseException:  # noqa: B036
            pass
        status = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


# -- the server ---------------------------------------------------------------------------------

class Server:
    """The warm process's request loop on the daemon's channel `sock`: it answers each fork
    request by forking a trial (launch) and ends on stop, EOF or a malformed packet.
    Single-threaded by construction (the safety check refuses to fork with a second thread);
    `signals`, `pools`, `libc` and `command` are handed to every trial."""

    def __init__(self, sock: socket.socket, signals: Signals, pools: ThreadPools,
                 libc: ctypes.CDLL, command: Command, clone: Optional[CloneParent]) -> None:
        self.sock = sock
        self.clone = clone  # None: each trial is forked twice
        self.command = command
        self.fd = sock.fileno()
        self.signals = signals
        self.pools = pools
        self.libc = libc

    def send(self, message: Message) -> None:
        self.sock.send(json.dumps(message, separators=(",", ":")).encode())

    def serve(self) -> int:
        """Answers requests until stop or EOF (exit 0) or a malformed packet (ProtocolError)."""
        while True:
            try:
                data, fds, flags, _ = _recv_fds(self.sock, MAX_PACKET_BYTES, 3)
            except InterruptedError:
                continue
            try:
                if not data and not fds:
                    return EXIT_OK  # EOF: the daemon is gone or done
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise ProtocolError(
                        f"a packet over {MAX_PACKET_BYTES} bytes or with more than 3 "
                        f"descriptors")
                request = _parse(data)
                if request["type"] == "stop":
                    if fds:
                        raise ProtocolError("a stop request carries descriptors")
                    return EXIT_OK
                _check_fork(request, fds)
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            if not self.fork(request, fds):
                return EXIT_OK

    def fork(self, request: Message, fds: Sequence[int]) -> bool:
        """One trial; False when the safety check failed (the server ends)."""
        try:
            reason = unsafe_reason({0, 1, 2, self.fd, *fds})
            answer = {"type": "unsafe", "id": request["id"], "reason": reason} \
                if reason is not None else self.launch(request, fds)
        finally:
            for fd in fds:
                os.close(fd)
        if reason is not None:
            _log(f"not safe to fork: {reason}")
        self.send(answer)
        return reason is None

    def launch(self, request: Message, fds: Sequence[int]) -> Message:
        """Forks the trial, once (clone with CLONE_PARENT) or twice (through a middle process
        that exits at once): the `forked` or `fork_failed` message to send."""
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            once = self.clone is not None and self.clone.robust_list_empty()
            try:
                child = self.clone() if once else os.fork()  # type: ignore[misc]
            except OSError as e:
                if once and e.errno in UNSUPPORTED_ERRNOS:
                    self.clone = None
                    _log(f"clone(CLONE_PARENT) failed ({os.strerror(e.errno)}): forking each "
                         f"trial twice from now on")
                    return self.launch(request, fds)
                return _fork_failed(request, e)
            if child == 0:
                if once:  # T itself, the daemon's child
                    _trial(self.sock, request, fds, write_end, self.pools, self.signals,
                           self.libc, self.command)
                # C1: forks T and exits at once; a failed fork is reported on the pipe.
                try:
                    os.close(read_end)
                    try:
                        t = os.fork()
                    except OSError as e:
                        os.write(write_end, f"E{e.errno}".encode())
                        os._exit(0)
                    if t == 0:
                        _trial(self.sock, request, fds, write_end, self.pools, self.signals,
                               self.libc, self.command)
                finally:
                    os._exit(0)
            os.close(write_end)
            write_end = -1
            report = _read_pid(read_end)
            # Reaped before `forked` is sent: once C1 has exited, T's parent is the daemon (the
            # subreaper), which T checks after its go.
            if not once:
                _reap(child)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        if isinstance(report, int):
            return {"type": "forked", "id": request["id"], "pid": report}
        return {"type": "fork_failed", "id": request["id"], "message": report}


if sys.version_info >= (3, 9):
    _recv_fds = socket.recv_fds
else:
    import array

    def _recv_fds(sock: socket.socket, bufsize: int,
                  maxfds: int) -> Tuple[bytes, List[int], int, Any]:
        """socket.recv_fds (Python 3.9), for Python 3.8: the same code."""
        fds = array.array("i")
        msg, ancdata, flags, addr = sock.recvmsg(bufsize,
                                                 socket.CMSG_LEN(maxfds * fds.itemsize))
        for cmsg_level, cmsg_type, cmsg_data in ancdata:
            if cmsg_level == socket.SOL_SOCKET and cmsg_type == socket.SCM_RIGHTS:
                fds.frombytes(cmsg_data[:len(cmsg_data) - (len(cmsg_data) % fds.itemsize)])
        return msg, list(fds), flags, addr


def _fork_failed(request: Message, error: OSError) -> Message:
    return {"type": "fork_failed", "id": request["id"],
            "message": os.strerror(error.errno) if error.errno else str(error)}


def _reap(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def _read_pid(fd: int) -> Union[int, str]:
    """T's pid (an int) from the pipe, or the message saying why there is none."""
    data = b""
    while True:
        ready, _, _ = select.select([fd], [], [], PID_REPORT_TIMEOUT_S)
        if not ready:
            return f"the trial process did not report its pid within {PID_REPORT_TIMEOUT_S:g} s"
        chunk = os.read(fd, 32)
        if not chunk:
            break
        data += chunk
    if data.startswith(b"E"):
        return os.strerror(int(data[1:]))
    if not data:
        return "the trial process ended before it reported its pid"
    return int(data)


def _parse(data: bytes) -> Message:
    try:
        request = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"a packet is not JSON ({e}): {data[:200]!r}") from None
    if not isinstance(request, dict):
        raise ProtocolError(f"a packet is not a JSON object: {data[:200]!r}")
    kind = request.get("type")
    if kind == "stop":
        if set(request) != {"type"}:
            raise ProtocolError(f"a stop request has fields other than type: {data[:200]!r}")
        return request
    if kind != "fork":
        raise ProtocolError(f"unknown request type {kind!r}: {data[:200]!r}")
    return request


def _check_fork(request: Message, fds: Sequence[int]) -> None:
    where = f"fork request {request.get('id')!r}"
    if set(request) != FORK_FIELDS:
        missing = sorted(FORK_FIELDS - set(request))
        unknown = sorted(set(request) - FORK_FIELDS)
        raise ProtocolError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) +
            ([f"unknown {', '.join(unknown)}"] if unknown else [])))
    if isinstance(request["id"], bool) or not isinstance(request["id"], (int, str)):
        raise ProtocolError(f"{where}: id must be an integer or a string")
    argv = request["argv"]
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ProtocolError(f"{where}: argv must be a non-empty array of strings")
    env = request["env"]
    if not isinstance(env, list) or not all(
            isinstance(e, str) and "=" in e and not e.startswith("=") and "\0" not in e
            for e in env):
        raise ProtocolError(f"{where}: env must be an array of \"KEY=VALUE\" strings")
    if not isinstance(request["cwd"], str) or not request["cwd"] or "\0" in request["cwd"]:
        raise ProtocolError(f"{where}: cwd must be a non-empty path")
    pid = request["daemon_pid"]
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ProtocolError(f"{where}: daemon_pid must be a positive integer")
    if len(fds) != 3:
        raise ProtocolError(f"{where}: carries {len(fds)} descriptors; expected 3 (trial "
                            f"channel, stdout, stderr)")


def _fresh_signals() -> Signals:
    """The dispositions this interpreter started with (before the preload could change them),
    for every signal that can be set: each trial gets them back, as an exec'd one starts with
    them."""
    found = []
    for signum in signal.valid_signals():
        handler = signal.getsignal(signum)
        if handler is None:
            continue
        try:
            signal.signal(signum, handler)  # the same disposition: a test that it can be set
        except (OSError, ValueError):
            continue
        if handler is signal.SIG_DFL or handler is signal.SIG_IGN:
            handler = _signal.SIG_DFL if handler is signal.SIG_DFL else _signal.SIG_IGN
        found.append((int(signum), handler))
    return found


def _channel() -> socket.socket:
    text = os.environ.get("TRIALD_FORK_SERVER_FD", "3")
    try:
        fd = int(text)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, 0, fileno=fd)
    except (ValueError, OSError) as e:
        raise ProtocolError(f"TRIALD_FORK_SERVER_FD={text!r} is not the daemon's channel "
                            f"({e})") from None
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) != socket.SOCK_SEQPACKET:
        sock.detach()
        raise ProtocolError(f"TRIALD_FORK_SERVER_FD={text!r} is not a SOCK_SEQPACKET socket")
    os.set_inheritable(fd, False)
    return sock


def _preload(modules: Sequence[str], objective: Optional[str],
             constraints: Optional[str]) -> Optional[str]:
    """Imports the modules and the objective; the traceback's tail (a str) if one raised."""
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except (Exception, SystemExit) as e:
                traceback.print_exception(type(e), e, e.__traceback__)
                return f"--preload {name}: importing it raised:\n{traceback_tail(e)}"
        if objective is not None:
            preload_objective(objective, constraints)
    except SpecError as e:
        _log(str(e))
        return str(e)
    except ImportFailed as e:
        traceback.print_exception(type(e.cause), e.cause, e.cause.__traceback__)
        return str(e)
    return None


def _cloner(fork_twice: bool) -> Optional[CloneParent]:
    """How trials are forked: once, by the CloneParent returned, or twice (None: asked for, or
    logged why)."""
    if fork_twice:
        return None
    clone = CloneParent.probe()
    if isinstance(clone, str):
        _log(f"forking each trial twice: {clone}")
        return None
    return clone


def serve(options: ServeOptions, command: Command) -> int:
    """`python3 -m triald fork-server`: the exit status. A trial's command line (a fork
    request's argv) is run by `command` (triald._cli.main) unless it is a plain `run`."""
    try:
        sock = _channel()
    except ProtocolError as e:
        _log(str(e))
        return EXIT_PROTOCOL
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    # The padding of the environment block is the trials' (_show_environment), not a variable.
    os.environ.pop(ENV_SPACE, None)
    signals = _fresh_signals()
    modules = [m.strip() for m in (options.preload or "").split(",") if m.strip()]
    for name in modules:
        if not all(part.isidentifier() for part in name.split(".")):
            _log(f"--preload: {name!r} is not a module name")
            sock.send(json.dumps({"type": "error", "message":
                                  f"--preload: {name!r} is not a module name"}).encode())
            return EXIT_PRELOAD_FAILED
    preload_env = dict(os.environ)
    # No BLAS threads in the server, whatever the study's environment asks (a trial gets its own
    # count back from its own environment: ThreadPools); the variable is as it was afterwards.
    blas_before = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    failure = _preload(modules, options.objective, options.constraints)
    if blas_before is None:
        del os.environ["OPENBLAS_NUM_THREADS"]
    else:
        os.environ["OPENBLAS_NUM_THREADS"] = blas_before
    server = None
    try:
        if failure is not None:
            sock.send(json.dumps({"type": "error", "message": shortened_error(
                failure)["message"]}).encode())
            return EXIT_PRELOAD_FAILED
        reason = unsafe_reason({0, 1, 2, sock.fileno()})
        if reason is not None:
            _log(f"not safe to fork: {reason}")
            sock.send(json.dumps({"type": "unsafe", "reason": reason}).encode())
            return EXIT_OK
        server = Server(sock, signals, ThreadPools(preload_env), libc, command,
                        _cloner(options.fork_twice))
        # Not dumpable: a process of the same user (a trial of this study, say) cannot ptrace the
        # server or write its memory through /proc/PID/mem, and so cannot plant code that every
        # later trial would inherit. Each trial makes itself dumpable again (_trial).
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            _log(f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}")
        # What the preload made stays where it is: the collector of a trial (or of the server)
        # never walks it, so its pages are not written to, and stay shared, in the trials.
        gc.collect()
        gc.freeze()
        # Cheaper forks: the server's anonymous memory in huge pages, before the first fork.
        huge, seconds = collapse_to_huge_pages()
        if huge:
            _log(f"{huge >> 20} MiB of memory in huge pages (MADV_COLLAPSE, "
                 f"{seconds * 1000:.0f} ms)")
        server.send({"type": "ready", "pid": os.getpid(), "preloaded": modules,
                     "objective_loaded": options.objective is not None,
                     "forks": 2 if server.clone is None else 1})
        return server.serve()
    except ProtocolError as e:
        _log(str(e))
        return EXIT_PROTOCOL
    except BrokenPipeError:
        return EXIT_OK  # the daemon closed the channel: nothing left to do
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
