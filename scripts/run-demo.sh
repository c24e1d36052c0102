#!/usr/bin/env bash
# Builds kvtier and runs its demonstration: Qwen3-8B and DeepSeek-style MLA pages through every
# codec, with sizes, errors and round-trip stability.
# Usage: scripts/run-demo.sh [kvtier-codec demo flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
. scripts/env.sh
cmake -S . -B build-demo -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build-demo --target kvtier-codec
build-demo/bin/kvtier-codec demo "$@"
