#!/usr/bin/env bash
# On the GPU machine (issue 15): the training step's speed and correctness in one call.
#   tests   the CUDA tests of the training kernels, from the focus-core test binary (`cuda_fused`:
#           fused attention, Sinkhorn and small ops, forward and gradients, against the composed
#           reference on the device);
#   step    the step profile and A/B of core/examples/train_speed.rs (SmolLM2-135M shapes, random
#           weights, 4 x 1024 tokens, K=8, full Sinkhorn gradient, 10 iterations, log gate, w 128);
#   anchor  experiments/gpu/train_anchor.py in the same call: eager f32 and bf16, compiled bf16
#           (compiled f32 skipped: minutes of compilation for a number the comparison does not
#           use); then our default step again, right after it;
#   long    steps at 8192 tokens (1 x 8192, 4 x 8192) with the device memory they took;
#   agree   CPU vs CUDA agreement of a short training run (train_speed agree);
#   ncu     the per-kernel split of one fused step of a 2-layer model (ncu, clocks left alone).
# Files come in $G (default gpu-stage, carried): train_speed.xz, focus_core_test.xz (the test
# binary of `cargo test --release --features cuda -p focus-core --lib --no-run`), gpu-prelude.sh,
# train_anchor.py. Usage: train_speed.sh [tests,step,anchor,long,agree,ncu] (default: all).
# A section is skipped when fewer than its seconds are left of BUDGET (default 560).
# Writes $OUT/*.log; prints a summary last.
set -uo pipefail
G=${G:-gpu-stage}
O=${OUT:-/tmp/out}
mkdir -p $O
WHAT=${1:-tests,step,anchor,long,agree,ncu}
BUDGET=${BUDGET:-560}
T0=$(date +%s)
source $G/gpu-prelude.sh
for f in $G/*.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee $O/gpu.txt
# has NAME SECONDS: NAME was asked for and SECONDS are left.
has() {
  [[ ",$WHAT," == *",$1,"* ]] || return 1
  local left=$((BUDGET - $(date +%s) + T0))
  if [ $left -lt $2 ]; then echo "SKIP $1: $left s left" | tee -a $O/skipped.log; return 1; fi
}
if has tests 60; then
  timeout 150 $G/focus_core_test cuda_fused --test-threads 1 --nocapture 2>&1 | tee $O/tests.log | grep -E "^test |test result|panicked|error|case|B [0-9]|value" | tail -80
fi
if has step 90; then
  timeout 200 $G/train_speed step --batch 4 --seq 1024 --steps ${STEPS:-10} ${VARIANTS:+--variants $VARIANTS} 2>&1 | tee $O/step.log
fi
if has anchor 200; then
  python3 - $G/train_anchor.py <<'EOF'
import sys
s = open(sys.argv[1]).read()
head, sep, tail = s.partition("cm = torch.compile(model)")
tail = tail.replace('[("f32", torch.float32), ("bf16 autocast", torch.bfloat16)]', '[("bf16 autocast", torch.bfloat16)]', 1)
open("/tmp/anchor.py", "w").write(head + sep + tail)
EOF
  PYTHONUNBUFFERED=1 timeout 330 python3 /tmp/anchor.py --compile --compile-scope model 2>&1 | grep -v Warning | tee $O/anchor.log
  timeout 60 $G/train_speed step --batch 4 --seq 1024 --steps 10 --variants fused,fused-detached 2>&1 | tee -a $O/anchor.log
fi
if has long 40; then
  for b in 1 4; do
    timeout 90 $G/train_speed step --batch $b --seq 8192 --steps 3 --warmup 1 --variants fused --mem 2>&1 | tee -a $O/long.log
  done
fi
if has agree 40; then
  timeout 120 $G/train_speed agree 2>&1 | tee $O/agree.log
fi
if has ncu 40; then
  left=$((BUDGET - $(date +%s) + T0 - 10))
  timeout $left ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    $G/train_speed step --layers 2 --batch 4 --seq 1024 --steps 1 --warmup 2 --variants fused > $O/ncu.csv 2> $O/ncu.err
  python3 - $O/ncu.csv <<'EOF' | tee $O/ncu_split.txt
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("ncu: no rows"); sys.exit()
h = rows[0]; ki, vi, ii = h.index("Kernel Name"), h.index("Metric Value"), h.index("ID")
tot = collections.Counter(); cnt = collections.Counter()
num = lambda x: x.replace(',', '').replace('.', '', 1).isdigit()
data = [(int(r[ii]), r[ki], float(r[vi].replace(',', ''))) for r in rows[1:] if num(r[vi])]
# Only the last of the three steps: the last third of the kernels by ID.
data.sort(); data = data[2 * len(data) // 3:]
for _, k, v in data:
    k = k.split("(")[0][:60]; tot[k] += v; cnt[k] += 1
all_ = sum(tot.values())
print(f"NCU 2-layer fused step (the last of three): {len(data)} kernels, {all_/1e6:.2f} ms of kernel time")
for k, v in tot.most_common(30):
    print(f"NCU {k:60s} {cnt[k]:5d} x  {v/1e6:8.3f} ms  {100*v/all_:5.1f}%")
EOF
fi
echo "== summary ($(($(date +%s) - T0)) s)"
cat $O/gpu.txt
grep -hE "test result|RESULT|MEM|AGREE|ms/step|SKIP|NCU.*kernels" $O/*.log $O/ncu_split.txt 2>/dev/null
