"""triald's report protocol for Python objectives: standard library only.

An exec objective is any command a sweep names; triald starts it once per trial, in its own
process, with the trial's parameters in the environment, and reads scalars back from a pipe. This
module is the Python side of that contract (proto/README.md, "Report protocol"), so that an existing
training script (plain PyTorch, Transformers, anything) becomes an isolated triald trial with a few
lines:

    import triald

    def objective(trial):
        lr = trial.param("lr")                      # the sampler's value for this trial
        for epoch in range(10):
            loss = train_one_epoch(lr)
            trial.report(loss, epoch)               # intermediate value: plots and pruning
        return evaluate()                           # the objective

    if __name__ == "__main__":
        triald.run(objective)                       # sends "final", honours SIGTERM

Stopping: triald prunes, cancels and times out a trial by sending SIGTERM to its process group
(then SIGKILL after the study's kill_grace). Once a Trial exists, SIGTERM no longer kills the
interpreter in the middle of a step; it sets `trial.stop_requested`, and the next `report()` (or
`check_stop()`) raises TrialStopped, which `run()` turns into a prompt, quiet exit. The daemon has
already decided the outcome (PRUNED, FAIL(timeout), ...); the script only has to get out of the
way, at a step boundary, with its files consistent.

Run by hand (no TRIALD_REPORT_FD), the same script still works: parameters come from
TRIALD_PARAMS if set (else from the `params` given to Trial, else none), and the protocol lines
go to stderr, so you can see what triald would receive.

Environment read: TRIALD_PARAMS (a JSON object), TRIALD_REPORT_FD, TRIALD_STUDY, TRIALD_TRIAL,
TRIALD_TRIAL_DIR, TRIALD_RESUME_DIR, TRIALD_N_OBJECTIVES (run(): how many values the objective
returns). Every message is one compact JSON line written with a single os.write (a line
is never split by buffering, and lines from several threads never interleave); lines longer than
the daemon's limit, non-finite numbers and malformed attributes are refused here with a
ValueError naming the problem, instead of ending the trial as FAIL(protocol) later.

Define-by-run objectives (a sweep's `[objective] kind = "python"`) are the other way in: an
objective function written for Optuna runs unchanged, one process per trial, under

    python3 -m triald run PATH.py:NAME        (or package.module:NAME; --params JSON replays)

which passes it an OptunaTrial (Optuna's Trial API: suggest_float, suggest_int,
suggest_categorical, report(value, step), should_prune, set_user_attr, ...) whose suggestions the
daemon answers over the same descriptor. Raising TrialPruned (or optuna.TrialPruned) ends the
trial PRUNED. Returning a tuple or list gives a study with several objectives its values;
trial.set_constraints([...]) (or a sweep's `[objective] constraints` function) its constraints.
The two classes are separate (triald._runner and triald._optuna; proto/README.md,
"Define-by-run objectives"); both take report(value, step), Optuna's order, and Trial also
its own earlier order, report(step, value), where the arguments tell which is which
(Trial.report).

The package's modules: _wire (the channel's lines), _optuna (OptunaTrial), _loading (finding
SPEC's callable), _runner (`run`, `check`), _forkserver (`fork-server`), _cli (the command line,
which alone imports _forkserver), and client (the daemon's client for notebooks and scripts:
submit, records, wait, ask and tell; `import triald.client`; _runner imports it only when an
objective reads trial.study); none imports a module that imports it back.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sys
import warnings
from types import FrameType
from typing import Any, Callable, Dict, Mapping, NoReturn, Optional, Sequence, Tuple, overload

from triald._optuna import (CategoricalDistribution, FloatDistribution, IntDistribution,
                            OptunaTrial, RetryFailedTrialCallback, TrialPruned)
from triald._wire import (MAX_ATTR_KEY_BYTES, MAX_LINE_BYTES, ChannelError, LineWriter,
                          TrialStopped, check_attr_key, constraint_values as _constraint_values,
                          finite as _finite,
                          handle_sigterm as _handle_sigterm,
                          open_report_fd, plain as _plain, shortened_error)

__all__ = ["Trial", "TrialStopped", "run", "MAX_LINE_BYTES", "MAX_ATTR_KEY_BYTES",
           "OptunaTrial", "TrialPruned", "FloatDistribution", "IntDistribution",
           "CategoricalDistribution", "ChannelError", "RetryFailedTrialCallback"]

# Exit status of a trial that stopped because triald asked it to: 128 + SIGTERM, as a shell
# reports a process ended by SIGTERM. The daemon classifies the trial by why it stopped it.
STOPPED_EXIT_STATUS = 128 + signal.SIGTERM

_MISSING = object()


class Trial:
    """One trial as its worker process sees it.

    params        the trial's parameters (dict: name -> int, float, str or bool)
    number        the trial number within its study (None when run by hand)
    study         the study's name (None when run by hand)
    dir           a private folder for this trial's checkpoints and artifacts (the current
                  directory when run by hand)
    resume_dir    for a retry, the folder of the failed attempt it replaces, where that attempt
                  left its checkpoints (TRIALD_RESUME_DIR); None for a first attempt, or when
                  that folder is not on this node
    stop_requested  True once triald has asked the trial to stop

    Creating a Trial installs a SIGTERM handler (from the main thread only: Python's rule); pass
    handle_sigterm=False to keep your own.
    """

    def __init__(self, params: Optional[Mapping[str, Any]] = None, *, handle_sigterm: bool = True,
                 environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("TRIALD_PARAMS")
        if raw is not None:
            try:
                loaded = json.loads(raw)
            except ValueError as e:
                raise ValueError(f"TRIALD_PARAMS is not JSON: {e}") from None
            if not isinstance(loaded, dict):
                raise ValueError("TRIALD_PARAMS is not a JSON object")
            self.params: Dict[str, Any] = loaded
        else:
            self.params = dict(params or {})
        self.study = env.get("TRIALD_STUDY")
        number = env.get("TRIALD_TRIAL")
        self.number = int(number) if number is not None else None
        self.dir = env.get("TRIALD_TRIAL_DIR") or os.getcwd()
        self.resume_dir = env.get("TRIALD_RESUME_DIR") or None
        self.stop_requested = False
        self._finished = False

        fd_text = env.get("TRIALD_REPORT_FD")
        # Run by hand (no descriptor), lines go to stderr.
        self._writer = LineWriter(open_report_fd(fd_text) if fd_text is not None else None)

        if handle_sigterm:
            _handle_sigterm(self._on_sigterm)

    # -- parameters ---------------------------------------------------------------------------

    def param(self, name: str, default: Any = _MISSING) -> Any:
        """The value of parameter `name`; `default` when the sweep does not define it."""
        if name in self.params:
            return self.params[name]
        if default is _MISSING:
            known = ", ".join(sorted(self.params)) or "none"
            raise KeyError(f"parameter {name!r} is not in this trial's parameters "
                           f"(it has: {known}); add it to the sweep's [space] or give a default")
        return default

    # -- reports ------------------------------------------------------------------------------

    @overload
    def report(self, value: float, step: int) -> None: ...

    @overload
    def report(self, step: int, *, value: float) -> None: ...

    def report(self, *args: Any, **kwargs: Any) -> None:
        """An intermediate value at `step` (an int >= 0): learning curves and pruning.

        Optuna's order: report(value, step). The order Trial took before, report(step, value),
        is still accepted where it cannot be mistaken for it: the arguments are read as
        (step, value) when the second is not an integer and the first is (report(epoch, 0.25)).
        Two integers are read in Optuna's order, with a warning (once per line of code): write
        the value as a float, or pass both by keyword, to say which is which. A bool is never
        a step. Keywords (report(value=v, step=s), or report(s, value=v)) are never ambiguous.

        Raises TrialStopped, before sending, once triald has asked the trial to stop.
        """
        self.check_stop()
        value, step = _report_arguments(args, kwargs)
        try:
            step = operator.index(step)
        except TypeError:
            raise ValueError(f"step must be an integer, got {step!r}") from None
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self._send({"type": "report", "step": step, "value": _finite(value, "value")})

    def attr(self, key: str, value: Any) -> None:
        """A named attribute of the trial (any JSON value): shown by trialctl and in reports."""
        check_attr_key(key)
        self._send({"type": "attr", "key": key, "value": _plain(value, f"attribute {key!r}")})

    def heartbeat(self) -> None:
        """Says the trial is alive: under [study] stall_timeout, a trial that sends no line for
        that long ends FAIL(stalled)."""
        self._send({"type": "heartbeat"})

    def error(self, message: object) -> None:
        """The worker's own account of a failure, stored with the failed trial.

        Never refused: a message too long for one line is shortened.
        """
        self._send(shortened_error(message))

    def constraints(self, values: Sequence[float]) -> None:
        """The trial's constraint values (feasible when every one is <= 0, as Optuna defines
        it): one line, sent before finish() (none for an empty sequence). NaN, infinities and
        non-numbers are refused with a ValueError."""
        if self._finished:
            raise RuntimeError("constraints() must come before finish()")
        found = _constraint_values(values, "constraints()")
        if found:  # an empty sequence: no constraints, feasible
            self._send({"type": "constraints", "values": found})

    def finish(self, value: Optional[float] = None, *,
               values: Optional[Sequence[float]] = None) -> None:
        """The objective: `value`, or `values` (a list) for several objectives. Once only."""
        if (value is None) == (values is None):
            raise ValueError("finish() takes exactly one of value or values")
        if self._finished:
            raise RuntimeError("finish() was already called for this trial")
        if values is not None:
            numbers_ = [_finite(v, f"values[{i}]") for i, v in enumerate(values)]
            if not numbers_:
                raise ValueError("values must not be empty")
            self._send({"type": "final", "values": numbers_})
        else:
            self._send({"type": "final", "value": _finite(value, "value")})
        self._finished = True

    # -- stopping -----------------------------------------------------------------------------

    def check_stop(self) -> None:
        """Raises TrialStopped if triald has asked the trial to stop; call it at step boundaries
        that do not report (e.g. inside a long epoch)."""
        if self.stop_requested:
            raise TrialStopped("triald asked this trial to stop (SIGTERM)")

    def _on_sigterm(self, signum: int, frame: Optional[FrameType]) -> None:
        self.stop_requested = True

    # -- the wire -----------------------------------------------------------------------------

    def _send(self, message: Dict[str, Any]) -> None:
        self._writer.send(message)


def _is_step(x: Any) -> bool:
    """Whether `x` can be a step: an integer (int, NumPy integer, ...), not a bool."""
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def _report_arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, Any]:
    """(value, step) from Trial.report's arguments, in Optuna's order or Trial's old one."""
    unknown = sorted(set(kwargs) - {"value", "step"})
    if unknown:
        raise TypeError(f"report() got an unexpected keyword argument {unknown[0]!r}")
    if len(args) + len(kwargs) != 2:
        raise TypeError(f"report() takes a value and a step (report(value, step)), got "
                        f"{len(args) + len(kwargs)} arguments")
    if not args:
        return kwargs["value"], kwargs["step"]
    if len(args) == 1:  # one by position, the other by keyword
        return (args[0], kwargs["step"]) if "step" in kwargs else (kwargs["value"], args[0])
    first, second = args
    if _is_step(second):
        if _is_step(first):
            warnings.warn(f"report({first!r}, {second!r}): two integers are read in Optuna's "
                          f"order, value {first!r} at step {second!r}; for report(step, value) "
                          f"give the value as a float, or write report(value=..., step=...)",
                          UserWarning, stacklevel=3)
        return first, second
    if _is_step(first):
        return second, first  # Trial's old order, report(step, value)
    return first, second  # no step at all: refused as Optuna's order


