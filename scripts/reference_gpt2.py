#!/usr/bin/python3
"""An independent GPT-2 forward pass in Python PyTorch (Debian's python3-torch 1.13), used to
cross-check trial-worker's C++ model: it reads the same Hugging Face folder (config.json and
model.safetensors, parsed here by hand) and prints the logits for the token ids it is given.

    reference_gpt2.py MODEL_DIR IDS_JSON OUT_F32
    reference_gpt2.py train MODEL_DIR RUN_JSONL OUT_JSON

The first form: IDS_JSON is a JSON array of token ids (one sequence); OUT_F32 receives the logits
[len(ids), vocab_size] as little-endian float32.

The second replays a training run: RUN_JSONL is what `trial-worker train ... --batches` printed
(each step's batch of token windows, the hyperparameters, the evaluation tokens). The same
steps are taken here with torch.optim.AdamW (decoupled weight decay on the 2-D parameters
only, as the worker documents), torch.nn.utils.clip_grad_norm_ and the documented learning-rate
schedule, and OUT_JSON receives {"lr": [...], "loss": [...], "eval_loss": x}: each step's
learning rate and training loss (before its update) and the evaluation loss after the last.

Written from the GPT-2 paper's definition, the published checkpoint layout and the worker's
documented training recipe, not from the C++ code it checks.
"""

import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F64": torch.float64}


def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(blob[base + begin:base + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        tensors[name.removeprefix("transformer.")] = t.to(torch.float32)
    return tensors


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, w, ids):
    """ids: [T] or [B, T] token ids; logits [T, V] or [B, T, V]."""
    if ids.dim() == 1:
        return forward(cfg, w, ids[None])[0]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    n_head = cfg["n_head"]
    b, t = ids.shape
    x = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(t)]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = torch.nn.functional.layer_norm(x, (x.shape[-1],), w[p + "ln_1.weight"],
                                           w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = qkv.split(x.shape[-1], dim=-1)
        hd = x.shape[-1] // n_head
        q, k, v = (z.view(b, t, n_head, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = torch.nn.functional.layer_norm(x, (x.shape[-1],), w[p + "ln_2.weight"],
                                           w[p + "ln_2.bias"], eps)
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (x.shape[-1],), w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T  # the head is tied to the token embedding


def parameters(cfg, w):
    """The trainable tensors: everything but the causal-mask buffers and a tied lm_head."""
    masks = {"h.{}.attn.{}".format(i, n) for i in range(cfg["n_layer"])
             for n in ("bias", "masked_bias")}
    return {name: t.clone().requires_grad_(True) for name, t in w.items()
            if name not in masks and name != "lm_head.weight"}


def learning_rate(step, max_steps, hp):
    """The rate of the update with 0-based index `step`: linear warmup from base/warmup to
    base over warmup_steps updates, then constant or a linear/cosine decay to 0 at max_steps."""
    base, warmup = hp["learning_rate"], hp["warmup_steps"]
    if step < warmup:
        return base * (step + 1) / warmup
    if hp["lr_schedule"] == "constant":
        return base
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    if hp["lr_schedule"] == "linear":
        return base * (1.0 - progress)
    return base * 0.5 * (1.0 + math.cos(math.pi * progress))


def window_loss(cfg, w, windows, reduction):
    logits = forward(cfg, w, windows[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             windows[:, 1:].reshape(-1), reduction=reduction)


def evaluate(cfg, w, tokens, seq_len, batch_size):
    """Mean next-token loss over consecutive windows of seq_len + 1 tokens overlapping by one,
    batch_size at a time, plus the shorter tail window."""
    n = len(tokens)
    starts = list(range(0, n - seq_len, seq_len))
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(starts), batch_size):
            rows = [tokens[s:s + seq_len + 1] for s in starts[i:i + batch_size]]
            total += window_loss(cfg, w, torch.tensor(rows), "sum").item()
            count += len(rows) * seq_len
        tail = starts[-1] + seq_len if starts else 0
        if n - tail >= 2:
            total += window_loss(cfg, w, torch.tensor([tokens[tail:]]), "sum").item()
            count += n - tail - 1
    return total / count


def train(model_dir, run_path, out_path):
    with open(model_dir + "/config.json") as f:
        cfg = json.load(f)
    with open(run_path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    steps = [line for line in lines if line["type"] == "step"]
    summary = lines[-1]
    hp, seq_len, max_steps = summary["hyperparams"], summary["seq_len"], summary["steps"]
    if hp["dropout"] != 0:
        sys.exit("reference_gpt2.py: dropout must be 0 to replay a run (its masks are random)")
    w = parameters(cfg, load_safetensors(model_dir + "/model.safetensors"))
    decay = [t for t in w.values() if t.dim() >= 2]
    no_decay = [t for t in w.values() if t.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=hp["learning_rate"], betas=(hp["adam_beta1"], hp["adam_beta2"]), eps=1e-8)
    lrs, losses = [], []
    for index, step in enumerate(steps):
        lr = learning_rate(index, max_steps, hp)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        loss = window_loss(cfg, w, torch.tensor(step["windows"]), "mean")
        loss.backward()
        if hp["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(w.values()), hp["grad_clip"])
        optimizer.step()
        lrs.append(lr)
        losses.append(loss.item())
    eval_loss = evaluate(cfg, w, summary["eval_tokens"], seq_len, hp["batch_size"])
    with open(out_path, "w") as f:
        json.dump({"lr": lrs, "loss": losses, "eval_loss": eval_loss}, f)
    return 0


def main():
    if sys.argv[1] == "train":
        return train(*sys.argv[2:5])
    model_dir, ids_path, out_path = sys.argv[1:4]
    with open(model_dir + "/config.json") as f:
        cfg = json.load(f)
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f), dtype=torch.long)
    with torch.no_grad():
        logits = forward(cfg, load_safetensors(model_dir + "/model.safetensors"), ids)
    with open(out_path, "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
