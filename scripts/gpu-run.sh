#!/usr/bin/env bash
# Runs on the GPU machine: every test of a bundle made by scripts/gpu-bundle.sh, then the
# benchmarks, writing logs, JUnit XML and benchmark JSON into one results folder.
# Usage: scripts/gpu-run.sh [BUNDLE_DIR] [RESULTS_DIR]   (defaults: .device and $OUT or results/)
# Exits non-zero when a test fails. Ends with a line "N passed, N failed, N skipped".
# KVTIER_GPU_SANITIZE=1 also runs every GPU test under compute-sanitizer memcheck and racecheck
# (logs in tests/<name>.<tool>.log; a report counts as a failure).
set -uo pipefail
cd "$(dirname "$0")/.."
bundle="${1:-.device}"
results="${2:-${OUT:-results}}"
mkdir -p "$results/tests"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
  --format=csv >"$results/gpu.txt" 2>&1 || true
passed=0 failed=0 skipped=0
while IFS=$'\t' read -r name exe args; do
  log="$results/tests/$name.log"
  # shellcheck disable=SC2086  # args are ctest's, split as ctest would
  if "$bundle/run" "$exe" $args --gtest_output="xml:$results/tests/$name.xml" >"$log" 2>&1; then
    if grep -q '\[  SKIPPED \]' "$log"; then
      skipped=$((skipped + 1)); echo "skipped $name"
    else
      passed=$((passed + 1)); echo "passed  $name"
    fi
  else
    failed=$((failed + 1)); echo "FAILED  $name (see tests/$name.log)"; tail -20 "$log"
  fi
  if [ "${KVTIER_GPU_SANITIZE:-0}" = 1 ]; then
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
      slog="$results/tests/$name.$tool.log"
      # shellcheck disable=SC2086
      if LD_LIBRARY_PATH="$bundle/lib" "$sanitizer" --tool "$tool" --error-exitcode 99 \
          "$bundle/bin/$exe" $args >"$slog" 2>&1; then
        passed=$((passed + 1)); echo "passed  $name ($tool)"
      else
        failed=$((failed + 1)); echo "FAILED  $name ($tool, see tests/$name.$tool.log)"
        tail -20 "$slog"
      fi
    done
  fi
done <"$bundle/data/tests.tsv"
# The example engine with its KV pool in GPU memory (shared with kvtierd through CUDA IPC, the
# fused kernels on the daemon's side): synthetic agentic sessions under raw, nvfp4 and nvfp4x2, every
# onboarded and resumed page checked (the engine exits non-zero on a mismatch).
if [ -x "$bundle/bin/kvtier-example-engine" ] && [ -x "$bundle/bin/kvtierd" ]; then
  edir=$(mktemp -d /tmp/kvtier-engine.XXXXXX)
  LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/kvtierd" --state-dir="$edir/state" \
    --socket="$edir/kvtier.sock" --set=host.capacity=256MiB --set=disk.capacity=1GiB \
    --set=disk.chunk=16MiB --set="pools.allowed_dirs=[$edir]" \
    --set=metrics.listen=127.0.0.1:19466 >"$results/example_engine_kvtierd.log" 2>&1 &
  epid=$!
  for _ in $(seq 300); do [ -S "$edir/kvtier.sock" ] && break; sleep 0.1; done
  for codec in raw nvfp4 nvfp4x2; do
    if "$bundle/run" kvtier-example-engine --socket="$edir/kvtier.sock" --pool-dir="$edir" \
        --device=0 --codec="$codec" --requests=48 --model="gpu-$codec" \
        >"$results/example_engine_$codec.txt" 2>&1; then
      passed=$((passed + 1)); echo "passed  example engine on the GPU ($codec)"
    else
      failed=$((failed + 1)); echo "FAILED  example engine on the GPU ($codec)"
      tail -20 "$results/example_engine_$codec.txt"
    fi
  done
  kill -TERM "$epid"
  wait "$epid" || { failed=$((failed + 1)); echo "FAILED  kvtierd did not stop cleanly"; }
  rm -rf "$edir"
  if scripts/example-engine-triattention.sh "$bundle" >"$results/example_engine_triattention.txt" 2>&1
  then
    passed=$((passed + 1)); echo "passed  example engine on the GPU (triattention + nvfp4)"
  else
    failed=$((failed + 1)); echo "FAILED  example engine on the GPU (triattention + nvfp4)"
    tail -20 "$results/example_engine_triattention.txt"
  fi
fi
if [ -x "$bundle/bin/kvtier-kernels-bench" ] && [ "${KVTIER_SKIP_BENCH:-0}" != 1 ]; then
  "$bundle/run" kvtier-kernels-bench --benchmark_min_time=0.2 \
    --benchmark_out="$results/kernels_bench.json" --benchmark_out_format=json \
    >"$results/kernels_bench.txt" 2>&1 || echo "kernels benchmark failed"
fi
if [ -x "$bundle/bin/kvtier-triattention-bench" ] && [ "${KVTIER_SKIP_BENCH:-0}" != 1 ]; then
  "$bundle/run" kvtier-triattention-bench >"$results/triattention_bench.txt" 2>&1 ||
    echo "triattention benchmark failed"
  "$bundle/run" kvtier-triattention-bench --json >"$results/triattention_bench.json" 2>&1 || true
fi
if [ -x "$bundle/bin/kvtier-codec-bench" ] && [ "${KVTIER_SKIP_BENCH:-0}" != 1 ]; then
  "$bundle/run" kvtier-codec-bench --benchmark_min_time=0.5 \
    --benchmark_out="$results/codec_bench.json" --benchmark_out_format=json \
    >"$results/codec_bench.txt" 2>&1 || echo "codec benchmark failed"
fi
# Storage benchmarks on the GPU machine's NVMe (KVTIER_STORAGE_BENCH=1): the disk benchmark against
# fio on the same file, then the index at one million blocks. fio comes from the bundle.
if [ "${KVTIER_STORAGE_BENCH:-0}" = 1 ] && [ -x "$bundle/bin/kvtier-bench" ]; then
  dir="${KVTIER_BENCH_DIR:-/var/tmp}"
  PATH="$bundle/bin:$PATH" LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/kvtier-bench" disk \
    --dir="$dir" ${KVTIER_DISK_BENCH_FLAGS:-} --json >"$results/disk_bench.json" \
    2>"$results/disk_bench.log" || echo "disk benchmark failed (see disk_bench.log)"
  "$bundle/run" kvtier-bench index --dir="$dir" ${KVTIER_INDEX_BENCH_FLAGS:-} \
    >"$results/index_bench.txt" 2>&1 || echo "index benchmark failed (see index_bench.txt)"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
