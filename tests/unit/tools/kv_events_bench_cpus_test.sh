#!/bin/sh
# `kvtier-bench kv-events --cpus=...` for a moment: the daemons pinned to the first CPU this
# process may use, the client and the subscriber to the second (the first again on a single CPU).
# Fails when the bench fails (it checks each child's CPUs itself) or its JSON does not report the
# CPUs asked for. Usage: kv_events_bench_cpus_test.sh KVTIER_BENCH
set -eu
bench=$1
# The allowed CPUs, one per line (from a list such as "0-3,6").
cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' '\n' |
  awk -F- '{ last = (NF == 2) ? $2 : $1; for (c = $1; c <= last; c++) print c }')
first=$(echo "$cpus" | sed -n 1p)
second=$(echo "$cpus" | sed -n 2p)
[ -n "$second" ] || second=$first
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bench" kv-events --seconds=0.25 --rounds=1 --rate=2000 --modes=paced \
  --cpus="daemon:$first,client:$second,subscriber:$second" --json > "$out"
for want in "\"daemon\": \"$first\"" "\"client\": \"$second\"" "\"subscriber\": \"$second\""; do
  if ! grep -q "$want" "$out"; then
    echo "the JSON does not report $want:" >&2
    cat "$out" >&2
    exit 1
  fi
done
echo "kv-events --cpus: daemons on CPU $first, client and subscriber on CPU $second"
