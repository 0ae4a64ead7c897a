#!/usr/bin/env bash
# The README's "test" command: installs dependencies, checks the formatting, builds everything and
# runs every test suite (unit, contract, integration, fault) with CTest; then, on a full run, the
# unit, contract and integration suites once more under ASan and UBSan, and the fuzzers. Ends with
# a table of each step's duration, the CTest time of each label and the slowest tests (also when
# a step fails), so that growth shows in every CI log.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# A full run (no CTest arguments) has every step below; TRIALD_<STEP>=0 leaves one out and
# TRIALD_<STEP>=1 forces it on a run with arguments.
step() {
  local v="${1:-}"
  shift
  [ "$v" = 1 ] || { [ "$#" -eq 0 ] && [ "$v" != 0 ]; }
}

# The durations: timed NAME COMMAND... runs COMMAND as one step of the table. The EXIT trap
# prints the table, with the step that failed (its command's status) and the steps not reached.
STEP_NAMES=()
STEP_SECONDS=()
STEP_RESULTS=()
CURRENT_STEP=""
CURRENT_START=0
CTEST_LOGS=()  # "NAME:BUILD_DIR:LOG" of each CTest run, for the label times and slowest tests
RUN_START=$(date +%s)

begin_step() {
  CURRENT_STEP="$1"
  CURRENT_START=$(date +%s)
  echo "== $1"
}

end_step() {
  STEP_NAMES+=("$CURRENT_STEP")
  STEP_SECONDS+=($(($(date +%s) - CURRENT_START)))
  STEP_RESULTS+=("$1")
  CURRENT_STEP=""
}

timed() {
  begin_step "$1"
  shift
  "$@"
  end_step ok
}

duration() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# The "Label Time Summary" CTest printed into LOG (the tests' own times, summed per label: with
# -j, more than the wall time the label took), and the ten slowest tests of DIR's last run (from
# Testing/Temporary/LastTest.log).
print_ctest_times() {
  local name="$1" dir="$2" log="$3"
  if [ -f "$log" ] && grep -q '^Label Time Summary:' "$log"; then
    echo "-- $name: CTest time per label (sum of the tests' times)"
    sed -n '/^Label Time Summary:/,/^$/{/^Label Time Summary:/d;/^$/d;p}' "$log"
  fi
  local last="$dir/Testing/Temporary/LastTest.log"
  if [ -f "$last" ]; then
    echo "-- $name: slowest tests"
    awk '/^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0 }
         /^Test time = / { printf "%9.1f s  %s\n", $4, name }' "$last" | sort -rn | head -10
  fi
}

print_times() {
  local rc=$?
  set +e
  if [ -n "$CURRENT_STEP" ]; then end_step "FAILED (exit $rc)"; fi
  echo
  echo "== durations ($(hostname), $(nproc) CPUs, JOBS=$JOBS)"
  printf '%-28s %8s  %s\n' step "m:ss" result
  local i
  for i in "${!STEP_NAMES[@]}"; do
    printf '%-28s %8s  %s\n' "${STEP_NAMES[$i]}" "$(duration "${STEP_SECONDS[$i]}")" "${STEP_RESULTS[$i]}"
  done
  printf '%-28s %8s  %s\n' total "$(duration $(($(date +%s) - RUN_START)))" \
    "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")"
  local entry
  for entry in "${CTEST_LOGS[@]}"; do
    IFS=: read -r name dir log <<<"$entry"
    print_ctest_times "$name" "$dir" "$log"
  done
  exit "$rc"
}
trap print_times EXIT

# ctest in build folder $1 with the other arguments, its output also in $1/ctest-output.log (for
# the label times at the end); then the reason of every test it reports as skipped (a
# TRIALD_SKIP, tests/support/skip.h), which its summary does not show. A --timeout among the
# arguments replaces the 600 s given to every test. TRIALD_CTEST_JOBS (default $JOBS) tests run at
# once.
run_ctest() {
  local dir="$1" rc=0
  shift
  CTEST_LOGS+=("$CURRENT_STEP:$dir:$dir/ctest-output.log")
  (cd "$dir" && ctest --output-on-failure -j "${TRIALD_CTEST_JOBS:-$JOBS}" --timeout 600 "$@") 2>&1 |
    tee "$dir/ctest-output.log" || rc=$?
  grep -h '^SKIPPED ' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null || true
  return "$rc"
}

