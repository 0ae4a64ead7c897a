#!/usr/bin/env bash
# The README's "run" command: installs dependencies, builds, starts triald on a local state
# directory, submits the quadratic example sweep, waits for it, prints the best trial and the
# trials table, and stops the daemon cleanly.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$ROOT/scripts/install-deps.sh"
build_triald

STATE="${TRIALD_DEMO_STATE:-$ROOT/demo-state}"
rm -rf "$STATE" "$STATE.log"
trap stop_triald EXIT
start_triald "$STATE"
export TRIALD_SOCKET="$STATE/triald.sock"
CTL="$BUILD_DIR/bin/trialctl"

echo "== submitting config/examples/quadratic.toml (20 trials, 2 at a time, one process each)"
"$CTL" submit "$ROOT/config/examples/quadratic.toml" --wait
echo
echo "== trials"
"$CTL" trials quadratic
echo
echo "== status"
"$CTL" status quadratic
stop_triald
echo
echo "triald stopped cleanly; its state (database, per-trial logs) is in $STATE"
