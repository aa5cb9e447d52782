#!/usr/bin/env bash
# On the GPU machine after unstage.py (core-tests staged): the decode and routing kernels alone,
# (1) decode attention's time per step over all layers at Qwen2.5's shape (32000 cached) and
# SmolLM2's (8150; `device_speed`) and the routing kernel's per call (`route_speed`), (2) Nsight
# Compute's full sections for one dense and one top-k `decode_partial` launch at each shape
# (device_speed runs 20 dense steps first: launch 0 is dense, launch 20 x layers top-k), and one
# `route_newest` launch. Usage: profile_kernels.sh PRELUDE; writes $OUT/kern.
set -uo pipefail
S=/root/stage; O=$OUT/kern; mkdir -p $O
source $1
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/core-tests
T="$S/core-tests --ignored --nocapture"
D=attention::decode::tests::device_speed
for shape in qwen smollm2; do
  DECODE_SHAPE=$shape timeout 120 $T $D 2>&1 | grep "us per step" | sed "s/^/$shape /" | tee -a $O/decode_speed.txt
done
timeout 60 $T attention::cuda::route::tests::route_speed 2>&1 | grep "us per call" | tee $O/route_speed.txt
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
N="timeout 150 $NCU --clock-control none --cache-control none --set full --page details"
for shape in qwen:480 smollm2:600; do
  name=${shape%%:*}; topk=${shape##*:}
  for skip in 0 $topk; do
    DECODE_SHAPE=$name $N --kernel-name regex:decode_partial --launch-skip $skip --launch-count 1 $T $D > $O/ncu_decode_${name}_$skip.txt 2>&1
    echo "ncu decode $name launch $skip rc $?"
  done
done
$N --kernel-name route_newest --launch-skip 10 --launch-count 1 $T attention::cuda::route::tests::route_speed > $O/ncu_route.txt 2>&1
echo "ncu route rc $?"
grep -h "Duration\|DRAM Throughput\|Achieved Occupancy" $O/ncu_*.txt
