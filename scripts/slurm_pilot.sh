#!/usr/bin/env bash
# Pilot mode for sites where the submit host cannot run triald (daemon/README.md, "Running on
# Slurm"): a batch script that starts one triald per allocated node, inside the allocation, each
# joining the studies of a shared PostgreSQL database and leaving when they have no work for it.
#
#   sbatch --nodes=4 --gres=gpu:8 --export=ALL,TRIALD_STORAGE=postgresql://... scripts/slurm_pilot.sh
#
# Submit studies to any triald on that database (or to a pilot's socket); each pilot runs trials
# locally with every single-host guarantee (cgroups, fork servers, GPU drain checks), on the GPUs
# Slurm gave its node (CUDA_VISIBLE_DEVICES) as its GPU slots and the node's allocated CPUs as its
# --max-workers. Environment:
#   TRIALD_STORAGE     the PostgreSQL URL the studies are on (required)
#   TRIALD_BIN         the folder holding triald (default: where `command -v triald` finds it)
#   TRIALD_IDLE        seconds without work before a pilot leaves (default 60)
#   TRIALD_STATE_ROOT  where each pilot keeps its state directory (default: $TMPDIR or /tmp);
#                      trial folders live there, so a retry on another node starts afresh unless
#                      this is a shared filesystem
#SBATCH --job-name=triald-pilot
#SBATCH --ntasks-per-node=1
set -euo pipefail
: "${TRIALD_STORAGE:?set TRIALD_STORAGE to the PostgreSQL URL of the studies}"
if [ -z "${TRIALD_BIN:-}" ]; then
  TRIALD_BIN="$(dirname "$(command -v triald)")" ||
    { echo "slurm_pilot: triald not in PATH; set TRIALD_BIN" >&2; exit 1; }
fi
export TRIALD_STORAGE TRIALD_BIN
export TRIALD_IDLE="${TRIALD_IDLE:-60}"
export TRIALD_STATE_ROOT="${TRIALD_STATE_ROOT:-${TMPDIR:-/tmp}}"
# One task per node; each runs its node's pilot in the foreground, so the job ends when the last
# pilot has left.
exec srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c '
  set -euo pipefail
  node="pilot-${SLURM_JOB_ID}-${SLURMD_NODENAME}"
  state="$TRIALD_STATE_ROOT/triald-$node"
  mkdir -p "$state"
  gpus="${CUDA_VISIBLE_DEVICES:-}"
  exec "$TRIALD_BIN/triald" --storage "$TRIALD_STORAGE" --node-name "$node" \
    --state-dir "$state" --gpus "${gpus:-none}" \
    --max-workers "${SLURM_CPUS_ON_NODE:-1}" --exit-when-idle "$TRIALD_IDLE"
'
