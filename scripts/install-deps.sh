#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of triald from Debian's archive; with
# --demo, only what scripts/demo.sh needs (DEMO_PACKAGES below).
# Idempotent: packages already present are skipped quickly by apt.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libtorch-dev libopenblas0-pthread
  libboost1.81-dev libboost-json1.81-dev
  libspdlog-dev libfmt-dev
  libsqlite3-dev sqlite3
  libpq-dev  # the PostgreSQL storage (libpq)
  postgresql  # a throwaway server for the tests (scripts/pg_test_server.sh); not the daemon's
  catch2
  libtomlplusplus-dev
  libsystemd-dev
  libcli11-dev  # command-line parsing of triald, trialctl and trial-worker (header-only)
  libeigen3-dev liblbfgspp-dev  # the GP sampler's linear algebra and L-BFGS-B (header-only)
  systemd  # systemd-analyze: tests/integration/systemd_test.cc verifies the unit files
  python3 python3-optuna python3-cmaes python3-torch
  mypy  # type-checks the Python client (CTest python_types)
  pyflakes3  # lints the Python client and its tests (CTest python_pyflakes)
  procps psmisc
  e2fsprogs  # mkfs.ext4: the read-only remount test's loop file system (storage_outage_test.cc)
  slurmctld slurmd slurm-client munge  # the one-node Slurm test cluster (scripts/slurm_test_cluster.sh)
  iproute2  # ip netns: the partition test's network namespaces (scripts/netns_lab.sh)
  chromium  # headless, renders trialctl's HTML report in tests/integration/report_test.cc
  clang-14 libclang-rt-14-dev
  clang-format-14  # scripts/test.sh checks that every C++ file is formatted (.clang-format)
)
# The demo's share (scripts/demo.sh runs install-deps.sh --demo): what builds triald, trialctl and
# trial-worker (configured without the test suites) and runs make_fixtures.py; none of the test
# and benchmark tools (the PostgreSQL server, Catch2, Chromium, clang, clang-format, systemd,
# Optuna, Python's PyTorch). Every one of them is in PACKAGES too.
DEMO_PACKAGES=(
  build-essential cmake pkg-config
  libtorch-dev libopenblas0-pthread
  libboost1.81-dev libboost-json1.81-dev
  libspdlog-dev libfmt-dev
  libsqlite3-dev libpq-dev
  libtomlplusplus-dev libsystemd-dev libcli11-dev
  libeigen3-dev liblbfgspp-dev
  python3
)
for p in "${DEMO_PACKAGES[@]}"; do
  [[ " ${PACKAGES[*]} " == *" $p "* ]] || { echo "install-deps: $p is in DEMO_PACKAGES, not in PACKAGES" >&2; exit 1; }
done
case "${1:-}" in
  "") ;;
  --demo) PACKAGES=("${DEMO_PACKAGES[@]}") ;;
  *) echo "usage: install-deps.sh [--demo]" >&2; exit 2 ;;
esac
# node and npm run the tokenizer's reference implementation (npm's gpt-3-encoder) for the tests
# and for make_fixtures.py (the demo too).
# A machine whose Node.js came from elsewhere (e.g. NodeSource's nodejs, which bundles npm and
# conflicts with Debian's npm package) keeps it.
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
# Debian's postgresql creates and starts a "main" cluster on port 5432 when installed; the
# tests start their own server instead (scripts/pg_test_server.sh), so ask postgresql-common not
# to create one. A drop-in file, not an edit of its createcluster.conf (a conffile): applies to
# clusters created from now on and leaves a machine's existing clusters alone.
if printf '%s\n' "${missing[@]}" | grep -qx postgresql; then
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" |
    $SUDO tee /etc/postgresql-common/createcluster.d/triald-no-main-cluster.conf >/dev/null
fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
