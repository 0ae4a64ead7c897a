"""Loading a SPEC (PATH.py:NAME or package.module:NAME) into the callable it names.

Shared by the runner (`python3 -m triald run` and `check`, triald._runner) and the fork server
(triald._forkserver), which imports the objective's module once, before any trial: a file is
loaded under its own stem as module name (FALLBACK_MODULE_NAME when that cannot be used), never
as __main__, and is remembered by its absolute path, so that a later load_objective (a forked
trial's `run`, or the constraints function in the same file) finds it loaded instead of running
its top level again.

Failures are two exceptions: SpecError (the spec cannot be used: no such file, module or
attribute, not callable; `run` and `check` exit 2) and ImportFailed (the module's own code
raised while it was imported; `run` fails the trial with the traceback, `check` exits 2).

Thread-safety: none; the runner and the fork server load from their main thread.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from types import ModuleType
from typing import Callable, Dict, Optional, Tuple

# An error line carries the end of a traceback: what raised, and where.
TRACEBACK_TAIL_LINES = 12
TRACEBACK_TAIL_CHARS = 4000

# The module name a file objective gets when its own stem cannot be used (not an identifier, or
# already imported: a file named triald.py or json.py must not replace those modules).
FALLBACK_MODULE_NAME = "_triald_objective"


# The files of the functions loaded, by role ("objective", "constraints"): {"path", "sha256"} of
# the module's file as it was when first imported (the code the trial runs, also when a fork
# server imported it before the trial). Read by the runner (the trial's "triald.code"
# attribute) and by `check` (the files trialctl records at submit).
LOADED_CODE: Dict[str, Dict[str, str]] = {}
_FILE_HASHES: Dict[str, str] = {}


def _record_code(role: str, module: ModuleType) -> None:
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return
    path = os.path.abspath(path)
    if path not in _FILE_HASHES:
        try:
            with open(path, "rb") as f:
                _FILE_HASHES[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return
    LOADED_CODE[role] = {"path": path, "sha256": _FILE_HASHES[path]}


class SpecError(Exception):
    """SPEC cannot be used; the message says why, naming the spec."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def traceback_tail(exc: BaseException) -> str:
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


class ImportFailed(Exception):
    """The objective's own code raised while its module was imported (not a spec problem for
    `run`: the trial fails with the traceback; `check` refuses it). `cause` is what it raised."""

    def __init__(self, spec: str, cause: BaseException, role: str = "objective") -> None:
        super().__init__(f"{role} {spec!r}: importing it raised:\n{traceback_tail(cause)}")
        self.cause = cause


def _split_spec(spec: str, role: str = "objective") -> Tuple[str, str]:
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise SpecError(f"{role} {spec!r}: expected PATH.py:NAME or package.module:NAME")
    if not all(part.isidentifier() for part in name.split(".")):
        raise SpecError(f"{role} {spec!r}: {name!r} is not a Python name")
    return target, name


# Files already loaded, by absolute path: an objective and its constraints function in one file
# share one module (its top level runs once).
_LOADED_FILES: Dict[str, ModuleType] = {}


def _is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target


def _load_file(spec: str, target: str,
               role: str = "objective") -> Tuple[ModuleType, str]:
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
        raise ImportFailed(spec, e, role) from None
    _LOADED_FILES[path] = module
    return module, os.path.basename(path)


def _load_module(spec: str, target: str,
                 role: str = "objective") -> Tuple[ModuleType, str]:
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
        raise ImportFailed(spec, e, role) from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:
        raise ImportFailed(spec, e, role) from None
    return module, f"module {target!r}"


def load_objective(spec: str, role: str = "objective") -> Callable[..., object]:
    """The callable SPEC names. Raises SpecError (unusable spec) or ImportFailed (the module
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
    _record_code(role, module)
    obj: object = module
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


def preload_objective(spec: str, constraints_spec: Optional[str] = None) -> None:
    """Imports the objective's module (and the constraints function's) ahead of `run`, as a
    fork server does once for all its trials: the module's top-level code runs here, and `run`
    in a forked trial then finds the module loaded (a file by its absolute path, a module in
    sys.modules) and does not import it again. Raises SpecError or ImportFailed as
    load_objective does; changes nothing for a `run` in a fresh process."""
    load_objective(spec)
    if constraints_spec is not None:
        load_objective(constraints_spec, "constraints")

