#!/usr/bin/env bash
# The one-node Slurm cluster of the `slurm` fixture (tests/slurm/fixture.sh,
# scripts/slurm_test_cluster.sh), checked on its own: it takes jobs, gives two jobs that each ask
# for a GPU one GPU each at the same time (the fake GPUs as GRES), and `scancel` leaves `squeue`
# empty. The Slurm executor's tests build on this cluster; a cluster that does not work fails
# this test first, naming its logs. Not root: skipped (exit 77, CTest's SKIP_RETURN_CODE), as
# the cluster needs root.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: needs root to run slurmctld and slurmd"
  exit 77
fi
[ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ] ||
  { echo "FAILED: SLURM_CONF (${SLURM_CONF:-unset}) names no cluster: the slurm fixture did not start" >&2; exit 1; }
export SLURM_CONF
CLUSTER="$(dirname "$SLURM_CONF")"
DIR="$(mktemp -d "${TMPDIR:-/tmp}/triald-slurm.XXXXXX")"
trap 'rm -rf "$DIR"' EXIT

fail() {
  echo "FAILED: $*" >&2
  tail -n 20 "$CLUSTER/log/slurmctld.log" "$CLUSTER/log/slurmd.log" >&2 || true
  exit 1
}

# Two GPU jobs at once: each sees one GPU, not the same one, and they overlap in time.
cat >"$DIR/job.sh" <<'JOB'
#!/bin/sh
echo "start $(date +%s.%N) $CUDA_VISIBLE_DEVICES"
sleep 2
echo "end $(date +%s.%N)"
JOB
chmod +x "$DIR/job.sh"
a=$(sbatch --parsable --gres=gpu:1 -o "$DIR/a.out" "$DIR/job.sh")
b=$(sbatch --parsable --gres=gpu:1 -o "$DIR/b.out" "$DIR/job.sh")
for _ in $(seq 1 100); do
  [ -z "$(squeue -h -j "$a,$b" 2>/dev/null)" ] && break
  sleep 0.2
done
[ -z "$(squeue -h -j "$a,$b" 2>/dev/null)" ] || fail "jobs $a and $b did not end within 20 s"
read -r _ a_start a_gpu < <(grep '^start' "$DIR/a.out") || fail "job $a did not run: $(cat "$DIR/a.out")"
read -r _ b_start b_gpu < <(grep '^start' "$DIR/b.out") || fail "job $b did not run: $(cat "$DIR/b.out")"
read -r _ a_end < <(grep '^end' "$DIR/a.out") || fail "job $a did not finish"
[ -n "$a_gpu" ] && [ -n "$b_gpu" ] || fail "a job saw no GPU (CUDA_VISIBLE_DEVICES \"$a_gpu\", \"$b_gpu\")"
[ "$a_gpu" != "$b_gpu" ] || fail "both jobs got GPU $a_gpu"
awk -v s="$b_start" -v e="$a_end" 'BEGIN { exit !(s < e) }' || fail "the jobs did not overlap"

# A third GPU job waits while two hold both GPUs; scancel ends them all.
ids=()
for _ in 1 2 3; do ids+=("$(sbatch --parsable --gres=gpu:1 -o /dev/null --wrap 'sleep 60')"); done
for _ in $(seq 1 50); do
  [ "$(squeue -h -t R -o %i | wc -l)" -eq 2 ] && break
  sleep 0.2
done
[ "$(squeue -h -t R -o %i | wc -l)" -eq 2 ] || fail "expected 2 running jobs: $(squeue)"
reason="$(squeue -h -t PD -o %r)"
[ "$reason" = Resources ] || [ "$reason" = Priority ] || fail "the third job waits for \"$reason\""
scancel "${ids[@]}"
for _ in $(seq 1 50); do
  [ -z "$(squeue -h)" ] && break
  sleep 0.2
done
[ -z "$(squeue -h)" ] || fail "scancel left jobs: $(squeue)"
echo "one-node Slurm cluster: two GPU jobs on GPUs $a_gpu and $b_gpu at once; scancel emptied the queue"
