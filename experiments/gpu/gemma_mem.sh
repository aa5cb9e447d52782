#!/usr/bin/env bash
# On the GPU machine: the device memory pool over the first steps of router trainings
# (train_paper --mem-trace: after each step, live allocations, the step's peak and the pool's
# reservation), one run per variant, one after another so that they do not share the pool.
# A variant is NAME:MODEL:FLAGS with FLAGS train_paper flags joined by commas, e.g.
#   gemma_mem.sh 12 g3:gemma-3-270m-q4_k_m.gguf: g3s512:gemma-3-270m-q4_k_m.gguf:--seq,512 \
#       smol-composed:SmolLM2-135M-Instruct.Q4_1.gguf:--composed
# Prints each variant's per-step lines and its error, if any; logs in /tmp/mem-NAME.log.
set -uo pipefail
S=/root/stage; STEPS=${1:?steps}; shift
source $S/gpu-prelude.sh
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/train_paper
for v in "$@"; do
  IFS=: read -r name model flags <<< "$v"
  timeout 300 $S/train_paper --model $S/$model --data $S/corpus/train --heldout $S/corpus/heldout \
    --out /tmp/mem-$name --steps $STEPS --eval-every 100000 --score cosine --groups 8 --mem-trace ${flags//,/ } \
    > /tmp/mem-$name.log 2>&1
  echo "== $name (rc $?): $(grep -m1 -o -i 'error.*' /tmp/mem-$name.log)"
  grep '^mem step' /tmp/mem-$name.log
done
