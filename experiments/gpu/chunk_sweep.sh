#!/usr/bin/env bash
# On the GPU machine after unstage.py (core-tests staged): the decode kernels at chunk sizes
# CHUNKS (attention::decode::tests::device_speed with DECODE_CHUNKS): wall time per step at
# Qwen2.5's and SmolLM2's shapes, and Nsight Compute's per-kernel durations (one step per mode,
# launches in order: per chunk dense, top-k, dense, top-k, each layer's decode_partial and
# decode_merge). Usage: chunk_sweep.sh PRELUDE [CHUNKS]; writes $OUT/ncu_SHAPE.csv.
set -uo pipefail
source $1
CH=${2:-32,64,128,256}
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x /root/stage/core-tests
T="/root/stage/core-tests --ignored --nocapture attention::decode::tests::device_speed"
for shape in qwen smollm2; do
  DECODE_SHAPE=$shape DECODE_CHUNKS=$CH timeout 100 $T 2>&1 | grep "us per step" | sed "s/^/$shape /"
  DECODE_SHAPE=$shape DECODE_CHUNKS=$CH DECODE_REPS=1 timeout 150 /usr/local/cuda/bin/ncu --clock-control none --cache-control none --kernel-name regex:decode_ --metrics gpu__time_duration.sum --csv --page raw --log-file $OUT/ncu_$shape.csv $T > /dev/null 2>&1; echo "ncu $shape rc $?"
done
