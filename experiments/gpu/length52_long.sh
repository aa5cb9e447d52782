#!/usr/bin/env bash
# On the GPU machine (issue 52), after length52.sh staged everything and its SmolLM2 runs ended:
# the long-context models' routers fine-tuned at length, detached (setsid), then their held-out
# perplexities (the whole of Persuasion) dense, soft and top-k up to 32K tokens. Gemma 3 270M:
# both shipped adapters at 4,096-token sequences (its local layers see 512 tokens; the global
# layers are where length matters). Qwen2.5-Coder-0.5B (32K context): its K=8 adapter
# (experiments/results/qwen_coder_k8_h200, trained at 1,024) at 16,384-token sequences.
# Usage: length52_long.sh  (waits for the SmolLM2 runs first; MIN minutes a run, default 7)
set -uo pipefail
S=/root/stage; R=$S/runs
BOOK=$S/corpus/heldout/austen__persuasion.txt
PROBE=$S/corpus/heldout/austen__persuasion.txt,$S/corpus/heldout/shakespeare__hamlet.txt
source scripts/cuda/gpu-prelude.sh
while pgrep -x train_paper > /dev/null; do sleep 5; done
mkdir -p $S/adapters && cp -r experiments/results/qwen_coder_k8_h200/adapter $S/adapters/qwen2.5-coder-0.5b-k8
cp -r sample_adapters/gemma3-270m-k8 sample_adapters/gemma3-270m-k8-global $S/adapters/
# NAME MODEL FROM SEQ BATCH STEPS LR SHARPEN BALANCE CTX
while read -r name model from seq batch steps lr sharpen balance ctx; do
  setsid nohup $S/train_paper --model $S/$model --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$name \
    --from $S/adapters/$from --seq $seq --batch $batch --steps $steps --minutes ${MIN:-7} \
    --eval-every $((steps / 4)) --lr $lr --sharpen $sharpen --balance $balance --ppl $BOOK --ctx $ctx \
    --probe $PROBE > $R/$name.log 2>&1 < /dev/null &
  echo "started $name: $model from $from, seq $seq x $batch, $steps steps, lr $lr"
done <<EOF
g8_s4k gemma-3-270m-q4_k_m.gguf gemma3-270m-k8 4096 2 600 3e-4 0 0 4096,8192,16384,32768
g8g_s4k gemma-3-270m-q4_k_m.gguf gemma3-270m-k8-global 4096 2 600 1e-3 0 5 4096,8192,16384,32768
q8_s16k Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf qwen2.5-coder-0.5b-k8 16384 1 600 1e-3 0 0 4096,16384,32768
EOF
sleep 60
for f in $R/g8_s4k.log $R/g8g_s4k.log $R/q8_s16k.log; do echo "== $f"; tail -3 $f; done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
