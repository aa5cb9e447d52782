#!/usr/bin/env bash
# On the GPU machine: `bench decode` of one build under several environment variants,
# interleaved (variant A, B, ... then again) so that drift between processes falls on all alike.
# Usage: ab_env.sh PRELUDE MODEL CONTEXTS STEPS K REPS "NAME=ENV ..." ...  (ENV "-" for none)
# e.g. ab_env.sh prelude.sh m.gguf 8150 32 2 2 "base=-" "variant=SOME_SWITCH=1" (switches a build reads)
# Prints one line per run (dense, top-k, ratio) and writes $OUT/ab.txt.
set -uo pipefail
source $1 >/dev/null 2>&1
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
MODEL=$2; CTX=$3; STEPS=$4; K=$5; REPS=$6; shift 6
S=/root/stage; chmod +x $S/focus-lens
for r in $(seq $REPS); do
  for v in "$@"; do
    name=${v%%=*}; envs=${v#*=}; [ "$envs" = "-" ] && envs=""
    env $envs timeout 150 $S/focus-lens bench decode --device cuda --model $MODEL --contexts $CTX --steps $STEPS --k $K --json > /tmp/ab.json 2>/tmp/ab.err || { echo "$name rep $r failed: $(tail -1 /tmp/ab.err)"; continue; }
    python3 - "$name" "$r" <<'PY'
import json, sys
d = json.load(open("/tmp/ab.json"))
for x in d["rows"]:
    print(f"{sys.argv[1]:>12} rep {sys.argv[2]} ctx {x['context']:>6} k {x['k']}: dense {x['dense_tokens_per_s']:7.1f} top-k {x['topk_tokens_per_s']:7.1f} = {x['topk_over_dense_speed']:.3f}x graph {x.get('topk_graph')}")
PY
  done
done | tee -a $OUT/ab.txt
