#!/usr/bin/python3
"""Training speed of trial-worker's C++ GPT-2 against the same model in Python PyTorch 1.13.

    /usr/bin/python3 scripts/bench_lm.py [--build build] [--repeats 3] [--threads N] [--quick]

Prints figures; asserts nothing. For each model it runs, alternately and --repeats times each:

  C++     `trial-worker train MODEL TRAIN EVAL --steps S --seq-len L --params {...}
          --no-initial-eval --device cpu`: the trial's own loading and training code
          (PrepareLm, TrainLm), which prints a JSON line after every optimizer step;
  Python  this script in --python-side mode under /usr/bin/python3: `import torch`, the
          checkpoint read from model.safetensors, the GPT-2 forward of scripts/reference_gpt2.py
          (the independent reference the tests check the C++ model against), cross-entropy,
          backward, clip_grad_norm_, torch.optim.AdamW: the same model, batch, sequence length,
          optimizer and thread count, on token ids the worker's tokenizer produced.

and reports, for each side, the median over repeats of

  tokens/s         training tokens per second over steps 2..S (step 1 is warm-up: first-touch
                   allocations, lazy initialisation), from each side's own per-step clock;
  start-to-step-1  seconds from the process's start (fork+exec) to the first optimizer step
                   done, measured by this script as the arrival of the first step line: library
                   loading, reading the checkpoint, tokenizing (C++ only: Python is handed token
                   ids), the first step;

and the ratio C++ / Python (>= 1.0: the worker is at least as fast).

Models: the tiny test fixture (2 layers x 32, GPT-2's 50257-token vocabulary: the LM head and
softmax dominate) and a random-init 4 layers x 256 (4 heads) GPT-2 written at bench time, where
the transformer's matrix products weigh more. The corpus is the fixture's license texts.
Needs the fixtures: python3 scripts/make_fixtures.py BUILD/fixtures --trial-worker
BUILD/bin/trial-worker (the tests make them too).
"""

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------------------------
# The Python side (runs in its own process, like the worker)

