#!/usr/bin/env bash
# On the GPU machine after stage.sh: the sample-adapter training runs and the collapse runs, all
# at once (candle's many small kernels leave one process's GPU mostly idle). Each run stops after
# MIN minutes with a final held-out evaluation. Runs go to /root/stage/runs (kept while the
# machine is warm, for eval.sh) and are copied to $OUT/runs.
# Usage: train.sh 1 MIN   (the four sample-adapter runs, from scratch)
#        train.sh 2       (resume those four from their checkpoints, with the same time limit,
#                          plus the two collapse runs)
set -uo pipefail
PHASE=${1:?phase}; MIN=${2:-7}
S=/root/stage; B=$S/focus-lens; M=$S/SmolLM2-135M-Instruct.Q4_1.gguf; R=$S/runs; mkdir -p $R
source $S/gpu-prelude.sh
data="--model $M --device cuda --data $S/corpus/train --heldout $S/corpus/heldout --seed 0 --lr 1e-2 --steps 100000 --time-limit-min $MIN"
main="$data --seq-len 1024 --batch 4 --eval-every 25 --eval-seqs 8 --checkpoint-every 5"
collapse="$data --seq-len 512 --batch 1 --eval-every 10 --eval-seqs 2 --checkpoint-every 0 --groups 8 --gate log"
( while sleep 10; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) > $R/smi.txt 2>&1 &
SMI=$!
run() { local name=$1; shift; $B train "$@" --out $R/$name > $R/$name.log 2>&1 & }
if [ "$PHASE" = 1 ]; then
  run k8_log $main --groups 8 --gate log
  run k8_paper $main --groups 8 --gate paper
  run k4_log $main --groups 4 --gate log
  run k4_paper $main --groups 4 --gate paper
else
  for n in k8_log k8_paper k4_log k4_paper; do
    mv $R/$n.log $R/$n.phase1.log; cp $R/$n/adapter_config.json $R/$n.phase1_config.json
    $B train $data --resume $R/$n/checkpoint --out $R/$n > $R/$n.log 2>&1 &
  done
  run collapse_softmax $collapse --sinkhorn-iters 0
  run collapse_sinkhorn $collapse --sinkhorn-iters 10
fi
for j in $(jobs -p); do [ "$j" = "$SMI" ] || wait $j; done
kill $SMI 2>/dev/null
mkdir -p $OUT/runs
for d in $R/*/; do n=$(basename $d); mkdir -p $OUT/runs/$n; cp $d/adapter_config.json $d/adapter_model.safetensors $d/train_log.jsonl $OUT/runs/$n/ 2>/dev/null; done
cp $R/*.log $R/*.json $R/smi.txt $OUT/runs/ 2>/dev/null
for f in $R/*/train_log.jsonl; do echo "$f $(tail -n1 $f | cut -c1-160)"; done
tail -n 2 $R/*.log
