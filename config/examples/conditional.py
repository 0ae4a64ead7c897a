"""A conditional search space, written as an Optuna objective function.

The optimizer's own parameters exist only for that optimizer (momentum for sgd, beta1 for adam),
and the number of layers decides which layer widths exist. triald runs it unchanged, one fresh
process per trial (`[objective] kind = "python"` in conditional.toml); Optuna is not needed:
`trial` is the triald runner's Optuna-compatible Trial. Standard library only.
"""

import math


def objective(trial):
    optimizer = trial.suggest_categorical("optimizer", ["adam", "sgd"])
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    if optimizer == "sgd":
        momentum = trial.suggest_float("momentum", 0.0, 0.99)
        loss = (math.log10(lr) + 1.5) ** 2 + (momentum - 0.9) ** 2
    else:
        beta1 = trial.suggest_float("beta1", 0.8, 0.999)
        loss = (math.log10(lr) + 3.0) ** 2 + (beta1 - 0.9) ** 2 + 0.05
    n_layers = trial.suggest_int("n_layers", 1, 3)
    for i in range(n_layers):
        width = trial.suggest_int(f"width_{i}", 16, 256, log=True)
        loss += 0.01 * (math.log2(width) - 6.0) ** 2
    # A made-up learning curve that ends at the loss, so a pruner has something to judge.
    for step in range(3):
        trial.report(loss + 0.1 * (3 - step), step)
        if trial.should_prune():
            import triald

            raise triald.TrialPruned()
    return loss


if __name__ == "__main__":
    print("run me with triald: trialctl submit conditional.toml")
