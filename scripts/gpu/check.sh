#!/usr/bin/env bash
# On the GPU machine after stage.sh: (1) the same small training run on CPU and on CUDA must
# agree within float tolerance; (2) a step-time probe of the real training shape, alone and with
# a second process sharing the GPU. Writes to $OUT/check.
set -uo pipefail
S=/root/stage; B=$S/focus-lens; M=$S/SmolLM2-135M-Instruct.Q4_1.gguf; O=$OUT/check; mkdir -p $O
source $S/gpu-prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $O/gpu.txt
small="--model $M --data $S/corpus/train/austen__emma.txt --heldout $S/corpus/heldout/austen__persuasion.txt --groups 4 --window 64 --steps 3 --seq-len 256 --batch 2 --eval-every 0 --eval-seqs 1 --checkpoint-every 0 --seed 5"
( time $B train --device cpu $small --out $O/agree_cpu ) > $O/agree_cpu.log 2>&1
( time $B train --device cuda $small --out $O/agree_cuda ) > $O/agree_cuda.log 2>&1
python3 scripts/gpu/compare_adapters.py $O/agree_cpu $O/agree_cuda 1e-3 | tee $O/agree.json
paste -d' ' <(jq -c '[.step,.loss]' $O/agree_cpu/train_log.jsonl 2>/dev/null || cat $O/agree_cpu/train_log.jsonl) <(cat $O/agree_cuda/train_log.jsonl) > $O/agree_losses.txt
probe="--model $M --data $S/corpus/train --heldout $S/corpus/heldout --groups 8 --steps 12 --seq-len 1024 --batch 4 --eval-every 0 --eval-seqs 2 --checkpoint-every 0"
$B train --device cuda $probe --out $O/probe1 > $O/probe1.log 2>&1
$B train --device cuda $probe --out $O/probe2a > $O/probe2a.log 2>&1 &
$B train --device cuda $probe --seed 1 --out $O/probe2b > $O/probe2b.log 2>&1 &
( while sleep 5; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) > $O/smi.txt 2>&1 &
wait %1 %2; kill %3 2>/dev/null
for r in probe1 probe2a probe2b; do echo "$r $(tail -n1 $O/$r/train_log.jsonl | cut -c1-200)"; done
tail -n 3 $O/*.log
