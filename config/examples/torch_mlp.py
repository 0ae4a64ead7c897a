#!/usr/bin/env python3
"""A PyTorch training script as a triald trial: a small MLP regressor, tuned and pruned.

The data are generated (a noisy smooth function of 8 inputs, fixed seed), so the example needs no
download. Each trial trains the network with its own hyperparameters, reports the validation loss
after every epoch (triald's median pruner stops trials whose curve is worse than the median of
earlier trials at the same epoch) and returns the best validation loss as the objective.

The triald-specific lines are the import, trial.param(...), trial.report(...) and triald.run(...):
everything else is an ordinary PyTorch script, and it still runs by hand (python3 torch_mlp.py
uses the defaults below and prints the protocol lines on stderr).
"""

import math
import os
import sys

try:
    import triald
except ImportError:  # running from a source checkout: the package lives in proto/client/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "proto", "client", "python"))
    import triald

import torch

EPOCHS = 20


def make_data(n, generator):
    x = torch.rand(n, 8, generator=generator) * 2 - 1
    y = torch.sin(3 * x[:, 0]) * x[:, 1] + 0.5 * x[:, 2] ** 2 - x[:, 3] * x[:, 4] + 0.3 * x[:, 5]
    y = y + 0.05 * torch.randn(n, generator=generator)
    return x, y.unsqueeze(1)


def objective(trial):
    lr = float(trial.param("lr", 3e-3))
    hidden = int(trial.param("hidden", 64))
    layers = int(trial.param("layers", 2))
    weight_decay = float(trial.param("weight_decay", 0.0))
    optimizer_name = trial.param("optimizer", "adam")
    seed = int(trial.param("seed", 0))

    # One thread per trial: triald runs trials side by side, one process each.
    torch.set_num_threads(1)
    data = torch.Generator().manual_seed(1234)  # the same data for every trial
    x_train, y_train = make_data(1024, data)
    x_val, y_val = make_data(512, data)

    torch.manual_seed(seed)
    blocks, width = [], 8
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, hidden), torch.nn.GELU()]
        width = hidden
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, 1))
    if optimizer_name == "adam":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    elif optimizer_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
    else:
        raise ValueError(f"unknown optimizer {optimizer_name!r}")
    trial.attr("parameters", sum(p.numel() for p in model.parameters()))

    best = math.inf
    batches = torch.Generator().manual_seed(seed)
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
            val = torch.nn.functional.mse_loss(model(x_val), y_val).item()
        if not math.isfinite(val):  # diverged: a finite, clearly bad value keeps the curve usable
            val = 1e6
        best = min(best, val)
        trial.report(epoch, val)  # raises triald.TrialStopped once the pruner stops the trial
    trial.attr("final_val_loss", val)
    return best


if __name__ == "__main__":
    triald.run(objective)
