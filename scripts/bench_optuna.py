#!/usr/bin/python3
"""Optuna baseline for triald's throughput benchmark.

Runs N no-op trials with Optuna itself: threads in one interpreter (n_jobs) and SQLite storage,
the setup triald replaces with a process per trial. Prints one JSON line:

    {"system":"optuna","trials":N,"seconds":S,"trials_per_s":R}

Only study creation and optimize() are timed, so interpreter start-up and imports do not count
against Optuna. DIR/optuna.db is recreated on every run, so runs are comparable.

Uses Debian's python3-optuna (3.1), hence /usr/bin/python3 rather than whatever python3 is first
on PATH.
"""

import argparse
import json
import logging
import os
import sys
import time
import warnings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, required=True, help="number of trials (N)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel jobs (threads); default 2")
    parser.add_argument("--storage-dir", required=True,
                        help="folder for optuna.db (created if missing; the db is replaced)")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be >= 1")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")

    try:
        import optuna
    except ImportError:
        print("bench_optuna: optuna is not installed (apt-get install python3-optuna)",
              file=sys.stderr)
        return 1

    # Optuna logs one INFO line per trial and warns about experimental features; neither
    # belongs in a benchmark's output, and logging each trial would slow the baseline down.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.logging.disable_default_handler()
    logging.getLogger("sqlalchemy").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    os.makedirs(args.storage_dir, exist_ok=True)
    db_path = os.path.join(os.path.abspath(args.storage_dir), "optuna.db")
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(db_path + suffix)
        except FileNotFoundError:
            pass

    def objective(trial):
        x = trial.suggest_float("x", -10.0, 10.0)
        return x * x

    start = time.perf_counter()
    study = optuna.create_study(storage=f"sqlite:///{db_path}", study_name="bench",
                                direction="minimize")
    study.optimize(objective, n_trials=args.trials, n_jobs=args.jobs)
    seconds = time.perf_counter() - start

    completed = len(study.get_trials(deepcopy=False,
                                     states=(optuna.trial.TrialState.COMPLETE,)))
    if completed != args.trials:
        print(f"bench_optuna: only {completed} of {args.trials} trials completed",
              file=sys.stderr)
        return 1
    print(json.dumps({
        "system": "optuna",
        "trials": args.trials,
        "seconds": round(seconds, 6),
        "trials_per_s": round(args.trials / seconds, 3),
    }, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
