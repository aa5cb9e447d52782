#!/usr/bin/env bash
# On the GPU machine (issue 52, second round), after length52.sh staged train_paper.xz,
# focus-lens.xz, corpus.tar.xz and the models (pack.py at 16 MiB a call: the working tree is
# ~45 MiB of the 64). The runs the first round left (experiments/results/length52_h100):
#   k8_st2   K=8 through its top-2 mask (straight-through, `focus-lens train`: the composed graph,
#            so 2 x 2,048 tokens, about 50 GB), from the length-trained K=8 (LEN8, an adapter
#            folder carried in the working tree: /work/length52/runs/k8_s4k_lr1e3 here, copied
#            into an ignored folder that `carry` names), then its perplexities at 4096 and 8192;
#   q8_s16k  Qwen2.5-Coder's K=8 at 16,384-token sequences (QSEQ; they fit since the fused step
#            recomputes the layers that do not: step::layer_gradients) for MIN minutes, then 4K/16K/32K;
#   g8_s4k   Gemma 3's all-layer adapter at 4,096 with its own recipe (lr 3e-4, no balance).
# Then `ppl --ctx ... --modes ...` (quality and prefill speed against length, the table of
# issue 52) for each, and `eval` (all suites) for the adapters to ship. Everything detached;
# `collect` brings back $OUT/round2.tgz.
# Usage: LEN8=DIR length52_round2.sh start|collect [WAIT]
set -uo pipefail
what=${1:?start|collect}
S=/root/stage; R=$S/runs2; B=$S/focus-lens; T=$S/train_paper
SMOL=$S/SmolLM2-135M-Instruct.Q4_1.gguf; GEMMA=$S/gemma-3-270m-q4_k_m.gguf; QWEN=$S/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
BOOK=$S/corpus/heldout/austen__persuasion.txt
source scripts/cuda/gpu-prelude.sh
mkdir -p $R
if [ "$what" = start ]; then
  cp -r ${LEN8:?the length-trained K=8 adapter folder} $R/from_k8 && cp -r experiments/results/qwen_coder_k8_h200/adapter $R/from_q8 && cp -r sample_adapters/gemma3-270m-k8 $R/from_g8
  setsid nohup bash -c "$B train --model $SMOL --device cuda --data $S/corpus/train --heldout $S/corpus/heldout --init $R/from_k8 --stages long \
      --straight-through 2 --seq-len 2048 --batch 2 --steps 400 --lr 1e-3 --sharpen 0.05 --balance 0.5 --eval-every 100 \
      --time-limit-min ${MIN:-6} --out $R/k8_st2 && $B ppl --model $SMOL --device cuda --adapter $R/k8_st2 --ctx 1024,4096,8192 \
      --modes dense,soft,top1,top2,top3 --json $BOOK > $R/k8_st2.ppl.json" > $R/k8_st2.log 2>&1 < /dev/null &
  setsid nohup bash -c "$T --model $QWEN --data $S/corpus/train --heldout $S/corpus/heldout --out $R/q8_s16k --from $R/from_q8 \
      --seq ${QSEQ:-16384} --batch 1 --steps 2000 --minutes ${MIN:-6} --eval-every 200 --lr 1e-3 && $B ppl --model $QWEN --device cuda \
      --adapter $R/q8_s16k --ctx 4096,16384,32768 --modes dense,soft,top1,top2,top3 --json $BOOK > $R/q8_s16k.ppl.json" > $R/q8_s16k.log 2>&1 < /dev/null &
  setsid nohup bash -c "$T --model $GEMMA --data $S/corpus/train --heldout $S/corpus/heldout --out $R/g8_s4k --from $R/from_g8 \
      --seq 4096 --batch 2 --steps 2000 --minutes ${MIN:-6} --eval-every 200 --lr 3e-4 && $B ppl --model $GEMMA --device cuda \
      --adapter $R/g8_s4k --ctx 4096,8192,16384,32768 --modes dense,soft,top1,top2,top3 --json $BOOK > $R/g8_s4k.ppl.json" > $R/g8_s4k.log 2>&1 < /dev/null &
  sleep 30; tail -n 3 $R/*.log; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
  exit 0
fi
WAIT=${2:-480}; end=$((SECONDS + WAIT))
while pgrep -f "focus-lens (train|ppl)|train_paper" > /dev/null && [ $SECONDS -lt $end ]; do sleep 10; done
for f in $R/*.log; do echo "== $f"; grep -E "TRAINED|TIMING|rror|wrote" $f | tail -4; done
for f in $R/*.ppl.json; do echo "== $f"; head -c 1500 $f; echo; done
tar czf $OUT/round2.tgz -C $S --exclude='*/checkpoint*' runs2
