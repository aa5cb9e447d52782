#!/usr/bin/env bash
# On the GPU machine after unstage.py (core-tests staged): the decode and routing kernels alone,
# (1) their time per call (decode_speed, route_speed), (2) Nsight Compute's full sections for one
# dense and one top-k `decode_partial` launch at SmolLM2's shape (8150 cached) and Qwen2.5's
# (32000), and one `route_newest` launch. Usage: profile_kernels.sh PRELUDE; writes $OUT/kern.
set -uo pipefail
S=/root/stage; O=$OUT/kern; mkdir -p $O
source $1
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/core-tests
T="$S/core-tests --ignored --nocapture"
timeout 120 $T attention::cuda::decode::tests::decode_speed 2>&1 | grep "us per call" | tee $O/decode_speed.txt
timeout 60 $T attention::cuda::route::tests::route_speed 2>&1 | grep "us per call" | tee $O/route_speed.txt
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
N="timeout 150 $NCU --clock-control none --cache-control none --set full --page details"
for shape in smollm2 qwen; do
  FOCUS_DECODE_SPEED=$shape $N --kernel-name regex:decode_partial --launch-count 2 \
    $T attention::cuda::decode::tests::decode_speed > $O/ncu_decode_$shape.txt 2>&1
  echo "ncu decode $shape rc $?"
done
$N --kernel-name route_newest --launch-skip 10 --launch-count 1 $T attention::cuda::route::tests::route_speed > $O/ncu_route.txt 2>&1
echo "ncu route rc $?"
grep -h "Duration\|DRAM Throughput\|Achieved Occupancy" $O/ncu_*.txt
