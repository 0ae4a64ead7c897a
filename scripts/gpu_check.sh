#!/usr/bin/env bash
# GPU check of trial-worker (issue 3, item 5): builds trial-worker alone (TRIALD_WORKER_ONLY)
# against the LibTorch that python3's PyTorch bundles (an official 2.x build, with CUDA where the
# wheel has it), then on the tiny fixture:
#   (a) `trial-worker check` and `inspect`;
#   (b) the lm objective, started the way triald starts it (--objective lm --config JSON,
#       TRIALD_PARAMS, report pipe on descriptor 3), on the CPU, on DEVICE and with device =
#       "auto"; prints the eval losses and the largest difference from the CPU run (and from
#       REFERENCE, a report file of the same config from another machine, when given);
#   (c) a trial killed with SIGKILL (its whole process group, as triald does) in the middle of
#       training on cuda, then polls nvidia-smi until no process of it holds GPU memory and the
#       GPU's used memory is back to what it was before the trial.
#   (d) with DAEMON_DIR (a folder with triald and trialctl, e.g. build/bin; a lib/ folder in it
#       is added to LD_LIBRARY_PATH): a small kind = "lm" sweep through triald on DEVICE, two
#       trials at a time, cancelled with `trialctl cancel` while they train; then polls until the
#       GPU's used memory is back to its baseline.
#   (e) with DAEMON_DIR and a GPU: a kind = "python" study with a fork server (preload torch),
#       one GPU trial at a time, each trial creating its own CUDA context and 256 MiB on it:
#       every trial finds CUDA uninitialised and the GPU at its baseline when it starts (nothing
#       of the trial before it is left, SIGKILLed or not); the server never holds GPU memory;
#       a trial SIGKILLed while it holds GPU memory is FAIL and its memory comes back; the
#       server SIGKILLed while a trial runs does not disturb that trial, and the next trial
#       starts a new server; GPU memory is back to the baseline after the study.
#   (f) with DAEMON_DIR: a kind = "lm" sweep on DEVICE with fork_server = true (trial-worker
#       --fork-server): both trials COMPLETE, forked, and GPU memory is back to the baseline.
# It is a manual check for a machine with a GPU, not part of the test suite (CI has no GPU). With
# DEVICE=cpu (and no nvidia-smi) it runs (a) and (b) on the CPU alone, as a dry run.
#
# usage: scripts/gpu_check.sh [DEVICE]          DEVICE: cuda (default) or cpu
# environment:
#   TORCH_PREFIX  LibTorch's CMake prefix (default: python3's torch.utils.cmake_prefix_path)
#   SYSROOT       a prefix with the headers, libraries and CMake configs of Boost (json),
#                 spdlog, fmt and toml++ (default: the system's); SYSROOT_TARBALL, if set, is
#                 unpacked to SYSROOT first (a machine without those packages: see below)
#   BUILD_DIR     build directory (default build-gpu/build)
#   OUT           where gpu_check.log goes (default build-gpu)
#   REFERENCE     report lines of the (b) config run elsewhere, to compare eval losses with
#   FIXTURES      the folder holding tiny-gpt2/ (default build/fixtures, where the tests make it
#                 with scripts/make_fixtures.py); the corpus is tests/fixtures/tiny-corpus
#   WORKER        a trial-worker already built: skips the build (for trying the script out)
#
# A machine without the Debian packages gets them as a tarball of a Debian 12 prefix, made where
# they are installed:
#   tar -C / -cJf sysroot.tar.xz usr/include/{boost,spdlog,fmt,toml++} \
#     usr/lib/x86_64-linux-gnu/lib{boost_json,spdlog,fmt,tomlplusplus}.so* \
#     usr/lib/x86_64-linux-gnu/cmake/{Boost-1.81.0,boost_headers-1.81.0,boost_json-1.81.0,spdlog,fmt,tomlplusplus}
# The LibTorch wheel must use the C++11 ABI (PyTorch >= 2.7 wheels do), as Debian's libraries do.
set -uo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DEVICE=${1:-cuda}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu/build}
OUT=${OUT:-$ROOT/build-gpu}
FIXTURES=${FIXTURES:-$ROOT/build/fixtures}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: >"$LOG"

log() { echo "$*" | tee -a "$LOG"; }
run_logged() { "$@" 2>&1 | tee -a "$LOG"; return "${PIPESTATUS[0]}"; }
HAVE_SMI=0
if command -v nvidia-smi >/dev/null 2>&1; then HAVE_SMI=1; fi

