"""`python3 -m triald run` and `check`: a define-by-run objective as one triald trial.

The command line is triald._cli's; SPEC (PATH.py:NAME or package.module:NAME) is loaded by
triald._loading.

`run` calls NAME(trial) with an OptunaTrial and ends the trial from what happens:
    returns a number            -> {"type":"final","value":V}, exit 0
    returns a tuple or list     -> {"type":"final","values":[...]} (several objectives), exit 0
    raises TrialPruned (triald's or optuna's)  -> {"type":"pruned"}, exit 0
    returns None, NaN, inf, a non-number, or not TRIALD_N_OBJECTIVES values (1 when unset)
                                -> an error line (Optuna's message), exit 1
    raises anything else        -> an error line with the traceback's last lines, exit 1
    stopped by triald (SIGTERM) -> exit 143, quietly, at the next suggest/report/should_prune
A SPEC that cannot be used (no such file or module, no such attribute, not callable) exits 2.
Constraints (feasible when every value is <= 0, as Optuna defines them) come from
trial.set_constraints([...]) or from --constraints SPEC, a function called after the objective
returns (and after it raises TrialPruned, as Optuna calls a constraints_func for pruned trials;
never for a failed trial) with a FrozenTrial; either way a {"type":"constraints","values":[...]}
line goes just before the final (or pruned) line. A constraints function that raises or returns
something other than a sequence of finite numbers fails the trial with an error line.
With --params (a JSON object) the trial is replayed by hand: no daemon, suggests answered from
the object, should_prune always false, and the lines a real run would send printed on stdout
(without TRIALD_N_OBJECTIVES, the objective's count of values is taken as returned).

`check` imports the --preload modules, loads SPEC and verifies NAME is callable: exit 0
silently, or 2 with the message; with --report it ends with a JSON line for trialctl, which
runs it in the trial's interpreter when a sweep is submitted (daemon/ctl/submit_check.h).

A fork server's trial (triald._forkserver) calls `run` in its forked process, after the server
loaded the objective's module once (preload_objective).

Thread-safety: none; `run` and `check` are called once, from the main thread, and end with the
process (`run` installs a SIGTERM handler).
"""

from __future__ import annotations

import collections.abc
import importlib
import json
import math
import os
import platform
import signal
import sys
import traceback
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Union

from triald._loading import (LOADED_CODE, ImportFailed, SpecError, load_objective,
                             traceback_tail)
from triald._optuna import (OptunaTrial, ReplayAnswers, is_trial_pruned,
                            retry_history_from_env)
from triald._wire import (DaemonAnswers, LineWriter, Message, TrialStopped, constraint_values,
                          handle_sigterm, open_report_fd, shortened_error)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_SPEC = 2
EXIT_STOPPED = 128 + signal.SIGTERM


def _trial_study() -> Any:
    """trial.study: the client is imported only by an objective that reads it."""
    from triald.client import trial_study
    return trial_study()


def _refused_value(value: Any) -> Optional[str]:
    """Why Optuna 3.1 (optuna/study/_tell.py) would not accept `value` as an objective value,
    or None; triald also refuses infinities (its records hold finite values only)."""
    if isinstance(value, (str, bytes)):
        return f"The value {value!r} could not be cast to float."
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"The value {value!r} could not be cast to float."
    if math.isnan(number):
        return f"The value {value} is not acceptable."
    if math.isinf(number):
        # Optuna stores inf; triald's records hold finite values only.
        return f"The value {value} is not acceptable (triald records finite values only)."
    return None


def _final_line(result: object, n_objectives: Optional[int] = 1) -> Message:
    """The line that ends a trial whose objective returned `result`: final, or an error with
    Optuna 3.1's message (optuna/study/_tell.py) for a value it would not accept.

    A sequence (tuple, list) gives one value per objective, anything else one value; each is
    checked first, then their count against `n_objectives` (None: not checked, as a replay by
    hand without TRIALD_N_OBJECTIVES). One objective is sent as "value", several as "values".
    """
    if result is None:
        return {"type": "error", "message": "The value None could not be cast to float."}
    if isinstance(result, collections.abc.Sequence) and not isinstance(result, (str, bytes)):
        values = list(result)
    else:
        values = [result]
    for value in values:
        message = _refused_value(value)
        if message is not None:
            return {"type": "error", "message": message}
    expected = len(values) if n_objectives is None and values else n_objectives or 1
    if len(values) != expected:
        return {"type": "error", "message": f"The number of the values {len(values)} did not "
                                            f"match the number of the objectives {expected}."}
    if expected == 1:
        return {"type": "final", "value": float(values[0])}
    return {"type": "final", "values": [float(v) for v in values]}


