#!/usr/bin/python3
"""Planned against measured memory of `kind = "lm"` trials: how well trial-worker's memory plan
(made on the meta device before anything is allocated; the trial's `planned_memory_bytes`
attribute) predicts the peak memory triald measures for the trial's whole process tree.

    /usr/bin/python3 scripts/bench_memory_plan.py [--build build] [--steps 3]

Starts triald on a scratch state directory and runs, for each model and sequence length, one
grid study over batch_size (a few optimizer steps each, on the CPU), then reads every trial's
`resources` from `trialctl trials --json` and prints, per trial, the plan, the measured peak
and their difference; per model, a least-squares line measured = base + slope * planned. The
base is what the plan leaves out on purpose (the process itself: LibTorch, the tokenizer, the
mapped checkpoint, allocator slack); a slope near 1 means the plan tracks what grows with the
configuration. Prints figures; asserts nothing.

Models: the tiny test fixture (2 layers x 32, GPT-2's vocabulary) and a random-init 4 x 256
GPT-2 written at run time (scripts/bench_lm.py's writer). Needs the fixtures: python3
scripts/make_fixtures.py BUILD/fixtures --trial-worker BUILD/bin/trial-worker.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_lm import write_random_gpt2  # noqa: E402
from bench_throughput import running_triald  # noqa: E402

BATCH_SIZES = [1, 4, 16, 32]
SEQ_LENS = [16, 64]  # fixed per study: seq_len is not tunable


def sweep(name, model, train, evalf, steps, seq_len):
    return f"""
[study]
name = "{name}"
direction = "minimize"
n_trials = {len(BATCH_SIZES)}
parallelism = 1

[objective]
kind = "lm"
model = "{model}"
train_file = "{train}"
eval_file = "{evalf}"
max_steps = {steps}
eval_every = {steps}
seq_len = {seq_len}
device = "cpu"

[space.batch_size]
type = "categorical"
choices = {json.dumps(BATCH_SIZES)}

[sampler]
kind = "grid"
"""


def fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else float("nan")
    return my - slope * mx, slope


def mib(b):
    return b / (1 << 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=3)
    a = parser.parse_args()
    fixtures = os.path.join(a.build, "fixtures")
    tiny = os.path.join(fixtures, "tiny-gpt2")
    train = os.path.join(fixtures, "licenses", "train.txt")
    evalf = os.path.join(fixtures, "licenses", "eval.txt")
    for need in (os.path.join(tiny, "model.safetensors"), train):
        if not os.path.exists(need):
            sys.exit(f"missing {need}: run python3 scripts/make_fixtures.py {fixtures} "
                     f"--trial-worker {os.path.join(a.build, 'bin', 'trial-worker')}")
    with tempfile.TemporaryDirectory(prefix="triald-plan-") as d:
        models = [("tiny fixture 2x32", tiny),
                  ("random 4x256", write_random_gpt2(os.path.join(d, "gpt2-4x256"), tiny,
                                                     4, 256, 4, 256))]
        state = os.path.join(d, "state")
        with running_triald(a.build, state, 1) as ctl:
            for i, (label, model) in enumerate(models):
                trials = []
                for seq_len in SEQ_LENS:
                    name = f"plan{i}-{seq_len}"
                    path = os.path.join(d, name + ".toml")
                    with open(path, "w") as f:
                        f.write(sweep(name, model, train, evalf, a.steps, seq_len))
                    subprocess.run(ctl + ["submit", path, "--wait"], check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    out = subprocess.run(ctl + ["trials", name, "--json"], check=True,
                                         capture_output=True, text=True).stdout
                    got = json.loads(out)
                    for t in got["trials"] if isinstance(got, dict) else got:
                        t["seq_len"] = seq_len
                        trials.append(t)
                print(f"\n{label}: {a.steps} steps, CPU")
                print(f"{'batch':>5} {'seq':>4} {'planned MiB':>12} {'measured MiB':>13} "
                      f"{'diff MiB':>9}  source")
                xs, ys = [], []
                for t in trials:
                    r = t.get("resources") or {}
                    planned, peak = r.get("planned_memory_bytes"), r.get("peak_memory_bytes")
                    if t["state"] != "COMPLETE" or planned is None or peak is None:
                        print(f"trial {t['number']}: {t['state']} without both figures: "
                              f"{t.get('fail_detail') or r}")
                        continue
                    xs.append(planned)
                    ys.append(peak)
                    print(f"{t['params']['batch_size']:>5} {t['seq_len']:>4} "
                          f"{mib(planned):>12.1f} {mib(peak):>13.1f} "
                          f"{mib(peak - planned):>9.1f}  {r.get('memory_source')}")
                if len(xs) >= 2:
                    base, slope = fit(xs, ys)
                    print(f"fit: measured = {mib(base):.1f} MiB + {slope:.3f} x planned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
