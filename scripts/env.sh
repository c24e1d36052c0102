# Sourced by the scripts: puts the CUDA toolkit's nvcc on PATH when it is installed in the usual
# place, so KVTIER_CUDA=AUTO finds it, and picks a parallel build level.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