log "== versions"
run_logged bash -c 'cmake --version | head -1; ${CXX:-g++} --version | head -1; uname -m; (. /etc/os-release && echo "$PRETTY_NAME")'
[ "$HAVE_SMI" = 1 ] && run_logged nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
run_logged python3 -c 'import torch; print("torch", torch.__version__, "cxx11_abi", torch.compiled_with_cxx11_abi(), "cuda", torch.version.cuda, "available", torch.cuda.is_available())'

# LibTorch's CMake config looks for the CUDA toolkit (nvcc) when the wheel has CUDA.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null 2>&1 && run_logged bash -c 'nvcc --version | tail -2'
TORCH_PREFIX=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
SYSROOT=${SYSROOT:-}
if [ -n "${SYSROOT_TARBALL:-}" ]; then
  SYSROOT=${SYSROOT:-/tmp/triald-sysroot}
  mkdir -p "$SYSROOT" && tar -C "$SYSROOT" -xJf "$SYSROOT_TARBALL" || { log "FAIL: cannot unpack $SYSROOT_TARBALL"; exit 1; }
fi
PREFIXES=$TORCH_PREFIX
EXTRA=()
if [ -n "$SYSROOT" ]; then
  S=$SYSROOT/usr
  C=$S/lib/x86_64-linux-gnu/cmake
  PREFIXES="$TORCH_PREFIX;$S"
  EXTRA=(-DBoost_DIR=$C/Boost-1.81.0 -Dboost_headers_DIR=$C/boost_headers-1.81.0
    -Dboost_json_DIR=$C/boost_json-1.81.0 -Dspdlog_DIR=$C/spdlog -Dfmt_DIR=$C/fmt
    -Dtomlplusplus_DIR=$C/tomlplusplus -DCMAKE_BUILD_RPATH=$S/lib/x86_64-linux-gnu)
  export LD_LIBRARY_PATH=$S/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

if [ -z "${WORKER:-}" ]; then
log "== build (LibTorch at $TORCH_PREFIX${SYSROOT:+, sysroot $SYSROOT})"
JOBS=${JOBS:-$(nproc)}
start=$(date +%s)
# Warnings of other compilers and LibTorch versions are not errors here (TRIALD_WERROR=OFF).
CMAKE_POLICY_VERSION_MINIMUM=3.5 run_logged cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DTRIALD_WORKER_ONLY=ON -DTRIALD_BUILD_TESTS=OFF -DTRIALD_WERROR=OFF \
  "-DCMAKE_PREFIX_PATH=$PREFIXES" "${EXTRA[@]}" || { log "FAIL: configure"; exit 1; }
run_logged cmake --build "$BUILD_DIR" -j"$JOBS" --target trial-worker || { log "FAIL: build"; exit 1; }
log "build took $(($(date +%s) - start)) s"
fi
W=${WORKER:-$BUILD_DIR/bin/trial-worker}
run_logged bash -c "ldd $W | grep -E 'torch|c10|cuda|boost|spdlog|fmt|toml|not found'"

MODEL=$FIXTURES/tiny-gpt2
CORPUS=$ROOT/tests/fixtures/tiny-corpus
status=0

log "== (a) check and inspect"
run_logged "$W" check "$MODEL" || { log "FAIL: check"; status=1; }
run_logged "$W" inspect "$MODEL" --batch-size 4 --seq-len 64 || { log "FAIL: inspect"; status=1; }

config() {  # DEVICE MAX_STEPS EVAL_EVERY
  echo "{\"model\":\"$MODEL\",\"train_file\":\"$CORPUS/train.txt\",\"eval_file\":\"$CORPUS/eval.txt\",\"max_steps\":$2,\"seq_len\":64,\"eval_every\":$3,\"device\":\"$1\",\"memory_budget_gb\":0,\"gpu_memory_fraction\":0,\"learning_rate\":0.003,\"weight_decay\":0,\"warmup_steps\":2,\"batch_size\":4,\"dropout\":0,\"adam_beta1\":0.9,\"adam_beta2\":0.999,\"grad_clip\":1,\"lr_schedule\":\"linear\",\"seed\":7,\"checkpoint_every\":0}"
}

