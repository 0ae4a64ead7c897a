"""Objectives for the runner's tests (tests/proto/python_runner_test.py), written as a user
writes them for Optuna."""

import math
import os

import triald
import units  # a sibling module: the runner puts this file's folder first on sys.path

NOT_CALLABLE = 3


def objective(trial):
    """A conditional space: momentum exists only for sgd, and the layer widths that exist depend
    on the number of layers."""
    optimizer = trial.suggest_categorical("optimizer", ["adam", "sgd"])
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    if optimizer == "sgd":
        trial.suggest_float("momentum", 0.0, 0.99)
    layers = trial.suggest_int("layers", 1, 3)
    widths = [trial.suggest_int(f"width_{i}", 16, 128, step=16) for i in range(layers)]
    trial.set_user_attr("units", units.scale(sum(widths)))
    trial.set_user_attr("number", trial.number)
    trial.set_user_attr("params", trial.params)
    return math.log10(lr) + sum(widths) / 1000


def same_name(trial):
    """The same name and distribution twice: one request, the same value."""
    first = trial.suggest_float("x", -1.0, 1.0)
    second = trial.suggest_float("x", -1.0, 1.0)
    trial.set_user_attr("same", first == second)
    return first + second


def conflicting(trial):
    """The same name with another distribution: the daemon refuses it."""
    trial.suggest_float("x", -1.0, 1.0)
    trial.suggest_float("x", -1.0, 2.0)
    return 0.0


def pruned_when_told(trial):
    """Optuna's pruning idiom."""
    x = trial.suggest_float("x", 0.0, 1.0)
    for step in range(5):
        trial.report(x * step, step)
        if trial.should_prune():
            raise triald.TrialPruned(f"pruned at step {step}")
    return x


if __name__ == "__main__":
    # Must never run under the runner: leaves a mark the tests look for, and fails loudly.
    open(os.path.join(os.environ["MAIN_BLOCK_MARK_DIR"], "main-block-ran"), "w").close()
    raise SystemExit("the __main__ block ran")
