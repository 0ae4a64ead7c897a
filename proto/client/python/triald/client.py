"""A client of a running triald for notebooks and scripts: standard library only.

    import triald.client

    daemon = triald.client.connect()                 # found as trialctl finds it
    study = daemon.submit("sweep.toml")              # or a dict: daemon.submit({...})
    study.wait(progress=print)                       # until the study ends
    print(study.best_trial.params)
    df = study.trials_dataframe()                    # pandas, Optuna's column names

Ask and tell, for loops you drive yourself (Optuna's ask-and-tell interface), on a study whose
sweep says `[objective] kind = "client"`:

    study = daemon.submit({"study": {"name": "by-hand", "n_trials": 20},
                           "objective": {"kind": "client"}})
    for _ in range(20):
        trial = study.ask()                          # the study's sampler answers suggest_*
        x = trial.suggest_float("x", -10, 10)
        study.tell(trial, (x - 2) ** 2)

Each asked trial holds one connection to the daemon until it is told (proto/README.md, "Ask
and tell"): if the program goes away first, the trial ends FAIL(lost) and is retried when the
study retries lost trials. The daemon stops a trial that runs past its trial_timeout, is pruned
(`trial.should_prune()` says so first) or whose study is cancelled: its next request raises
TrialStopped (ChannelError's subclass).

Errors from the daemon raise TrialdError with its code ("not_found", "invalid_argument",
"failed_precondition", "permission_denied", "unavailable", ...) and message.

Thread-safety: a Client makes one connection per request and may be shared between threads; an
AskedTrial is used by one thread at a time, like Optuna's Trial.
"""

from __future__ import annotations

import datetime
import importlib
import json
import math
import os
import platform
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._optuna import OptunaTrial, is_trial_pruned
from ._wire import ChannelError, DaemonAnswers, LineWriter, finite

__all__ = ["AskedTrial", "Client", "Study", "TrialRecord", "TrialStopped", "TrialStudy",
           "TrialdError", "connect", "sweep_toml", "trial_study"]

# The system service's socket (proto/socket_paths.h), and the current folder's of old versions.
SYSTEM_SOCKET = "/run/triald/triald.sock"
CURRENT_FOLDER_SOCKET = ".triald/triald.sock"
# The largest reply read (the daemon's limit on a reply, proto/control.h).
MAX_REPLY_BYTES = 256 * 1024 * 1024

PathLike = Union[str, "os.PathLike[str]"]
Sweep = Union[PathLike, Mapping[str, Any]]


