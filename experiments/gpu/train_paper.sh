#!/usr/bin/env bash
# On the GPU machine (issue 15, items 2-3): paper-scale training of the K=8 and K=4 adapters with
# the fused training step (core/examples/train_paper.rs), both runs at once on one GPU, then their
# held-out perplexities (Persuasion, tests/fixtures/ppl_persuasion_60k.txt; ctx 512 and 1024;
# dense, soft, top-k). The paper's setting: dot scores, tau 0.1, Sinkhorn 10 iterations with the
# full gradient, log gate, w 128, 4000 steps x 4 x 1024 tokens (16.4M), AdamW lr 1e-2 with cosine
# decay; each run stops after MIN minutes at the latest (with a final held-out evaluation).
# Staged with experiments/gpu/pack.py into call folders (train_paper.xz, corpus.tar.xz, the
# model); each call carries one folder and runs this script on it: it unstages it
# (experiments/gpu/unstage.py, into /root/stage) and trains once everything is there.
# Usage: train_paper.sh CALL_FOLDER [MIN] [RUN...]   (RUN = k8_log, k4_log, k8_paper, ...)
set -uo pipefail
F=${1:?call folder}; MIN=${2:-7.0}; shift 2 2>/dev/null || shift $#
RUNS=${*:-k8_log k4_log}
S=/root/stage; B=$S/train_paper; M=$S/SmolLM2-135M-Instruct.Q4_1.gguf; R=$S/runs
T0=$(date +%s)
python3 experiments/gpu/unstage.py $F || exit 1
[ -f $S/train_paper.xz.ok ] && chmod +x $B
[ -x $B ] && [ -f $M.xz.ok ] && [ -d $S/corpus/train ] || { echo "STAGED part only"; ls $S; exit 0; }
source $F/gpu-prelude.sh
mkdir -p $R
( while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) > $R/smi.txt 2>&1 &
SMI=$!
for run in $RUNS; do
  k=${run%%_*}; k=${k#k}; gate=${run#*_}
  $B --model $M --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$run --groups $k --gate $gate \
    --tau 0.1 --steps ${STEPS:-4000} --minutes $MIN --eval-every 500 --ppl tests/fixtures/ppl_persuasion_60k.txt \
    > $R/$run.log 2>&1 &
done
for j in $(jobs -p); do [ "$j" = "$SMI" ] || wait $j; done
kill $SMI 2>/dev/null
for run in $RUNS; do echo "== $run"; grep -E "^(training|step|TRAINED|PPL)|rror" $R/$run.log; done
tar czf $OUT/runs.tgz -C $S runs
echo "== done in $(($(date +%s) - T0)) s"
