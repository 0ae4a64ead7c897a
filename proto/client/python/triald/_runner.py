"""python3 -m triald: runs a define-by-run objective as one triald trial, or checks it loads.

    python3 -m triald run SPEC [--constraints SPEC] [--params JSON]
    python3 -m triald check SPEC [--constraints SPEC]
    python3 -m triald fork-server [--preload MOD,MOD...] [--objective SPEC [--constraints SPEC]]

SPEC is PATH.py:NAME (a file, loaded under a module name other than __main__, so its
`if __name__ == "__main__":` block does not run; its folder goes first on sys.path, so sibling
modules import) or package.module:NAME (imported from the working directory or PYTHONPATH).
NAME may be dotted (Class.method).

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

`check` only loads SPEC and verifies NAME is callable: exit 0 silently, or 2 with the message
(the daemon runs it when a sweep is submitted).

`fork-server` is a study's warm process whose forks run `run` (triald._forkserver).
"""

import argparse
import collections.abc
import difflib
import importlib
import importlib.util
import json
import math
import os
import signal
import sys
import traceback

from triald._optuna import OptunaTrial, ReplayAnswers, is_trial_pruned
from triald._wire import (DaemonAnswers, LineWriter, TrialStopped, constraint_values,
                          handle_sigterm, open_report_fd, shortened_error)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_SPEC = 2
EXIT_STOPPED = 128 + signal.SIGTERM

# An error line carries the end of a traceback: what raised, and where.
TRACEBACK_TAIL_LINES = 12
TRACEBACK_TAIL_CHARS = 4000

# The module name a file objective gets when its own stem cannot be used (not an identifier, or
# already imported: a file named triald.py or json.py must not replace those modules).
FALLBACK_MODULE_NAME = "_triald_objective"


