"""The trial channel's wire: JSON lines written whole, limits checked before sending.

Shared by the report-only Trial (triald.run) and the define-by-run OptunaTrial (python3 -m
triald run). A line is one compact JSON object written with a single os.write loop under a lock,
so lines from several threads never interleave; answers to requests (suggest, should_prune) are
read from the same descriptor, one line each, in request order (proto/README.md).

Thread-safety: LineWriter.send and DaemonAnswers.ask are safe to call from several threads; an
ask holds the lock from its request to its answer, so answers cannot be taken by another thread.
"""

from __future__ import annotations

import collections.abc
import json
import math
import numbers
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, TextIO

# The daemon's limits (proto/report.h): a line without its newline, and an attribute key.
MAX_LINE_BYTES = 64 * 1024
MAX_ATTR_KEY_BYTES = 256

# One protocol line (a request, an answer, a report), as a JSON object.
Message = Dict[str, Any]
# What signal.signal takes as a handler (a function; not SIG_DFL or SIG_IGN).
SignalHandler = Callable[[int, Optional[FrameType]], Any]


def finite(value: Any, what: str) -> float:
    """float(value), refusing bools, non-numbers and non-finite numbers with a ValueError."""
    # float() accepts Python numbers, numpy scalars and 0-d tensors (which define __float__).
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, not a bool")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {number!r}")
    return number


