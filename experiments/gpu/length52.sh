#!/usr/bin/env bash
# On the GPU machine (issue 52): routers trained at the lengths they serve. Stages one call folder
# (pack.py pieces: train_paper.xz, focus-lens.xz, corpus.tar.xz, the model) into /root/stage; once
# everything is there, `start` launches the length fine-tunes detached (setsid: they outlive the
# call) and the shipped adapters' baselines; `collect` waits and brings everything back in
# $OUT/runs.tgz. The runs: each shipped SmolLM2 adapter (trained at 1,024 tokens) fine-tuned at
# SEQ-token sequences (the curriculum's second stage), its held-out perplexities at 1024, 4096 and
# 8192 (SmolLM2's context) on the whole of Persuasion (held out of every training set), dense,
# soft and top-k; the baselines are the same perplexities of the shipped adapters as they are.
# Usage: length52.sh CALL_FOLDER stage|start|collect [WAIT]
set -uo pipefail
F=${1:?call folder}; what=${2:?stage|start|collect}
S=/root/stage; R=$S/runs; M=$S/SmolLM2-135M-Instruct.Q4_1.gguf
BOOK=$S/corpus/heldout/austen__persuasion.txt
PROBE=$S/corpus/heldout/austen__persuasion.txt,$S/corpus/heldout/shakespeare__hamlet.txt
python3 experiments/gpu/unstage.py $F || exit 1
[ "$what" = stage ] && exit 0
for f in train_paper.xz focus-lens.xz corpus.tar.xz SmolLM2-135M-Instruct.Q4_1.gguf; do
  [ -f $S/$f.ok ] || { echo "not staged: $f"; exit 1; }
done
chmod +x $S/train_paper $S/focus-lens
source scripts/cuda/gpu-prelude.sh
mkdir -p $R
if [ "$what" = start ]; then
  cp -rn sample_adapters $S/
  setsid bash -c "while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done >> $R/smi.txt 2>&1" &
  # NAME FROM SEQ BATCH STEPS LR BALANCE
  while read -r name from seq batch steps lr balance; do
    setsid nohup $S/train_paper --model $M --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$name \
      --from $S/sample_adapters/$from --seq $seq --batch $batch --steps $steps --minutes ${MIN:-7} \
      --eval-every $((steps / 4)) --lr $lr --sharpen 0.05 --balance $balance --ppl $BOOK --ctx 1024,4096,8192 \
      --probe $PROBE > $R/$name.log 2>&1 < /dev/null &
    echo "started $name: from $from, seq $seq x $batch, $steps steps, lr $lr, balance $balance"
  done <<EOF
k8_s4k smollm2-135m-k8 4096 2 600 3e-4 0.5
k4_s4k smollm2-135m-k4 4096 2 600 3e-4 2
k8_s8k smollm2-135m-k8 8192 1 600 3e-4 0.5
k8_s4k_lr1e3 smollm2-135m-k8 4096 2 600 1e-3 0.5
EOF
  # Baselines: the shipped adapters at each length, and prefill speed dense vs top-k (bench forward).
  setsid nohup bash -c "
    for a in smollm2-135m-k8 smollm2-135m-k4; do for ctx in 4096 8192; do
      for mode in dense soft topk1 topk2 topk3; do
        case \$mode in dense) m='';; soft) m='--adapter $S/sample_adapters/'\$a' --mode soft';;
          *) m='--adapter $S/sample_adapters/'\$a' --mode topk --k '\${mode#topk};; esac
        echo \"== \$a ctx \$ctx \$mode\"; $S/focus-lens ppl --model $M --device cuda --ctx \$ctx --json \$m $BOOK
      done; done; done > $R/baseline_ppl.txt 2>&1" < /dev/null > /dev/null 2>&1 &
  sleep 45
  for f in $R/*.log; do echo "== $f"; tail -3 $f; done
  exit 0
fi
WAIT=${3:-480}; end=$((SECONDS + WAIT))
while pgrep -x train_paper > /dev/null && [ $SECONDS -lt $end ]; do sleep 10; done
echo "running: $(pgrep -x train_paper | wc -l) train_paper"
for log in $R/*.log; do
  echo "== $(basename $log .log)"
  grep -E "^(training|starting|TRAINED|PPL|TIMING)|rror|panick" $log | tail -14
done
tail -2 $R/smi.txt
tar czf $OUT/runs.tgz -C $S --exclude='*.pid' runs