lm_run() {  # NAME DEVICE: runs the (b) config, report lines in $OUT/report-NAME.jsonl
  local report=$OUT/report-$1.jsonl t0
  t0=$(date +%s.%N)
  TRIALD_REPORT_FD=3 TRIALD_PARAMS='{}' TRIALD_STUDY=gpu TRIALD_TRIAL=0 \
    "$W" --objective lm --config "$(config "$2" 20 5)" 3>"$report" >"$OUT/stdout-$1.txt" 2>"$OUT/stderr-$1.txt"
  local rc=$?
  log "-- $1 (device=$2): exit $rc, $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s"
  run_logged cat "$report"
  [ -s "$OUT/stderr-$1.txt" ] && run_logged cat "$OUT/stderr-$1.txt"
  return $rc
}

# Largest |difference| of the report values (eval losses) of two report files; fails when the
# steps differ or the difference is above TOL.
compare() {  # A B TOL
  python3 - "$1" "$2" "$3" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
def values(path):
    out = {}
    for line in open(path):
        d = json.loads(line)
        if d["type"] == "report": out[d["step"]] = d["value"]
        if d["type"] == "attr" and d["key"] == "initial_eval_loss": out[0] = d["value"]
    return out
a, b, tol = values(sys.argv[1]), values(sys.argv[2]), float(sys.argv[3])
if not a or a.keys() != b.keys():
    print("MISMATCH steps", sorted(a), sorted(b)); sys.exit(1)
diff = max(abs(a[k] - b[k]) for k in a)
print(f"max |eval loss difference| {sys.argv[1].split('/')[-1]} vs {sys.argv[2].split('/')[-1]}: {diff:.3g} (tolerance {tol})")
for k in sorted(a): print(f"  step {k}: {a[k]:.6f} {b[k]:.6f}")
sys.exit(0 if diff <= tol else 1)
EOF
  return "${PIPESTATUS[0]}"
}

log "== (b) lm objective: 20 steps, batch 4, seq_len 64, eval every 5, seed 7, dropout 0"
lm_run cpu cpu || status=1
if [ -n "${REFERENCE:-}" ]; then compare "$OUT/report-cpu.jsonl" "$REFERENCE" 1e-3 || status=1; fi
if [ "$DEVICE" != cpu ]; then
  lm_run "$DEVICE" "$DEVICE" || status=1
  grep -q "\"device\",\"value\":\"cuda" "$OUT/report-$DEVICE.jsonl" || { log "FAIL: device attr is not cuda"; status=1; }
  compare "$OUT/report-$DEVICE.jsonl" "$OUT/report-cpu.jsonl" 1e-3 || status=1
  if [ -n "${REFERENCE:-}" ]; then compare "$OUT/report-$DEVICE.jsonl" "$REFERENCE" 1e-3 || status=1; fi
fi
lm_run auto auto || status=1
log "device chosen by auto: $(grep -o '"key":"device","value":"[^"]*"' "$OUT/report-auto.jsonl")"

used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null; }
# Polls every 0.1 s, for at most SECONDS, until no process holds GPU memory and memory.used is
# within 2 MiB of BASELINE; logs what it found under WHAT. Returns 1 (logging FAIL) if it never is.
back_to_baseline() {  # BASELINE SECONDS WHAT
  local now t0 ok=0
  t0=$(date +%s.%N)
  for _ in $(seq 1 $(($2 * 10))); do
    now=$(used)
    if [ -z "$(apps)" ] && [ "$now" -le $(($1 + 2)) ]; then ok=1; break; fi
    sleep 0.1
  done
  log "$3: memory.used ${now} MiB (baseline $1) after $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s; compute apps: [$(apps | tr '\n' ' ')]"
  if [ $ok = 1 ]; then log "memory back to baseline: yes"; return 0; fi
  log "FAIL: memory not back to baseline within $2 s"
  return 1
}
GPU=1
if [ "$DEVICE" = cpu ] || [ "$HAVE_SMI" = 0 ]; then GPU=0; fi

if [ $GPU = 0 ]; then
  log "== (c) skipped: no GPU"
else
log "== (c) GPU memory after a SIGKILLed trial"
baseline=$(used)
log "baseline memory.used ${baseline} MiB; compute apps: [$(apps | tr '\n' ' ')]"
report=$OUT/report-killed.jsonl
: >"$report"
TRIALD_REPORT_FD=3 TRIALD_PARAMS='{}' setsid "$W" --objective lm --config "$(config cuda 100000 5)" \
  3>"$report" >"$OUT/stdout-killed.txt" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ "$(grep -c '"type":"report"' "$report")" -ge 2 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
