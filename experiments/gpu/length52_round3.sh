#!/usr/bin/env bash
# On the GPU machine (issue 52, third round): several models at once, started as they arrive.
# Stages one call folder (pack.py pieces) into /root/stage like length52.sh; then:
#
#   length52_round3.sh CALL stage           reassemble what has arrived (unstage.py)
#   length52_round3.sh CALL tests           the CUDA tests: `cuda_fused` of the focus-train test
#                                           binary, `cuda` of focus-model's (decode, routing)
#   length52_round3.sh CALL start           launch, detached, every run of $RUNS and every eval of
#                                           $EVALS whose model is staged and that has not started
#                                           yet (call again as more models arrive)
#   length52_round3.sh CALL collect [WAIT]  wait up to WAIT s (default 470) for the runs and evals,
#                                           print their summaries, bring back $OUT/runs.tgz
#   length52_round3.sh CALL profile         Nsight Compute's per-kernel times of one chunk of
#                                           $PROFILE (MODEL:ADAPTER:CTX) in $PROFILE_MODES
#                                           (default `dense topk:2`)
#   length52_round3.sh CALL bench           `focus-lens bench forward --stages` of $BENCH
#                                           (MODEL:ADAPTER:LENGTHS ...; BENCH_K, default 2):
#                                           $OUT/bench_ADAPTER.json
#   length52_round3.sh CALL table           `focus-lens ppl --ctx ... --modes ...` of $TABLES, one
#                                           at a time on the otherwise idle GPU (the speed figures;
#                                           TABLE_MODES: the runs' --modes, default
#                                           `dense,top1,top2,top3 soft`)
#
# RUNS (default experiments/gpu/length52_round3.txt): one run a line,
#   NAME MODEL FROM SEQ BATCH STEPS LR BALANCE MINUTES CTX [train_paper flags...]
#   MODEL a staged GGUF's file name; FROM `-` (a new adapter: the flags say how), a shipped
#   adapter (sample_adapters/NAME), adapters/NAME (prepared by `prep` below), runs/NAME (another
#   run of the table: it starts once that one saved its adapter) or a stored adapter's folder in
#   the checkout (experiments/results/...), any of these but runs/ with `@wN` after it for its
#   local window set to N (focus-lens must be staged); CTX the held-out perplexity
#   lengths (whole of Persuasion, dense, soft, top-1..3) or `-` for none. The flags come first
#   on train_paper's line, so a flag there wins over the columns' (`--eval-every N`).
# EVALS: MODEL:ADAPTER[:RUN,RUN...] ... (`focus-lens eval`, soft and top-2, every suite with the
#   long cloze on Persuasion, then TruthfulQA with the few-shot prefix; the base model's scores
#   with the soft runs only: the top-2 runs take --no-base, their base is the soft run's). RUNS,
#   when given, names the ones to run of soft, soft_fewshot, topk, topk_fewshot. EVAL_SUITE: the
#   suite of the runs without the prefix (default all; e.g. long-cloze).
# TABLES: MODEL:ADAPTER:CTX,CTX,... ...
set -uo pipefail
F=${1:?call folder}; what=${2:?stage|tests|start|collect|table|profile}
S=/root/stage; R=$S/runs
BOOK=$S/corpus/heldout/austen__persuasion.txt
PROBE=$S/corpus/heldout/austen__persuasion.txt,$S/corpus/heldout/shakespeare__hamlet.txt
RUNS=${RUNS:-experiments/gpu/length52_round3.txt}
python3 experiments/gpu/unstage.py $F || exit 1
[ "$what" = stage ] && exit 0
source scripts/cuda/gpu-prelude.sh
# The binaries of scripts/cuda/cuda-env.sh's stub-linked builds load the CUDA libraries so.
export LD_PRELOAD="${PRELOAD-libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13}"
mkdir -p $R
for b in train_paper focus-lens focus_train_test focus_model_test; do [ -f $S/$b ] && chmod +x $S/$b; done
staged() { [ -f $S/$1.ok ]; }

if [ "$what" = tests ]; then
  staged focus_train_test.xz && (cd crates/train && $S/focus_train_test --test-threads 1 cuda_fused 2>&1 | tail -40 | tee $OUT/cuda_train_tests.log)
  staged focus_model_test.xz && (cd crates/model && $S/focus_model_test --test-threads 1 cuda 2>&1 | tail -40 | tee $OUT/cuda_model_tests.log)
  exit 0
