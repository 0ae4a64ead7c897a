# Shared by the scripts in this folder: the repository root and the build step.
# shellcheck shell=bash
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${TRIALD_BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"

# Configures $BUILD_DIR with the CMake options given (and the build type, $CMAKE_BUILD_TYPE or
# RelWithDebInfo). TRIALD_DEBUG_INFO, when set, is the RelWithDebInfo build's debug-information
# flag in place of CMake's -g: .ci/run sets -g1 (line tables and function names, enough for
# backtraces and sanitizer reports; much less for the compiler and linker to write).
configure_triald() {
  local flags=()
  if [ -n "${TRIALD_DEBUG_INFO:-}" ]; then
    flags+=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $TRIALD_DEBUG_INFO -DNDEBUG")
  fi
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
    "$(unity_build_flag)" "${flags[@]}" "$@" >/dev/null
}

# The unity-build option for a cmake configure: TRIALD_UNITY_BUILD=1 (.ci/run sets it) compiles
# each target's sources in batches of 8 per translation unit (CMake's unity build), so a cold
# build parses the headers every file shares (Boost.Asio, Boost.JSON, spdlog, Catch2) and
# compiles their inline code (instrumented, under the sanitizers) once per batch instead of once
# per file. Unset, one file per unit, as an incremental build wants. Given every time, so a build
# folder follows the variable. In a unity build two files of one target cannot both define a
# name in an anonymous namespace (tests/README.md, "Unity builds").
unity_build_flag() {
  if [ "${TRIALD_UNITY_BUILD:-0}" = 1 ]; then
    echo "-DCMAKE_UNITY_BUILD=ON"
  else
    echo "-DCMAKE_UNITY_BUILD=OFF"
  fi
}

# Configures and builds everything (daemon, trialctl, trial-worker, tests) into $BUILD_DIR.
build_triald() {
  configure_triald -DTRIALD_BUILD_TESTS=ON
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

# Builds what the demo runs, and nothing else: triald, trialctl and trial-worker (which
# make_fixtures.py runs to pretrain the demo's checkpoint). A new build folder is configured
# without the test suites (no Catch2 needed) and with -g1 (TRIALD_DEBUG_INFO, unless set: the
# LibTorch sources compile about 30% faster); one that exists keeps its tests, unbuilt, and its
# flags.
build_demo() {
  if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
    configure_triald
  else
    TRIALD_DEBUG_INFO="${TRIALD_DEBUG_INFO:--g1}" configure_triald -DTRIALD_BUILD_TESTS=OFF
  fi
  cmake --build "$BUILD_DIR" -j "$JOBS" --target triald trialctl trial-worker
}

# Starts triald on $1 (state dir) in the background, logging to $1.log; sets TRIALD_PID and
# waits until it answers.
start_triald() {
  local state="$1"; shift
  "$BUILD_DIR/bin/triald" --state-dir "$state" "$@" >"$state.log" 2>&1 &
  TRIALD_PID=$!
  for _ in $(seq 1 300); do
    if "$BUILD_DIR/bin/trialctl" --socket "$state/triald.sock" ping >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$TRIALD_PID" 2>/dev/null; then
      echo "triald failed to start:" >&2; cat "$state.log" >&2; return 1
    fi
    sleep 0.05
  done
  echo "triald did not answer within 15 s" >&2; return 1
}

# SIGTERM and wait: triald stops its trials, records them and exits 0.
stop_triald() {
  if [ -n "${TRIALD_PID:-}" ] && kill -0 "$TRIALD_PID" 2>/dev/null; then
    kill -TERM "$TRIALD_PID"
    wait "$TRIALD_PID" || true
  fi
  TRIALD_PID=""
}
