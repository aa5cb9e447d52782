#!/usr/bin/env bash
# The house's CPU A/B (issue 27: 59b4e85 vs its successor; issue 48: 13d0139 vs the crate split):
# two release binaries, old and new, alternated ROUNDS times on this machine: bench forward
# (prefill tokens/s, dense and top-k), bench attention (K=8, k=1 and 2, 4096 tokens), bench decode
# (context 1024 and 4096, dense and top-k tokens/s) and a CPU training step (focus-lens train, 4
# steps of 1 x 512 tokens; the seconds a step from its own log). Other builds on the machine are
# SIGSTOPped while it runs, as in ab_old_new.sh.
# Usage: [ONLY=decode] ab_house_cpu.sh OLD_BINARY NEW_BINARY [ROUNDS]   (ONLY=decode: bench decode alone)
set -uo pipefail
OLD=${1:?old binary}; NEW=${2:?new binary}; ROUNDS=${3:-3}
me=$$; mkdir -p /tmp/ab; : > /tmp/ab/frozen; rm -f /tmp/ab/thaw
freeze() { for p in $(pgrep -f 'cargo|rustc|/target/|cc1|collect2|/ld|nvcc|Xvfb'); do [ "$p" != "$me" ] && kill -STOP $p 2>/dev/null && echo $p >> /tmp/ab/frozen; done; }
( while [ ! -e /tmp/ab/thaw ]; do freeze; sleep 1; done ) & fl=$!
sleep 2
cd "$(dirname "$0")/../.."
C=~/.cache/focus-lens/corpus
# The training text: the corpus (scripts/fetch_corpus.py), else the Persuasion fixture for both.
TRAIN=$C/train/austen__emma.txt; HELD=$C/heldout/austen__persuasion.txt
[ -e $TRAIN ] || { TRAIN=tests/fixtures/ppl_persuasion_60k.txt; HELD=$TRAIN; }
for r in $(seq 1 $ROUNDS); do for b in old new; do
  bin=$OLD; [ $b = new ] && bin=$NEW
  if [ "${ONLY:-}" != decode ]; then
  $bin bench forward --lengths 1024 --repeats 3 --json 2>/dev/null | python3 -c "import sys,json; d=json.load(sys.stdin); r=d['rows'][0]; print('$r $b forward dense_tps',round(r['dense_tokens_per_s'],1),'topk_tps',round(r['topk_tokens_per_s'],1))"
  $bin bench attention --groups 8 --k 1,2 --lengths 4096 --repeats 3 --json 2>/dev/null | python3 -c "
import sys,json
for l in sys.stdin:
  d=json.loads(l); print('$r $b attention k',d['k'],'dense_ms',round(d['dense_ms'],1),'focus_ms',round(d['focus_ms'],1))"
  fi
  $bin bench decode --contexts 1024,4096 --steps 8 --json 2>/dev/null | python3 -c "
import sys,json
d=json.load(sys.stdin)
for r in (d['rows'] if isinstance(d,dict) else d):
  print('$r $b decode ctx',r['context'],'dense_tps',round(r['dense_tokens_per_s'],1),'topk_tps',round(r['topk_tokens_per_s'],1))"
  [ "${ONLY:-}" = decode ] && continue
  rm -rf /tmp/ab/train_$b
  t0=$(date +%s.%N)
  $bin train --data $TRAIN --heldout $HELD --out /tmp/ab/train_$b --steps 4 --seq-len 512 --batch 1 --eval-every 4 --eval-seqs 1 >/dev/null 2>&1
  echo "$r $b train 4 steps x 512 tokens (whole command: load, 4 steps, one evaluation of 1 window) s $(python3 -c "print(round($(date +%s.%N)-$t0,2))")"
done; done
touch /tmp/ab/thaw; wait $fl
for p in $(sort -u /tmp/ab/frozen); do kill -CONT $p 2>/dev/null; done
rm -f /tmp/ab/thaw
