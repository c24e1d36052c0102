#!/usr/bin/env bash
# Builds kvtier with CUDA (Release) on the development machine and packs the GPU tests, the
# storage-engine tests (label storage: real NVMe and the GPU machine's kernel), the benchmarks and
# fio (the disk benchmark's baseline), with the shared libraries they need, into .device/ for the GPU machine (whose image
# has CUDA but none of the Debian -dev libraries). The CUDA runtime is linked statically.
# Usage: scripts/gpu-bundle.sh [OUT_DIR]      (default .device; keep it out of git)
# The bundle (with RocksDB linked in and fio's libraries) exceeds the device tool's 64 MiB carry
# limit, so it is also stripped and packed into OUT_DIR-pack/bundle.tar.xz (about 35 MB).
# Then, through the device tool, carrying OUT_DIR-pack:
#   tar -xJf .device-pack/bundle.tar.xz && scripts/gpu-run.sh .device "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.device}"
. scripts/env.sh
command -v nvcc >/dev/null || { echo "gpu-bundle: nvcc not found; install the CUDA toolkit" >&2; exit 1; }
build=build-gpu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON >/dev/null
cmake --build "$build"

# The GPU and storage tests (ctest labels gpu and storage), as ctest knows them: one line per test, "name<TAB>executable<TAB>args...".
manifest="$(mktemp)"
trap 'rm -f "$manifest"' EXIT
ctest --test-dir "$build" -L 'gpu|storage' --show-only=json-v1 | python3 -c '
import json, os, sys
for t in json.load(sys.stdin)["tests"]:
    cmd = t["command"]
    print("\t".join([t["name"], os.path.basename(cmd[0])] + cmd[1:]))
' >"$manifest"
mapfile -t exes < <(cut -f2 "$manifest" | sort -u | sed "s|^|$build/bin/|")
for b in kvtier-kernels-bench kvtier-triattention-bench kvtier-codec-bench kvtier-codec kvtier-bench \
    kvtier-example-engine \
    kvtier-store-crash-harness kvtierd kvtierctl; do
  [ -x "$build/bin/$b" ] && exes+=("$build/bin/$b")
done
command -v fio >/dev/null && exes+=("$(command -v fio)")
cp "$manifest" "$build/tests.tsv"
../shared/tools/device-bundle.sh -o "$out" "${exes[@]}" -- "$build/tests.tsv"
strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
mkdir -p "$out-pack"
tar -cf - "$out" | xz -T0 -6 >"$out-pack/bundle.tar.xz"
echo "packed $(du -h "$out-pack/bundle.tar.xz" | cut -f1) into $out-pack/bundle.tar.xz"
