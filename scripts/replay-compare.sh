#!/usr/bin/env bash
# Replays one workload through kvtier-example-engine under several codecs, each against a fresh
# kvtierd with the same host and disk byte budgets, and prints the prefix tokens served from cache
# side by side (docs/PERFORMANCE.md, "Trace replay").
# Usage: scripts/replay-compare.sh BUILD_DIR HOST_CAPACITY DISK_CAPACITY "CODECS" [engine flags...]
#   e.g. scripts/replay-compare.sh build 256MiB 1GiB "raw nvfp4" \
#          --trace ../shared/traces/mooncake_synthetic_trace.jsonl --requests 1000
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,7p' "$0"; exit 2; }
bin=$(cd "$1" && pwd)/bin
host=$2
disk=$3
codecs=$4
shift 4
dir=$(mktemp -d /tmp/kvtier-replay.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$dir"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for codec in $codecs; do
  rm -rf "$dir/state"
  "$bin/kvtierd" --state-dir="$dir/state" --socket="$dir/kvtier.sock" \
    --set=host.capacity="$host" --set=host.pin=none --set=disk.capacity="$disk" \
    --set=disk.chunk=16MiB --set="pools.allowed_dirs=[$dir]" \
    --set="metrics.listen=127.0.0.1:$port" > "$dir/kvtierd-$codec.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do [ -S "$dir/kvtier.sock" ] && break; sleep 0.1; done
  start=$(date +%s.%N)
  "$bin/kvtier-example-engine" --socket="$dir/kvtier.sock" --pool-dir="$dir" --codec="$codec" \
    --json --quiet "$@" > "$dir/$codec.json"
  end=$(date +%s.%N)
  python3 - "$dir/$codec.json" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
h = r["hits_by_tier"]
print(f'{r["codec"]:>8}: {r["sessions"]} requests, prompt tokens {r["prompt_tokens"]}, '
      f'from cache {r["cached_prefix_tokens"]} ({100.0 * r["cached_prefix_tokens"] / max(1, r["prompt_tokens"]):.1f}%), '
      f'blocks served host {h["host"]} disk {h["disk"]}, '
      f'cold/hot offloaded {r["cold_bytes_offloaded"] / max(1, r["hot_bytes_offloaded"]):.3f}, '
      f'pages checked {r["pages_checked"] + r["resumed_pages_checked"]}, mismatches {r["mismatches"]}, '
      f'hook errors {r["hook_errors"]}, {secs:.1f} s')
PY
  kill -TERM "$pid"
  wait "$pid" || { echo "kvtierd ($codec) did not stop cleanly"; exit 1; }
  pid=""
done
