#!/usr/bin/env bash
# The `slurm` CTest fixture (tests/CMakeLists.txt): starts or stops the one-node test cluster of
# scripts/slurm_test_cluster.sh in DIR. Not root: skipped (77), and so are the tests that need
# the cluster (they check for root themselves). As root a cluster that cannot start fails here,
# naming its logs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -eq 2 ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: the test Slurm cluster needs root (slurmd runs jobs as their users)"
  exit 77
fi
case "$1" in
  start) "$ROOT/scripts/slurm_test_cluster.sh" start "$2" ;;
  stop) "$ROOT/scripts/slurm_test_cluster.sh" stop "$2" ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
