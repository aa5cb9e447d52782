#!/usr/bin/env bash
# After a build made with scripts/cuda/cuda-env.sh on a machine without CUDA: records the CUDA libraries
# (libcuda, cublas, cublasLt, curand, nvrtc, cudart) as the binary's dependencies (patchelf), so the
# loader on the GPU machine resolves the symbols the link stubs left open. Not needed when the build
# used an installed toolkit.
# Usage: scripts/cuda/cuda-needed.sh BINARY
set -euo pipefail
bin=${1:?usage: scripts/cuda/cuda-needed.sh BINARY}
command -v patchelf >/dev/null || { apt-get update -qq && apt-get install -y -qq patchelf >/dev/null; }
have=$(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
for lib in libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13; do
  grep -qx "$lib" <<<"$have" || patchelf --add-needed "$lib" "$bin"
done
readelf -d "$bin" | grep NEEDED
