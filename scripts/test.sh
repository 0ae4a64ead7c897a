#!/usr/bin/env bash
# The README's "test" command: installs dependencies, checks the formatting, builds everything and
# runs every test suite (unit, contract, integration, fault) with CTest; then, on a full run, the
# unit, contract and integration suites once more under ASan and UBSan, and the fuzzers.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# A full run (no CTest arguments) has every step below; TRIALD_<STEP>=0 leaves one out and
# TRIALD_<STEP>=1 forces it on a run with arguments.
step() {
  local v="${1:-}"
  shift
  [ "$v" = 1 ] || { [ "$#" -eq 0 ] && [ "$v" != 0 ]; }
}

# ctest in build folder $1 with the other arguments; then the reason of every test it reports as
# skipped (a TRIALD_SKIP, tests/support/skip.h), which its summary does not show.
run_ctest() {
  local dir="$1" rc=0
  shift
  (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 600 "$@") || rc=$?
  grep -h '^SKIPPED ' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null || true
  return "$rc"
}

"$ROOT/scripts/install-deps.sh"

# Formatting (TRIALD_FORMAT): every C++ file tracked by git is as clang-format-14 writes it with
# the repository's .clang-format. Prints the files that differ and fails.
if step "${TRIALD_FORMAT:-}" "$@"; then
  files="$(git -C "$ROOT" ls-files -- '*.h' '*.cc')"  # fails outside a git checkout
  unformatted=()
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    clang-format-14 --dry-run --Werror "$ROOT/$f" >/dev/null 2>&1 || unformatted+=("$f")
  done <<<"$files"
  if [ ${#unformatted[@]} -ne 0 ]; then
    echo "clang-format-14: ${#unformatted[@]} file(s) differ from .clang-format:" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    echo "fix: clang-format-14 -i ${unformatted[*]}" >&2
    exit 1
  fi
  echo "clang-format-14: every tracked *.h and *.cc is formatted"
fi

build_triald
run_ctest "$BUILD_DIR" "$@"

# The sanitizer pass (TRIALD_SANITIZE): a second build in $BUILD_DIR/sanitize with ASan and UBSan
# (-DTRIALD_SANITIZE=ON) and without trial-worker (LibTorch), then the unit, contract (with
# PostgreSQL) and integration suites in it, less the tests labelled no-sanitize
# (tests/README.md, "The sanitizer pass"). Every process writes its sanitizer reports to
# $BUILD_DIR/sanitize/reports: a report from the daemon, trialctl or a worker fails the pass even
# where the test did not look at that process's exit.
if step "${TRIALD_SANITIZE:-}" "$@"; then
  SAN_DIR="$BUILD_DIR/sanitize"
  # Debug with -O1 -g1: quicker to compile than RelWithDebInfo under instrumentation, quick
  # enough to run, and the reports still have line numbers.
  cmake -S "$ROOT" -B "$SAN_DIR" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DTRIALD_SANITIZE=ON \
    -DTRIALD_BUILD_WORKER=OFF >/dev/null
  cmake --build "$SAN_DIR" -j "$JOBS"
  rm -rf "$SAN_DIR/reports"
  mkdir -p "$SAN_DIR/reports"
  ASAN_OPTIONS="log_path=$SAN_DIR/reports/asan:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="log_path=$SAN_DIR/reports/ubsan:print_stacktrace=1:${UBSAN_OPTIONS:-}" \
    run_ctest "$SAN_DIR" -L 'unit|postgres|integration' -LE no-sanitize
  if [ -n "$(ls -A "$SAN_DIR/reports")" ]; then
    for r in "$SAN_DIR/reports"/*; do echo "== $r" >&2; cat "$r" >&2; done
    echo "sanitizer reports above (in $SAN_DIR/reports)" >&2
    exit 1
  fi
fi

# Fuzzing (TRIALD_FUZZ; tests/fuzz/): a second build with clang, libFuzzer, ASan and UBSan in
# $BUILD_DIR/fuzz; replays the committed inputs, then fuzzes each decoder for a fixed number of
# inputs from seed TRIALD_FUZZ_SEED (1; 0 draws a new seed), at most TRIALD_FUZZ_SECONDS (300)
# each.
if step "${TRIALD_FUZZ:-}" "$@"; then
  CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD_DIR/fuzz" -DTRIALD_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIALD_FUZZ_SECONDS="${TRIALD_FUZZ_SECONDS:-300}" \
    -DTRIALD_FUZZ_SEED="${TRIALD_FUZZ_SEED:-1}" >/dev/null
  cmake --build "$BUILD_DIR/fuzz" -j "$JOBS"
  (cd "$BUILD_DIR/fuzz" && ctest --output-on-failure -j "$JOBS" -L fuzz)
fi
