"""python3 -m triald: runs a define-by-run objective as one triald trial, or checks it loads.

    python3 -m triald run SPEC [--params JSON]
    python3 -m triald check SPEC

SPEC is PATH.py:NAME (a file, loaded under a module name other than __main__, so its
`if __name__ == "__main__":` block does not run; its folder goes first on sys.path, so sibling
modules import) or package.module:NAME (imported from the working directory or PYTHONPATH).
NAME may be dotted (Class.method).

`run` calls NAME(trial) with an OptunaTrial and ends the trial from what happens:
    returns a number            -> {"type":"final","value":V}, exit 0
    raises TrialPruned (triald's or optuna's)  -> {"type":"pruned"}, exit 0
    returns None, NaN, inf or a non-number     -> an error line (Optuna's message), exit 1
    raises anything else        -> an error line with the traceback's last lines, exit 1
    stopped by triald (SIGTERM) -> exit 143, quietly, at the next suggest/report/should_prune
A SPEC that cannot be used (no such file or module, no such attribute, not callable) exits 2.
With --params (a JSON object) the trial is replayed by hand: no daemon, suggests answered from
the object, should_prune always false, and the lines a real run would send printed on stdout.

`check` only loads SPEC and verifies NAME is callable: exit 0 silently, or 2 with the message
(the daemon runs it when a sweep is submitted).
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
from triald._wire import (DaemonAnswers, LineWriter, TrialStopped, handle_sigterm, open_report_fd,
                          shortened_error)

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

    def __init__(self, spec, cause):
        super().__init__(f"objective {spec!r}: importing it raised:\n{traceback_tail(cause)}")
        self.cause = cause


def _split_spec(spec):
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise SpecError(f"objective {spec!r}: expected PATH.py:NAME or package.module:NAME")
    if not all(part.isidentifier() for part in name.split(".")):
        raise SpecError(f"objective {spec!r}: {name!r} is not a Python name")
    return target, name


def _is_file_target(target):
    return target.endswith(".py") or "/" in target


def _load_file(spec, target):
    path = os.path.abspath(target)
    if not os.path.isfile(path):
        where = "" if os.path.isabs(target) else f" (relative to {os.getcwd()})"
        raise SpecError(f"objective {spec!r}: no such file {path}{where}")
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = stem if stem.isidentifier() and stem not in sys.modules else \
        FALLBACK_MODULE_NAME
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"objective {spec!r}: {path} cannot be loaded as a Python module")
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
        raise _ImportFailed(spec, e) from None
    return module, os.path.basename(path)


def _load_module(spec, target):
    if not all(part.isidentifier() for part in target.split(".")):
        raise SpecError(f"objective {spec!r}: {target!r} is neither a file (PATH.py) nor a "
                        f"module name (package.module)")
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as e:
        # Only the spec's own module (or a package above it) missing is a spec error; a module
        # the objective itself imports is the objective's failure.
        if e.name is not None and (target == e.name or target.startswith(e.name + ".")):
            raise SpecError(f"objective {spec!r}: no module named {e.name!r} (looked in "
                            f"{os.getcwd()} and PYTHONPATH)") from None
        raise _ImportFailed(spec, e) from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:
        raise _ImportFailed(spec, e) from None
    return module, f"module {target!r}"


def load_objective(spec):
    """The callable SPEC names. Raises SpecError (unusable spec) or _ImportFailed (the module
    raised while it was imported)."""
    target, name = _split_spec(spec)
    # The objective sees itself as the program, without the runner's arguments (argparse at
    # import time must not read them).
    sys.argv = [target]
    if _is_file_target(target):
        module, what = _load_file(spec, target)
    else:
        module, what = _load_module(spec, target)
    obj = module
    for depth, part in enumerate(name.split(".")):
        if not hasattr(obj, part):
            owner = what if depth == 0 else repr(".".join(name.split(".")[:depth]))
            message = f"objective {spec!r}: {owner} has no attribute {part!r}"
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not
                                                     n.startswith("_")], n=1)
            if close:
                message += f" (did you mean {close[0]!r}?)"
            raise SpecError(message)
        obj = getattr(obj, part)
    if not callable(obj):
        raise SpecError(f"objective {spec!r}: {name!r} is not callable (it is a "
                        f"{type(obj).__name__})")
    return obj


def _final_line(result):
    """The line that ends a trial whose objective returned `result`: final, or an error with
    Optuna 3.1's message (optuna/study/_tell.py) for a value it would not accept."""

    def refused(value):
        if isinstance(value, (str, bytes)):
            return f"The value {value!r} could not be cast to float."
        try:
            number = float(value)
        except (TypeError, ValueError):
            return f"The value {value!r} could not be cast to float."
        if math.isnan(number):
            return f"The value {value} is not acceptable."
        if math.isinf(number):
            # Optuna stores inf; triald's records hold finite numbers only.
            return f"The value {value} is not acceptable (triald records finite values only)."
        return None

    if result is None:
        return {"type": "error", "message": "The value None could not be cast to float."}
    if isinstance(result, collections.abc.Sequence) and not isinstance(result, (str, bytes)):
        if not result:
            return {"type": "error", "message": "The number of the values 0 did not match the "
                                                "number of the objectives 1."}
        for value in result:
            message = refused(value)
            if message is not None:
                return {"type": "error", "message": message}
        return {"type": "final", "values": [float(v) for v in result]}
    message = refused(result)
    if message is not None:
        return {"type": "error", "message": message}
    return {"type": "final", "value": float(result)}


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


def run(spec, params_json=None):
    """`python3 -m triald run`: the exit status."""
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
        objective = load_objective(spec)
    except SpecError as e:
        _error(writer, str(e))
        return EXIT_BAD_SPEC
    except _ImportFailed as e:
        traceback.print_exception(type(e.cause), e.cause, e.cause.__traceback__)
        _send_quietly(writer, shortened_error(traceback_tail(e.cause)))
        return EXIT_FAILED

    number = os.environ.get("TRIALD_TRIAL")
    trial = OptunaTrial(writer, answers, number=int(number) if number else 0,
                        replay=params_json is not None)
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
            _send_quietly(writer, {"type": "pruned"})
            sys.stdout.flush()
            return EXIT_OK
        if trial.stop_requested:
            _stopped()  # whatever the objective raised while being stopped
        traceback.print_exception(type(e), e, e.__traceback__)
        _send_quietly(writer, shortened_error(traceback_tail(e)))
        return EXIT_FAILED

    line = _final_line(result)
    if line["type"] == "error":
        print(f"triald: the trial failed: {line['message']}", file=sys.stderr)
    _send_quietly(writer, line)
    sys.stdout.flush()
    return EXIT_OK if line["type"] == "final" else EXIT_FAILED


def check(spec):
    """`python3 -m triald check`: the exit status."""
    try:
        load_objective(spec)
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
        "--params", metavar="JSON",
        help="replay by hand: a JSON object of parameter values; prints the lines a real run "
             "would send")
    check_parser = commands.add_parser(
        "check", help="only verify that SPEC loads and names a callable (exit 0, or 2)")
    check_parser.add_argument("spec", metavar="SPEC", help="PATH.py:NAME or package.module:NAME")
    args = parser.parse_args(argv)
    if args.command == "check":
        return check(args.spec)
    return run(args.spec, args.params)
