#!/usr/bin/env bash
# The README's "test" command: installs dependencies, builds everything and runs every test
# suite (unit, contract, integration, fault) with CTest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$ROOT/scripts/install-deps.sh"
build_triald
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@")

# Fuzzing (tests/fuzz/): a second build with clang, libFuzzer, ASan and UBSan in
# $BUILD_DIR/fuzz; replays the committed inputs, then fuzzes each decoder for a fixed number of
# inputs from seed TRIALD_FUZZ_SEED (1; 0 draws a new seed), at most TRIALD_FUZZ_SECONDS (300)
# each. Runs on a full run (no CTest arguments) unless TRIALD_FUZZ=0; TRIALD_FUZZ=1 forces it.
if [ "${TRIALD_FUZZ:-}" = 1 ] || { [ $# -eq 0 ] && [ "${TRIALD_FUZZ:-}" != 0 ]; }; then
  CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD_DIR/fuzz" -DTRIALD_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIALD_FUZZ_SECONDS="${TRIALD_FUZZ_SECONDS:-300}" \
    -DTRIALD_FUZZ_SEED="${TRIALD_FUZZ_SEED:-1}" >/dev/null
  cmake --build "$BUILD_DIR/fuzz" -j "$JOBS"
  (cd "$BUILD_DIR/fuzz" && ctest --output-on-failure -j "$JOBS" -L fuzz)
fi
