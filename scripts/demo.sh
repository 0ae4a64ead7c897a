#!/usr/bin/env bash
# The README's "run" command: installs the demo's dependencies (install-deps.sh --demo: none of
# the test tools), builds triald, trialctl and trial-worker (not the test suites), makes the LM
# fixtures (a tiny GPT-2, the license corpus from /usr/share/common-licenses, and the checkpoint
# trial-worker pretrains from them), starts triald on a local state directory, submits the
# lm-finetune example sweep (12 fine-tuning trials, two at a time, one process each), waits for
# it, prints the best hyperparameters and evaluation loss and the trials table, and stops the
# daemon cleanly.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$ROOT/scripts/install-deps.sh" --demo
build_demo

echo "== making the fixtures under tests/fixtures (pretraining the tiny GPT-2 takes a few seconds)"
python3 "$ROOT/scripts/make_fixtures.py" "$ROOT/tests/fixtures" \
  --trial-worker "$BUILD_DIR/bin/trial-worker"

STATE="${TRIALD_DEMO_STATE:-$ROOT/demo-state}"
rm -rf "$STATE" "$STATE.log"
trap stop_triald EXIT
start_triald "$STATE"
export TRIALD_SOCKET="$STATE/triald.sock"
CTL="$BUILD_DIR/bin/trialctl"

echo
echo "== submitting config/examples/lm-finetune.toml (12 trials, 2 at a time, one process each)"
"$CTL" submit "$ROOT/config/examples/lm-finetune.toml" --wait
echo
echo "== trials (value: evaluation loss on licenses the model never saw)"
"$CTL" trials lm-finetune
echo
echo "== status"
"$CTL" status lm-finetune
stop_triald
echo
echo "triald stopped cleanly; its state (database, per-trial logs) is in $STATE"
