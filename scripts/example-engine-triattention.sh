#!/usr/bin/env bash
# The example engine with TriAttention and cold pages from configuration blocks, its KV pool in GPU
# memory when the machine has one: a synthetic calibration (safetensors, numpy) and config.json for the engine's tiny model are written first. Exit status:
# the engine's (non-zero on a hook error or a page mismatch).
# Usage: scripts/example-engine-triattention.sh [DIR]   (a bundle or a build folder; default .device)
set -euo pipefail
bundle=$(cd "${1:-.device}" && pwd)
d=$(mktemp -d /tmp/kvtier-triattention.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$d"
}
trap cleanup EXIT
py=python3
$py -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
$py - "$d" <<'PY'
import json, struct, sys, numpy as np
d = sys.argv[1]
L, H, D = 2, 2, 64
B = D // 2
rng = np.random.default_rng(3)
re, im = rng.standard_normal((L, H, B)).astype(np.float32), rng.standard_normal((L, H, B)).astype(np.float32)
norm = (np.hypot(re, im) + 0.5).astype(np.float32)
omega = (10000.0 ** (-2.0 * np.arange(B) / D)).astype(np.float32)
fs = np.ones(B, np.float32)
tensors = [("E_q_real", re), ("E_q_imag", im), ("E_q_norm", norm), ("omega", omega), ("freq_scale_sq", fs)]
hdr, at = {}, 0
for n, t in tensors:
    hdr[n] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + t.nbytes]}; at += t.nbytes
h = json.dumps(hdr).encode()
with open(d + "/calib.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for _, t in tensors: f.write(t.tobytes())
json.dump({"model_type": "llama", "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": 1,
           "hidden_size": H * D, "head_dim": D, "rope_theta": 10000.0, "max_position_embeddings": 65536},
          open(d + "/config.json", "w"))
PY
printf 'algorithm: triattention\nbudget: 256\nbeta: 64\neviction_mode: union\ncalibration_path: %s\nmodel_config_path: %s\n' "$d/calib.safetensors" "$d/config.json" > "$d/tri.yaml"
printf 'algorithm: quantization_for_cold_page\nquant: nvfp4\n' > "$d/cold.yaml"
LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/kvtierd" --state-dir="$d/state" --socket="$d/k.sock" \
  --set=host.capacity=256MiB --set=disk.capacity=1GiB --set=disk.chunk=16MiB \
  --set="pools.allowed_dirs=[$d]" --set=metrics.listen=127.0.0.1:19467 > "$d/kvtierd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -S "$d/k.sock" ] && break; sleep 0.1; done
status=0
LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/kvtier-example-engine" --socket="$d/k.sock" \
  --pool-dir="$d" \
  --tokens-per-page=64 --requests=24 --config="$d/tri.yaml,$d/cold.yaml" || status=$?
kill -TERM "$pid"
wait "$pid" || status=1
pid=""
exit "$status"
