#!/usr/bin/env bash
# On the GPU machine (issue 52): routers trained at the lengths they serve. Stages one call folder
# (pack.py pieces: train_paper.xz, focus-lens.xz, corpus.tar.xz, the model) into /root/stage; once
# everything is there, `start` launches the length fine-tunes of a run table detached (setsid:
# they outlive the call) and the evaluations; `collect` waits and brings everything back in
# $OUT/runs.tgz. Each run fine-tunes an adapter at SEQ-token sequences (a curriculum's later
# stage) and measures its held-out perplexities at 1024, 4096 and 8192 (SmolLM2's context) on the
# whole of Persuasion (held out of every training set), dense, soft and top-k.
#
# Usage: length52.sh CALL_FOLDER stage|start|collect|eval [WAIT]
#   RUNS   the run table (default experiments/gpu/length52_round1.txt): one run a line,
#          NAME FROM SEQ BATCH STEPS LR BALANCE MINUTES [train_paper flags...]
#          FROM is a shipped adapter (sample_adapters/NAME) or runs/NAME, another run of the
#          table: that run starts once the other has saved its adapter (a curriculum's stages).
#   EVALS  adapters for `focus-lens eval` (sample_adapters/NAME or runs/NAME, space separated;
#          default none): each in soft and top-2 mode, every suite (the long cloze on the whole of
#          Persuasion), then TruthfulQA again with the few-shot prefix, the base model's scores
#          beside them; `start` runs them beside the training,
#          `eval` alone (and waits for them). JSON in runs/eval_*.json, the printout in .log.
set -uo pipefail
F=${1:?call folder}; what=${2:?stage|start|collect|eval}
S=/root/stage; R=$S/runs; M=${MODEL:-$S/SmolLM2-135M-Instruct.Q4_1.gguf}
BOOK=$S/corpus/heldout/austen__persuasion.txt
PROBE=$S/corpus/heldout/austen__persuasion.txt,$S/corpus/heldout/shakespeare__hamlet.txt
RUNS=${RUNS:-experiments/gpu/length52_round1.txt}
python3 experiments/gpu/unstage.py $F || exit 1
[ "$what" = stage ] && exit 0
for f in train_paper.xz focus-lens.xz corpus.tar.xz $(basename $M); do
  [ -f $S/$f.ok ] || { echo "not staged: $f"; exit 1; }
done
chmod +x $S/train_paper $S/focus-lens
source scripts/cuda/gpu-prelude.sh
# The binaries of scripts/cuda/cuda-env.sh's stub-linked builds load the CUDA libraries so.
export LD_PRELOAD="${PRELOAD-libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13}"
mkdir -p $R
cp -rn sample_adapters $S/

# An adapter named as the tables name it, as a path on this machine.
where() { case $1 in runs/*) echo $S/$1 ;; *) echo $S/sample_adapters/$1 ;; esac; }

evals() {
  for a in ${EVALS:-}; do
    local tag=${a##*/}
    for mode in soft topk; do for shot in "" --few-shot; do
      local name=eval_${tag}_${mode}${shot:+_fewshot}
      while [ ! -f "$(where $a)/adapter_model.safetensors" ]; do sleep 5; done
      # The few-shot prefix is TruthfulQA's (the clozes are the same either way).
      local suite=all; [ -n "$shot" ] && suite=truthfulqa-mc
      $S/focus-lens eval --model $M --device cuda --adapter "$(where $a)" --mode $mode --k 2 --suite $suite \
        $shot --long-cloze-text $BOOK --json > $R/$name.json 2> $R/$name.log
      echo "$name: exit $?" >> $R/eval_done.txt
    done; done
  done
}

if [ "$what" = start ]; then
  setsid bash -c "while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done" >> $R/smi.txt 2>&1 < /dev/null &
  grep -v '^#' "$RUNS" | while read -r name from seq batch steps lr balance minutes extra; do
    [ -n "$name" ] || continue
    setsid nohup bash -c "
      while [ ! -f $(where $from)/adapter_model.safetensors ]; do sleep 5; done
      exec $S/train_paper --model $M --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$name \
        --from $(where $from) --seq $seq --batch $batch --steps $steps --minutes $minutes \
        --eval-every $((steps / 4)) --lr $lr --sharpen 0.05 --balance $balance $extra --ppl $BOOK \
        --ctx 1024,4096,8192 --probe $PROBE" > $R/$name.log 2>&1 < /dev/null &
    echo "started $name: from $from, seq $seq x $batch, $steps steps ($minutes min at most), lr $lr, balance $balance $extra"
  done
  export -f evals where; export S R M BOOK EVALS
  setsid nohup bash -c evals > $R/evals.log 2>&1 < /dev/null &
  sleep 45
  for f in $R/*.log; do echo "== $f"; tail -3 $f; done
  exit 0
fi
if [ "$what" = eval ]; then
  evals
  for f in $R/eval_*.log; do echo "== $f"; tail -4 $f; done
  tar czf $OUT/evals.tgz -C $S runs/eval_*.json runs/eval_*.log
  exit 0
fi
WAIT=${3:-480}; end=$((SECONDS + WAIT))
while pgrep -x train_paper > /dev/null && [ $SECONDS -lt $end ]; do sleep 10; done
echo "running: $(pgrep -x train_paper | wc -l) train_paper, $(pgrep -x focus-lens | wc -l) focus-lens"
for log in $R/*.log; do
  echo "== $(basename $log .log)"
  grep -E "^(training|starting|TRAINED|PPL|TIMING)|rror|panick" $log | tail -16
done
cat $R/eval_done.txt 2>/dev/null
tail -2 $R/smi.txt
# The adapters' weights come back too (runs/NAME/adapter_model.safetensors, ~1.1 MB each).
tar czf $OUT/runs.tgz -C $S --exclude='*.pid' runs