log "reports before the kill: $(grep -c '"type":"report"' "$report")"
during=$(used)
log "during the trial: memory.used ${during} MiB; compute apps: [$(apps | tr '\n' ' ')] (worker pid $pid)"
kill -KILL -- -"$pid" 2>/dev/null || kill -KILL "$pid"
wait $pid 2>/dev/null
log "worker exit: $? (137 = SIGKILL)"
t0=$(date +%s.%N)
ok=0
for i in $(seq 1 100); do
  now=$(used)
  if ! apps | grep -q "^$pid," && [ "$now" -le $((baseline + 2)) ]; then ok=1; break; fi
  sleep 0.1
done
elapsed=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
log "after the kill: memory.used ${now} MiB (baseline ${baseline}) after ${elapsed} s; compute apps: [$(apps | tr '\n' ' ')]"
if [ $ok = 1 ]; then log "memory back to baseline: yes"; else log "FAIL: memory not back to baseline within 10 s"; status=1; fi
fi

if [ -n "${DAEMON_DIR:-}" ]; then
  log "== (d) a kind = \"lm\" sweep through triald on $DEVICE, cancelled while it trains"
  BIN=$(dirname "$W")  # triald runs the trial-worker next to it
  for b in triald trialctl; do
    [ "$DAEMON_DIR/$b" -ef "$BIN/$b" ] || cp "$DAEMON_DIR/$b" "$BIN/$b"
  done
  [ -d "$DAEMON_DIR/lib" ] && export LD_LIBRARY_PATH=$DAEMON_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  run_logged bash -c "ldd '$BIN/triald' | grep -E 'sqlite|systemd|not found'"
  STATE=$(mktemp -d /tmp/triald-gpu-check.XXXXXX)
  CTL=("$BIN/trialctl" --socket "$STATE/triald.sock")
  [ $GPU = 1 ] && baseline=$(used) && log "baseline memory.used ${baseline} MiB"
  "$BIN/triald" --state-dir "$STATE" --no-cgroups --slots-per-gpu 2 --gpu-release-timeout 30 \
    >"$OUT/triald.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 100); do "${CTL[@]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # A trial gets a GPU slot (CUDA_VISIBLE_DEVICES) only when the study asks for one.
  GPUS_PER_TRIAL=$([ "$DEVICE" = cpu ] && echo 0 || echo 1)
  cat >"$STATE/sweep.toml" <<EOF
[study]
name = "gpu-check"
direction = "minimize"
n_trials = 4
parallelism = 2
trial_timeout = 300
gpus_per_trial = $GPUS_PER_TRIAL

[objective]
kind = "lm"
model = "$MODEL"
train_file = "$CORPUS/train.txt"
eval_file = "$CORPUS/eval.txt"
max_steps = 100000
seq_len = 64
eval_every = 5
device = "$DEVICE"
batch_size = 4

[space.learning_rate]
type = "float"
low = 1e-4
high = 1e-2
log = true
EOF
  run_logged "${CTL[@]}" submit "$STATE/sweep.toml" || status=1
  # Two trials running, then a few seconds of training.
  for _ in $(seq 1 300); do
    [ "$("${CTL[@]}" trials gpu-check 2>/dev/null | grep -ci running)" -ge 2 ] && break
    sleep 0.1
  done
  sleep 4
  run_logged "${CTL[@]}" trials gpu-check
  if [ $GPU = 1 ]; then
    during_apps=$(apps)
    log "during the sweep: memory.used $(used) MiB; compute apps: [$(echo "$during_apps" | tr '\n' ' ')]"
    [ "$(echo "$during_apps" | grep -c MiB)" -ge 2 ] || { log "FAIL: not two trials on the GPU"; status=1; }
  fi
  run_logged "${CTL[@]}" cancel gpu-check || status=1
  if [ $GPU = 1 ]; then
    back_to_baseline "$baseline" 30 "after the cancel" || status=1
  fi
  for _ in $(seq 1 300); do
    "${CTL[@]}" trials gpu-check 2>/dev/null | grep -qi running || break
    sleep 0.1
  done
  run_logged "${CTL[@]}" trials gpu-check
  if [ "$("${CTL[@]}" trials gpu-check | grep -c 'cancelled: study cancelled')" -lt 2 ]; then
    log "FAIL: the sweep's trials did not run until the cancel"
    status=1
  fi
  run_logged "${CTL[@]}" status gpu-check
  kill -TERM $dpid
  wait $dpid
  log "triald exit: $?"
  run_logged bash -c "grep -iE 'gpu|leak|error|warn' '$OUT/triald.log' | tail -20"
fi

if [ -n "${DAEMON_DIR:-}" ] && [ $GPU = 1 ]; then
  log "== (e) kind = \"python\" trials forked from a server that preloaded torch, each with its own CUDA context"
  BIN=$(dirname "$W")
  # triald finds the Python runner at BIN/../lib/python3/dist-packages (its install layout).
  mkdir -p "$BIN/../lib/python3/dist-packages"
  ln -sfn "$ROOT/proto/client/python/triald" "$BIN/../lib/python3/dist-packages/triald"
  STATE=$(mktemp -d /tmp/triald-gpu-fork.XXXXXX)
  CTL=("$BIN/trialctl" --socket "$STATE/triald.sock")
  cat >"$STATE/cuda_objective.py" <<PYTHON
import os
import subprocess
import time

import torch

STATE = "$STATE"


def used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def objective(trial):
    # Before this trial touches CUDA: the server never initialised it, and the trial before this
    # one left nothing on the GPU.
    trial.set_user_attr("cuda_initialised_at_start", torch.cuda.is_initialized())
    trial.set_user_attr("gpu_used_at_start_mib", used_mib())
    with open(os.path.join(STATE, f"pid-{trial.number}"), "w") as f:
        f.write(str(os.getpid()))
    x = trial.suggest_float("x", 0.0, 1.0)
    block = torch.ones(64 * 1024 * 1024, device="cuda")  # 256 MiB, and a CUDA context
    trial.set_user_attr("gpu_used_mib", used_mib())
    if trial.number == 2:
        time.sleep(600)  # SIGKILLed by the check while it holds GPU memory
    if trial.number == 4:
        while not os.path.exists(os.path.join(STATE, "go-4")):  # the server is killed meanwhile
            time.sleep(0.1)
    return float(block[:10].sum().item()) * x
PYTHON
  cat >"$STATE/fork.toml" <<TOML
[study]
name = "gpu-fork"
n_trials = 7
parallelism = 1
trial_timeout = 300
gpus_per_trial = 1

[objective]
kind = "python"
function = "cuda_objective.py:objective"
python = "python3"
preload = ["torch"]

[sampler]
kind = "random"
seed = 1
TOML
  baseline=$(used)
  log "baseline memory.used ${baseline} MiB"
  "$BIN/triald" --state-dir "$STATE" --no-cgroups --gpu-release-timeout 30 >"$OUT/triald-fork.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 100); do "${CTL[@]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
  run_logged "${CTL[@]}" submit "$STATE/fork.toml" || status=1
  server_pid() {
    "${CTL[@]}" status gpu-fork --json 2>/dev/null |
      python3 -c 'import json, sys; s = json.load(sys.stdin).get("fork_server") or {}; print(s.get("pid") or "")'
  }
  study_state() {
    "${CTL[@]}" status gpu-fork --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])'
  }
  wait_file() { for _ in $(seq 1 1200); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
  # Trial 2 holds 256 MiB when it is SIGKILLed.
  wait_file "$STATE/pid-2" || { log "FAIL: trial 2 never started"; status=1; }
  for _ in $(seq 1 300); do [ "$(used)" -gt $((baseline + 200)) ] && break; sleep 0.1; done
  server=$(server_pid)
  log "trial 2 (pid $(cat "$STATE/pid-2")) holds GPU memory: memory.used $(used) MiB; server pid ${server}; compute apps: [$(apps | tr '\n' ' ')]"
  if [ -z "$server" ]; then log "FAIL: no fork server pid in status"; status=1; fi
  if [ -n "$server" ] && apps | grep -q "^${server},"; then log "FAIL: the fork server holds GPU memory"; status=1; fi
  kill -KILL "$(cat "$STATE/pid-2")"
  # Trial 4 runs (it holds GPU memory) when the server is SIGKILLed; then it is let go.
  wait_file "$STATE/pid-4" || { log "FAIL: trial 4 never started"; status=1; }
  sleep 2
  server=$(server_pid)
  log "killing the fork server (pid ${server}) while trial 4 (pid $(cat "$STATE/pid-4")) runs"
  [ -n "$server" ] && kill -KILL "$server"
  sleep 1
  touch "$STATE/go-4"
  for _ in $(seq 1 1200); do [ "$(study_state)" = COMPLETE ] && break; sleep 0.2; done
  run_logged "${CTL[@]}" trials gpu-fork
  run_logged bash -c "'${CTL[0]}' --socket '$STATE/triald.sock' events gpu-fork | grep -i fork"
  "${CTL[@]}" trials gpu-fork --json >"$OUT/fork-trials.json"
  python3 - "$OUT/fork-trials.json" "$baseline" <<'PYTHON' 2>&1 | tee -a "$LOG"
import json, sys
trials = json.load(open(sys.argv[1]))
baseline = int(sys.argv[2])
bad = []
for t in trials:
    a = t.get("attrs") or {}
    print(f"trial {t['number']}: {t['state']} {t.get('fail_reason') or ''} CUDA initialised at start:"
          f" {a.get('cuda_initialised_at_start')}, GPU used at start {a.get('gpu_used_at_start_mib')}"
          f" MiB, with its block {a.get('gpu_used_mib')} MiB")
    if a.get("cuda_initialised_at_start") is not False:
        bad.append(f"trial {t['number']}: CUDA initialised before the trial touched it")
    if a.get("gpu_used_at_start_mib") is None or a["gpu_used_at_start_mib"] > baseline + 2:
        bad.append(f"trial {t['number']}: the GPU was not at its baseline when it started")
    if t["number"] == 2:
        if t["state"] != "FAIL":
            bad.append("trial 2 (SIGKILLed) is not FAIL")
    elif t["state"] != "COMPLETE":
        bad.append(f"trial {t['number']} is {t['state']}")
if len(trials) != 7:
    bad.append(f"{len(trials)} trials, expected 7")
print("\n".join(bad) if bad else "every trial: a fresh CUDA context on a GPU at its baseline")
sys.exit(1 if bad else 0)
PYTHON
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  if [ "$("${CTL[@]}" events gpu-fork | grep -c fork_server_started)" -lt 2 ]; then
    log "FAIL: no new fork server after the kill"
    status=1
  fi
  back_to_baseline "$baseline" 30 "after the study" || status=1
  kill -TERM $dpid
  wait $dpid
fi

if [ -n "${DAEMON_DIR:-}" ]; then
  log "== (f) a kind = \"lm\" sweep on $DEVICE with fork_server = true"
  BIN=$(dirname "$W")
  STATE=$(mktemp -d /tmp/triald-gpu-lmfork.XXXXXX)
  CTL=("$BIN/trialctl" --socket "$STATE/triald.sock")
  [ $GPU = 1 ] && baseline=$(used)
  "$BIN/triald" --state-dir "$STATE" --no-cgroups --gpu-release-timeout 30 >"$OUT/triald-lmfork.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 100); do "${CTL[@]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
  cat >"$STATE/sweep.toml" <<TOML
[study]
name = "gpu-lmfork"
n_trials = 2
parallelism = 1
trial_timeout = 300
gpus_per_trial = $([ "$DEVICE" = cpu ] && echo 0 || echo 1)

[objective]
kind = "lm"
model = "$MODEL"
train_file = "$CORPUS/train.txt"
eval_file = "$CORPUS/eval.txt"
max_steps = 10
seq_len = 64
eval_every = 5
device = "$DEVICE"
batch_size = 4
fork_server = true

[space.learning_rate]
type = "float"
low = 1e-4
high = 1e-2
log = true
TOML
  run_logged "${CTL[@]}" submit "$STATE/sweep.toml" --wait || status=1
  run_logged "${CTL[@]}" trials gpu-lmfork
  run_logged bash -c "'${CTL[0]}' --socket '$STATE/triald.sock' events gpu-lmfork | grep -i fork"
  if [ "$("${CTL[@]}" trials gpu-lmfork | grep -ci complete)" -lt 2 ]; then
    log "FAIL: the forked lm trials did not complete"
    status=1
  fi
  "${CTL[@]}" events gpu-lmfork | grep -q fork_server_started || { log "FAIL: no fork server"; status=1; }
  if "${CTL[@]}" events gpu-lmfork | grep -q fork_server_off; then
    log "FAIL: the lm fork server fell back to exec"
    status=1
  fi
  if [ $GPU = 1 ]; then
    back_to_baseline "$baseline" 30 "after the study" || status=1
  fi
  kill -TERM $dpid
  wait $dpid
fi

log "RESULT: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
