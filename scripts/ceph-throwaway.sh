#!/usr/bin/env bash
# A throwaway Ceph cluster (Debian 12's Ceph 16: ceph-mon, ceph-osd, ceph-common) in a temporary
# directory, for benchmarks and manual tests of the cluster tier: one monitor on a free loopback
# port, 1-3 memstore OSDs, cephx on, one pool of size 1. The recipe is the one of
# tests/testing/ceph_cluster.cc. Every daemon runs in the foreground of its own process (-f); the
# script records their pids in DIR/pids and `stop` signals exactly those, then removes DIR.
#
# Usage:
#   scripts/ceph-throwaway.sh [start] [--osds N] [--memstore-bytes BYTES] [--pool NAME] [--dir DIR]
#       Prints KEY=value lines for eval: CEPH_DIR, CEPH_CONF, CEPH_KEYRING, CEPH_USER, CEPH_POOL,
#       CEPH_MON_HOST. Progress and errors go to stderr; on failure it stops what it started.
#   scripts/ceph-throwaway.sh stop DIR
#       SIGTERM to each recorded pid (SIGKILL after 10 s), then removes DIR.
#
#   eval "$(scripts/ceph-throwaway.sh --osds 1)"
#   rados -c "$CEPH_CONF" -k "$CEPH_KEYRING" -p "$CEPH_POOL" bench 3 write
#   scripts/ceph-throwaway.sh stop "$CEPH_DIR"
#
# Memstore keeps every object in RAM (about twice the stored bytes) and blocks all writes once it
# counts itself full. Ceph 16's memstore does not give all of a deleted object's bytes back to its
# count (a 1 GiB memstore reported itself full after 2.0-2.5 GB written and deleted, with
# nothing stored), so --memstore-bytes (default 8 GiB; a cap, not an allocation) should exceed
# what a cluster's whole life writes. RAM follows what is stored (plus the allocator's cache):
# keep each run small and start a fresh cluster per benchmark run.
set -euo pipefail

die() {
  echo "ceph-throwaway: $*" >&2
  exit 1
}

# Stops the pids recorded in $1/pids (last started first), then removes $1.
stop_cluster() {
  local dir="$1"
  [[ -f "$dir/ceph-throwaway" ]] || die "$dir was not made by ceph-throwaway.sh"
  if [[ -f "$dir/pids" ]]; then
    local pids
    pids=$(tac "$dir/pids")
    local pid
    for pid in $pids; do
      kill -TERM "$pid" 2>/dev/null || true
    done
    local i
    for pid in $pids; do
      for ((i = 0; i < 100; ++i)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$pid" 2>/dev/null; then
        echo "ceph-throwaway: pid $pid did not exit after SIGTERM; SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
  fi
  rm -rf "$dir"
}

if [[ "${1:-}" == "stop" ]]; then
  [[ $# -eq 2 ]] || die "usage: $0 stop DIR"
  stop_cluster "$2"
  exit 0
fi
[[ "${1:-}" == "start" ]] && shift

osds=1
memstore_bytes=$((8 << 30))
pool=kvtier-bench
dir=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --osds) osds="$2"; shift 2 ;;
    --memstore-bytes) memstore_bytes="$2"; shift 2 ;;
    --pool) pool="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) die "unknown argument '$1' (see the comment at the top of $0)" ;;
  esac
done
[[ "$osds" =~ ^[1-3]$ ]] || die "--osds must be 1, 2 or 3"
[[ "$memstore_bytes" =~ ^[0-9]+$ ]] || die "--memstore-bytes must be a byte count"
for b in ceph-mon ceph-osd ceph rados ceph-authtool monmaptool python3; do
  command -v "$b" >/dev/null || die "$b not found (scripts/install-deps.sh installs Ceph)"
done

if [[ -z "$dir" ]]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/ceph-throwaway.XXXXXX")
else
  mkdir -p "$dir"
  [[ -z "$(ls -A "$dir")" ]] || die "--dir $dir is not empty"
fi
dir=$(cd "$dir" && pwd)
touch "$dir/ceph-throwaway" "$dir/pids"
started=0
# On any failure (set -e or die), stop what was started.
trap '[[ $started == 1 ]] || { echo "ceph-throwaway: failed; removing $dir" >&2; stop_cluster "$dir"; }' EXIT

# A port that was free a moment ago (the kernel's pick for port 0).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fsid=$(cat /proc/sys/kernel/random/uuid)
mon_host="v2:127.0.0.1:$port"
conf="$dir/ceph.conf"
keyring="$dir/admin.keyring"
mkdir "$dir/run" "$dir/mon.a"
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = $mon_host
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $keyring
run dir = $dir/run
log file = $dir/\$name.log
admin socket = $dir/run/\$name.asok
osd objectstore = memstore
memstore device bytes = $memstore_bytes
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
mon data avail crit = 0
mon data avail warn = 0
osd data = $dir/osd.\$id
mon data = $dir/mon.\$id
ms bind ipv6 = false
public addr = 127.0.0.1
[osd]
keyring = $dir/osd.\$id/keyring
EOF

quiet() { "$@" >>"$dir/setup.log" 2>&1 || { tail -n 20 "$dir/setup.log" >&2; return 1; }; }
ceph_cli() { ceph -c "$conf" -k "$keyring" -n client.admin --connect-timeout 15 "$@"; }
# Starts "$@" in the background with its output in log $1 and records its pid.
spawn() {
  local log="$1"
  shift
  nohup "$@" >"$log" 2>&1 </dev/null &
  echo $! >>"$dir/pids"
}

echo "ceph-throwaway: monitor on 127.0.0.1:$port in $dir" >&2
quiet ceph-authtool --create-keyring "$dir/mon.keyring" --gen-key -n mon. --cap mon 'allow *'
quiet ceph-authtool --create-keyring "$keyring" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *'
quiet ceph-authtool "$dir/mon.keyring" --import-keyring "$keyring"
quiet monmaptool --create --addv a "[$mon_host]" --fsid "$fsid" "$dir/monmap"
quiet ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.keyring"
spawn "$dir/mon.a.stdout" ceph-mon -f -c "$conf" -i a
quiet ceph_cli mon stat

for ((n = 0; n < osds; ++n)); do
  uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(ceph_cli osd new "$uuid" 2>>"$dir/setup.log" | tail -n 1)
  [[ "$id" =~ ^[0-9]+$ ]] || die "'ceph osd new' printed '$id'"
  mkdir "$dir/osd.$id"
  quiet ceph-authtool --create-keyring "$dir/osd.$id/keyring" --gen-key -n "osd.$id"
  quiet ceph_cli auth add "osd.$id" osd 'allow *' mon 'allow profile osd' -i "$dir/osd.$id/keyring"
  quiet ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" --keyring "$dir/osd.$id/keyring"
  spawn "$dir/osd.$id.stdout" ceph-osd -f -c "$conf" -i "$id"
  for ((tries = 0; ; ++tries)); do
    ceph_cli osd dump 2>/dev/null | grep -q "^osd.$id up" && break
    ((tries < 300)) || die "osd.$id did not come up (log $dir/osd.$id.log)"
    sleep 0.1
  done
  echo "ceph-throwaway: osd.$id up" >&2
done
quiet ceph_cli osd pool create "$pool" 16 16 replicated
quiet ceph_cli osd pool set "$pool" size 1 --yes-i-really-mean-it
started=1

echo "CEPH_DIR=$dir"
echo "CEPH_CONF=$conf"
echo "CEPH_KEYRING=$keyring"
echo "CEPH_USER=admin"
echo "CEPH_POOL=$pool"
echo "CEPH_MON_HOST=$mon_host"
