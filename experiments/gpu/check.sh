#!/usr/bin/env bash
# On the GPU machine after unstage.py: (1) the same small training run on CPU and on CUDA must
# agree within float tolerance; (2) a step-time probe of the real training shape, alone and with
# a second process sharing the GPU. Writes to $OUT/check.
set -uo pipefail
S=/root/stage; B=$S/focus-lens; M=$S/SmolLM2-135M-Instruct.Q4_1.gguf; O=$OUT/check; mkdir -p $O
source $S/gpu-prelude.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $O/gpu.txt
small="--model $M --data $S/corpus/train/austen__emma.txt --heldout $S/corpus/heldout/austen__persuasion.txt --groups 4 --window 64 --steps 3 --seq-len 256 --batch 2 --eval-every 0 --eval-seqs 1 --checkpoint-every 0 --seed 5"
( time $B train --device cpu $small --out $O/agree_cpu ) > $O/agree_cpu.log 2>&1
( time $B train --device cuda $small --out $O/agree_cuda ) > $O/agree_cuda.log 2>&1
python3 experiments/gpu/compare_adapters.py $O/agree_cpu $O/agree_cuda 0.01 | tee $O/agree.json
# Step-time probe: one process alone, then four sharing the GPU (candle launches many small
# kernels, so one process leaves the GPU idle between them).
probe="--model $M --data $S/corpus/train/austen__emma.txt --heldout $S/corpus/heldout/austen__persuasion.txt --groups 8 --steps 10 --seq-len 1024 --batch 2 --eval-every 0 --eval-seqs 1 --checkpoint-every 0"
( while sleep 3; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) > $O/smi.txt 2>&1 &
SMI=$!
$B train --device cuda $probe --out $O/probe1 > $O/probe1.log 2>&1
for s in 1 2 3 4; do $B train --device cuda $probe --seed $s --out $O/probe4_$s > $O/probe4_$s.log 2>&1 & done
wait %2 %3 %4 %5; kill $SMI 2>/dev/null
for r in probe1 probe4_1 probe4_2 probe4_3 probe4_4; do python3 -c "
import json,sys; rows=[json.loads(l) for l in open('$O/$r/train_log.jsonl')]
print('$r', 'steady s/step', (rows[-1]['seconds']-rows[1]['seconds'])/(len(rows)-2), 'first', rows[0]['seconds'])"; done
sort -t, -k2 -n $O/smi.txt | tail -n 2
tail -n 3 $O/*.log