def python_side(args):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import torch  # noqa: E402  (the import is part of the start-up being measured)
    import reference_gpt2 as ref  # noqa: E402

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    w = ref.parameters(cfg, ref.load_safetensors(os.path.join(args.model, "model.safetensors")))
    with open(args.tokens) as f:
        tokens = torch.tensor(json.load(f), dtype=torch.long)
    decay = [t for t in w.values() if t.dim() >= 2]
    no_decay = [t for t in w.values() if t.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-4)
    params = list(w.values())
    began = time.monotonic()
    for step in range(1, args.steps + 1):
        starts = torch.randint(0, len(tokens) - args.seq_len - 1, (args.batch_size,))
        windows = torch.stack([tokens[s:s + args.seq_len + 1] for s in starts.tolist()])
        optimizer.zero_grad()
        loss = ref.window_loss(cfg, w, windows, "mean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        value = loss.item()
        print(json.dumps({"type": "step", "step": step, "loss": value,
                          "elapsed_s": time.monotonic() - began}), flush=True)
    print(json.dumps({"type": "summary", "threads": torch.get_num_threads()}), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# The driver

def timed_run(command, env, batch_size, seq_len):
    """Runs a side; returns (tokens/s over steps 2..N, seconds from start to step 1)."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    first_step = None
    elapsed = []
    for line in proc.stdout:
        record = json.loads(line)
        if record.get("type") == "step":
            if first_step is None:
                first_step = time.monotonic() - start
            elapsed.append(record["elapsed_s"])
    err = proc.stderr.read()
    if proc.wait() != 0:
        sys.exit("bench_lm: `{}` failed:\n{}".format(" ".join(command), err))
    timed_steps = len(elapsed) - 1
    tokens_per_s = timed_steps * batch_size * seq_len / (elapsed[-1] - elapsed[0])
    return tokens_per_s, first_step


def write_random_gpt2(folder, like, n_layer, n_embd, n_head, n_positions, seed=0):
    """A GPT-2 folder with random N(0, 0.02) weights (ones/zeros for LayerNorms and biases) and
    the tokenizer of `like`."""
    import torch
    os.makedirs(folder, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(like, name), os.path.join(folder, name))
    with open(os.path.join(like, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=n_positions,
               n_ctx=n_positions)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    g = torch.Generator().manual_seed(seed)
    v, c = cfg["vocab_size"], n_embd
    shapes = {"wte.weight": [v, c], "wpe.weight": [n_positions, c],
              "ln_f.weight": [c], "ln_f.bias": [c]}
    for i in range(n_layer):
        p = "h.{}.".format(i)
        shapes.update({p + "ln_1.weight": [c], p + "ln_1.bias": [c],
                       p + "attn.c_attn.weight": [c, 3 * c], p + "attn.c_attn.bias": [3 * c],
                       p + "attn.c_proj.weight": [c, c], p + "attn.c_proj.bias": [c],
                       p + "ln_2.weight": [c], p + "ln_2.bias": [c],
                       p + "mlp.c_fc.weight": [c, 4 * c], p + "mlp.c_fc.bias": [4 * c],
                       p + "mlp.c_proj.weight": [4 * c, c], p + "mlp.c_proj.bias": [c]})
    header, chunks, offset = {}, [], 0
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) == 2:
            t = torch.randn(shape, generator=g) * 0.02
        elif name.endswith(".weight"):
            t = torch.ones(shape)
        else:
            t = torch.zeros(shape)
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer steps")
    parser.add_argument("--python-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.python_side:
        return python_side(args)

    build = os.path.abspath(args.build)
    worker = os.path.join(build, "bin", "trial-worker")
    fixtures = os.path.join(build, "fixtures")
    for need in (worker, os.path.join(fixtures, "tiny-gpt2", "model.safetensors"),
                 os.path.join(fixtures, "licenses", "train.txt")):
        if not os.path.exists(need):
            sys.exit("bench_lm: {} is missing; build trial-worker and run python3 "
                     "scripts/make_fixtures.py {} --trial-worker {}".format(need, fixtures, worker))
    train = os.path.join(fixtures, "licenses", "train.txt")
    evalf = os.path.join(fixtures, "licenses", "eval.txt")
    repeats = 1 if args.quick else args.repeats
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))

    with tempfile.TemporaryDirectory(prefix="bench-lm-") as tmp:
        tokens_path = os.path.join(tmp, "tokens.json")
        with open(train, "rb") as f:
            out = subprocess.run([worker, "tokenize", os.path.join(fixtures, "tiny-gpt2")],
                                 stdin=f, capture_output=True, check=True).stdout
        with open(tokens_path, "wb") as f:
            f.write(out)
        big = write_random_gpt2(os.path.join(tmp, "gpt2-4x256"),
                                os.path.join(fixtures, "tiny-gpt2"), 4, 256, 4, 256)
        cases = [("tiny fixture 2x32", os.path.join(fixtures, "tiny-gpt2"), 8, 64, 12),
                 ("random 4x256", big, 4, 128, 8)]
        print("threads {}, repeats {}; tokens/s over steps 2..N, median; start-to-step-1 in s"
              .format(args.threads, repeats))
        print("{:<20} {:>6} {:>12} {:>12} {:>7} {:>10} {:>10}".format(
            "model", "BxT", "C++ tok/s", "Py tok/s", "ratio", "C++ start", "Py start"))
        for name, model, batch, seq, steps in cases:
            if args.quick:
                steps = max(4, steps // 2)
            params = json.dumps({"batch_size": batch, "learning_rate": 1e-4,
                                 "lr_schedule": "constant"})
            cpp_cmd = [worker, "train", model, train, evalf, "--steps", str(steps), "--seq-len",
                       str(seq), "--params", params, "--no-initial-eval", "--device", "cpu"]
            py_cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--python-side", "--model",
                      model, "--tokens", tokens_path, "--steps", str(steps), "--seq-len", str(seq),
                      "--batch-size", str(batch), "--threads", str(args.threads)]
            cpp, py = [], []
            for _ in range(repeats):
                cpp.append(timed_run(cpp_cmd, env, batch, seq))
                py.append(timed_run(py_cmd, env, batch, seq))
            cpp_tps = statistics.median(r[0] for r in cpp)
            py_tps = statistics.median(r[0] for r in py)
            print("{:<20} {:>6} {:>12.0f} {:>12.0f} {:>7.2f} {:>10.2f} {:>10.2f}".format(
                name, "{}x{}".format(batch, seq), cpp_tps, py_tps, cpp_tps / py_tps,
                statistics.median(r[1] for r in cpp), statistics.median(r[1] for r in py)))
            print("  runs C++ {}  Python {}".format(
                " ".join("{:.0f}".format(r[0]) for r in cpp),
                " ".join("{:.0f}".format(r[0]) for r in py)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
