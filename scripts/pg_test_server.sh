#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests: Debian's postgresql, initdb into a private directory,
# trust authentication, listening only on 127.0.0.1, torn down afterwards. CTest starts one per
# test run as the `postgres` fixture (tests/CMakeLists.txt); it also serves by hand:
#
#   scripts/pg_test_server.sh start DIR [PORT]   start a server; prints its admin URL
#                                                (postgresql://postgres@127.0.0.1:PORT/postgres)
#   scripts/pg_test_server.sh restart DIR        restart it (fast shutdown, then start), keeping
#                                                its data: what clients see when a server restarts
#   scripts/pg_test_server.sh stop DIR           stop it and remove DIR
#
# Without PORT a free port is picked. PG_LISTEN (default 127.0.0.1) is the address it listens on
# and names in the URL: scripts/netns_lab.sh starts one inside a network namespace, on that
# namespace's own address. A server left running in DIR by an interrupted run is
# stopped and replaced by `start`.
#
# PostgreSQL refuses to run as root. Run as root (CI, containers), the server runs as the
# `postgres` user that Debian's package creates; run as anyone else, it runs as that user. The
# cluster lives in DIR/pg when the server's user can reach DIR and the socket path stays short,
# otherwise in a private directory under ${TMPDIR:-/tmp} that DIR/cluster-root names.
#
# The server is tuned for disposable test data: fsync=off and full_page_writes=off make every
# commit cheap, at the price of a cluster that an OS crash may corrupt — never use these
# settings for data that matters.
set -euo pipefail

die() {
  echo "pg_test_server: $*" >&2
  exit 1
}

LISTEN="${PG_LISTEN:-127.0.0.1}"
[[ "$LISTEN" =~ ^[0-9.]+$ ]] || die "PG_LISTEN must be an IPv4 address, not \"$LISTEN\""

usage() { die "usage: $0 start DIR [PORT] | restart DIR | stop DIR"; }

# The newest installed server binaries (Debian keeps them off PATH, per major version), or
# PG_BINDIR, or initdb on PATH (other distributions).
find_bindir() {
  if [ -n "${PG_BINDIR:-}" ]; then
    echo "$PG_BINDIR"
    return
  fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then
    echo "$d"
    return
  fi
  if command -v initdb >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return
  fi
  die "no PostgreSQL server found (initdb): install Debian's postgresql (scripts/install-deps.sh) or set PG_BINDIR"
}

# Runs a command as the server's user.
as_server_user() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# True when something accepts TCP connections on $LISTEN:$1.
port_in_use() { (exec 3<>"/dev/tcp/$LISTEN/$1") 2>/dev/null; }

pick_port() {
  local p
  for _ in $(seq 1 100); do
    # Below Linux's ephemeral range (32768+), so no outgoing connection holds it.
    p=$((20000 + RANDOM % 12000))
    if ! port_in_use "$p"; then
      echo "$p"
      return
    fi
  done
  die "no free port found in 20000..31999"
}

# Stops the server of DIR, if any, and removes its files and DIR.
stop_server() {
  local dir="$1" root=""
  [ -f "$dir/cluster-root" ] && root="$(cat "$dir/cluster-root")"
  if [ -n "$root" ] && [ -f "$root/data/postmaster.pid" ]; then
    local bindir
    bindir="$(find_bindir)"
    # Fast shutdown: disconnects clients (a test may still hold connections) and exits cleanly.
    as_server_user "$bindir/pg_ctl" -D "$root/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      as_server_user "$bindir/pg_ctl" -D "$root/data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
      true
  fi
  [ -n "$root" ] && rm -rf "$root"
  rm -rf "$dir"
}

start_server() {
  local dir="$1" port="${2:-}"
  local bindir
  bindir="$(find_bindir)"
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    die "running as root, but there is no 'postgres' user to run the server as (Debian's postgresql package creates it)"
  fi
  stop_server "$dir"
  mkdir -p "$dir"
  if [ -z "$port" ]; then
    port="$(pick_port)"
  elif port_in_use "$port"; then
    die "port $port on $LISTEN is already in use; choose another (for CTest: cmake -DTRIALD_TEST_PG_PORT=N)"
  fi

  # The cluster's root: DIR/pg if the server's user can write there and the socket path fits
  # in sockaddr_un (107 bytes), else a private directory under $TMPDIR.
  local root="$dir/pg"
  mkdir -p "$root"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$root"
  if ! as_server_user test -w "$root" || [ $((${#root} + 24)) -gt 100 ]; then
    rm -rf "$root"
    root="$(mktemp -d "${TMPDIR:-/tmp}/triald-pg.XXXXXX")"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$root"
    as_server_user test -w "$root" || die "the server's user cannot write to $root"
  fi
  echo "$root" >"$dir/cluster-root"
  as_server_user mkdir -p "$root/socket"

  # --no-sync: the cluster is disposable (see the header). UTF8 with the C locale: the encoding
  # triald expects, independent of the machine's locale.
  if ! as_server_user "$bindir/initdb" -D "$root/data" -U postgres -A trust -E UTF8 \
    --locale=C --no-sync >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    die "initdb into $root/data failed (log above)"
  fi
  # PG_TEST_DURABLE=1 keeps fsync on, as a production server has it (benchmarks against SQLite's
  # synchronous=FULL: scripts/bench_cluster.py).
  local fsync=off
  [ "${PG_TEST_DURABLE:-0}" = 1 ] && fsync=on
  as_server_user tee -a "$root/data/postgresql.conf" >/dev/null <<EOF
# Added by scripts/pg_test_server.sh: a disposable test server (never use for real data).
listen_addresses = '$LISTEN'
port = $port
unix_socket_directories = '$root/socket'
fsync = $fsync
full_page_writes = $fsync
max_connections = 200
shared_buffers = 32MB
EOF
  # Listening elsewhere than loopback (a lab's namespace): clients on the server's own subnet
  # are trusted too (initdb's rules name only loopback).
  if [ "$LISTEN" != 127.0.0.1 ]; then
    echo "host all all samenet trust" | as_server_user tee -a "$root/data/pg_hba.conf" >/dev/null
  fi
  if ! as_server_user "$bindir/pg_ctl" -D "$root/data" -l "$root/server.log" -w -t 60 start \
    >/dev/null; then
    cat "$root/server.log" >&2 || true
    die "the server in $root/data did not start (log above)"
  fi
  local url="postgresql://postgres@$LISTEN:$port/postgres"
  echo "$url" >"$dir/url"
  echo "$url"
}

[ $# -ge 2 ] || usage
cmd="$1"
dir="$(realpath -m "$2")"
case "$cmd" in
  start)
    [ $# -le 3 ] || usage
    start_server "$dir" "${3:-}"
    ;;
  restart)
    [ $# -eq 2 ] || usage
    root="$(cat "$dir/cluster-root" 2>/dev/null)" || die "no server was started in $dir"
    as_server_user "$(find_bindir)/pg_ctl" -D "$root/data" -l "$root/server.log" -m fast -w \
      -t 60 restart >/dev/null || die "restarting the server in $root/data failed (see $root/server.log)"
    ;;
  stop)
    [ $# -eq 2 ] || usage
    stop_server "$dir"
    ;;
  *) usage ;;
esac