def _send_quietly(writer: LineWriter, line: Message) -> None:
    """Sends an ending line; a daemon that already closed the channel (it ended the trial) is
    not an error of its own."""
    try:
        writer.send(line)
    except OSError:
        pass


def _stopped() -> NoReturn:
    # Exit at once: threads a training library started must not delay the exit the daemon is
    # waiting for (as triald.run does).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_STOPPED)


def _error(writer: Optional[LineWriter], message: str) -> None:
    print(f"triald: {message}", file=sys.stderr)
    if writer is not None:
        _send_quietly(writer, shortened_error(message))


def _n_objectives(replay: bool) -> Optional[int]:
    """TRIALD_N_OBJECTIVES (the study's number of objectives; 1 when unset, as from a daemon
    that does not set it). Replayed by hand without it: None, the returned count is taken."""
    text = os.environ.get("TRIALD_N_OBJECTIVES")
    if text is None:
        return None if replay else 1
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"TRIALD_N_OBJECTIVES={text!r} is not a positive integer")
    return n


def _constraints_line(trial: OptunaTrial, constraints_fn: Optional[Callable[..., object]],
                      constraints_spec: Optional[str],
                      values: Optional[List[float]]) -> Optional[Message]:
    """The constraints line to send before the ending line, None for none, or an error line:
    from the constraints function (called with the frozen trial) or from set_constraints()."""
    if constraints_fn is None:
        found = trial.constraints
    else:
        if trial.constraints is not None:
            return shortened_error(
                f"the trial called set_constraints() and the sweep names a constraints function "
                f"({constraints_spec}); use one or the other")
        what = f"the constraints function {constraints_spec}"
        try:
            result = constraints_fn(trial.frozen(values))
        except TrialStopped:
            _stopped()
        except Exception as e:
            traceback.print_exception(type(e), e, e.__traceback__)
            return shortened_error(f"{what} raised:\n{traceback_tail(e)}")
        try:
            found = constraint_values(result, what)
        except ValueError as e:
            return shortened_error(str(e))
    if not found:
        return None  # none, or an empty sequence: feasible either way
    return {"type": "constraints", "values": found}


def run(spec: str, params_json: Optional[str] = None,
        constraints_spec: Optional[str] = None) -> int:
    """`python3 -m triald run`: the exit status."""
    replay = params_json is not None
    answers: Union[DaemonAnswers, ReplayAnswers]
    if params_json is not None:
        try:
            params = json.loads(params_json)
        except ValueError as e:
            _error(None, f"--params is not JSON: {e}")
            return EXIT_BAD_SPEC
        if not isinstance(params, dict):
            _error(None, "--params must be a JSON object of parameter values")
            return EXIT_BAD_SPEC
        writer = LineWriter(None, sys.stdout)
        answers = ReplayAnswers(params, writer)
    else:
        fd_text = os.environ.get("TRIALD_REPORT_FD")
        if fd_text is None:
            _error(None, "TRIALD_REPORT_FD is not set: triald runs this for a sweep's "
                         "kind = \"python\" objective; by hand, replay a trial with "
                         "--params '{\"name\": value, ...}'")
            return EXIT_BAD_SPEC
        try:
            writer = LineWriter(open_report_fd(fd_text))
        except ValueError as e:
            _error(None, str(e))
            return EXIT_BAD_SPEC
        answers = DaemonAnswers(writer)

    try:
        n_objectives = _n_objectives(replay)
    except ValueError as e:
        _error(writer, str(e))
        return EXIT_BAD_SPEC

    constraints_fn = None
    try:
        objective = load_objective(spec)
        if constraints_spec is not None:
            constraints_fn = load_objective(constraints_spec, "constraints")
    except SpecError as e:
        _error(writer, str(e))
        return EXIT_BAD_SPEC
    except ImportFailed as e:
        traceback.print_exception(type(e.cause), e.cause, e.cause.__traceback__)
        _send_quietly(writer, shortened_error(traceback_tail(e.cause)))
        return EXIT_FAILED

    number = os.environ.get("TRIALD_TRIAL")
    trial = OptunaTrial(writer, answers, number=int(number) if number else 0, replay=replay,
                        trial_dir=os.environ.get("TRIALD_TRIAL_DIR"),
                        resume_dir=os.environ.get("TRIALD_RESUME_DIR"),
                        retry_history=retry_history_from_env(
                            os.environ.get("TRIALD_RETRY_HISTORY")),
                        study=_trial_study if os.environ.get("TRIALD_SOCKET") else None)
    handle_sigterm(trial.on_sigterm)
    if LOADED_CODE and not replay:
        # Which code this trial runs: the objective's file (and the constraints function's) as
        # imported, so a study whose file changed while it ran shows which trials ran what.
        _send_quietly(writer, {"type": "attr", "key": "triald.code", "value": dict(LOADED_CODE)})

    try:
        result = objective(trial)
    except TrialStopped:
        _stopped()
    except SystemExit as e:
        _send_quietly(writer, shortened_error(
            f"the objective called sys.exit({e.code!r}) instead of returning a value"))
        raise
    except BaseException as e:  # Optuna fails the trial on KeyboardInterrupt too
        if is_trial_pruned(e):
            # As Optuna's constraints_func, the constraints of a pruned trial are computed too.
            line = _constraints_line(trial, constraints_fn, constraints_spec, None)
            if line is not None and line["type"] == "error":
                print(f"triald: the trial failed: {line['message']}", file=sys.stderr)
                _send_quietly(writer, line)
                return EXIT_FAILED
            if line is not None:
                _send_quietly(writer, line)
            _send_quietly(writer, {"type": "pruned"})
            sys.stdout.flush()
            return EXIT_OK
        if trial.stop_requested:
            _stopped()  # whatever the objective raised while being stopped
        traceback.print_exception(type(e), e, e.__traceback__)
        _send_quietly(writer, shortened_error(traceback_tail(e)))
        return EXIT_FAILED

    line = _final_line(result, n_objectives)
    if line["type"] == "final":
        values = line["values"] if "values" in line else [line["value"]]
        constraints = _constraints_line(trial, constraints_fn, constraints_spec, values)
        if constraints is not None and constraints["type"] == "error":
            line = constraints
        elif constraints is not None:
            _send_quietly(writer, constraints)
    if line["type"] == "error":
        print(f"triald: the trial failed: {line['message']}", file=sys.stderr)
    _send_quietly(writer, line)
    sys.stdout.flush()
    return EXIT_OK if line["type"] == "final" else EXIT_FAILED