class TrialdError(RuntimeError):
    """The daemon refused a request (`code`, `message`), or could not be reached."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message


class TrialStopped(ChannelError):
    """The daemon stopped an asked trial (trial_timeout, a prune, a cancelled study, triald
    stopping); its message says why. The trial is over: do not tell it."""


# -- finding the daemon ----------------------------------------------------------------------


def socket_search_order(environ: Optional[Mapping[str, str]] = None) -> List[Tuple[str, str]]:
    """The places looked at when neither `socket` nor $TRIALD_SOCKET is given, in trialctl's
    order (proto/socket_paths.h): (path, what it is)."""
    env = os.environ if environ is None else environ
    places = [(SYSTEM_SOCKET, "the system service")]
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        places.append((os.path.join(runtime, "triald", "triald.sock"), "your own daemon"))
    state_home = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state_home):
        home = env.get("HOME") or os.path.expanduser("~")
        state_home = os.path.join(home, ".local", "state") if os.path.isabs(home) else ""
    if state_home:
        places.append((os.path.join(state_home, "triald", "triald.sock"),
                       "your own daemon (no $XDG_RUNTIME_DIR)"))
    places.append((CURRENT_FOLDER_SOCKET, "the current folder's"))
    return places


def find_socket(socket_path: Optional[PathLike] = None) -> str:
    """The socket to talk to: `socket_path`, else $TRIALD_SOCKET (both as given), else the first
    place of socket_search_order() where a daemon accepts a connection; TrialdError
    ("unavailable") naming every place tried when none does."""
    if socket_path:
        return os.fspath(socket_path)
    if os.environ.get("TRIALD_SOCKET"):
        return os.environ["TRIALD_SOCKET"]
    tried = []
    for path, what in socket_search_order():
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
            return path
        except OSError as e:
            tried.append(f"{path} ({what}): {e.strerror or e}")
    raise TrialdError("unavailable", "no triald answers; tried " + "; ".join(tried) +
                      ". Start one (`triald`, or `systemctl --user start triald`), or pass "
                      "socket= or set $TRIALD_SOCKET")


def connect(socket_path: Optional[PathLike] = None, *, timeout: float = 30.0) -> "Client":
    """A Client of the daemon found as trialctl finds it (find_socket), checked with a ping."""
    client = Client(find_socket(socket_path), timeout=timeout)
    client.ping()
    return client


# -- sweep files from dicts ------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v, f'{where}.{k}')}"
                               for k, v in value.items()) + "}"
    raise ValueError(f"{where}: {type(value).__name__} cannot be written in a sweep file")


def sweep_toml(sweep: Mapping[str, Any]) -> str:
    """The sweep file for `sweep`, a dict of tables as a sweep file has them ({"study": {...},
    "objective": {...}, "space": {"lr": {...}}, ...}); nested dicts become [a.b] tables.
    ValueError naming the key whose value cannot be written."""
    out: List[str] = []

    def table(path: List[str], body: Mapping[str, Any]) -> None:
        scalars = [(k, v) for k, v in body.items() if not isinstance(v, Mapping)]
        tables = [(k, v) for k, v in body.items() if isinstance(v, Mapping)]
        if path and (scalars or not tables):
            out.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for key, value in scalars:
            out.append(f"{_toml_key(str(key))} = "
                       f"{_toml_value(value, '.'.join(path + [str(key)]))}")
        if path and (scalars or not tables):
            out.append("")
        for key, value in tables:
            table(path + [str(key)], value)

    if not isinstance(sweep, Mapping):
        raise ValueError("a sweep is a dict of tables ({\"study\": {...}, \"objective\": {...}})")
    for key, value in sweep.items():
        if not isinstance(value, Mapping):
            raise ValueError(f"{key}: a sweep's top level holds tables (dicts), got "
                             f"{type(value).__name__}")
    table([], sweep)
    return "\n".join(out).rstrip("\n") + "\n"


# -- records ---------------------------------------------------------------------------------


def _when(seconds: Optional[float]) -> Optional[datetime.datetime]:
    return None if seconds is None else datetime.datetime.fromtimestamp(seconds)


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the daemon reports it (`trialctl trials --json`), read-only.

    state is "WAITING", "RUNNING", "COMPLETE", "PRUNED" or "FAIL"; value/values the objective(s);
    params the parameters as the objective saw them; user_attrs its attributes; system_attrs
    triald's own ("triald.code": the files the trial's code came from, with their SHA-256);
    intermediate_values {step: value}; fail_reason and fail_summary why a FAIL failed."""

    number: int
    state: str
    value: Optional[float]
    values: Optional[List[float]]
    params: Dict[str, Any]
    user_attrs: Dict[str, Any]
    system_attrs: Dict[str, Any]
    intermediate_values: Dict[int, float]
    constraints: Optional[List[float]]
    datetime_start: Optional[datetime.datetime]
    datetime_complete: Optional[datetime.datetime]
    duration_s: Optional[float]
    fail_reason: Optional[str]
    fail_summary: Optional[str]
    retry_of: Optional[int]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, t: Mapping[str, Any]) -> "TrialRecord":
        intermediate = {int(step): float(v) for step, v in t.get("intermediate") or []}
        attrs: Dict[str, Any] = dict(t.get("attrs") or {})
        return cls(number=int(t["number"]), state=str(t["state"]), value=t.get("value"),
                   values=t.get("values"), params=dict(t.get("params") or {}),
                   user_attrs={k: v for k, v in attrs.items() if not k.startswith("triald.")},
                   system_attrs={k: v for k, v in attrs.items() if k.startswith("triald.")},
                   intermediate_values=intermediate,
                   constraints=t.get("constraints"),
                   datetime_start=_when(t.get("started_at")),
                   datetime_complete=_when(t.get("finished_at")),
                   duration_s=t.get("duration_s"), fail_reason=t.get("fail_reason"),
                   fail_summary=t.get("fail_summary"), retry_of=t.get("retry_of"),
                   raw=dict(t))


