#!/usr/bin/env bash
# On the GPU machine: GPU memory over the first steps of a Gemma 3 router training (the composed
# step), sampled every 0.5 s, for seeds 0 and 1 (the same steps see other batches), to tell a
# growing footprint from one batch's spike. Usage: gemma_mem.sh STEPS SEED...
set -uo pipefail
S=/root/stage; STEPS=${1:?steps}; shift
source $S/gpu-prelude.sh
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/train_paper
for seed in "$@"; do
  ( while sleep 0.5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done ) > /tmp/mem$seed.txt &
  m=$!
  timeout 90 $S/train_paper --model $S/gemma-3-270m-q4_k_m.gguf --data $S/corpus/train --heldout $S/corpus/heldout \
    --out /tmp/g$seed --steps $STEPS --eval-every 0 --score cosine --groups 8 --seed $seed > /tmp/g$seed.log 2>&1
  kill $m
  echo "== seed $seed: $(wc -l < /tmp/g$seed/train_log.jsonl) steps; $(grep -m1 -o 'Error.*' /tmp/g$seed.log)"
  python3 -c "
import json
rows=[json.loads(l) for l in open('/tmp/g$seed/train_log.jsonl')]
print('s/step', [round(b['seconds']-a['seconds'],3) for a,b in zip(rows[-4:],rows[-3:])])"
  echo "MiB every 0.5 s: $(tr '\n' ' ' < /tmp/mem$seed.txt)"
done
