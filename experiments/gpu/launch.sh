#!/usr/bin/env bash
# On the GPU machine: stage one call folder (unstage.py into /root/stage), then start train_paper
# runs detached (setsid), so that they outlive this call. They run on while the machine stays
# warm: the next call (another launch.sh, or collect.sh) must come within the machine's idle
# release. Each RUN is NAME=STEPS:ARGS as in sweep.sh (ARGS: train_paper flags joined by commas;
# paths absolute, e.g. --from,/root/stage/sample_adapters/smollm2-135m-k8). A run stops after MIN
# minutes at the latest, with its final evaluation and perplexities. MODEL picks the base model
# (a file name in the stage, default SmolLM2's GGUF); PROBE as in sweep.sh.
# Usage: [MODEL=NAME] [PROBE=BOOKS] launch.sh CALL_FOLDER MIN [RUN...]
set -uo pipefail
F=${1:?call folder}; MIN=${2:?minutes}; shift 2
S=/root/stage; B=$S/train_paper; M=$S/${MODEL:-SmolLM2-135M-Instruct.Q4_1.gguf}; R=$S/runs
python3 experiments/gpu/unstage.py $F || exit 1
[ -f $S/train_paper.xz.ok ] && chmod +x $B
[ $# -gt 0 ] || { echo "staged; no run asked"; exit 0; }
[ -x $B ] && [ -f $M ] && [ -d $S/corpus/train ] || { echo "not staged yet: $B, $M, $S/corpus"; ls $S; exit 1; }
# The runs read these after this call's working tree may be gone: copies in the stage.
cp -rn sample_adapters tests/fixtures/ppl_persuasion_60k.txt $S/
source $F/gpu-prelude.sh
# Binaries built with cuda-env.sh and not passed through cuda-needed.sh lack the CUDA libraries as
# NEEDED entries: preloading them resolves the same symbols.
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
mkdir -p $R
[ -f $R/smi.pid ] && kill -0 "$(cat $R/smi.pid)" 2>/dev/null || {
  setsid bash -c "while sleep 30; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done >> $R/smi.txt 2>&1" &
  echo $! > $R/smi.pid
}
for run in "$@"; do
  name=${run%%=*}; rest=${run#*=}; steps=${rest%%:*}; args=${rest#*:}
  setsid nohup $B --model $M --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$name --steps $steps --minutes $MIN \
    --eval-every $(( steps / 4 )) --ppl $S/ppl_persuasion_60k.txt --ctx 1024 ${PROBE:+--probe $PROBE} ${args//,/ } \
    > $R/$name.log 2>&1 < /dev/null &
  echo "started $name: $steps steps, ${args//,/ }"
done
sleep 20
for run in "$@"; do name=${run%%=*}; echo "== $name"; grep -vE "^step [0-9]+ [0-9.]+ ms/step" $R/$name.log | tail -4; done
