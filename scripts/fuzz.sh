#!/usr/bin/env bash
# Builds the cold-block fuzzer (libFuzzer + ASan + UBSan, clang) into build-fuzz/, writes a seed
# corpus of valid blocks with kvtier-codec, and fuzzes the block header parser and decoders.
# Usage: scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]   (SECONDS defaults to 60)
# Exits non-zero when the fuzzer finds a crash, a leak or undefined behaviour; the input that
# triggered it is left in fuzz-corpus/artifacts/. The corpus grows in fuzz-corpus/cold-block/.
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
build=build-fuzz
corpus=fuzz-corpus/cold-block
artifacts=fuzz-corpus/artifacts

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }

# The whole build uses clang: libFuzzer and the sanitizer runtimes come with it.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja \
  -DKVTIER_BUILD_FUZZERS=ON -DKVTIER_BUILD_BENCHMARKS=OFF -DKVTIER_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target kvtier-cold-block-fuzz kvtier-codec ${JOBS:+-j "$JOBS"}

# Seeds: valid blocks for each fixture of tests/fuzz/cold_block_fuzz.cc (same layouts, codecs and
# 16-byte alignment), from pages of random bytes (BF16/FP16/FP8 NaN and Inf included) and of zeros.
tool="$build/bin/kvtier-codec"
seeds="$(mktemp -d)"
trap 'rm -rf "$seeds"' EXIT
gqa=(--family gqa --layers 2 --kv-heads 2 --head-dim 32 --tokens 16 --rope-start 16 --rope-len 16)
"$tool" layout "${gqa[@]}" --dtype bf16 >"$seeds/gqa_bf16.json"
"$tool" layout "${gqa[@]}" --dtype fp8_e4m3 >"$seeds/gqa_fp8.json"
"$tool" layout --family mla --layers 1 --kv-lora-rank 32 --rope-dim 16 --tokens 8 --dtype fp16 \
  --indexer-bytes-per-token 8 >"$seeds/mla_fp16.json"
# Flat page sizes: layers * buffers * heads * tokens * row elements * element bytes (+ indexer).
declare -A page_bytes=(
  [gqa_bf16]=$((2 * 2 * 2 * 16 * 32 * 2))
  [gqa_fp8]=$((2 * 2 * 2 * 16 * 32 * 1))
  [mla_fp16]=$((1 * 8 * (32 + 16) * 2 + 8 * 8))
)
fixtures=(gqa_bf16:raw gqa_bf16:nvfp4 gqa_bf16:nvfp4x2 gqa_bf16:nvfp4+rope gqa_fp8:nvfp4
  mla_fp16:nvfp4x2+rope)
mkdir -p "$corpus" "$artifacts"
for fixture in "${fixtures[@]}"; do
  layout="${fixture%%:*}"
  codec="${fixture#*:}"
  head -c "${page_bytes[$layout]}" /dev/urandom >"$seeds/random.pages"
  head -c "${page_bytes[$layout]}" /dev/zero >"$seeds/zero.pages"
  for input in random zero; do
    "$tool" encode --layout "$seeds/$layout.json" --codec "$codec" --alignment 16 \
      --in "$seeds/$input.pages" --out "$corpus/seed-$layout-${codec/+/-}-$input" 2>/dev/null
  done
done

echo "fuzz.sh: fuzzing for ${seconds}s with $(ls "$corpus" | wc -l) corpus inputs" >&2
"$build/bin/kvtier-cold-block-fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" "$corpus"