def plain(value: Any, what: str) -> Any:
    """A JSON-ready copy of an attribute value: numbers finite, keys strings, no custom types."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        return finite(value, what)
    if isinstance(value, dict):
        out: Dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{what}: object keys must be strings, got {key!r}")
            out[key] = plain(item, f"{what}[{key!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [plain(item, f"{what}[{i}]") for i, item in enumerate(value)]
    raise ValueError(f"{what}: {type(value).__name__} is not a JSON value")


def constraint_values(result: Any, what: str = "the constraints function") -> List[float]:
    """`result` (what a constraints function returned, or set_constraints was given) as a list
    of finite floats; ValueError naming the problem. Like Optuna's constraints_func it is a
    sequence of numbers (a tuple, a list, a 1-D array), NaN refused with Optuna's message;
    infinities are refused too (the wire carries finite numbers)."""
    if isinstance(result, (str, bytes, dict)) or result is None or \
            not isinstance(result, collections.abc.Iterable):
        raise ValueError(f"{what} must return a sequence of floats (e.g. [c1, c2]), got "
                         f"{type(result).__name__} {result!r}")
    try:
        items = list(result)
    except TypeError:  # a 0-d array is Iterable but not iterable
        raise ValueError(f"{what} must return a sequence of floats (e.g. [c1, c2]), got "
                         f"{type(result).__name__} {result!r}") from None
    values = []
    for i, item in enumerate(items):
        if isinstance(item, bool):
            raise ValueError(f"{what}: constraints[{i}] is a bool ({item}); a constraint is a "
                             f"number, satisfied when <= 0")
        try:
            if isinstance(item, (str, bytes)):
                raise TypeError
            number = float(item)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: constraints[{i}] = {item!r} could not be cast to "
                             f"float") from None
        if math.isnan(number):
            raise ValueError("Constraint values cannot be NaN.")
        if math.isinf(number):
            raise ValueError(f"{what}: constraints[{i}] = {number} is not finite (triald "
                             f"records finite values only)")
        values.append(number)
    return values


def check_attr_key(key: object) -> None:
    """ValueError unless `key` is an attribute key the daemon takes."""
    if not isinstance(key, str) or not key:
        raise ValueError("attribute key must be a non-empty string")
    if len(key.encode("utf-8")) > MAX_ATTR_KEY_BYTES:
        raise ValueError(f"attribute key longer than {MAX_ATTR_KEY_BYTES} bytes")


def encode(message: Message) -> str:
    """`message` as one compact JSON line, without its newline; ValueError for NaN or inf."""
    return json.dumps(message, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def shortened_error(message: object) -> Message:
    """An error line for `message`, halved until it fits (an error line is never refused)."""
    text = str(message)
    line = {"type": "error", "message": text}
    while len(encode(line).encode("utf-8")) > MAX_LINE_BYTES and text:
        text = text[: len(text) // 2]
        line["message"] = text + " [...]"
    return line


class LineWriter:
    """Writes protocol lines to a descriptor, or (fd None) to a text stream.

    The stream is read when a line is written (sys.stderr by default), so a caller that swaps
    sys.stderr still sees the lines.
    """

    def __init__(self, fd: Optional[int] = None, stream: Optional[TextIO] = None) -> None:
        self.fd = fd
        self._stream = stream
        self.lock = threading.RLock()

    def send(self, message: Message) -> None:
        """Writes `message` as one line; ValueError (before writing) if it exceeds the limit."""
        line = encode(message)
        data = line.encode("utf-8")
        if len(data) > MAX_LINE_BYTES:
            raise ValueError(f"a {message['type']} line of {len(data)} bytes exceeds triald's "
                             f"limit of {MAX_LINE_BYTES}")
        data += b"\n"
        with self.lock:
            if self.fd is None:
                stream = self._stream if self._stream is not None else sys.stderr
                stream.write(line + "\n")
                stream.flush()
                return
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self.fd, view)
                except InterruptedError:
                    continue
                view = view[written:]


def open_report_fd(fd_text: str) -> int:
    """The descriptor named by TRIALD_REPORT_FD, made non-inheritable; ValueError if unusable."""
    try:
        fd = int(fd_text)
        os.fstat(fd)
    except (ValueError, OSError) as e:
        raise ValueError(f"TRIALD_REPORT_FD={fd_text!r} is not an open descriptor ({e})") from None
    # Programs the trial starts must not hold the channel open after it is gone.
    os.set_inheritable(fd, False)
    return fd


class TrialStopped(Exception):
    """Raised by report() / check_stop() once triald has asked the trial to stop (SIGTERM)."""


def handle_sigterm(handler: SignalHandler) -> None:
    """Installs `handler` for SIGTERM in this process only. A process the objective forks
    (multiprocessing's and joblib's fork start method, PyTorch's DataLoader workers) gets
    SIGTERM's default action back, so that Process.terminate(), a pool's shutdown and the
    daemon's SIGTERM end it as they would without triald; inherited, the handler would keep such
    a child alive (and its parent's exit, which joins its multiprocessing children, waiting).

    The forking thread blocks SIGTERM across the fork, and the child unblocks it only once the
    default action is back: a SIGTERM sent meanwhile stays pending in the kernel instead of
    reaching Python's handler, whose pending signals a child forgets (CPython clears them after
    fork). A child forked behind Python's back (a C library's fork()) still has the handler,
    which then restores the default action and dies of the signal."""
    owner = os.getpid()

    def on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        handler(signum, frame)

    saved = threading.local()  # the forking thread's signal mask before the fork

    def before() -> None:
        saved.mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def in_parent() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved.mask)

    def in_child() -> None:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, saved.mask)

    signal.signal(signal.SIGTERM, on_sigterm)
    os.register_at_fork(before=before, after_in_parent=in_parent, after_in_child=in_child)


class ChannelError(RuntimeError):
    """The daemon refused a request, closed the channel, or answered something unreadable."""


class DaemonAnswers:
    """Requests on the two-way trial channel (a socketpair end): sends a line, reads its answer.

    An answer `{"type":"error","message":...}` (the daemon refused the request and is ending the
    trial FAIL(protocol)) raises ChannelError with the daemon's message. `reading` is True while
    the main thread waits for an answer (its request fully sent): a SIGTERM handler may then
    raise to leave the wait, without cutting a line short.
    """

    # An answer carries at most one categorical choice, so it fits the request limit; a longer
    # line is not triald speaking.
    MAX_ANSWER_BYTES = MAX_LINE_BYTES + 1024

    def __init__(self, writer: LineWriter) -> None:
        if writer.fd is None:
            raise ValueError("the trial channel's writer has no descriptor to read answers from")
        self._writer = writer
        self._fd: int = writer.fd
        self._buffer = b""
        self.reading = False

    def ask(self, message: Message,
            check_stop: Optional[Callable[[], None]] = None) -> Message:
        """Sends `message` and returns its answer (a dict). `check_stop` is called once the wait
        has begun, so a stop requested just before it is not missed."""
        # Only the main thread runs signal handlers, so only its wait can be interrupted.
        main = threading.current_thread() is threading.main_thread()
        with self._writer.lock:
            self._writer.send(message)
            self.reading = main
            try:
                if check_stop is not None:
                    check_stop()
                return self._read_line(message)
            finally:
                if main:
                    self.reading = False

    def _read_line(self, request: Message) -> Message:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
                break
            if len(self._buffer) > self.MAX_ANSWER_BYTES:
                raise ChannelError(f"the answer to a {request['type']} request is longer than "
                                   f"{self.MAX_ANSWER_BYTES} bytes")
            try:
                chunk = os.read(self._fd, 65536)
            except OSError as e:
                raise ChannelError(
                    f"cannot read triald's answer to a {request['type']} request from "
                    f"TRIALD_REPORT_FD={self._fd} ({e}); the descriptor must be the "
                    f"two-way trial channel (a socketpair), as triald gives python objectives"
                ) from None
            if not chunk:
                raise ChannelError(f"triald closed the trial channel without answering a "
                                   f"{request['type']} request")
            self._buffer += chunk
        try:
            answer = json.loads(line.decode("utf-8"))
        except ValueError as e:
            raise ChannelError(f"triald's answer is not JSON ({e}): {line[:200]!r}") from None
        if not isinstance(answer, dict):
            raise ChannelError(f"triald's answer is not a JSON object: {line[:200]!r}")
        if answer.get("type") == "error":
            raise ChannelError(f"triald refused the {request['type']} request: "
                               f"{answer.get('message')}")
        return answer
