"""Optuna's Trial API for define-by-run objectives, answered by triald over the trial channel.

An objective written for Optuna (`def objective(trial): lr = trial.suggest_float(...)`) runs
unchanged under `python3 -m triald run FILE.py:NAME`: every suggest_* call becomes a `suggest`
request that the daemon's sampler answers at once, report() an intermediate value, should_prune()
a question to the daemon's pruner. Semantics follow Optuna 3.1 (optuna/trial/_trial.py and
optuna/distributions.py): the same checks with the same messages, the same deprecated aliases
with the same warning category, high adjusted down to a multiple of step with the same warning,
and the same name with the same distribution returning the same value (from a local cache,
without asking again).

Where triald differs, it is because the wire carries JSON: bounds and reported values must be
finite, and categorical choices are strings, integers, floats or bools, without duplicates
(Optuna also takes None and, with a warning, other objects).

Thread-safety: one OptunaTrial may be used from several threads (each request holds the
channel's lock until its answer), but like Optuna's Trial it is meant for the objective's thread.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import math
import numbers
import operator
import os
import warnings
from types import FrameType
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union,
                    overload)

from triald._wire import (ChannelError, DaemonAnswers, LineWriter, Message, TrialStopped,
                          check_attr_key, constraint_values, finite, plain)

# The daemon's per-trial limits on the define-by-run exchange (proto/README.md).
MAX_PARAMS = 1000
MAX_REQUESTS = 1000000

# A categorical choice the wire carries (Optuna also takes None).
ChoiceType = Union[bool, int, float, str]

_DEPRECATED_SUGGEST = ("{name} has been deprecated in v3.0.0. This feature will be removed in "
                       "v6.0.0. See https://github.com/optuna/optuna/releases/tag/v3.0.0. Use "
                       ":func:`~optuna.trial.Trial.suggest_float` instead.")


class TrialPruned(Exception):
    """Raise it from an objective to end the trial PRUNED (as optuna.TrialPruned does).

    The runner also recognises optuna.TrialPruned itself (and subclasses of either), so an
    objective written for Optuna needs no change.
    """


def is_trial_pruned(exc: BaseException) -> bool:
    """True for triald.TrialPruned and for optuna.exceptions.TrialPruned, without importing
    Optuna: a class of that module and name anywhere in the exception's class hierarchy."""
    for cls in type(exc).__mro__:
        if cls is TrialPruned:
            return True
        if cls.__name__ == "TrialPruned" and cls.__module__ == "optuna.exceptions":
            return True
    return False


# -- distributions ------------------------------------------------------------------------------


@overload
def _adjusted_high(low: int, high: int, step: int) -> int: ...


@overload
def _adjusted_high(low: float, high: float, step: float) -> float: ...


