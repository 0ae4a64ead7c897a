#!/usr/bin/env bash
# A small network of "hosts" for partition tests: a PostgreSQL server and N triald nodes, each
# in its own network namespace, joined by veth pairs to a bridge in a switch namespace. Nothing
# here touches the machine's own network: the addresses (10.77.0.0/24) exist only inside the
# namespaces this script makes, and the namespaces have no route anywhere else. Needs root
# (ip netns). tests/integration/partition_test.cc drives it; it also serves by hand:
#
#   scripts/netns_lab.sh up DIR N        make the namespaces, start the database (prints its URL)
#   scripts/netns_lab.sh path DIR HOST   the namespace file of HOST (db, n1..nN) for setns(2)
#   scripts/netns_lab.sh cut DIR A B     drop every packet between hosts A and B, both ways
#   scripts/netns_lab.sh isolate DIR H   unplug host H: its link to the switch goes down
#   scripts/netns_lab.sh heal DIR        undo every cut and isolation
#   scripts/netns_lab.sh down DIR        stop the database, remove the namespaces and DIR
#
# Hosts: `db` is 10.77.0.1 (PostgreSQL on port 5432), node i is 10.77.0.(10+i). A cut makes
# the packets between two hosts vanish silently, both ways (a real partition: TCP retries, no
# error comes back; see cut below); an isolation takes the switch's port down. The namespaces are named
# <tag>-sw, <tag>-db, <tag>-n1... with a tag unique to DIR, so several labs can coexist.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUBNET=10.77.0
NOWHERE=02:00:00:00:77:77  # a locally administered address no veth here has

die() {
  echo "netns_lab: $*" >&2
  exit 1
}

usage() { die "usage: $0 up DIR N | path DIR HOST | cut DIR A B | isolate DIR HOST | heal DIR | down DIR"; }

[ "$(id -u)" -eq 0 ] || die "needs root (ip netns)"
command -v ip >/dev/null || die "no ip command: install Debian's iproute2 (scripts/install-deps.sh)"

tag_of() { cat "$1/tag" 2>/dev/null || die "no lab in $1 (run: $0 up $1 N)"; }
ns_of() { echo "$(tag_of "$1")-$2"; }
addr_of() {
  case "$1" in
    db) echo "$SUBNET.1" ;;
    n[0-9]*) echo "$SUBNET.$((10 + ${1#n}))" ;;
    *) die "unknown host \"$1\" (expected db or n1, n2, ...)" ;;
  esac
}
hosts_of() { cat "$1/hosts"; }

up() {
  local dir="$1" n="$2" tag sw h
  [[ "$n" =~ ^[1-9]$ ]] || die "N must be 1..9, not \"$n\""
  [ -e "$dir/tag" ] && down "$dir"
  mkdir -p "$dir"
  # A tag from the kernel's randomness: namespace names must not collide with another lab's.
  tag="tdl$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
  echo "$tag" >"$dir/tag"
  : >"$dir/cuts"
  sw="$tag-sw"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  local hosts=(db)
  for i in $(seq 1 "$n"); do hosts+=("n$i"); done
  printf '%s\n' "${hosts[@]}" >"$dir/hosts"
  for h in "${hosts[@]}"; do
    local ns="$tag-$h"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "p-$h" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p-$h" master br0 up
    ip -n "$ns" addr add "$(addr_of "$h")/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  # The database: scripts/pg_test_server.sh inside the db namespace, listening on its address.
  PG_LISTEN="$(addr_of db)" ip netns exec "$tag-db" "$ROOT/scripts/pg_test_server.sh" start \
    "$dir/pg" 5432 >/dev/null
  echo "postgresql://postgres@$(addr_of db):5432/postgres"
}

cut() {
  local dir="$1" a="$2" b="$3"
  # Each side's neighbour entry for the other names a hardware address no host has: frames
  # leave, the bridge floods them, nobody takes them. Sends succeed, nothing arrives, no error
  # comes back: TCP retransmits until its own timeouts, as across a real partition.
  ip -n "$(ns_of "$dir" "$a")" neigh replace "$(addr_of "$b")" lladdr "$NOWHERE" dev eth0 nud permanent
  ip -n "$(ns_of "$dir" "$b")" neigh replace "$(addr_of "$a")" lladdr "$NOWHERE" dev eth0 nud permanent
  echo "cut $a $b" >>"$dir/cuts"
}

isolate() {
  local dir="$1" h="$2"
  ip -n "$(ns_of "$dir" sw)" link set "p-$h" down
  echo "isolate $h" >>"$dir/cuts"
}

heal() {
  local dir="$1" kind a b h
  while read -r kind a b; do
    case "$kind" in
      cut)
        ip -n "$(ns_of "$dir" "$a")" neigh del "$(addr_of "$b")" dev eth0 2>/dev/null || true
        ip -n "$(ns_of "$dir" "$b")" neigh del "$(addr_of "$a")" dev eth0 2>/dev/null || true
        ;;
      isolate) ip -n "$(ns_of "$dir" sw)" link set "p-$a" up ;;
    esac
  done <"$dir/cuts"
  : >"$dir/cuts"
  # Addresses that went unresolved while a link was down are resolved afresh at the next packet,
  # not after the kernel's own retry delay.
  for h in $(hosts_of "$dir"); do
    ip -n "$(ns_of "$dir" "$h")" neigh flush dev eth0 2>/dev/null || true
  done
}

down() {
  local dir="$1" tag h
  tag="$(cat "$dir/tag" 2>/dev/null)" || {
    rm -rf "$dir"
    return 0
  }
  if [ -d "$dir/pg" ]; then
    ip netns exec "$tag-db" "$ROOT/scripts/pg_test_server.sh" stop "$dir/pg" || true
  fi
  for h in $(hosts_of "$dir" 2>/dev/null) sw; do
    ip netns del "$tag-$h" 2>/dev/null || true
  done
  rm -rf "$dir"
}

[ $# -ge 2 ] || usage
cmd="$1"
dir="$(realpath -m "$2")"
case "$cmd" in
  up) [ $# -eq 3 ] || usage; up "$dir" "$3" ;;
  path) [ $# -eq 3 ] || usage; echo "/run/netns/$(ns_of "$dir" "$3")" ;;
  cut) [ $# -eq 4 ] || usage; cut "$dir" "$3" "$4" ;;
  isolate) [ $# -eq 3 ] || usage; isolate "$dir" "$3" ;;
  heal) [ $# -eq 2 ] || usage; heal "$dir" ;;
  down) [ $# -eq 2 ] || usage; down "$dir" ;;
  *) usage ;;
esac