timed "dependencies (apt-get)" "$ROOT/scripts/install-deps.sh"

# Formatting (TRIALD_FORMAT): every C++ file tracked by git is as clang-format-14 writes it with
# the repository's .clang-format. Prints the files that differ and fails. One clang-format
# process checks them all (one per file spent most of the step starting clang-format).
check_format() {
  local listed files=() out rc=0
  listed="$(git -C "$ROOT" ls-files -- '*.h' '*.cc')"  # fails outside a git checkout
  mapfile -t files <<<"$listed"
  out="$(cd "$ROOT" && clang-format-14 --dry-run --Werror "${files[@]}" 2>&1 >/dev/null)" || rc=$?
  local unformatted=()
  mapfile -t unformatted < <(sed -nE 's/^(.+):[0-9]+:[0-9]+: error: code should be clang-formatted.*/\1/p' <<<"$out" | sort -u)
  if [ ${#unformatted[@]} -ne 0 ]; then
    echo "clang-format-14: ${#unformatted[@]} file(s) differ from .clang-format:" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    echo "fix: clang-format-14 -i ${unformatted[*]}" >&2
    return 1
  fi
  if [ "$rc" -ne 0 ]; then
    echo "$out" >&2
    echo "clang-format-14 failed (exit $rc)" >&2
    return 1
  fi
  echo "clang-format-14: every tracked *.h and *.cc (${#files[@]}) is formatted"
}
if step "${TRIALD_FORMAT:-}" "$@"; then
  timed "format check" check_format
fi

# A full run with the sanitizer pass (TRIALD_SANITIZE) runs each test once. The sanitizer pass
# (below) runs the labels SAN_LABELS, less the tests labelled SAN_EXCLUDE; the normal build builds
# and runs the rest only, NORMAL_LABELS: the tests that cannot run under ASan or need trial-worker
# (no-sanitize), the fault suite and the documentation checks. Every label must be in one of the
# two (check_label_split), so that a new label cannot drop out of CI unseen. A run with CTest
# arguments, or without the sanitizer pass, builds everything and runs what it is asked.
SAN_LABELS='unit|postgres|integration'
SAN_EXCLUDE='no-sanitize'
NORMAL_LABELS='no-sanitize|fault|docs'
SPLIT=0
if step "${TRIALD_SANITIZE:-}" "$@" && [ "$#" -eq 0 ]; then SPLIT=1; fi

# The tests-<label> targets of build folder $1 whose label matches the regex $2
# (tests/CMakeLists.txt writes the labels that have programs to test_program_labels.txt).
label_targets() {
  local label
  while read -r label; do
    [ -n "$label" ] || continue
    if [[ "$label" =~ ^($2)$ ]]; then echo "tests-$label"; fi
  done <"$1/test_program_labels.txt"
}

# Fails naming any label of the normal build (its programs' labels, and CTest's labels of the
# tests it knows now) that neither pass runs.
check_label_split() {
  local label missing=()
  while read -r label; do
    [ -n "$label" ] || continue
    [[ "$label" =~ ^($SAN_LABELS|$NORMAL_LABELS)$ ]] || missing+=("$label")
  done < <({ cat "$BUILD_DIR/test_program_labels.txt"; (cd "$BUILD_DIR" && ctest --print-labels) |
    sed -n 's/^  //p'; } | sort -u)
  if [ ${#missing[@]} -ne 0 ]; then
    echo "CTest label(s) in neither the sanitizer pass ($SAN_LABELS) nor the normal pass" \
      "($NORMAL_LABELS): ${missing[*]} (scripts/test.sh)" >&2
    return 1
  fi
}

build_normal() {
  if [ "$SPLIT" = 0 ]; then
    build_triald
    return
  fi
  configure_triald -DTRIALD_BUILD_TESTS=ON
  check_label_split
  local targets
  targets="triald trialctl bench-tools $(label_targets "$BUILD_DIR" "$NORMAL_LABELS" | tr '\n' ' ')"
  echo "normal build: $targets(the sanitizer pass builds and runs the rest)"
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $targets
}

timed "configure + build" build_normal
if [ "$SPLIT" = 1 ]; then
  timed "ctest" run_ctest "$BUILD_DIR" -L "$NORMAL_LABELS"
else
  timed "ctest" run_ctest "$BUILD_DIR" "$@"
fi

# The sanitizer pass (TRIALD_SANITIZE): a second build in $BUILD_DIR/sanitize with ASan and UBSan
# (-DTRIALD_SANITIZE=ON) and without trial-worker (LibTorch), then the unit, contract (with
# PostgreSQL) and integration suites in it, less the tests labelled no-sanitize
# (tests/README.md, "The sanitizer pass"). It builds the programs of those labels only (their
# tests-<label> targets). Every process writes its sanitizer reports to
# $BUILD_DIR/sanitize/reports: a report from the daemon, trialctl or a worker fails the pass even
# where the test did not look at that process's exit.
build_sanitizer() {
  # Debug with -Og -g1: under instrumentation a third quicker to compile than -O1 (which cost
  # 17 minutes of a 37-minute CI run), quick enough to run (the tests mostly wait on processes
  # and Python), and the reports still have line numbers.
  cmake -S "$ROOT" -B "$SAN_DIR" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" \
    -DTRIALD_SANITIZE=ON "$(unity_build_flag)" \
    -DTRIALD_BUILD_WORKER=OFF >/dev/null
  local targets
  targets="$(label_targets "$SAN_DIR" "$SAN_LABELS" | tr '\n' ' ')"
  echo "sanitizer build: $targets"
  # shellcheck disable=SC2086
  cmake --build "$SAN_DIR" -j "$JOBS" --target $targets
}

run_sanitizer() {
  rm -rf "$SAN_DIR/reports"
  mkdir -p "$SAN_DIR/reports"
  ASAN_OPTIONS="log_path=$SAN_DIR/reports/asan:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="log_path=$SAN_DIR/reports/ubsan:print_stacktrace=1:${UBSAN_OPTIONS:-}" \
    run_ctest "$SAN_DIR" -L "$SAN_LABELS" -LE "$SAN_EXCLUDE"
  if [ -n "$(ls -A "$SAN_DIR/reports")" ]; then
    for r in "$SAN_DIR/reports"/*; do echo "== $r" >&2; cat "$r" >&2; done
    echo "sanitizer reports above (in $SAN_DIR/reports)" >&2
    return 1
  fi
}

if step "${TRIALD_SANITIZE:-}" "$@"; then
  SAN_DIR="$BUILD_DIR/sanitize"
  timed "sanitizer build" build_sanitizer
  timed "sanitizer ctest" run_sanitizer
fi

# Fuzzing (TRIALD_FUZZ; tests/fuzz/): a second build with clang, libFuzzer, ASan and UBSan in
# $BUILD_DIR/fuzz; replays the committed inputs, then fuzzes each decoder for a fixed number of
# inputs from seed TRIALD_FUZZ_SEED (1; 0 draws a new seed), at most TRIALD_FUZZ_SECONDS (300)
# each.
if step "${TRIALD_FUZZ:-}" "$@"; then
  FUZZ_DIR="$BUILD_DIR/fuzz"
  build_fuzz() {
    CXX=clang++-14 cmake -S "$ROOT" -B "$FUZZ_DIR" -DTRIALD_FUZZ=ON "$(unity_build_flag)" \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIALD_FUZZ_SECONDS="${TRIALD_FUZZ_SECONDS:-300}" \
      -DTRIALD_FUZZ_SEED="${TRIALD_FUZZ_SEED:-1}" >/dev/null
    cmake --build "$FUZZ_DIR" -j "$JOBS"
  }
  timed "fuzz build" build_fuzz
  timed "fuzz run" run_ctest "$FUZZ_DIR" -L fuzz --timeout $((${TRIALD_FUZZ_SECONDS:-300} + 600))
fi
