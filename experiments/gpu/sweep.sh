#!/usr/bin/env bash
# On the GPU machine (issue 15, item 2): runs of the paper-scale router training sweep, all at
# once on one GPU (core/examples/train_paper.rs, fused step), then their held-out perplexities
# (Persuasion, held out, ctx 1024: dense, soft, top-1..3). Each RUN is NAME=STEPS:ARGS, ARGS being
# train_paper flags joined by commas, e.g.
#   paper=4000:--groups,8,--score,dot,--tau,0.1      cos_km=1000:--score,cosine,--init,kmeans
# Staged like train_paper.sh (pack.py / unstage.py into /root/stage). A run stops after MIN
# minutes at the latest (with its final evaluation), so a call never runs past its limit.
# MODEL (a file name in the stage, default SmolLM2's GGUF) picks the base model; PPL the held-out
# text (default the Persuasion fixture); PROBE the structure probe's books (comma-separated paths,
# e.g. $S/corpus/heldout/austen__persuasion.txt,$S/corpus/heldout/shakespeare__hamlet.txt).
# Usage: [MODEL=NAME] sweep.sh CALL_FOLDER MIN RUN...
set -uo pipefail
F=${1:?call folder}; MIN=${2:?minutes}; shift 2
S=/root/stage; B=$S/train_paper; M=$S/${MODEL:-SmolLM2-135M-Instruct.Q4_1.gguf}; R=$S/runs
T0=$(date +%s)
python3 experiments/gpu/unstage.py $F || exit 1
[ -f $S/train_paper.xz.ok ] && chmod +x $B
[ -x $B ] && { [ -f $M.xz.ok ] || [ -f $M.ok ]; } && [ -d $S/corpus/train ] || { echo "STAGED part only"; ls $S; exit 0; }
[ $# -gt 0 ] || { echo "staged; no run asked"; exit 0; }
source $F/gpu-prelude.sh
# Binaries built with cuda-env.sh and not passed through cuda-needed.sh lack the CUDA libraries as
# NEEDED entries: preloading them resolves the same symbols.
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
mkdir -p $R
( while sleep 30; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done ) > $R/smi.txt 2>&1 &
SMI=$!
for run in "$@"; do
  name=${run%%=*}; rest=${run#*=}; steps=${rest%%:*}; args=${rest#*:}
  $B --model $M --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$name --steps $steps --minutes $MIN \
    --eval-every $(( steps / 4 )) --ppl ${PPL:-tests/fixtures/ppl_persuasion_60k.txt} --ctx 1024 ${PROBE:+--probe $PROBE} ${args//,/ } > $R/$name.log 2>&1 &
done
for j in $(jobs -p); do [ "$j" = "$SMI" ] || wait $j; done
kill $SMI 2>/dev/null
for run in "$@"; do name=${run%%=*}; echo "== $name"; grep -E "^(training|step|TRAINED|PPL)|rror" $R/$name.log; done
tar czf $OUT/runs.tgz -C $S runs
echo "== done in $(($(date +%s) - T0)) s"