# -- the client ------------------------------------------------------------------------------


class Client:
    """The daemon at `socket_path` (connect() finds it). Each request is one connection."""

    def __init__(self, socket_path: PathLike, *, timeout: float = 30.0) -> None:
        self.socket_path = os.fspath(socket_path)
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.socket_path)
        except OSError as e:
            s.close()
            raise TrialdError("unavailable", f"cannot connect to triald at {self.socket_path}: "
                              f"{e.strerror or e}") from None
        return s

    @staticmethod
    def _exchange(s: socket.socket, verb: str, args: Mapping[str, Any]) -> Any:
        request = dict(args)
        request["verb"] = verb
        s.sendall(json.dumps(request, separators=(",", ":")).encode("utf-8") + b"\n")
        # Byte by byte past the first chunk would be slow; the reply is the only line sent
        # before the client speaks again, so reading to its newline takes nothing more.
        chunks: List[bytes] = []
        size = 0
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise TrialdError("unavailable", f"triald closed the connection before "
                                  f"answering \"{verb}\"")
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise TrialdError("internal", f"the reply to \"{verb}\" exceeds "
                                  f"{MAX_REPLY_BYTES} bytes")
            if chunk.endswith(b"\n"):
                break
        reply = json.loads(b"".join(chunks).decode("utf-8"))
        if not reply.get("ok"):
            raise TrialdError(str(reply.get("code", "unknown")), str(reply.get("error", "")))
        return reply.get("result")

    def request(self, verb: str, **args: Any) -> Any:
        """Sends one control request (proto/README.md, "Control protocol") and returns its
        result; TrialdError when the daemon refuses it."""
        with self._connect() as s:
            return self._exchange(s, verb, args)

    def ping(self) -> Dict[str, Any]:
        """{pid, running, queued, state_dir, node, shared, version}."""
        result: Dict[str, Any] = self.request("ping")
        return result

    def submit(self, sweep: Sweep, *, name: Optional[str] = None, resume: bool = False,
               python: Optional[str] = None) -> "Study":
        """Submits a sweep file (a path) or a sweep as a dict (sweep_toml) and returns its Study.
        `name` replaces [study] name; `resume` continues the study of that name if there is one
        (trialctl submit --resume). The trials of [objective] kind = "python" run `python`
        (default: this interpreter, sys.executable, as trialctl takes the submitter's); a dict's
        relative paths are relative to the current folder."""
        if isinstance(sweep, Mapping):
            text = sweep_toml(sweep)
            path = os.path.join(os.getcwd(), "<client sweep>.toml")
        else:
            path = os.path.abspath(os.fspath(sweep))
            with open(path, encoding="utf-8") as f:
                text = f.read()
        args: Dict[str, Any] = {"sweep": text, "path": path, "resume": resume}
        if name is not None:
            args["name"] = name
        interpreter = python or sys.executable
        if interpreter:
            args["python"] = os.path.abspath(interpreter)
            if python is None:
                args["python_version"] = "Python " + platform.python_version()
        result = self.request("submit", **args)
        return Study(self, str(result["study"]))

    def studies(self) -> List[Dict[str, Any]]:
        """Every study's summary (trialctl studies --json)."""
        result: List[Dict[str, Any]] = self.request("studies")
        return result

    def study(self, name: str) -> "Study":
        """The study called `name` (TrialdError "not_found" when there is none)."""
        self.request("status", study=name)
        return Study(self, name)


