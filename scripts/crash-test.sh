#!/usr/bin/env bash
# The storage engine's crash harness at full length: builds kvtier-store-crash-harness (Release,
# in build-crash/) and runs it for CYCLES cycles with a volatile host tier and CYCLES/2 with a
# persistent one. Each cycle SIGKILLs a child that stores and reads blocks at a random moment,
# reopens the store and checks that every index entry verifies, every acknowledged durable block
# is present and no read returns wrong bytes. CI runs 20 + 10 cycles through ctest (crash.store_*).
# Usage: scripts/crash-test.sh [CYCLES=200] [SEED=1]
set -euo pipefail
cd "$(dirname "$0")/.."
cycles="${1:-200}"
seed="${2:-1}"
. scripts/env.sh
cmake -S . -B build-crash -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=ON \
  -DKVTIER_BUILD_BENCHMARKS=OFF -DKVTIER_CUDA=OFF >/dev/null
cmake --build build-crash --target kvtier-store-crash-harness
harness=build-crash/bin/kvtier-store-crash-harness
echo "== volatile host tier: ${cycles} cycles (seed ${seed})"
"$harness" --cycles="$cycles" --seed="$seed" | tail -n 3
echo "== persistent host tier: $((cycles / 2)) cycles (seed $((seed + 1)))"
"$harness" --cycles="$((cycles / 2))" --seed="$((seed + 1))" --persistent-host | tail -n 3
