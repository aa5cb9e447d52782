#!/usr/bin/env bash
# On the GPU machine after unstage.py: K=8 log-gate adapters with cosine scores at lower
# temperatures (sharper memberships), one run per GPU, then their held-out PPL at ctx 1024
# (soft, top-1, top-2, top-3). Raw outputs to $OUT/tau. Usage: tau_sweep.sh MIN STEPS TAU...
set -uo pipefail
S=/root/stage; B=$S/focus-lens; M=$S/SmolLM2-135M-Instruct.Q4_1.gguf; R=$S/tau; O=$OUT/tau; mkdir -p $R $O
source $S/gpu-prelude.sh
MIN=${1:?minutes}; STEPS=${2:?steps}; shift 2
NGPU=$(nvidia-smi -L | wc -l); i=0
for tau in "$@"; do
  CUDA_VISIBLE_DEVICES=$((i % NGPU)) $B train --model $M --device cuda --data $S/corpus/train --heldout $S/corpus/heldout \
    --seed 0 --seq-len 1024 --batch 4 --lr 1e-2 --cosine-decay --steps $STEPS --time-limit-min $MIN --eval-every 50 \
    --eval-seqs 8 --checkpoint-every 0 --groups 8 --gate log --score cosine --sinkhorn-grad detached --tau $tau \
    --out $R/k8_tau$tau > $R/k8_tau$tau.log 2>&1 &
  i=$((i + 1))
done
wait
FX=tests/fixtures/ppl_persuasion_60k.txt
for tau in "$@"; do
  for m in "soft" "topk --k 1" "topk --k 2" "topk --k 3"; do
    n=$(echo $m | tr -d ' -' | sed 's/topkk/topk/')
    echo "$B ppl --device cuda --model $M --ctx 1024 --adapter $R/k8_tau$tau --mode $m --json $FX > $O/k8_tau${tau}_${n}.json"
  done
done | xargs -P 8 -I{} bash -c '{}'
for d in $R/k8_tau*/; do n=$(basename $d); mkdir -p $O/$n; cp $d/adapter_config.json $d/adapter_model.safetensors $d/train_log.jsonl $O/$n/; done
for f in $O/*.json; do echo "$(basename $f) $(python3 -c "import json;print(round(json.load(open('$f'))['ppl'],3))")"; done
for f in $R/*/train_log.jsonl; do echo "$f $(tail -n1 $f | cut -c1-150)"; done
cd $OUT && tar czf tau.tgz tau
