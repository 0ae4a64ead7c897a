"""Objectives with several values and with constraints (tests/proto/python_runner_test.py)."""

import math

import triald

# How many times this module's top level ran (an objective and its constraints function in one
# file share one module).
LOADS = globals().get("LOADS", 0) + 1


def two_values(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("memory", 812.0)
    return x * x, (x - 2) ** 2


def two_values_list(trial):
    return [0.5, 3]


def one_value_in_a_list(trial):
    return [0.25]


def three_values(trial):
    return 1.0, 2.0, 3.0


def scalar(trial):
    return 1.5


def none_inside(trial):
    return 1.0, None


def nan_inside(trial):
    return math.nan, 1.0


def str_inside(trial):
    return 1.0, "abc"


def with_set_constraints(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_constraints([x - 0.5])
    trial.set_constraints([x - 0.25, -1])  # the last call counts
    return x, 1 - x


def set_constraints_then_pruned(trial):
    trial.set_constraints([2.0])
    trial.report(0.5, 0)
    raise triald.TrialPruned()


def reports_then_pruned(trial):
    trial.suggest_float("x", 0.0, 1.0)
    trial.report(0.75, 3)
    raise triald.TrialPruned()


def raises(trial):
    raise RuntimeError("the objective broke")


def bad_set_constraints(trial):
    trial.set_constraints([math.nan])
    return 1.0


def single_with_memory(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    trial.set_user_attr("memory_gb", 9.5)
    return x


# -- constraints functions ----------------------------------------------------------------------


def memory_constraint(frozen):
    """Feasible when the trial fits in 8 GB: what Optuna's constraints_func examples do."""
    return [frozen.user_attrs["memory_gb"] - 8.0]


def seen_constraint(frozen):
    """Encodes what the frozen trial showed: number, x, values, value (or the error reading it),
    last_step, and how many times this module was loaded."""
    try:
        value = frozen.value
    except RuntimeError as e:
        value = str(e)
    print("SEEN " + repr((frozen.number, frozen.params, frozen.values, value,
                          frozen.user_attrs, sorted(frozen.distributions), frozen.last_step,
                          LOADS)), flush=True)
    return (-1.0, 0.5)


def empty_constraints(frozen):
    return []


def constraints_scalar(frozen):
    return 0.5


def constraints_nan(frozen):
    return [math.nan]


def constraints_inf(frozen):
    return [0.0, math.inf]


def constraints_str(frozen):
    return [1.0, "x"]


def constraints_raise(frozen):
    raise KeyError("memory_gb")


NOT_CALLABLE = 3


def retries(trial):
    """What a checkpointing objective asks of a retry: triald's helpers and Optuna's."""
    trial.set_user_attr("first", triald.RetryFailedTrialCallback.retried_trial_number(trial))
    trial.set_user_attr("history", triald.RetryFailedTrialCallback.retry_history(trial))
    return 1.0


def folders(trial):
    """Sends the trial's folders as attributes: where it writes, and where a retry resumes from."""
    trial.set_user_attr("dir", trial.dir)
    trial.set_user_attr("resume_dir", trial.resume_dir)
    return 0.0
