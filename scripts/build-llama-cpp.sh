#!/usr/bin/env bash
# Builds llama.cpp beside the project (never inside the repository): the reference that the
# speed comparisons (llama-bench), the perplexity and token-id checks (llama-perplexity,
# llama-tokenize) and the stand-in maker (llama-quantize, for the K-quant mixes) use.
#
# The source comes from a package registry, not from GitHub: the PyPI sdist of
# `llama-cpp-python` vendors llama.cpp under vendor/llama.cpp (with its converter
# convert_hf_to_gguf.py and the gguf-py package). Built Release with the host's CPU flags
# (GGML_NATIVE) and ggml's AMX path off (it segfaulted inside this project's container).
#
# Usage: scripts/build-llama-cpp.sh [DEST]
#   DEST (or $LLAMA_CPP_DIR) defaults to ~/.cache/focus-lens/llama.cpp. Afterwards:
#   DEST/src       the llama.cpp source (convert_hf_to_gguf.py, gguf-py/)
#   DEST/bin       llama-quantize, llama-bench, llama-perplexity, llama-tokenize
#   DEST/lib       libllama and libggml*
#   DEST/READY     written last: the version built and the time
# In this project's container (Xeon with AVX-512, AMX advertised) the tools built so crash
# (SIGILL / SIGSEGV) in ggml's weight-repacking CPU path: run llama-bench with `--repack 0`
# (other tools: `--no-repack`). Dense products are unaffected.
# Environment: LLAMA_CPP_PYTHON_VERSION (default below), JOBS (default 2).
# Needs: python3 with pip, a C/C++ compiler, cmake (installed with apt-get if missing).
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
DEST=${1:-${LLAMA_CPP_DIR:-$HOME/.cache/focus-lens/llama.cpp}}
JOBS=${JOBS:-2}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
rm -f "$DEST/READY"

if ! command -v cmake >/dev/null; then
  echo "cmake not found: installing it with apt-get" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq cmake >/dev/null
fi

# 1. The source: the sdist, unpacked; its vendored llama.cpp becomes DEST/src.
if [ ! -f "$DEST/src/CMakeLists.txt" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --quiet --no-binary :all: --no-deps --dest "$work" \
    "llama-cpp-python==$VERSION"
  tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
  rm -rf "$DEST/src"
  mv "$work/llama_cpp_python-$VERSION/vendor/llama.cpp" "$DEST/src"
fi

# 2. The build: CPU only, native flags, no AMX, no network (no curl), shared libllama.
cmake -S "$DEST/src" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_AMX=OFF -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DCMAKE_INSTALL_PREFIX="$DEST" -DCMAKE_INSTALL_RPATH="$DEST/lib" >/dev/null
cmake --build "$DEST/build" -j "$JOBS" --target \
  llama-quantize llama-bench llama-perplexity llama-tokenize llama
cmake --install "$DEST/build" >/dev/null 2>&1 || true
# `install` skips targets that were not built; copy the ones asked for by hand as well.
mkdir -p "$DEST/bin" "$DEST/lib"
for t in llama-quantize llama-bench llama-perplexity llama-tokenize; do
  cp -f "$DEST/build/bin/$t" "$DEST/bin/" 2>/dev/null || true
done
find "$DEST/build" -name 'lib*.so*' -exec cp -Pf {} "$DEST/lib/" \;

for t in llama-quantize llama-bench llama-perplexity llama-tokenize; do
  LD_LIBRARY_PATH="$DEST/lib" "$DEST/bin/$t" --help >/dev/null 2>&1 || {
    # Some tools print usage and exit 1 on --help; only a missing binary is an error.
    [ -x "$DEST/bin/$t" ] || { echo "build failed: $DEST/bin/$t missing" >&2; exit 1; }
  }
done
printf 'llama-cpp-python %s (vendored llama.cpp), built %s\n' "$VERSION" "$(date -u +%FT%TZ)" \
  >"$DEST/READY"
echo "llama.cpp built in $DEST (bin/, lib/, src/); LD_LIBRARY_PATH=$DEST/lib if a tool cannot find libllama"
