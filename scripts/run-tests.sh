#!/usr/bin/env bash
# Builds everything (the CUDA sources too when nvcc exists) with warnings as errors and runs every
# test. GPU tests skip where there is no GPU. This is the README's test command and what CI runs.
# Usage: scripts/run-tests.sh [ctest flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
. scripts/env.sh
cmake -S . -B build -G Ninja -DKVTIER_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure "$@"
