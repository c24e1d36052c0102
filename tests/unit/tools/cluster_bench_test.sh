#!/usr/bin/env bash
# scripts/ceph-throwaway.sh and `kvtier-bench cluster` end to end, as a user runs them: start a
# throwaway cluster, run a small benchmark with both writers and the lookup, check that every side
# measured something and that the pool is empty afterwards, then stop the cluster and check that
# its processes and directory are gone. Exit 77 (skipped) without the Ceph binaries.
# Usage: cluster_bench_test.sh SOURCE_DIR KVTIER_BENCH
set -euo pipefail
src="$1"
bench="$2"
for b in ceph-mon ceph-osd ceph rados ceph-authtool monmaptool; do
  command -v "$b" >/dev/null || { echo "skipped: $b is not installed"; exit 77; }
done
eval "$("$src/scripts/ceph-throwaway.sh" --osds 1 --memstore-bytes $((512 << 20)))"
trap '"$src/scripts/ceph-throwaway.sh" stop "$CEPH_DIR" || true' EXIT
pids=$(cat "$CEPH_DIR/pids")
[[ $(wc -w <<<"$pids") -eq 2 ]] || { echo "FAIL: expected a monitor and an OSD pid: $pids"; exit 1; }
for pid in $pids; do kill -0 "$pid"; done

out="$CEPH_DIR/bench.json"
"$bench" cluster --ceph-conf "$CEPH_CONF" --keyring "$CEPH_KEYRING" --user "$CEPH_USER" \
  --pool "$CEPH_POOL" --sizes 40960 --depths 2 --seconds 1 --max-phase-bytes 4194304 --put both \
  --rounds 2 \
  --lookup-chain 32 --lookup-reps 3 --json >"$out"
python3 - "$out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
[p] = j["points"]
assert (p["size"], p["depth"]) == (40960, 2), p
for side in ("rados_write", "rados_read", "kvtier_write_threads", "kvtier_write_batched",
             "kvtier_read"):
    t = p[side]
    assert t["ops"] > 0 and t["mib_per_s"] > 0 and t["ops_per_s"] > 0, (side, t)
    if "write" in side:  # --max-phase-bytes bounds every write phase (reads run --seconds)
        assert t["ops"] <= 4194304 // 40960, (side, t)
assert p["rados_write"]["ops"] == 102, p["rados_write"]  # rados bench's --max-objects
assert p["write_threads_ratio"] > 0 and p["read_ratio"] > 0, p
assert j["rounds"] == 2 and p["rounds"] == 2 and len(p["round_ratios"]) == 2, p
l = j["lookup"]
assert l["chain"] == 32 and 0 < l["exists_p50_us"] <= l["exists_p99_us"], l
assert 0 < l["local_p50_us"] <= l["local_p99_us"], l
PY
left=$(rados -c "$CEPH_CONF" -k "$CEPH_KEYRING" -p "$CEPH_POOL" ls --all)
[[ -z "$left" ]] || { echo "FAIL: the benchmark left objects in the pool: $left"; exit 1; }

dir="$CEPH_DIR"
trap - EXIT
"$src/scripts/ceph-throwaway.sh" stop "$dir"
for pid in $pids; do
  if kill -0 "$pid" 2>/dev/null; then echo "FAIL: pid $pid still runs after stop"; exit 1; fi
done
[[ ! -e "$dir" ]] || { echo "FAIL: $dir still exists after stop"; exit 1; }
echo "PASS"
