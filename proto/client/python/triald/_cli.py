"""python3 -m triald: the command line of the runner and the fork server.

    python3 -m triald run SPEC [--constraints SPEC] [--params JSON]
    python3 -m triald check SPEC [--constraints SPEC] [--preload MOD,MOD...] [--report]
    python3 -m triald fork-server [--preload MOD,MOD...] [--objective SPEC [--constraints SPEC]]
                                  [--fork-twice]

SPEC is PATH.py:NAME (a file, loaded under a module name other than __main__, so its
`if __name__ == "__main__":` block does not run; its folder goes first on sys.path, so sibling
modules import) or package.module:NAME (imported from the working directory or PYTHONPATH).
NAME may be dotted (Class.method). Loading it is triald._loading's.

`run` runs SPEC as one trial and `check` only verifies that it (and the --preload modules)
load (triald._runner);
`fork-server` is a study's warm process whose forks run `run` (triald._forkserver, which gets
main() to parse a trial's command line: it does not import this module).

Thread-safety: none; main() is the process's entry point.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from triald._runner import check, run


def main(argv: Sequence[str]) -> int:
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
    check_parser.add_argument("--preload", metavar="MOD,MOD...",
                              help="import these modules first (as the fork server would)")
    check_parser.add_argument(
        "--report", action="store_true",
        help="end with one JSON line on stdout (the interpreter, its version and what failed); "
             "the objective's own output goes to stderr")
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
    fork_server_parser.add_argument(
        "--fork-twice", action="store_true",
        help="fork each trial through a middle process instead of cloning it as the daemon's "
             "child (the C libraries' pthread_atfork handlers then run in it)")
    args = parser.parse_args(list(argv))
    if args.command == "fork-server":
        if args.constraints is not None and args.objective is None:
            parser.error("fork-server: --constraints needs --objective")
        from triald import _forkserver  # only the server needs it
        options = _forkserver.ServeOptions(preload=args.preload, objective=args.objective,
                                           constraints=args.constraints,
                                           fork_twice=args.fork_twice)
        return _forkserver.serve(options, main)
    if args.command == "check":
        preload = [m for m in (args.preload or "").split(",") if m]
        return check(args.spec, args.constraints, preload, args.report)
    return run(args.spec, args.params, args.constraints)