def run(objective: Callable[[Trial], Any], trial: Optional[Trial] = None) -> NoReturn:
    """Runs objective(trial) as one triald trial and exits the process.

    The returned number (or list of numbers, one per objective: TRIALD_N_OBJECTIVES of them, 1
    when unset) is sent as the final value and the process exits 0.
    If triald stopped the trial (TrialStopped), it exits with 143 without a traceback. Any other
    exception is sent as the trial's error message, then re-raised (a traceback on stderr, which
    triald keeps in the trial's log, and exit status 1).
    """
    trial = trial if trial is not None else Trial()
    try:
        result = objective(trial)
    except TrialStopped:
        # Exit at once: threads a training library started (data loaders, ...) must not delay
        # the exit that the daemon is waiting for.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(STOPPED_EXIT_STATUS)
    except Exception as e:
        trial.error(f"{type(e).__name__}: {e}")
        raise
    if result is None:
        raise ValueError("the objective returned None; return the value to minimise/maximise")
    values = list(result) if isinstance(result, (list, tuple)) else [result]
    n_text = os.environ.get("TRIALD_N_OBJECTIVES", "1")
    n_objectives = int(n_text) if n_text.isdigit() and int(n_text) >= 1 else None
    if n_objectives is None:
        raise ValueError(f"TRIALD_N_OBJECTIVES={n_text!r} is not a positive integer")
    if len(values) != n_objectives:
        message = (f"The number of the values {len(values)} did not match the number of the "
                   f"objectives {n_objectives}.")
        trial.error(message)
        raise ValueError(message)
    if len(values) == 1:
        trial.finish(values[0])
    else:
        trial.finish(values=values)
    sys.stdout.flush()
    sys.exit(0)
