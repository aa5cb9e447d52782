# Source this at the start of a command on a GPU machine whose CUDA 13 libraries come with its
# PyTorch (no system toolkit): it puts them, and the driver's folder, on LD_LIBRARY_PATH. Send it
# along with the binary (experiments/gpu/pack.py stages it). Usage:
#   source gpu-prelude.sh && ./focus-lens ...
_sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
export LD_LIBRARY_PATH=$_sp/nvidia/cu13/lib:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
unset _sp
