"""Two objectives and a constraint, written as an Optuna objective function.

A made-up model whose depth and width trade error against latency: the error falls with size and
with a well-chosen learning rate, the latency grows with size. Each trial also records the memory
its model would need (a user attribute); fits_in_memory, named by `[objective] constraints` in
two_objectives.toml, makes a trial feasible only when that memory is at most 1 GB, as Optuna's
constraints_func would. triald runs it unchanged (`[objective] kind = "python"`); with Optuna
installed, `python3 two_objectives.py` runs the same study under Optuna. Standard library only.
"""

import math


def objective(trial):
    layers = trial.suggest_int("layers", 1, 8)
    width = trial.suggest_int("width", 16, 1024, log=True)
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    params = layers * width * width
    error = 1.0 / math.sqrt(1.0 + params / 1e4) + 0.05 * (math.log10(lr) + 2.5) ** 2
    latency_ms = 0.5 + layers * width / 64.0
    # Parameters, gradients and two AdamW moments in float32.
    trial.set_user_attr("memory_gb", params * 4 * 4 * 40 / 1e9)
    return error, latency_ms


def fits_in_memory(frozen_trial):
    """Feasible (<= 0) when the model fits in 1 GB."""
    return [frozen_trial.user_attrs["memory_gb"] - 1.0]


if __name__ == "__main__":
    import optuna

    sampler = optuna.samplers.NSGAIISampler(seed=1, constraints_func=fits_in_memory)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(objective, n_trials=60)
    for trial in study.best_trials:
        print(trial.number, trial.values, trial.params)
