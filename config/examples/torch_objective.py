"""A PyTorch training loop written as an Optuna objective function, pruned as Optuna prunes.

This is the file an Optuna user already has: `def objective(trial)` asks for its own parameters
(trial.suggest_*), reports the validation loss after every epoch (trial.report) and gives up when
the pruner says so (trial.should_prune -> raise TrialPruned). triald runs it unchanged, each trial
in its own fresh process (`[objective] kind = "python"` in torch_objective.toml); Optuna itself
is not needed: without it the runner's own TrialPruned is raised.

The space is conditional: the optimizer's own parameters exist only for that optimizer (momentum
for sgd, beta2 for adam) and the number of hidden layers decides which layer widths exist. The
data are generated (a noisy smooth function of 8 inputs, fixed seed), so nothing is downloaded,
and a trial trains in about a second on one CPU thread.
"""

import math

import torch

try:
    from optuna import TrialPruned
except ImportError:  # no Optuna installed: the triald runner's TrialPruned ends the trial PRUNED
    from triald import TrialPruned

EPOCHS = 12


def make_data(n, generator):
    x = torch.rand(n, 8, generator=generator) * 2 - 1
    y = torch.sin(3 * x[:, 0]) * x[:, 1] + 0.5 * x[:, 2] ** 2 - x[:, 3] * x[:, 4] + 0.3 * x[:, 5]
    y = y + 0.05 * torch.randn(n, generator=generator)
    return x, y.unsqueeze(1)


def objective(trial):
    n_layers = trial.suggest_int("n_layers", 1, 3)
    widths = [trial.suggest_int(f"width_{i}", 8, 128, log=True) for i in range(n_layers)]
    optimizer_name = trial.suggest_categorical("optimizer", ["adam", "sgd"])
    lr = trial.suggest_float("lr", 1e-4, 3e-1, log=True)
    if optimizer_name == "sgd":
        momentum = trial.suggest_float("momentum", 0.0, 0.99)
    else:
        beta2 = trial.suggest_float("beta2", 0.9, 0.9999)

    # One thread per trial: triald runs trials side by side, one process each.
    torch.set_num_threads(1)
    data = torch.Generator().manual_seed(1234)  # the same data for every trial
    x_train, y_train = make_data(1024, data)
    x_val, y_val = make_data(512, data)

    torch.manual_seed(0)
    blocks, width = [], 8
    for w in widths:
        blocks += [torch.nn.Linear(width, w), torch.nn.GELU()]
        width = w
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, 1))
    if optimizer_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, beta2))
    trial.set_user_attr("n_weights", sum(p.numel() for p in model.parameters()))

    batches = torch.Generator().manual_seed(0)
    for epoch in range(EPOCHS):
        model.train()
        order = torch.randperm(len(x_train), generator=batches)
        for i in range(0, len(order), 128):
            idx = order[i:i + 128]
            loss = torch.nn.functional.mse_loss(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val_loss = torch.nn.functional.mse_loss(model(x_val), y_val).item()
        if not math.isfinite(val_loss):  # diverged: a finite, clearly bad value keeps the curve
            val_loss = 1e6
        trial.report(val_loss, epoch)
        if trial.should_prune():
            raise TrialPruned()
    return val_loss


if __name__ == "__main__":
    # With Optuna installed, the same file runs under Optuna as well.
    import optuna

    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=3))
    study.optimize(objective, n_trials=10)
    print(study.best_params, study.best_value)