class SpecError(Exception):
    """SPEC cannot be used; the message says why, naming the spec."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def traceback_tail(exc):
    """The last lines of exc's traceback (its type and message last), bounded for an error line.

    The runner's and the trial object's own frames are left out (the user's code is what the
    line is for), and so are the column markers (^^^) under each source line.
    """
    report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    frames = [f for f in report.stack if not f.filename.startswith(_PACKAGE_DIR + os.sep)]
    report.stack = traceback.StackSummary.from_list(frames)
    lines = [line for line in "".join(report.format()).splitlines()
             if line.strip(" ^~")]
    text = "\n".join(lines[-TRACEBACK_TAIL_LINES:])
    if len(lines) > TRACEBACK_TAIL_LINES or len(text) > TRACEBACK_TAIL_CHARS:
        text = "[...]\n" + text[-TRACEBACK_TAIL_CHARS:]
    return text


class _ImportFailed(Exception):
    """The objective's own code raised while its module was imported (not a spec problem for
    `run`: the trial fails with the traceback; `check` refuses it)."""

    def __init__(self, spec, cause, role="objective"):
        super().__init__(f"{role} {spec!r}: importing it raised:\n{traceback_tail(cause)}")
        self.cause = cause


def _split_spec(spec, role="objective"):
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise SpecError(f"{role} {spec!r}: expected PATH.py:NAME or package.module:NAME")
    if not all(part.isidentifier() for part in name.split(".")):
        raise SpecError(f"{role} {spec!r}: {name!r} is not a Python name")
    return target, name


# Files already loaded, by absolute path: an objective and its constraints function in one file
# share one module (its top level runs once).
_LOADED_FILES = {}


def _is_file_target(target):
    return target.endswith(".py") or "/" in target


def _load_file(spec, target, role="objective"):
    path = os.path.abspath(target)
    if path in _LOADED_FILES:
        return _LOADED_FILES[path], os.path.basename(path)
    if not os.path.isfile(path):
        where = "" if os.path.isabs(target) else f" (relative to {os.getcwd()})"
        raise SpecError(f"{role} {spec!r}: no such file {path}{where}")
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = stem if stem.isidentifier() and stem not in sys.modules else \
        FALLBACK_MODULE_NAME
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"{role} {spec!r}: {path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    # Registered before it runs, as an import does: pickling (multiprocessing, joblib) and
    # dataclasses look the module up by name.
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[module_name]
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise _ImportFailed(spec, e, role) from None
    _LOADED_FILES[path] = module
    return module, os.path.basename(path)


def _load_module(spec, target, role="objective"):
    if not all(part.isidentifier() for part in target.split(".")):
        raise SpecError(f"{role} {spec!r}: {target!r} is neither a file (PATH.py) nor a "
                        f"module name (package.module)")
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as e:
        # Only the spec's own module (or a package above it) missing is a spec error; a module
        # the objective itself imports is the objective's failure.
        if e.name is not None and (target == e.name or target.startswith(e.name + ".")):
            raise SpecError(f"{role} {spec!r}: no module named {e.name!r} (looked in "
                            f"{os.getcwd()} and PYTHONPATH)") from None
        raise _ImportFailed(spec, e, role) from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:
        raise _ImportFailed(spec, e, role) from None
    return module, f"module {target!r}"


def load_objective(spec, role="objective"):
    """The callable SPEC names. Raises SpecError (unusable spec) or _ImportFailed (the module
    raised while it was imported). `role` names the spec in messages ("objective" or
    "constraints")."""
    target, name = _split_spec(spec, role)
    if role == "objective":
        # The objective sees itself as the program, without the runner's arguments (argparse
        # at import time must not read them).
        sys.argv = [target]
    if _is_file_target(target):
        module, what = _load_file(spec, target, role)
    else:
        module, what = _load_module(spec, target, role)
    obj = module
    for depth, part in enumerate(name.split(".")):
        if not hasattr(obj, part):
            owner = what if depth == 0 else repr(".".join(name.split(".")[:depth]))
            message = f"{role} {spec!r}: {owner} has no attribute {part!r}"
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not
                                                     n.startswith("_")], n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
            raise SpecError(message)
        obj = getattr(obj, part)
    if not callable(obj):
        raise SpecError(f"{role} {spec!r}: {name!r} is not callable (it is a "
                        f"{type(obj).__name__})")
    return obj


def preload_objective(spec, constraints_spec=None):
    """Imports the objective's module (and the constraints function's) ahead of `run`, as a
    fork server does once for all its trials: the module's top-level code runs here, and `run`
    in a forked trial then finds the module loaded (a file by its absolute path, a module in
    sys.modules) and does not import it again. Raises SpecError or _ImportFailed as
    load_objective does; changes nothing for a `run` in a fresh process."""
    load_objective(spec)
    if constraints_spec is not None:
        load_objective(constraints_spec, "constraints")


def _refused_value(value):
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


def _final_line(result, n_objectives=1):
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


def _send_quietly(writer, line):
    """Sends an ending line; a daemon that already closed the channel (it ended the trial) is
    not an error of its own."""
    try:
        writer.send(line)
    except OSError:
        pass


def _stopped():
    # Exit at once: threads a training library started must not delay the exit the daemon is
    # waiting for (as triald.run does).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_STOPPED)


def _error(writer, message):
    print(f"triald: {message}", file=sys.stderr)
    if writer is not None:
        _send_quietly(writer, shortened_error(message))


def _n_objectives(replay):
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


def _constraints_line(trial, constraints_fn, constraints_spec, values):
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


def run(spec, params_json=None, constraints_spec=None):
    """`python3 -m triald run`: the exit status."""
    replay = params_json is not None
    if replay:
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
    except _ImportFailed as e:
        traceback.print_exception(type(e.cause), e.cause, e.cause.__traceback__)
        _send_quietly(writer, shortened_error(traceback_tail(e.cause)))
        return EXIT_FAILED

    number = os.environ.get("TRIALD_TRIAL")
    trial = OptunaTrial(writer, answers, number=int(number) if number else 0, replay=replay,
                        trial_dir=os.environ.get("TRIALD_TRIAL_DIR"),
                        resume_dir=os.environ.get("TRIALD_RESUME_DIR"))
    handle_sigterm(trial.on_sigterm)

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


def check(spec, constraints_spec=None):
    """`python3 -m triald check`: the exit status."""
    try:
        load_objective(spec)
        if constraints_spec is not None:
            load_objective(constraints_spec, "constraints")
    except SpecError as e:
        _error(None, str(e))
        return EXIT_BAD_SPEC
    except _ImportFailed as e:
        _error(None, str(e))
        return EXIT_BAD_SPEC
    return EXIT_OK


def main(argv):
    parser = argparse.ArgumentParser(
        prog="python3 -m triald",
        description="Runs an Optuna-style objective function as one triald trial.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_parser = commands.add_parser(
        "run", help="call the objective with a trial answered by triald (or by --params)")
    run_parser.add_argument("spec", metavar="SPEC", help="PATH.py:NAME or package.module:NAME")
    run_parser.add_argument(
        "--constraints", metavar="SPEC",
        help="a constraints function (PATH.py:NAME or package.module:NAME), called with the "
             "finished trial; it returns the constraint values (feasible when all <= 0)")
    run_parser.add_argument(
        "--params", metavar="JSON",
        help="replay by hand: a JSON object of parameter values; prints the lines a real run "
             "would send")
    check_parser = commands.add_parser(
        "check", help="only verify that SPEC loads and names a callable (exit 0, or 2)")
    check_parser.add_argument("spec", metavar="SPEC", help="PATH.py:NAME or package.module:NAME")
    check_parser.add_argument("--constraints", metavar="SPEC",
                              help="also verify this constraints function")
    fork_server_parser = commands.add_parser(
        "fork-server", help="serve a study's trials as forks of one warm process (triald "
                            "starts it; proto/README.md, Fork server protocol)")
    fork_server_parser.add_argument(
        "--preload", metavar="MOD,MOD...",
        help="modules to import once, before any trial (e.g. torch,numpy)")
    fork_server_parser.add_argument(
        "--objective", metavar="SPEC",
        help="also import the objective's module once (its top-level code runs in the server)")
    fork_server_parser.add_argument(
        "--constraints", metavar="SPEC",
        help="the constraints function, imported with the objective (needs --objective)")
    args = parser.parse_args(argv)
    if args.command == "fork-server":
        if args.constraints is not None and args.objective is None:
            parser.error("fork-server: --constraints needs --objective")
        from triald import _forkserver  # only the server needs it
        return _forkserver.serve(args)
    if args.command == "check":
        return check(args.spec, args.constraints)
    return run(args.spec, args.params, args.constraints)