def _adjusted_high(low: float, high: float, step: float) -> float:
    """The largest low + k * step <= high, in decimal arithmetic as Optuna does (so that
    0.1-style steps land exactly), with Optuna's warning when high moves."""
    span = decimal.Decimal(str(high)) - decimal.Decimal(str(low))
    d_step = decimal.Decimal(str(step))
    if span % d_step == 0:
        return high
    grid_high = (span // d_step) * d_step + decimal.Decimal(str(low))
    new_high = type(high)(grid_high) if isinstance(high, int) else float(grid_high)
    warnings.warn(f"The distribution is specified by [{low}, {high}] and step={step}, but the "
                  f"range is not divisible by `step`. It will be replaced by [{low}, {new_high}].")
    return new_high


def _wire_number(value: float, what: str) -> float:
    """A bound or step as JSON carries it: finite (the wire has no inf or nan)."""
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite for triald, got {value!r}")
    return value


class _Distribution:
    """Equality, hashing and repr by attributes, as Optuna's distributions."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Distribution):
            return NotImplemented
        if type(self) is not type(other):
            return False
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__,) + self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"

    def _key(self) -> Tuple[Any, ...]:
        return tuple(sorted(vars(self).items()))


class FloatDistribution(_Distribution):
    """A float parameter's range: low, high (both included), log, step (None or > 0)."""

    def __init__(self, low: float, high: float, log: bool = False,
                 step: Optional[float] = None) -> None:
        if log and step is not None:
            raise ValueError("The parameter `step` is not supported when `log` is true.")
        if low > high:
            raise ValueError("The `low` value must be smaller than or equal to the `high` value "
                             f"(low={low}, high={high}).")
        if log and low <= 0.0:
            raise ValueError("The `low` value must be larger than 0 for a log distribution "
                             f"(low={low}, high={high}).")
        if step is not None and step <= 0:
            raise ValueError(f"The `step` value must be non-zero positive value, but step={step}.")
        self.step: Optional[float] = None
        if step is not None:
            high = _adjusted_high(low, high, step)
            self.step = _wire_number(float(step), "step")
        self.low = _wire_number(float(low), "low")
        self.high = _wire_number(float(high), "high")
        self.log = bool(log)

    def to_wire(self) -> Dict[str, Any]:
        wire: Dict[str, Any] = {"type": "float", "low": self.low, "high": self.high, "log": self.log}
        if self.step is not None:
            wire["step"] = self.step
        return wire

    def value(self, answer: Any) -> float:
        if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
            raise ValueError(f"'{answer}' is not a valid type. float-castable value is expected.")
        if math.isnan(answer):
            raise ValueError(f"`{answer}` is invalid value.")
        return float(answer)

    def contains(self, value: float) -> bool:
        if not self.low <= value <= self.high:
            return False
        if self.step is None:
            return True
        k = (value - self.low) / self.step
        return abs(k - round(k)) < 1.0e-8


class IntDistribution(_Distribution):
    """An int parameter's range: low, high (both included), log, step (>= 1; 1 when log)."""

    def __init__(self, low: int, high: int, log: bool = False, step: int = 1) -> None:
        if log and step != 1:
            raise ValueError("Samplers and other components in Optuna only accept step is 1 "
                             "when `log` argument is True.")
        if low > high:
            raise ValueError("The `low` value must be smaller than or equal to the `high` value "
                             f"(low={low}, high={high}).")
        if log and low < 1:
            raise ValueError("The `low` value must be equal to or greater than 1 for a log "
                             f"distribution (low={low}, high={high}).")
        if step <= 0:
            raise ValueError(f"The `step` value must be non-zero positive value, but step={step}.")
        self.log = bool(log)
        self.step = int(step)
        self.low = int(low)
        self.high = _adjusted_high(self.low, int(high), self.step)

    def to_wire(self) -> Dict[str, Any]:
        return {"type": "int", "low": self.low, "high": self.high, "step": self.step,
                "log": self.log}

    def value(self, answer: Any) -> int:
        if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
            raise ValueError(f"'{answer}' is not a valid type. float-castable value is expected.")
        if isinstance(answer, float) and not answer.is_integer():
            raise ValueError(f"`{answer}` is not an integer.")
        return int(answer)

    def contains(self, value: int) -> bool:
        return self.low <= value <= self.high and (value - self.low) % self.step == 0


def _same_choice(a: object, b: object) -> bool:
    """Choice equality as the wire sees it: bools only equal bools, strings strings, numbers
    numbers (so True is not 1, and 1 is 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a == b


class CategoricalDistribution(_Distribution):
    """A categorical parameter's choices (a tuple of strings, integers, floats or bools)."""

    def __init__(self, choices: Sequence[ChoiceType]) -> None:
        if len(choices) == 0:
            raise ValueError("The `choices` must contain one or more elements.")
        # Optuna also takes None (and other objects, with a warning); the wire carries JSON
        # scalars, and a null answer could not be told from a missing one.
        for i, choice in enumerate(choices):
            if isinstance(choice, (bool, str, numbers.Integral)):
                continue
            if isinstance(choice, numbers.Real) and math.isfinite(choice):
                continue
            raise ValueError(f"triald's categorical choices are strings, integers, finite floats "
                             f"and bools; choices[{i}] is {choice!r} ({type(choice).__name__})")
        for i, choice in enumerate(choices):
            for j in range(i):
                if _same_choice(choices[j], choice):
                    raise ValueError(f"The `choices` contain {choice!r} twice (choices[{j}] and "
                                     f"choices[{i}]); triald needs distinct choices")
        self.choices = tuple(choices)

    def _key(self) -> Tuple[Any, ...]:
        # Type-aware, so that (True, 2) and (1, 2) differ as they do on the wire.
        return (tuple((type(c) is bool, isinstance(c, str), c) for c in self.choices),)

    def to_wire(self) -> Dict[str, Any]:
        wire_choices: List[ChoiceType] = []
        for choice in self.choices:
            if isinstance(choice, (bool, str)):
                wire_choices.append(choice)
            elif isinstance(choice, numbers.Integral):
                wire_choices.append(int(choice))
            else:
                wire_choices.append(float(choice))
        return {"type": "categorical", "choices": wire_choices}

    def value(self, answer: Any) -> ChoiceType:
        for choice in self.choices:
            if _same_choice(answer, choice):
                return choice
        raise ValueError(f"'{answer}' not in {self.choices}.")

    def contains(self, value: object) -> bool:
        return True


# A parameter's distribution.
Distribution = Union[FloatDistribution, IntDistribution, CategoricalDistribution]


# -- the trial ----------------------------------------------------------------------------------


class FrozenTrial:
    """A finished trial as a constraints function sees it (`[objective] constraints`), like the
    FrozenTrial Optuna passes to a sampler's constraints_func: number, params, distributions,
    user_attrs, intermediate_values, datetime_start, and the objective's values (None for a
    pruned trial). `value` is the single objective's value; with several objectives reading it
    raises RuntimeError, as in Optuna. Every property returns a copy.
    """

    def __init__(self, *, number: int, params: Dict[str, Any],
                 distributions: Dict[str, Distribution], user_attrs: Dict[str, Any],
                 intermediate_values: Mapping[int, float], values: Optional[Sequence[float]],
                 datetime_start: datetime.datetime,
                 system_attrs: Optional[Mapping[str, Any]] = None) -> None:
        self._system_attrs = copy.deepcopy(dict(system_attrs or {}))
        self._number = number
        self._params = copy.deepcopy(params)
        self._distributions = copy.deepcopy(distributions)
        self._user_attrs = copy.deepcopy(user_attrs)
        self._intermediate_values = dict(intermediate_values)
        self._values = None if values is None else [float(v) for v in values]
        self._datetime_start = datetime_start

    @property
    def number(self) -> int:
        return self._number

    @property
    def params(self) -> Dict[str, Any]:
        return copy.deepcopy(self._params)

    @property
    def distributions(self) -> Dict[str, Distribution]:
        return copy.deepcopy(self._distributions)

    @property
    def user_attrs(self) -> Dict[str, Any]:
        return copy.deepcopy(self._user_attrs)

    @property
    def intermediate_values(self) -> Dict[int, float]:
        return dict(self._intermediate_values)

    @property
    def system_attrs(self) -> Dict[str, Any]:
        return copy.deepcopy(self._system_attrs)

    @property
    def last_step(self) -> Optional[int]:
        return max(self._intermediate_values) if self._intermediate_values else None

    @property
    def datetime_start(self) -> datetime.datetime:
        return self._datetime_start

    @property
    def values(self) -> Optional[List[float]]:
        return None if self._values is None else list(self._values)

    @property
    def value(self) -> Optional[float]:
        if self._values is None:
            return None
        if len(self._values) > 1:
            raise RuntimeError(
                "This attribute is not available during multi-objective optimization.")
        return self._values[0]

    def __repr__(self) -> str:
        return (f"FrozenTrial(number={self._number!r}, values={self._values!r}, "
                f"params={self._params!r}, user_attrs={self._user_attrs!r})")


class ReplayAnswers:
    """Answers requests from fixed values (`--params`), as a daemon would: no daemon needed."""

    def __init__(self, params: Mapping[str, Any], writer: LineWriter) -> None:
        self._params = params
        self._writer = writer

    def ask(self, message: Message,
            check_stop: Optional[Callable[[], None]] = None) -> Message:
        with self._writer.lock:
            self._writer.send(message)
            if message["type"] == "should_prune":
                return {"type": "should_prune", "value": False}
            if message["type"] == "relative_params":
                return {"type": "relative_params", "params": {}}  # a replay samples nothing
            name = message["name"]
            if name not in self._params:
                known = ", ".join(sorted(self._params)) or "none"
                raise ValueError(f"The value of the parameter '{name}' is not found in --params "
                                 f"(it has: {known}).")
            return {"type": "suggestion", "name": name, "value": self._params[name]}


class OptunaTrial:
    """The `trial` a define-by-run objective receives: Optuna's Trial API over triald's channel.

    Built by the runner (python3 -m triald run); `answers` asks the daemon (DaemonAnswers) or
    replays fixed values (ReplayAnswers), `writer` sends the lines that need no answer.
    `replay` makes a conflicting distribution an error here instead of the daemon's.

    number          the trial number (TRIALD_TRIAL; 0 when it is not set)
    dir             the trial's private folder for checkpoints and artifacts (TRIALD_TRIAL_DIR;
                    the current directory when it is not set)
    resume_dir      for a retry, the failed attempt's folder with its checkpoints
                    (TRIALD_RESUME_DIR); None for a first attempt, or when that folder is not on
                    this node
    datetime_start  when the trial object was created (local time, as Optuna)
    params, distributions, user_attrs   copies, as Optuna's properties return
    system_attrs    for a retry (TRIALD_RETRY_HISTORY), {"failed_trial": the configuration's
                    first attempt, "retry_history": every earlier attempt, oldest first}, as
                    Optuna's RetryFailedTrialCallback sets them, so its retried_trial_number()
                    and retry_history() (and triald.RetryFailedTrialCallback's) read them; {}
                    for a first attempt
    stop_requested  True once triald has asked the trial to stop (SIGTERM)
    """

    def __init__(self, writer: LineWriter, answers: Union[DaemonAnswers, ReplayAnswers], *,
                 number: int = 0, replay: bool = False, trial_dir: Optional[str] = None,
                 resume_dir: Optional[str] = None,
                 retry_history: Optional[Sequence[int]] = None,
                 study: Optional[Callable[[], Any]] = None) -> None:
        self._writer = writer
        self._study_factory = study
        self._study_view: Any = None
        self._relative_params: Optional[Dict[str, Any]] = None
        self._system_attrs: Dict[str, Any] = {}
        if retry_history:
            self._system_attrs = {"failed_trial": int(retry_history[0]),
                                  "retry_history": [int(n) for n in retry_history]}
        self._answers = answers
        self._replay = replay
        self._number = number
        self._dir = trial_dir or os.getcwd()
        self._resume_dir = resume_dir or None
        self._datetime_start = datetime.datetime.now()
        self._params: Dict[str, Any] = {}
        self._distributions: Dict[str, Distribution] = {}
        self._user_attrs: Dict[str, Any] = {}
        self._intermediate_values: Dict[int, float] = {}
        self._requests = 0
        self._constraints: Optional[List[float]] = None
        self.stop_requested = False

    # -- suggestions ----------------------------------------------------------------------------

    def suggest_float(self, name: str, low: float, high: float, *, step: Optional[float] = None,
                      log: bool = False) -> float:
        """A float in [low, high] (log domain if log; on the grid low + k * step if step)."""
        value: float = self._suggest(name, FloatDistribution(low, high, log=log, step=step))
        return value

    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        """Deprecated in Optuna 3.0: suggest_float(name, low, high)."""
        warnings.warn(_DEPRECATED_SUGGEST.format(name="suggest_uniform"), FutureWarning,
                      stacklevel=2)
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        """Deprecated in Optuna 3.0: suggest_float(name, low, high, log=True)."""
        warnings.warn(_DEPRECATED_SUGGEST.format(name="suggest_loguniform"), FutureWarning,
                      stacklevel=2)
        return self.suggest_float(name, low, high, log=True)

    def suggest_discrete_uniform(self, name: str, low: float, high: float, q: float) -> float:
        """Deprecated in Optuna 3.0: suggest_float(name, low, high, step=q)."""
        warnings.warn(_DEPRECATED_SUGGEST.format(name="suggest_discrete_uniform"), FutureWarning,
                      stacklevel=2)
        return self.suggest_float(name, low, high, step=q)

    def suggest_int(self, name: str, low: int, high: int, step: int = 1,
                    log: bool = False) -> int:
        """An int in [low, high] on the grid low + k * step (log domain if log). As in Optuna
        3.1, step and log may also be given by position."""
        return int(self._suggest(name, IntDistribution(low, high, log=log, step=step)))

    def suggest_categorical(self, name: str, choices: Sequence[ChoiceType]) -> ChoiceType:
        """One of `choices` (the object itself, as given)."""
        choice: ChoiceType = self._suggest(name, CategoricalDistribution(choices))
        return choice

    def _suggest(self, name: str, distribution: Distribution) -> Any:
        self.check_stop()
        if not isinstance(name, str) or not name:
            raise ValueError(f"a parameter name must be a non-empty string, got {name!r}")
        known = self._distributions.get(name)
        if known is not None:
            if known == distribution:
                return self._params[name]  # Optuna: the same name and distribution, same value
            if self._replay:
                raise ValueError(f"parameter {name!r} was suggested with {known!r} and now with "
                                 f"{distribution!r}; a trial's parameter keeps one distribution")
            # A real run asks anyway: the daemon ends the trial FAIL(protocol), naming both.
        elif len(self._distributions) >= MAX_PARAMS:
            raise ValueError(f"a trial may suggest at most {MAX_PARAMS} distinct parameters; "
                             f"{name!r} would be one more")
        answer = self._ask({"type": "suggest", "name": name,
                            "distribution": distribution.to_wire()})
        if answer.get("type") != "suggestion" or answer.get("name") != name \
                or "value" not in answer:
            raise ChannelError(f"triald answered a suggest for {name!r} with {answer!r}")
        value: Any = distribution.value(answer["value"])
        if not distribution.contains(value):
            warnings.warn(f"The value {value} of the parameter '{name}' is out of the range of "
                          f"the distribution {distribution}.")
        if known is None:
            self._params[name] = value
            self._distributions[name] = distribution
        return value

    # -- intermediate values and pruning --------------------------------------------------------

    def report(self, value: float, step: int) -> None:
        """An intermediate value at `step` (Optuna's order: value first). A step already reported
        is ignored with a warning, as in Optuna. Raises TrialStopped once triald asked the trial
        to stop."""
        self.check_stop()
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"The `value` argument is of type '{type(value).__name__}' but "
                            "supposed to be a float.") from None
        try:
            step = operator.index(step)
        except TypeError:
            raise ValueError(f"step must be an integer, got {step!r}") from None
        if step < 0:
            raise ValueError(f"The `step` argument is {step} but cannot be negative.")
        if step in self._intermediate_values:
            warnings.warn(f"The reported value is ignored because this `step` {step} is already "
                          "reported.")
            return
        self._writer.send({"type": "report", "step": step, "value": finite(number, "value")})
        self._intermediate_values[step] = number

    def should_prune(self) -> bool:
        """Whether triald's pruner has decided to stop this trial, judged on the values reported
        so far (always False when replayed by hand). Raise TrialPruned when it is True."""
        self.check_stop()
        answer = self._ask({"type": "should_prune"})
        if answer.get("type") != "should_prune" or not isinstance(answer.get("value"), bool):
            raise ChannelError(f"triald answered should_prune with {answer!r}")
        prune: bool = answer["value"]
        return prune

    @property
    def relative_params(self) -> Dict[str, Any]:
        """The parameters the study's sampler drew jointly for this trial (Optuna's
        trial.relative_params: its relative sample over the search space it inferred from the
        finished trials), asked of the daemon once; suggest_* of those names return these
        values. Empty when the sampler has none (random, TPE's start-up trials, a replay)."""
        if self._relative_params is None:
            self.check_stop()
            answer = self._ask({"type": "relative_params"})
            params = answer.get("params")
            if answer.get("type") != "relative_params" or not isinstance(params, dict):
                raise ChannelError(f"triald answered relative_params with {answer!r}")
            self._relative_params = params
        return copy.deepcopy(self._relative_params)

    # -- attributes -----------------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Says the trial is alive (triald's own; Optuna has none): under [study] stall_timeout a
        trial that sends no line for that long ends FAIL(stalled), so an objective with long
        silent phases calls this from its loop."""
        self._writer.send({"type": "heartbeat"})

    def set_user_attr(self, key: str, value: Any) -> None:
        """A user attribute (a JSON value), stored with the trial."""
        check_attr_key(key)
        self._writer.send({"type": "attr", "key": key, "value": plain(value, f"attribute {key!r}")})
        self._user_attrs[key] = copy.deepcopy(value)

    @property
    def user_attrs(self) -> Dict[str, Any]:
        return copy.deepcopy(self._user_attrs)

    # -- constraints (triald's own; Optuna takes them from a sampler's constraints_func) --------

    def set_constraints(self, values: Sequence[float]) -> None:
        """The trial's constraint values (a sequence of numbers; the trial is feasible when every
        one is <= 0, as Optuna defines it). Sent just before the trial's final (or pruned) line;
        a later call replaces an earlier one. Refused with a ValueError here: NaN, infinities,
        non-numbers."""
        self._constraints = constraint_values(values, "set_constraints()")

    @property
    def constraints(self) -> Optional[List[float]]:
        """What set_constraints() was given (a list of floats), or None."""
        return None if self._constraints is None else list(self._constraints)

    def frozen(self, values: Optional[Sequence[float]]) -> FrozenTrial:
        """A read-only view of this trial once its objective has returned `values` (a list of
        floats, or None for a pruned trial): what a constraints function receives."""
        return FrozenTrial(number=self._number, params=self._params,
                           distributions=self._distributions, user_attrs=self._user_attrs,
                           intermediate_values=self._intermediate_values, values=values,
                           datetime_start=self._datetime_start,
                           system_attrs=self._system_attrs)

    @property
    def params(self) -> Dict[str, Any]:
        return copy.deepcopy(self._params)

    @property
    def distributions(self) -> Dict[str, Distribution]:
        return copy.deepcopy(self._distributions)

    @property
    def number(self) -> int:
        return self._number

    @property
    def system_attrs(self) -> Dict[str, Any]:
        return copy.deepcopy(self._system_attrs)

    @property
    def dir(self) -> str:
        return self._dir

    @property
    def resume_dir(self) -> Optional[str]:
        return self._resume_dir

    @property
    def datetime_start(self) -> datetime.datetime:
        return self._datetime_start

    @property
    def study(self) -> Any:
        """The trial's study, read-only (triald.client.TrialStudy: study_name, direction(s),
        user_attrs, trials, best_trial, best_value, best_params, ...), read from the daemon
        that runs the trial (TRIALD_SOCKET) when first used. RuntimeError where there is none
        (a trial run by hand); triald.client.TrialdError where it cannot be reached (a Slurm
        trial on another host)."""
        if self._study_view is None:
            if self._study_factory is None:
                raise RuntimeError("trial.study needs the daemon that runs the trial (TRIALD_SOCKET "
                                   "and TRIALD_STUDY); this trial runs without one")
            self._study_view = self._study_factory()
        return self._study_view

    # -- stopping -------------------------------------------------------------------------------

    def check_stop(self) -> None:
        """Raises TrialStopped if triald has asked the trial to stop (suggest_*, report and
        should_prune call it)."""
        if self.stop_requested:
            raise TrialStopped("triald asked this trial to stop (SIGTERM)")

    def on_sigterm(self, signum: int, frame: Optional[FrameType]) -> None:
        self.stop_requested = True
        if getattr(self._answers, "reading", False):
            # A stopped trial gets no answer: leave the wait now rather than at SIGKILL.
            self.check_stop()

    def _ask(self, message: Message) -> Message:
        self._requests += 1
        if self._requests > MAX_REQUESTS:
            raise ValueError(f"a trial may make at most {MAX_REQUESTS} requests "
                             "(suggest and should_prune)")
        return self._answers.ask(message, self.check_stop)


class RetryFailedTrialCallback:
    """The two helpers of Optuna's RetryFailedTrialCallback that objectives call, for objectives
    run without Optuna installed (triald retries trials itself: [study] retries and retry_on).
    Optuna's own class works too: both read trial.system_attrs."""

    @staticmethod
    def retried_trial_number(trial: Any) -> Optional[int]:
        """The number of the configuration's first attempt when `trial` retries it, else
        None."""
        first = trial.system_attrs.get("failed_trial", None)
        return None if first is None else int(first)

    @staticmethod
    def retry_history(trial: Any) -> List[int]:
        """The numbers of the earlier attempts of `trial`'s configuration, oldest first; [] for
        a first attempt."""
        return list(trial.system_attrs.get("retry_history", []))


def retry_history_from_env(text: Optional[str]) -> List[int]:
    """TRIALD_RETRY_HISTORY ("3,5": the attempts a retry follows, oldest first) as numbers;
    [] when unset or not such a list."""
    if not text:
        return []
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        return []
