#!/usr/bin/python3
"""An independent GPT-2 forward pass in Python PyTorch (Debian's python3-torch 1.13), used to
cross-check trial-worker's C++ model: it reads the same Hugging Face folder (config.json and
model.safetensors, parsed here by hand) and prints the logits for the token ids it is given.

    reference_gpt2.py MODEL_DIR IDS_JSON OUT_F32

IDS_JSON is a JSON array of token ids (one sequence); OUT_F32 receives the logits
[len(ids), vocab_size] as little-endian float32. Written from the GPT-2 paper's definition and
the published checkpoint layout, not from the C++ code it checks.
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
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    n_head = cfg["n_head"]
    t = ids.shape[0]
    x = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(t)]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = torch.nn.functional.layer_norm(x, (x.shape[-1],), w[p + "ln_1.weight"],
                                           w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = qkv.split(x.shape[-1], dim=-1)
        hd = x.shape[-1] // n_head
        q, k, v = (z.view(t, n_head, hd).transpose(0, 1) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(t, -1)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = torch.nn.functional.layer_norm(x, (x.shape[-1],), w[p + "ln_2.weight"],
                                           w[p + "ln_2.bias"], eps)
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (x.shape[-1],), w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T  # the head is tied to the token embedding


def main():
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
