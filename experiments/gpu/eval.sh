#!/usr/bin/env bash
# On the GPU machine after train.sh: held-out perplexity tables (part `ppl`) or the
# zero-degradation suites (part `suites`) for the trained adapters in /root/stage/runs, several
# jobs at once. JSON goes to $S/eval/ppl$TAG or $S/eval/suites and comes back as
# $OUT/eval.tgz (with the runs as $OUT/runs.tgz). RUNS (a glob, default *) picks the run
# folders, MODEL their base model, TAG keeps one model's tables apart from another's.
# Usage: [RUNS='qwen_*'] [MODEL=...] [TAG=_qwen] eval.sh ppl|suites|collect [PARALLEL]
set -uo pipefail
PART=${1:?ppl or suites}; P=${2:-6}
S=/root/stage; B=$S/focus-lens; M=${MODEL:-$S/SmolLM2-135M-Instruct.Q4_1.gguf}; R=$S/runs
source $S/gpu-prelude.sh
FX=tests/fixtures/ppl_persuasion_60k.txt
jobs=$(mktemp)
collect() {
  tar czf $OUT/runs.tgz -C $S --exclude='*/checkpoint*' runs
  [ -d $S/eval ] && tar czf $OUT/eval.tgz -C $S eval
  for f in $R/*/train_log.jsonl; do echo "$f $(tail -n1 $f | cut -c1-160)"; done
}
if [ "$PART" = collect ]; then collect; exit 0; fi
runs=$(cd $R && for d in ${RUNS:-*}/; do [ -f $d/adapter_config.json ] && echo ${d%/}; done)
if [ "$PART" = ppl ]; then
  O=$S/eval/ppl${TAG:-}; mkdir -p $O
  for c in 512 1024; do
    echo "$B ppl --device cuda --model $M --ctx $c --json $FX > $O/dense_$c.json" >> $jobs
    for a in $runs; do
      K=$(python3 -c "import json;print(json.load(open('$R/$a/adapter_config.json'))['groups'])")
      ks="1 2 3 $K"
      echo "$B ppl --device cuda --model $M --ctx $c --adapter $R/$a --mode soft --json $FX > $O/${a}_soft_$c.json" >> $jobs
      for k in $ks; do
        echo "$B ppl --device cuda --model $M --ctx $c --adapter $R/$a --mode topk --k $k --json $FX > $O/${a}_topk${k}_$c.json" >> $jobs
      done
    done
  done
else
  O=$S/eval/suites; mkdir -p $O
  for a in $runs; do
    echo "$B eval --device cuda --model $M --adapter $R/$a --mode topk --k 2 --suite all --json > $O/${a}_topk2.json" >> $jobs
    echo "$B eval --device cuda --model $M --adapter $R/$a --mode soft --suite all --no-base --json > $O/${a}_soft.json" >> $jobs
    echo "$B eval --device cuda --model $M --adapter $R/$a --mode topk --k 2 --suite truthfulqa-mc --few-shot --json > $O/${a}_topk2_6shot.json" >> $jobs
  done
fi
xargs -P $P -I{} bash -c '{} 2>>'$O'/errors.log' < $jobs
ls $O | wc -l
for f in $O/*.json; do python3 - "$f" <<'PY'
import json, sys, os
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(os.path.basename(sys.argv[1]), "BAD", e); sys.exit()
if "ppl" in d:
    print(f"{os.path.basename(sys.argv[1]):<32} ppl {d['ppl']:.4f} {d['seconds']:.1f}s")
else:
    for c in d.get("comparisons", []): print(os.path.basename(sys.argv[1]), c["summary"])
    for r in d.get("results", []): print(os.path.basename(sys.argv[1]), r["suite"], r["mode"], round(r["accuracy"], 4), round(r["score"], 4), round(r["seconds"], 1))
PY
done
tail -n 5 $O/errors.log
collect
