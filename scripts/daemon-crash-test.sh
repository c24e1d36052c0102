#!/usr/bin/env bash
# The daemon's crash harness at full length: builds kvtierd and kvtier-daemon-crash-harness
# (Release, in build-crash/; or in an existing build directory named by KVTIER_BUILD_DIR) and runs
# CYCLES cycles. Each cycle SIGKILLs a real kvtierd while an engine's threads offload, while they
# onboard, or while they are idle, restarts it and checks that every acknowledged durable block is
# found and onboarded with its exact bytes; the state drive (a 128 MiB tmpfs the harness mounts,
# so run as root) fills up at CYCLES/3 and gets its space back at 2*CYCLES/3. Exit status: the
# harness's (0 PASS, 1 FAIL, 77 when the tmpfs cannot be mounted). CI runs 21 cycles through ctest
# (crash.daemon); scripts/crash-test.sh is the storage engine's own harness.
# Usage: scripts/daemon-crash-test.sh [CYCLES=100] [SEED=1] [harness flags, e.g. --dir=D]
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-100}"
seed="${2:-1}"
shift $(($# > 2 ? 2 : $#))
build="${KVTIER_BUILD_DIR:-build-crash}"
. scripts/env.sh
if [ -z "${KVTIER_BUILD_DIR:-}" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=ON \
    -DKVTIER_BUILD_BENCHMARKS=OFF -DKVTIER_CUDA=OFF >/dev/null
fi
cmake --build "$build" --target kvtierd kvtier-daemon-crash-harness
echo "== kvtierd: ${cycles} cycles (seed ${seed})"
"$build/bin/kvtier-daemon-crash-harness" --cycles="$cycles" --seed="$seed" \
  --kvtierd="$build/bin/kvtierd" "$@"
