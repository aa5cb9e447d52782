#!/usr/bin/env bash
# On the GPU machine (issue 53), from the repository root: our fused router-training step at the
# shapes of Llama-3.1-8B, Qwen2.5-7B and Gemma-2-9B (bf16 stand-ins with random weights, written
# here by scripts/make-standin.py: weights cannot be carried) against the PyTorch anchor
# (experiments/gpu/train_anchor.py, torch.compile) in the same call, and a 1M-token training run
# on the 8B stand-in.
#
#   bash experiments/gpu/issue53.sh STAGE_DIR [SECTIONS]
#
# SECTIONS, comma-separated (default: standins,step,run1m: more than one call's 600 s, so give a
# few a call; each section writes the stand-ins it needs when they are not on disk already):
#   tests         the CUDA tests of the training kernels (fused attention, Sinkhorn, small ops:
#                 `cuda_fused` in the focus-train test binary, $G/focus_train_test[.xz], built
#                 with `cargo test --release --features cuda -p focus-train --lib --no-run`)
#                 (TESTS_FILTER: another name filter for the test binary)
#   agree         CPU and CUDA training agree (`train_speed agree`: losses, router gradients)
#   ncu           every kernel's time (ncu, clocks left alone) in one step of a 2-layer model of
#                 $NCU_SHAPE's shapes (default llama-3.1-8b; `make-standin.py --layers 2`), 4 x 2,048 tokens, Recompute
#                 On (every layer recomputed, as most of the 32 are): $O/ncu_summary.txt
#   standins      the three stand-ins as bf16 Hugging Face directories under $STANDINS (default
#                 /root/standins), each timed (16.1, 15.2 and 18.5 GB: 46 GiB with the three; the
#                 8B took 23 s on an H200 host). Where the disk is short, the oldest stand-in
#                 written is removed first (a shape's section writes its own again), so with less
#                 than about 50 GiB free run the shapes' sections alone
#   step          = llama-3.1-8b,qwen2.5-7b,gemma2-9b
#   llama-3.1-8b, qwen2.5-7b, gemma2-9b
#                 one shape: ours (core/examples/train_speed.rs: `step --model DIR --batch 4 --seq
#                 2048 --steps 5 --variants $VARIANTS`, default fused (Recompute::Auto),fused-recompute), then
#                 the anchor (`train_anchor.py --shape S --batch 4 --seq 2048 --steps 5 --compile`:
#                 dense forward, eager and compiled bf16 step), then ours again: side by side
#   run1m         `focus-lens train` on the Llama-3.1-8B stand-in: the paper recipe's one stage,
#                 $STEPS1M (default 123) steps x 4 x 2,048 tokens = 1,007,616 tokens, held-out
#                 evaluation at the start and the end only (2 sequences), no checkpoints; the
#                 adapter and its train_log.jsonl in $OUT/run1m_adapter, the device memory sampled
#                 every 500 ms
#
# STAGE_DIR holds (carried, e.g. .stage/i53, which git ignores; or /root/stage after unstage.py):
#   train_speed.xz   `cargo build --release --features cuda -p focus-core --example train_speed`
#   focus-lens.xz    `cargo build --release --features cuda -p focus-lens` (for run1m)
#   tokenizer-smollm2.json[.xz]  `make-standin.py --write-tokenizer` (SmolLM2's vocabulary, padded
#                    to each shape's by make-standin.py; $TOKENIZER overrides)
#   corpus.tar.xz or corpus/     train/*.txt and heldout/*.txt for run1m ($CORPUS overrides)
# Each *.xz is decompressed beside itself (kept when already newer), corpus.tar.xz extracted.
# The carry limit (64 MiB a call with the checkout) may need experiments/gpu/pack.py and
# unstage.py over several calls for the two binaries; then STAGE_DIR is /root/stage.
# The binaries get the CUDA libraries through scripts/cuda/gpu-prelude.sh, and LD_PRELOAD=$PRELOAD
# (default those the stub-linked builds of scripts/cuda/cuda-env.sh need; PRELOAD= to skip it).
# ANCHOR=0: ours only in a shape's section (no anchor, no second run of ours).
# MARGIN_GB (default 3): disk left free beside a stand-in being written.
# BUDGET (default 570 s): a section that cannot get its minimum of what is left is skipped (SKIP
# line), and every command's timeout is cut to what is left. Writes $OUT/*.log; a summary last.
set -uo pipefail
G=${1:?usage: issue53.sh STAGE_DIR [SECTIONS]}
WHAT=${2:-standins,step,run1m}
WHAT=${WHAT//step/llama-3.1-8b,qwen2.5-7b,gemma2-9b}
O=${OUT:-/tmp/out}
SD=${STANDINS:-/root/standins}
BUDGET=${BUDGET:-570}
VARIANTS=${VARIANTS:-fused,fused-recompute}
PRELOAD=${PRELOAD-libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13}
T0=$(date +%s)
mkdir -p "$O" "$SD"
# shellcheck source=/dev/null
source scripts/cuda/gpu-prelude.sh

for f in "$G"/*.xz; do
  [ -e "$f" ] || continue
  case $f in
    *.tar.xz) [ -d "${f%.tar.xz}" ] || tar xJf "$f" -C "$G" ;;
    *) [ "${f%.xz}" -nt "$f" ] || xz -dkf "$f" ;;
  esac
done
for b in train_speed focus-lens focus_train_test; do [ -f "$G/$b" ] && chmod +x "$G/$b"; done
TOK=${TOKENIZER:-$G/tokenizer-smollm2.json}
CORPUS=${CORPUS:-$G/corpus}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee "$O/gpu.txt"
df -h "$SD" | tee -a "$O/gpu.txt"

left() { echo $((BUDGET - $(date +%s) + T0)); }
# cap SECONDS [RESERVE]: SECONDS, or what is left less RESERVE when that is less (at least 1).
cap() {
  local l=$(($(left) - ${2:-0}))
  if [ "$l" -lt "$1" ]; then echo $((l > 1 ? l : 1)); else echo "$1"; fi
}
# has NAME SECONDS: NAME was asked for and SECONDS are left.
has() {
  [[ ",$WHAT," == *",$1,"* ]] || return 1
  local l
  l=$(left)
  if [ "$l" -lt "$2" ]; then echo "SKIP $1: $l s left, needs $2" | tee -a "$O/skipped.log"; return 1; fi
}
# ours SECONDS BINARY ARGS...: one of our CUDA binaries under a timeout.
ours() {
  local t=$1
  shift
  timeout -k 10 "$t" env LD_PRELOAD="$PRELOAD" "$@"
}

# Disk the stand-in of a shape takes, GB (rounded up), and a margin.
size_gb() {
  case $1 in
    llama-3.1-8b) echo 17 ;;
    qwen2.5-7b) echo 16 ;;
    gemma2-9b) echo 19 ;;
    *) echo 20 ;;
  esac
}
avail_gb() { df -BG --output=avail "$SD" | tail -1 | tr -dc 0-9; }

# ensure_standin SHAPE: $SD/SHAPE written unless complete already ($SD/SHAPE.complete); other
# stand-ins are removed, oldest first, while the disk is short of it.
ensure_standin() {
  local s=$1 d=$SD/$1 t0 rc need victim
  [ -f "$d.complete" ] && return 0
  if [ ! -f "$TOK" ]; then echo "STANDIN $s: no tokenizer $TOK" | tee -a "$O/standins.log"; return 1; fi
  rm -rf "$d"
  need=$(($(size_gb "$s") + ${MARGIN_GB:-3}))
  while [ "$(avail_gb)" -lt "$need" ]; do
    victim=$(find "$SD" -maxdepth 1 -name '*.complete' -printf '%T@ %p\n' | sort -n | head -1 | cut -d' ' -f2)
    [ -n "$victim" ] || { echo "STANDIN $s: no room ($(avail_gb) GB free, needs $need)" | tee -a "$O/standins.log"; return 1; }
    echo "removing ${victim%.complete} for room" | tee -a "$O/standins.log"
    rm -rf "${victim%.complete}" "$victim"
  done
  t0=$(date +%s)
  timeout -k 10 "$(cap 300)" python3 scripts/make-standin.py "$s" --hf-bf16 "$d" --tokenizer-from "$TOK" > "$O/standin_$s.err" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "STANDIN $s: failed (exit $rc): $(tail -2 "$O/standin_$s.err")" | tee -a "$O/standins.log"
    rm -rf "$d"
    return 1
  fi
  touch "$d.complete"
  echo "STANDIN $s: $(du -sh "$d" | cut -f1) in $(($(date +%s) - t0)) s ($(tail -1 "$O/standin_$s.err")); $(avail_gb) GB left" | tee -a "$O/standins.log"
}

anchor_shape() {
  case $1 in
    llama-3.1-8b) echo llama3-8b ;;
    *) echo "$1" ;;
  esac
}

# The step of one shape, ours / anchor / ours, in $O/step_SHAPE.log.
step_shape() {
  local s=$1 log=$O/step_$1.log
  ensure_standin "$s" || return
  [ -x "$G/train_speed" ] || { echo "no $G/train_speed" | tee -a "$log"; return; }
  echo "== $s: ours ($(date +%T))" | tee -a "$log"
  ours "$(cap 150 200)" "$G/train_speed" step --model "$SD/$s" --batch 4 --seq 2048 --steps 5 --variants "$VARIANTS" 2>&1 | tee -a "$log"
  [ "${ANCHOR:-1}" = 1 ] || return 0
  echo "== $s: anchor, train_anchor.py --shape $(anchor_shape "$s") ($(date +%T))" | tee -a "$log"
  PYTHONUNBUFFERED=1 timeout -k 10 "$(cap 330 90)" python3 experiments/gpu/train_anchor.py --shape "$(anchor_shape "$s")" --batch 4 --seq 2048 --steps 5 --compile 2>&1 | grep -v Warning | tee -a "$log"
  echo "== $s: ours again ($(date +%T))" | tee -a "$log"
  ours "$(cap 150)" "$G/train_speed" step --model "$SD/$s" --batch 4 --seq 2048 --steps 5 --variants "$VARIANTS" 2>&1 | tee -a "$log"
}

if has tests 60; then
  if [ -x "$G/focus_train_test" ]; then
    timeout -k 10 "$(cap 240)" env LD_PRELOAD="$PRELOAD" "$G/focus_train_test" "${TESTS_FILTER:-cuda_fused}" --test-threads 1 --nocapture > "$O/tests.log" 2>&1
    echo "tests: exit $? ($(grep -E '^test result' "$O/tests.log" | tail -1))" | tee -a "$O/tests.log"
  else
    echo "tests: no $G/focus_train_test" | tee -a "$O/tests.log"
  fi
fi
if has agree 60 && [ -x "$G/train_speed" ]; then
  ours "$(cap 150)" "$G/train_speed" agree 2>&1 | tee "$O/agree.log" | grep -E "AGREE|rror"
fi
if has ncu 100 && [ -x "$G/train_speed" ] && [ -f "$TOK" ]; then
  ns=${NCU_SHAPE:-llama-3.1-8b}
  d2=$SD/$ns-2layers
  [ -f "$d2/config.json" ] || python3 scripts/make-standin.py "$ns" --layers 2 --hf-bf16 "$d2" --tokenizer-from "$TOK" > "$O/standin_2layers.err" 2>&1
  timeout -k 10 "$(cap 200)" env LD_PRELOAD="$PRELOAD" ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$G/train_speed" step --model "$d2" --batch 4 --seq 2048 --steps 1 --warmup 1 --variants fused-recompute > "$O/ncu.csv" 2> "$O/ncu.err"
  python3 - "$O/ncu.csv" "$ns" <<'PY' | tee "$O/ncu_summary.txt"
import collections, csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
r = csv.reader(lines)
hdr = next(r)
ki, vi, mi = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Name")
rows = [(x[ki], float(x[vi].replace(",", ""))) for x in r if len(x) > vi and x[mi] == "gpu__time_duration.sum"]
rows = rows[len(rows) // 2:]  # the timed step (the second half of the launches: warm-up, then the step)
agg = collections.defaultdict(lambda: [0.0, 0])
for k, v in rows:
    agg[k[:100]][0] += v / 1e6
    agg[k[:100]][1] += 1
print(f"# NCU kernels of one step, 2 layers of {sys.argv[2]}'s shapes, 4 x 2048, every layer recomputed: total {sum(v for _, v in rows) / 1e6:.1f} ms")
for k, (t, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:40]:
    print(f"{t:9.2f} ms {n:5d}  {k}")
PY
fi
if has standins 60; then
  for s in llama-3.1-8b qwen2.5-7b gemma2-9b; do
    [ "$(left)" -gt 40 ] || { echo "SKIP standin $s: $(left) s left" | tee -a "$O/skipped.log"; break; }
    ensure_standin "$s"
  done
fi
for s in llama-3.1-8b qwen2.5-7b gemma2-9b; do
  if has "$s" "$([ "${ANCHOR:-1}" = 1 ] && echo 300 || echo 100)"; then step_shape "$s"; fi
done
if has run1m 240; then
  STEPS1M=${STEPS1M:-123}
  if ensure_standin llama-3.1-8b && [ -x "$G/focus-lens" ] && [ -d "$CORPUS/train" ] && [ -d "$CORPUS/heldout" ]; then
    rm -rf "$O/run1m_adapter"
    t=$(cap 540)
    # The trainer stops itself (evaluating and saving) a minute and a half before the timeout.
    lim=$(python3 -c "print(max(0.5, ($t - 90) / 60))")
    nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -lms 500 > "$O/run1m_mem.csv" &
    smi=$!
    t0=$(date +%s)
    echo "run1m: $STEPS1M steps x 4 x 2048 tokens = $((STEPS1M * 8192)) tokens; timeout $t s, time limit $lim min" | tee "$O/run1m.log"
    ours "$t" "$G/focus-lens" train --model "$SD/llama-3.1-8b" --device cuda --data "$CORPUS/train" --heldout "$CORPUS/heldout" \
      --out "$O/run1m_adapter" --recipe paper --steps "$STEPS1M" --seq-len 2048 --batch 4 --eval-every "$STEPS1M" --eval-seqs 2 \
      --checkpoint-every 0 --time-limit-min "$lim" >> "$O/run1m.log" 2>&1
    rc=$?
    kill $smi 2>/dev/null
    wait $smi 2>/dev/null
    tail -3 "$O/run1m.log"
    echo "run1m: exit $rc after $(($(date +%s) - t0)) s; device memory peak $(cut -d, -f2 "$O/run1m_mem.csv" | tr -dc '0-9\n' | sort -n | tail -1) MiB (nvidia-smi, 500 ms samples)" | tee -a "$O/run1m.log"
  else
    echo "run1m: needs the 8B stand-in, $G/focus-lens and $CORPUS/{train,heldout}" | tee -a "$O/run1m.log"
  fi
fi
echo "== summary ($(($(date +%s) - T0)) s)"
cat "$O/gpu.txt"
grep -hE "^tests|FAILED|panicked|AGREE|STANDIN|^MODEL|^==|RESULT|^MEM|ms/step|compile|SKIP|^run1m|^wrote|rror" "$O"/tests.log "$O"/agree.log "$O"/standins.log "$O"/step_*.log "$O"/run1m.log "$O"/skipped.log 2>/dev/null
exit 0
