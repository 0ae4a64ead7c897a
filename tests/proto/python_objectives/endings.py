"""Objectives ending each way a trial can end (tests/proto/python_runner_test.py)."""

import math
import time

import triald


def returns_float(trial):
    return 0.25 + trial.suggest_int("k", 0, 3)


def returns_int(trial):
    return 3


def returns_none(trial):
    trial.suggest_float("x", 0.0, 1.0)


def returns_nan(trial):
    return math.nan


def returns_str(trial):
    return "abc"


def raises(trial):
    def inner():
        raise RuntimeError("the data loader broke")
    inner()


def raises_pruned(trial):
    trial.report(0.5, 0)
    raise triald.TrialPruned()


def raises_optuna_pruned(trial):
    import optuna  # python3-optuna, as in a user's own environment
    trial.report(0.5, 0)
    raise optuna.TrialPruned()


def reports_until_stopped(trial):
    # A step every 10 ms for up to 30 s: the stop arrives long before the loop could end.
    for step in range(3000):
        trial.report(float(step), step)
        time.sleep(0.01)
    return 0.0


def asks_until_stopped(trial):
    trial.report(1.0, 0)
    while not trial.should_prune():
        pass
    return 0.0


def same_module(trial):
    import sys
    return 1.0 if sys.modules["triald"] is triald and type(trial).__module__.startswith(
        "triald.") else 0.0