class Study:
    """A study of the daemon's, by name. Every property reads the daemon afresh."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"Study({self.name!r})"

    # -- reading ---------------------------------------------------------------------------

    def status(self) -> Dict[str, Any]:
        """The study's summary (trialctl status --json): state, counts, best, ..."""
        result: Dict[str, Any] = self.client.request("status", study=self.name)
        return result

    @property
    def directions(self) -> List[str]:
        return list(self.status()["directions"])

    @property
    def metric_names(self) -> Optional[List[str]]:
        """The objectives' names ([study] metric_names, Optuna's set_metric_names), or None."""
        names = self.status().get("metric_names")
        return None if names is None else list(names)

    def trials(self, states: Optional[Sequence[str]] = None) -> List[TrialRecord]:
        """Every trial (or those in `states`), by number."""
        records = [TrialRecord.from_json(t)
                   for t in self.client.request("trials", study=self.name)]
        return [t for t in records if states is None or t.state in states]

    @property
    def best_trial(self) -> TrialRecord:
        """The best feasible COMPLETE trial of a study with one objective (ValueError when there
        is none yet, as Optuna)."""
        try:
            best = self.client.request("best", study=self.name)
        except TrialdError as e:
            if e.code == "not_found" and "no study" not in e.message:
                raise ValueError(e.message) from None
            raise
        if "best_trials" in best:
            raise RuntimeError("a study with several objectives has no single best trial; "
                               "use best_trials")
        return TrialRecord.from_json(best)

    @property
    def best_trials(self) -> List[TrialRecord]:
        """The Pareto front of a study with several objectives (the best trial, alone, of one
        with a single objective)."""
        best = self.client.request("best", study=self.name)
        if "best_trials" in best:
            return [TrialRecord.from_json(t) for t in best["best_trials"]]
        return [TrialRecord.from_json(best)]

    @property
    def best_value(self) -> float:
        value = self.best_trial.value
        assert value is not None
        return value

    @property
    def best_params(self) -> Dict[str, Any]:
        return self.best_trial.params

    def trials_dataframe(self) -> Any:
        """The trials as a pandas DataFrame with Optuna's trials_dataframe columns (number,
        value or values_0.. (value_NAME, values_NAME.. with metric_names), datetime_start, datetime_complete, duration, params_NAME,
        user_attrs_NAME, state); ImportError when pandas cannot be imported."""
        try:
            pandas: Any = importlib.import_module("pandas")
        except ImportError:
            raise ImportError("trials_dataframe needs pandas; records() gives the same rows "
                              "as dicts without it") from None
        return pandas.DataFrame(self.records())

    def records(self) -> List[Dict[str, Any]]:
        """The rows trials_dataframe() holds, as dicts (no pandas needed)."""
        rows = []
        status = self.status()
        directions = list(status["directions"])
        names = status.get("metric_names")
        several = len(directions) > 1
        for t in self.trials():
            row: Dict[str, Any] = {"number": t.number}
            if several:
                for i in range(len(directions)):
                    row[f"values_{names[i] if names else i}"] = t.values[i] if t.values else None
            else:
                row[f"value_{names[0]}" if names else "value"] = t.value
            row["datetime_start"] = t.datetime_start
            row["datetime_complete"] = t.datetime_complete
            row["duration"] = (t.datetime_complete - t.datetime_start
                               if t.datetime_start and t.datetime_complete else None)
            for name, value in sorted(t.params.items()):
                row[f"params_{name}"] = value
            for name, value in sorted(t.user_attrs.items()):
                row[f"user_attrs_{name}"] = value
            row["state"] = t.state
            rows.append(row)
        return rows

    # -- control ---------------------------------------------------------------------------

    def enqueue(self, params: Mapping[str, Any], *, skip_if_exists: bool = False) -> int:
        """Queues a trial with these parameters (Optuna's enqueue_trial); returns its number
        (with skip_if_exists, that of the trial which had them already)."""
        text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
        result = self.client.request("enqueue", study=self.name, params=text,
                                     skip_if_exists=skip_if_exists)
        return int(result["trial"])

    def pause(self) -> None:
        self.client.request("pause", study=self.name)

    def resume(self) -> None:
        self.client.request("resume", study=self.name)

    def cancel(self) -> None:
        self.client.request("cancel", study=self.name)

    def set_metric_names(self, metric_names: Sequence[str]) -> None:
        """Names the study's objectives (Optuna's study.set_metric_names): one distinct name
        per objective, in the order of directions (an empty list clears them)."""
        self.client.request("set", study=self.name, metric_names=list(metric_names))

    def extend(self, n_trials: int) -> None:
        """Sets the study's n_trials (more than it has finished)."""
        self.client.request("extend", study=self.name, n_trials=n_trials)

    def wait(self, *, progress: Optional[Callable[[Dict[str, Any]], None]] = None,
             interval: float = 1.0, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Waits until the study has ended (COMPLETE, CANCELLED or FAILED) and returns its
        summary. `progress` gets the summary whenever its counts change; TimeoutError after
        `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: Optional[Tuple[Any, ...]] = None
        while True:
            status = self.status()
            key = tuple(status.get(k) for k in ("state", "paused", "waiting", "running",
                                                 "complete", "pruned", "failed"))
            if progress is not None and key != seen:
                progress(status)
            seen = key
            if status["state"] != "RUNNING":
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"study {self.name} still {status['state']} after "
                                   f"{timeout} s")
            time.sleep(interval)

    # -- ask and tell ----------------------------------------------------------------------

    def ask(self) -> "AskedTrial":
        """A new trial of this study ([objective] kind = "client"), running until told: its
        suggest_* are answered by the study's sampler. TrialdError when none can start now
        (the study is paused, complete, or has `parallelism` trials asked and not told)."""
        s = self.client._connect()
        try:
            result = self.client._exchange(s, "ask", {"study": self.name})
        except BaseException:
            s.close()
            raise
        s.settimeout(None)  # a suggest waits for the sampler, however long it takes
        return AskedTrial(self, s, result)

    def tell(self, trial: "AskedTrial", values: Union[None, float, Sequence[float]] = None, *,
             state: Optional[str] = None) -> None:
        """Ends an asked trial: COMPLETE with `values` (one number, or one per objective),
        state="PRUNED" (at its last reported step), or state="FAIL". Telling a trial twice, or
        one the daemon stopped, raises ValueError / TrialStopped."""
        if trial.study.name != self.name:
            raise ValueError(f"trial {trial.number} belongs to study {trial.study.name}, "
                             f"not {self.name}")
        trial._tell(values, state)


class TrialStudy:
    """What `trial.study` gives an objective run by triald (python3 -m triald run): its study,
    read-only, with the names Optuna's Study has. Every read asks the daemon afresh (the other
    trials go on meanwhile). `direction` and `directions` are "minimize" / "maximize" strings;
    trials are TrialRecords (state a string: "COMPLETE", ...). A triald study has no user or
    system attributes of its own: user_attrs and system_attrs are empty."""

    def __init__(self, study: Study) -> None:
        self._study = study

    def __repr__(self) -> str:
        return f"TrialStudy({self._study.name!r})"

    @property
    def study_name(self) -> str:
        return self._study.name

    @property
    def name(self) -> str:
        return self._study.name

    @property
    def directions(self) -> List[str]:
        return self._study.directions

    @property
    def metric_names(self) -> Optional[List[str]]:
        return self._study.metric_names

    @property
    def direction(self) -> str:
        directions = self.directions
        if len(directions) > 1:
            raise RuntimeError("A single direction cannot be retrieved from a multi-objective "
                               "study. Consider using Study.directions to retrieve a list "
                               "containing all directions.")
        return directions[0]

    @property
    def user_attrs(self) -> Dict[str, Any]:
        return {}

    @property
    def system_attrs(self) -> Dict[str, Any]:
        return {}

    @property
    def trials(self) -> List[TrialRecord]:
        return self._study.trials()

    def get_trials(self, deepcopy: bool = True,
                   states: Optional[Sequence[str]] = None) -> List[TrialRecord]:
        """The trials, those in `states` only when given (state names; Optuna's TrialState
        members work too, by name)."""
        del deepcopy  # records are read-only copies already
        names = None if states is None else [getattr(s, "name", s) for s in states]
        return self._study.trials(names)

    @property
    def best_trial(self) -> TrialRecord:
        return self._study.best_trial

    @property
    def best_trials(self) -> List[TrialRecord]:
        return self._study.best_trials

    @property
    def best_value(self) -> float:
        return self._study.best_value

    @property
    def best_params(self) -> Dict[str, Any]:
        return self._study.best_params

    def trials_dataframe(self) -> Any:
        return self._study.trials_dataframe()


def trial_study(environ: Optional[Mapping[str, str]] = None) -> TrialStudy:
    """The study of the trial this process runs, from TRIALD_SOCKET and TRIALD_STUDY (what the
    Python runner's trial.study gives); RuntimeError when they are not set."""
    env = os.environ if environ is None else environ
    path, name = env.get("TRIALD_SOCKET"), env.get("TRIALD_STUDY")
    if not path or not name:
        raise RuntimeError("trial.study needs the daemon that runs the trial (TRIALD_SOCKET and "
                           "TRIALD_STUDY); this trial runs without one")
    return TrialStudy(Study(Client(path), name))


class AskedTrial(OptunaTrial):
    """A trial of an ask (Study.ask): Optuna's Trial API (suggest_*, report, should_prune,
    set_user_attr, set_constraints, params, ...) over the trial's own connection, plus `study`
    and `params` fixed by [space] at the ask. Tell it through Study.tell (or `tell` here)."""

    def __init__(self, study: Study, sock: socket.socket, reply: Mapping[str, Any]) -> None:
        self._socket = sock
        writer = LineWriter(fd=sock.fileno())
        super().__init__(writer, DaemonAnswers(writer), number=int(reply["trial"]),
                         retry_history=reply.get("retry_history"))
        self._study = study
        self._n_objectives = int(reply.get("n_objectives") or 1)
        self._fixed: Dict[str, Any] = dict(reply.get("params") or {})
        self._told = False

    @property
    def study(self) -> Study:
        return self._study

    @property
    def fixed_params(self) -> Dict[str, Any]:
        """The [space] parameters drawn at the ask (suggest them, or read them here)."""
        return dict(self._fixed)

    def _ask(self, message: Dict[str, Any]) -> Dict[str, Any]:
        try:
            return super()._ask(message)
        except ChannelError as e:
            if " stopped: " in str(e):
                self._close()
                raise TrialStopped(str(e).split("request: ", 1)[-1]) from None
            raise

    def tell(self, values: Union[None, float, Sequence[float]] = None, *,
             state: Optional[str] = None) -> None:
        self._study.tell(self, values, state=state)

    def _tell(self, values: Union[None, float, Sequence[float]], state: Optional[str]) -> None:
        if self._told:
            raise ValueError(f"trial {self.number} was told already")
        state = (state or "COMPLETE").upper()
        lines: List[Dict[str, Any]] = []
        if state == "COMPLETE":
            if values is None:
                raise ValueError("tell needs the objective's value (or state=\"PRUNED\" / "
                                 "\"FAIL\")")
            numbers = ([finite(v, "a value") for v in values]
                       if isinstance(values, (list, tuple)) else [finite(values, "the value")])
            if len(numbers) != self._n_objectives:
                raise ValueError(f"this study has {self._n_objectives} objective(s); tell got "
                                 f"{len(numbers)} value(s)")
            if self._constraints is not None:
                lines.append({"type": "constraints", "values": self._constraints})
            lines.append({"type": "final", "values": numbers})
        elif state == "PRUNED":
            lines.append({"type": "pruned"})
        elif state == "FAIL":
            lines.append({"type": "error", "message": "the client told FAIL"})
        else:
            raise ValueError(f"state must be COMPLETE, PRUNED or FAIL, got {state!r}")
        self._told = True
        try:
            for line in lines:
                self._writer.send(line)
        except OSError as e:
            self._close()
            raise TrialStopped(f"trial {self.number}: the daemon closed its connection ({e})") \
                from None
        # Done once the daemon has recorded the end: it closes the connection then. So a tell
        # has taken effect when it returns (the next ask sees the slot free, as in Optuna).
        try:
            self._socket.shutdown(socket.SHUT_WR)
            self._socket.settimeout(self._study.client.timeout)
            while self._socket.recv(65536):
                pass
        except OSError:
            pass
        self._close()

    def _close(self) -> None:
        self._told = True
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()

    def __enter__(self) -> "AskedTrial":
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool:
        """Used as `with study.ask() as trial:`, a trial not told when the block ends is told
        PRUNED if the block raised TrialPruned (triald's or Optuna's; the exception ends there,
        as in Optuna's optimize), FAIL if it raised anything else (the exception goes on) or
        ended without telling."""
        pruned = error is not None and is_trial_pruned(error)
        if not self._told:
            self._tell(None, "PRUNED" if pruned else "FAIL")
        return pruned

