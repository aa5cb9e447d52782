#!/usr/bin/env bash
# On the GPU machine after unstage.py: train the sample adapters, one run per GPU (candle's many
# small kernels keep one process launch-bound, so runs sharing a GPU slow each other down).
# Runs go to /root/stage/runs (kept while the machine is warm, for eval.sh) and are copied to
# $OUT/runs.tgz. Every run: the full Sinkhorn gradient (SGRAD=detached: the cheaper one),
# cosine LR decay over STEPS, stopped after MIN minutes at the latest (with a final held-out evaluation).
# Usage: train.sh probe                       (speed: full vs detached gradient, 4 steps each)
#        [TAU=0.1] train.sh MIN STEPS SCORE [RUN...]
#                                             (RUN = k8_log, k4_log, k8_paper, k4_paper)
#        MODEL=/root/stage/other.gguf train.sh ...  (another base model, e.g. Qwen2.5-Coder-0.5B)
#        PREFIX=qwen_ GPU0=1 BATCH=2 train.sh ...  (run folders named PREFIX+RUN, GPUs from
#                                             GPU0 on, sequences per step)
#        EXTRA="--router-layers global" train.sh ...  (more train flags for every run)
#        ST=2 LR=2e-3 train.sh MIN STEPS SCORE NAME=ADAPTER...
#                                             (fine-tune ADAPTER, a path in the checkout,
#                                             with --init; ST: --straight-through k)
# Started with setsid it outlives its call: a later call collects $S/runs (see collect in eval.sh).
# Round 2: `train.sh 9.0 365 cosine k8_log k4_log`, then `train.sh 7.9 325 dot k8_log k4_log`,
# each followed by `eval.sh ppl` (rounds 2-3 with SGRAD=detached). Round 4, the adapters
# shipped before the sweep: experiments/HISTORY.md.
set -uo pipefail
S=/root/stage; B=$S/focus-lens; M=${MODEL:-$S/SmolLM2-135M-Instruct.Q4_1.gguf}; R=$S/runs; mkdir -p $R
source $S/gpu-prelude.sh
NGPU=$(nvidia-smi -L | wc -l)
data="--model $M --device cuda --data $S/corpus/train --heldout $S/corpus/heldout --seed 0 --seq-len 1024 --batch ${BATCH:-4}"
if [ "$1" = probe ]; then
  small="--model $M --device cuda --data $S/corpus/train/austen__emma.txt --heldout $S/corpus/heldout/austen__persuasion.txt --seq-len 1024 --batch 4"
  i=0
  for g in full detached; do
    CUDA_VISIBLE_DEVICES=$((i % NGPU)) $B train $small --steps 5 --eval-every 0 --eval-seqs 1 --checkpoint-every 0 \
      --groups 8 --score cosine --sinkhorn-grad $g --out $R/probe_$g > $R/probe_$g.log 2>&1 &
    i=$((i + 1))
  done
  wait
  for g in full detached; do
    python3 -c "import json; r=[json.loads(l) for l in open('$R/probe_$g/train_log.jsonl')]; print('$g', 'steps 2-5:', round((r[4]['seconds']-r[0]['seconds'])/4, 3), 's/step of 4 x 1024 tokens')"
  done
  tail -n 3 $R/probe_*.log
  exit 0
fi
MIN=${1:?minutes}; STEPS=${2:?steps}; SCORE=${3:?dot or cosine}; shift 3
RUNS=${*:-k8_log k4_log k8_paper k4_paper}
common="$data --lr ${LR:-1e-2} --cosine-decay --steps $STEPS --time-limit-min $MIN --eval-every 50 --eval-seqs 8 --checkpoint-every 25 --sinkhorn-grad ${SGRAD:-full} ${ST:+--straight-through $ST} ${EXTRA:-}"
( while sleep 15; do nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader; done ) > $R/smi${PREFIX:-}.txt 2>&1 &
SMI=$!
i=0
for run in $RUNS; do
  if [ "${run#*=}" != "$run" ]; then
    # NAME=ADAPTER: the adapter's own configuration (groups, gate, score, tau).
    spec="--init $PWD/${run#*=}"; run=${run%%=*}
  else
    k=${run%%_*}; k=${k#k}; gate=${run#*_}
    spec="--groups $k --gate $gate --score $SCORE --tau ${TAU:-0.1}"
  fi
  run=${PREFIX:-}$run; launched="${launched:-} $run"
  CUDA_VISIBLE_DEVICES=$(((${GPU0:-0} + i) % NGPU)) $B train $common $spec --out $R/$run > $R/$run.log 2>&1 &
  i=$((i + 1))
done
for j in $(jobs -p); do [ "$j" = "$SMI" ] || wait $j; done
kill $SMI 2>/dev/null
# One archive: $OUT returns at most 8 files.
tar czf ${OUT:-/tmp}/runs.tgz -C $S --exclude='*/checkpoint*' runs
for run in $launched; do echo "$run $(tail -n1 $R/$run/train_log.jsonl | cut -c1-200)"; tail -n 2 $R/$run.log; done
