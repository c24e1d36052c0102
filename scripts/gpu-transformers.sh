#!/usr/bin/env bash
# kvtier under a real transformers model on the GPU machine (tools/torch/kvtier_transformers.py;
# docs/ACCURACY.md and docs/PERFORMANCE.md report its runs).
#
#   scripts/gpu-transformers.sh pack          on the development machine: builds the CUDA tree
#       (build-gpu, as scripts/gpu-bundle.sh does), bundles kvtierd, kvtierctl and kvtier-bench
#       with their libraries, and the `kvtier` wheel with libkvtier and every library it needs
#       (KVTIER_BUNDLE=all), into .device-tf-pack/ (about 20 MB; carry it).
#   scripts/gpu-transformers.sh run [STEP...]  on the GPU machine, from the checkout, carrying
#       .device-tf-pack: unpacks, installs the wheel into a scratch directory for the machine's
#       Python (torch, transformers), and runs each STEP (default: correctness sessions), logs
#       and JSON into $OUT (default results/). Steps: correctness and sessions
#       (tools/torch/kvtier_transformers.py, options in $KVTIER_TF_ARGS), train and eval
#       (tools/torch/kvtier_accuracy.py: train a small model into /tmp/kvtier-accuracy-model, then
#       its accuracy through kvtierd; options in $KVTIER_TRAIN_ARGS and $KVTIER_EVAL_ARGS),
#       calibrate and triattention (the trained model's TriAttention calibration, then its
#       accuracy with decode-time eviction at several budgets; $KVTIER_CALIBRATE_ARGS,
#       $KVTIER_TRI_ARGS).
set -euo pipefail
cd "$(dirname "$0")/.."
pack=.device-tf-pack
case "${1:-}" in
  pack)
    . scripts/env.sh
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON >/dev/null
    cmake --build build-gpu --target kvtierd kvtierctl kvtier-bench kvtier
    rm -rf "$pack" .device-tf
    mkdir -p "$pack"
    ../shared/tools/device-bundle.sh -o .device-tf build-gpu/bin/kvtierd build-gpu/bin/kvtierctl \
      build-gpu/bin/kvtier-bench
    strip --strip-unneeded .device-tf/bin/* .device-tf/lib/* 2>/dev/null || true
    tar -cf - .device-tf | xz -T0 -6 >"$pack/bundle.tar.xz"
    venv=$(mktemp -d)
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    KVTIER_BUNDLE=all KVTIER_LIBRARY="$PWD/build-gpu/lib/libkvtier.so" \
      "$venv/bin/pip" wheel --no-deps --no-build-isolation --no-index -w "$pack" ./client/python \
      >/dev/null
    rm -rf "$venv" client/python/build client/python/*.egg-info
    du -sh "$pack"/*
    ;;
  run)
    shift
    results="${OUT:-results}"
    mkdir -p "$results"
    tar -xJf "$pack/bundle.tar.xz"
    py=/tmp/kvtier-py
    rm -rf "$py"
    python3 -m pip install --no-index --no-deps --target "$py" "$pack"/kvtier-*.whl >/dev/null
    # kvtierd from the bundle, with its libraries (the script starts it as one program).
    printf '#!/bin/sh\nexec %s/.device-tf/run kvtierd "$@"\n' "$PWD" >/tmp/kvtierd-bundled
    chmod +x /tmp/kvtierd-bundled
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$results/gpu.txt" || true
    status=0
    for step in "${@:-correctness sessions}"; do
      for s in $step; do
        echo "== $s"
        case "$s" in
          train) cmd=(tools/torch/kvtier_accuracy.py train ${KVTIER_TRAIN_ARGS:-}) ;;
          eval) cmd=(tools/torch/kvtier_accuracy.py eval --kvtierd /tmp/kvtierd-bundled
                     --json "$results/$s.json" ${KVTIER_EVAL_ARGS:-}) ;;
          calibrate) cmd=(tools/torch/kvtier_accuracy.py calibrate ${KVTIER_CALIBRATE_ARGS:-}) ;;
          triattention) cmd=(tools/torch/kvtier_accuracy.py triattention
                             --json "$results/$s.json" ${KVTIER_TRI_ARGS:-}) ;;
          *) cmd=(tools/torch/kvtier_transformers.py "$s" --kvtierd /tmp/kvtierd-bundled
                  --json "$results/$s.json" ${KVTIER_TF_ARGS:-}) ;;
        esac
        PYTHONPATH="$py" python3 "${cmd[@]}" 2>&1 | grep -v -i "warn" | tee "$results/$s.txt" ||
          status=1
      done
    done
    exit "$status"
    ;;
  *)
    echo "usage: $0 pack | run [STEP...]" >&2
    exit 2
    ;;
esac