def _last_line(text: str) -> str:
    """The last non-empty line of `text` (an exception's type and message)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text.strip()


def check(spec: str, constraints_spec: Optional[str] = None,
          preload: Sequence[str] = (), report: bool = False) -> int:
    """`python3 -m triald check`: the exit status (0, or 2 when something does not load).

    Imports the `preload` modules, then loads SPEC (and the constraints function), as a trial
    and a fork server would. With `report`, the objective's own output goes to stderr and the
    last line of stdout is one JSON object for trialctl's check at submit: {"ok", "executable"
    (sys.executable: the interpreter behind a pyenv shim or a venv's link), "version", and when
    not ok "stage" ("preload", "objective" or "constraints"), "module" (the module or spec that
    failed), "error" (the exception's last line) and "detail" (the traceback's tail); when ok
    "files", the absolute paths of the files the objective and constraints functions came
    from}."""
    result: Dict[str, Any] = {"ok": True, "executable": sys.executable,
                              "version": platform.python_version()}
    real_stdout = sys.stdout
    if report:
        sys.stdout = sys.stderr  # what the user's modules print at import is not the report
    try:
        for name in preload:
            result.update(stage="preload", module=name)
            try:
                importlib.import_module(name)
            except (Exception, SystemExit) as e:
                detail = traceback_tail(e)
                result.update(ok=False, error=_last_line(detail), detail=detail)
                _error(None, f"preload module {name!r}: importing it raised:\n{detail}")
                break
        roles = [("objective", spec)]
        if constraints_spec is not None:
            roles.append(("constraints", constraints_spec))
        for role, role_spec in roles if result["ok"] else []:
            result.update(stage=role, module=role_spec)
            try:
                load_objective(role_spec, role)
            except SpecError as e:
                result.update(ok=False, error=str(e), detail=str(e))
                _error(None, str(e))
                break
            except ImportFailed as e:
                detail = traceback_tail(e.cause)
                result.update(ok=False, error=_last_line(detail), detail=detail)
                _error(None, str(e))
                break
    finally:
        sys.stdout = real_stdout
    if result["ok"]:
        result.pop("stage", None)
        result.pop("module", None)
        # The files the functions came from, which trialctl records with the study.
        result["files"] = [code["path"] for code in LOADED_CODE.values()]
    if report:
        sys.stderr.flush()
        print(json.dumps(result), flush=True)
    return EXIT_OK if result["ok"] else EXIT_BAD_SPEC
