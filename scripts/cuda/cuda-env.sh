# Source this file (bash) before building the `cuda` feature:
#   source scripts/cuda/cuda-env.sh && cargo build --release --features cuda
# It sets what candle's build scripts and crates/kernels/build.rs read (CUDA_ROOT, CUDA_PATH,
# CUDA_COMPUTE_CAP) and CARGO_TARGET_DIR=target/cuda (so CPU and CUDA builds do not rebuild each other).
#
# With a CUDA toolkit already installed (CUDA_ROOT, CUDA_PATH or CUDA_TOOLKIT_ROOT_DIR set, or nvcc on
# PATH) it uses that toolkit and changes nothing else. Only on a machine without one does it install
# nvcc 13.0 from PyPI wheels into ~/.cache/focus-cuda-13.0 (pinned: a GPU driver of CUDA 13.0 may
# refuse PTX from a newer nvcc), make link stubs that carry the CUDA libraries' sonames (such a machine
# has no libcuda; the real libraries are resolved where the binary runs, see cuda-needed.sh) and let
# the link leave their symbols unresolved.
# The compute capability: CUDA_COMPUTE_CAP if set, else the first GPU's (nvidia-smi), else 90 (Hopper).

_focus_root=${CUDA_ROOT:-${CUDA_PATH:-${CUDA_TOOLKIT_ROOT_DIR:-}}}
if [ -z "$_focus_root" ] && command -v nvcc >/dev/null 2>&1; then
  # nvcc on PATH: the toolkit is the folder above its bin/.
  _focus_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
CUDA_TK=${CUDA_TK:-$HOME/.cache/focus-cuda-13.0}
# A toolkit this script installed earlier is not a full one (no libraries to link): it takes the branch
# below that installs it, which then finds it in place.
if [ -n "$_focus_root" ] && [ -x "$_focus_root/bin/nvcc" ] && [ "$_focus_root" != "$CUDA_TK/nvidia/cu13" ]; then
  export CUDA_ROOT=$_focus_root CUDA_PATH=$_focus_root
  case ":$PATH:" in *":$_focus_root/bin:"*) ;; *) export PATH=$_focus_root/bin:$PATH ;; esac
else
  if [ -n "$_focus_root" ] && [ "$_focus_root" != "$CUDA_TK/nvidia/cu13" ]; then
    echo "cuda-env.sh: $_focus_root/bin/nvcc not found; installing nvcc 13.0 from PyPI instead" >&2
  fi
  if [ ! -x "$CUDA_TK/nvidia/cu13/bin/nvcc" ]; then
    python3 -m pip install --quiet --target "$CUDA_TK" \
      nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 \
      nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85 || { unset _focus_root; return 1; }
  fi
  _stubs=$CUDA_TK/stubs
  if [ ! -f "$_stubs/libcuda.so" ]; then
    mkdir -p "$_stubs"
    echo 'void focus_cuda_link_stub(void) {}' > "$_stubs/stub.c"
    for _pair in cuda:libcuda.so.1 nvrtc:libnvrtc.so.13 curand:libcurand.so.10 cublas:libcublas.so.13 \
                 cublasLt:libcublasLt.so.13 cudart:libcudart.so.13; do
      gcc -shared -fPIC -Wl,-soname,"${_pair#*:}" -o "$_stubs/lib${_pair%%:*}.so" "$_stubs/stub.c" \
        || { unset _focus_root _stubs _pair; return 1; }
    done
  fi
  export CUDA_ROOT=$CUDA_TK/nvidia/cu13 CUDA_PATH=$CUDA_TK/nvidia/cu13
  case ":$PATH:" in *":$CUDA_ROOT/bin:"*) ;; *) export PATH=$CUDA_ROOT/bin:$PATH ;; esac
  # The stubs define no symbols: the real ones are resolved on the GPU machine at load time.
  case " ${RUSTFLAGS:-} " in
    *" -L $_stubs "*) ;;
    *) export RUSTFLAGS="${RUSTFLAGS:-} -L $_stubs -C link-arg=-Wl,--unresolved-symbols=ignore-in-object-files" ;;
  esac
  unset _stubs _pair
fi
if [ -z "${CUDA_COMPUTE_CAP:-}" ]; then
  # (`|| true`: a caller under `set -e -o pipefail` on a machine without nvidia-smi goes on.)
  _cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .' || true)
  export CUDA_COMPUTE_CAP=${_cap:-90}
  unset _cap
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/cuda}
unset _focus_root
