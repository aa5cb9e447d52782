#!/usr/bin/env bash
# On the GPU machine (issue 27, the house's second step: a redesign with no change in behaviour):
#   tests  the CUDA tests of the new binary: the fused training ops (`cuda_`), the CUDA attention
#          kernels, and decode on the device against the CPU (`gpu_decode`, `device_decode`);
#   ab     the training step (core/examples/train_speed.rs, SmolLM2-135M shapes, 4 x 1024 tokens,
#          K=8, the fused default) of the binaries before and after, alternated ROUNDS times.
# Files in $G (carried): train_speed_base.xz, train_speed_new.xz, focus_core_test.xz,
# gpu-prelude.sh. Writes $OUT/*.log; prints the step lines last.
set -uo pipefail
G=${G:-.stage/house}
O=${OUT:-/tmp/out}
mkdir -p $O
source $G/gpu-prelude.sh
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
for f in $G/*.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv | tee $O/gpu.txt
for filter in cuda gpu_decode device_decode; do
  timeout 200 $G/focus_core_test $filter --test-threads 1 2>&1 | tee -a $O/tests.log | grep -E "^test |test result|panicked" | tail -40
done
for r in $(seq 1 ${ROUNDS:-3}); do
  for b in base new; do
    echo "== $b round $r" | tee -a $O/ab.log
    timeout 120 $G/train_speed_$b step --device cuda --batch 4 --seq 1024 --steps ${STEPS:-15} --variants fused 2>&1 | tee -a $O/ab.log | tail -3
  done
done