fi

cp -rn sample_adapters $S/
# Adapters the tables start from that are a shipped one with its routing changed: K=8 with a
# local window of 256 and of 512 tokens (`focus-lens adapter derive`: the weights the same).
mkdir -p $S/adapters
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
for w in 256 512; do
  d=$S/adapters/smollm2-135m-k8-w$w
  [ -d $d ] || ! staged $SMOL || $S/focus-lens adapter derive $S/sample_adapters/smollm2-135m-k8 --model $S/$SMOL --out $d --window $w
done
# runs/NAME, adapters/NAME (staged here), experiments/... (a stored adapter in the checkout), or a
# shipped adapter's name.
where() { case $1 in runs/*|adapters/*) echo $S/$1 ;; experiments/*) echo $PWD/$1 ;; *) echo $S/sample_adapters/$1 ;; esac; }

if [ "$what" = start ]; then
  # (The whole list detached from the call's output: a `a || b &` subshell kept the pipe of
  # `start | grep` open, and the call ran to its time limit.)
  { pgrep -f "nvidia-smi --query" > /dev/null || exec setsid bash -c "while sleep 20; do nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; done"; } >> $R/smi.txt 2>&1 < /dev/null &
  grep -v '^#' "$RUNS" | while read -r name model from seq batch steps lr balance minutes ctx extra; do
    [ -n "$name" ] || continue
    [ -f $R/$name.log ] && continue
    staged $model || { echo "waiting for $model: $name"; continue; }
    # FROM@wN: a stored or shipped adapter with its local window set to N (`focus-lens adapter
    # derive`: the weights the same), made here as adapters/NAME-wN.
    case $from in *@w*)
      src=${from%@w*}; w=${from##*@w}; d=adapters/${src##*/}-w$w
      [ -d $S/$d ] || $S/focus-lens adapter derive $(where $src) --model $S/$model --out $S/$d --window $w || { echo "could not derive $from: $name not started"; continue; }
      from=$d ;;
    esac
    fromflag=""; wait_for=""
    [ "$from" != - ] && { fromflag="--from $(where $from)"; wait_for="$(where $from)/adapter_model.safetensors"; }
    pplflags=""; [ "$ctx" != - ] && pplflags="--ppl $BOOK --ctx $ctx"
    setsid nohup bash -c "
      while [ -n '$wait_for' ] && [ ! -f '$wait_for' ]; do sleep 5; done
      exec $S/train_paper --model $S/$model --data $S/corpus/train --heldout $S/corpus/heldout --out $R/$name $extra \
        $fromflag --seq $seq --batch $batch --steps $steps --minutes $minutes \
        --eval-every $((steps / 4)) --lr $lr --sharpen 0.05 --balance $balance $pplflags --probe $PROBE" > $R/$name.log 2>&1 < /dev/null &
    echo "started $name: $model from $from, seq $seq x $batch, $steps steps ($minutes min at most), lr $lr, balance $balance $extra"
  done
  for e in ${EVALS:-}; do
    model=${e%%:*}; a=${e#*:}; only=all
    case $a in *:*) only=${a#*:}; a=${a%%:*} ;; esac
    tag=${a##*/}
    [ -f $R/eval_${tag}.started ] && continue
    staged $model || { echo "waiting for $model: eval $a"; continue; }
    touch $R/eval_${tag}.started
    setsid nohup bash -c "
      while [ ! -f $(where $a)/adapter_model.safetensors ]; do sleep 5; done
      for mode in soft topk; do for shot in '' --few-shot; do
        name=eval_${tag}_\${mode}\${shot:+_fewshot}
        [ '$only' = all ] || [[ ,$only, == *,\${mode}\${shot:+_fewshot},* ]] || continue
        suite=${EVAL_SUITE:-all}; [ -n \"\$shot\" ] && suite=truthfulqa-mc
        base=''; [ \$mode = topk ] && base=--no-base
        $S/focus-lens eval --model $S/$model --device cuda --adapter $(where $a) --mode \$mode --k 2 --suite \$suite \
          \$shot \$base --long-cloze-text $BOOK --json > $R/\$name.json 2> $R/\$name.log
        echo \"\$name: exit \$?\" >> $R/eval_done.txt
      done; done" > $R/eval_${tag}.driver.log 2>&1 < /dev/null &
    echo "started evals of $a on $model"
  done
  sleep ${SETTLE:-20}
  for f in $R/*.log; do echo "== $f"; tail -2 $f; done
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
  exit 0
fi

if [ "$what" = table ]; then
  for t in ${TABLES:-}; do
    IFS=: read -r model a ctx <<< "$t"; tag=${a##*/}
    echo "== table $tag ($model, ctx $ctx)"
    # Soft in a run of its own (dense again beside it): its 32K pass may not fit, and a mode
    # that fails ends its table.
    for modes in ${TABLE_MODES:-dense,top1,top2,top3 soft}; do
      t=table_${tag}_${modes//,/-}
      timeout ${TABLE_TIMEOUT:-400} $S/focus-lens ppl --model $S/$model --device cuda --adapter $(where $a) --ctx $ctx \
        --modes $modes --json $BOOK > $R/$t.json 2> $R/$t.log
      echo "$t: exit $?"; tail -2 $R/$t.log
      python3 experiments/gpu/length_table.py $R/$t.json
    done
  done
  nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv,noheader
  (cd $S && tar czf $OUT/tables.tgz runs/table_*)
  exit 0
fi

if [ "$what" = bench ]; then
  # `bench forward --stages`: dense (without the router) and top-k alternated, then one pass of
  # each split by stage, on the book's first tokens.
  for b in ${BENCH:-}; do
    IFS=: read -r model a lengths <<< "$b"; tag=${a##*/}
    timeout ${BENCH_TIMEOUT:-300} $S/focus-lens bench forward --device cuda --model $S/$model --adapter $(where $a) \
      --k ${BENCH_K:-2} --lengths $lengths --repeats ${BENCH_REPEATS:-2} --stages --text $BOOK --json > $OUT/bench_$tag.json 2> $OUT/bench_$tag.log
    echo "bench_$tag: exit $?"; tail -3 $OUT/bench_$tag.log; python3 experiments/gpu/bench_stages.py $OUT/bench_$tag.json
  done
  exit 0
fi

if [ "$what" = profile ]; then
  # Where one pass's time goes: Nsight Compute's per-kernel durations (clocks left alone) over
  # one chunk of $PROFILE (MODEL:ADAPTER:CTX) in each of $PROFILE_MODES (focus-lens ppl --mode
  # M --k N), the GPU otherwise idle. The summaries come back in $OUT/profile.tgz.
  IFS=: read -r model a ctx <<< "${PROFILE:?MODEL:ADAPTER:CTX}"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  for m in ${PROFILE_MODES:-dense topk:2}; do
    mode=${m%%:*}; k=${m#*:}; [ "$k" = "$m" ] && k=""
    f=$R/profile_${a##*/}_${ctx}_${mode}${k}.txt
    timeout ${PROFILE_TIMEOUT:-280} $NCU --clock-control none --cache-control none --csv --page raw --metrics gpu__time_duration.sum --log-file $f \
      $S/focus-lens ppl --model $S/$model --device cuda --adapter $(where $a) --ctx $ctx --chunks 1 --mode $mode ${k:+--k $k} $BOOK > $f.log 2>&1
    echo "profile $mode$k: exit $?"; tail -3 $f.log
    python3 experiments/gpu/kernel_summary.py $f | head -25
  done
  (cd $S && tar czf $OUT/profile.tgz runs/profile_*)
  exit 0
fi

WAIT=${3:-470}; end=$((SECONDS + WAIT))
while { pgrep -x train_paper > /dev/null || pgrep -x focus-lens > /dev/null; } && [ $SECONDS -lt $end ]; do sleep 10; done
echo "running: $(pgrep -x train_paper | wc -l) train_paper, $(pgrep -x focus-lens | wc -l) focus-lens"
for log in $R/*.log; do
  case $log in *eval_*|*table_*) continue ;; esac
  echo "== $(basename $log .log)"
  grep -E "^(training|starting|TRAINED|PPL|TIMING|step [0-9]+ loss)|rror|panick" $log | tail -14
done
cat $R/eval_done.txt 2>/dev/null
tail -2 $R/smi.txt
tar czf $OUT/runs.tgz -C $S --exclude='*.pid' runs
