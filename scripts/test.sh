#!/usr/bin/env bash
# The README's "test" command: installs dependencies, builds everything and runs every test
# suite (unit, contract, integration, fault) with CTest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$ROOT/scripts/install-deps.sh"
build_triald
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" --timeout 600 "$@"
