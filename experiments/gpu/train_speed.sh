#!/usr/bin/env bash
# On the GPU machine (issue 15): the training step's speed and correctness in one session.
#   1. the CUDA tests of the training kernels (and the inference kernels'), from the focus-core
#      test binary: `cuda_` tests, forward and gradients against the composed reference;
#   2. the step profile and A/B of core/examples/train_speed.rs (SmolLM2-135M shapes, random
#      weights, 4 x 1024 tokens, K=8, full Sinkhorn gradient, 10 iterations, log gate, w 128);
#   3. steps at 8192 tokens (1 x 8192 and 4 x 8192) with the device memory they took;
#   4. CPU vs CUDA agreement of a short training run (train_speed agree);
#   5. the PyTorch anchor, train_anchor.py (../shared/tools), in the same session: its eager
#      runs and compiled bf16 (compiled f32 skipped: 4 minutes of compilation for a number
#      the comparison does not use); then our default step once more, right after it.
# Files come in $G (default .gpu, carried): train_speed.xz, focus_core_test.xz (the test binary
# of `cargo test --release --features cuda -p focus-core --lib --no-run`), gpu-prelude.sh,
# train_anchor.py. Usage: train_speed.sh [tests,step,long,agree,anchor] (default: all).
# Writes $OUT/*.log; prints a summary last.
set -uo pipefail
G=${G:-.gpu}
O=${OUT:-/tmp/out}
mkdir -p $O
WHAT=${1:-tests,step,long,agree,anchor}
source $G/gpu-prelude.sh
for f in $G/*.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total --format=csv | tee $O/gpu.txt
has() { [[ ",$WHAT," == *",$1,"* ]]; }
if has tests; then
  timeout 300 $G/focus_core_test cuda_ --test-threads 1 2>&1 | tee $O/tests.log | grep -E "^test |test result|panicked|error" | tail -40
fi
if has step; then
  timeout 420 $G/train_speed step --batch 4 --seq 1024 --steps ${STEPS:-10} ${VARIANTS:+--variants $VARIANTS} 2>&1 | tee $O/step.log
fi
if has long; then
  for b in 1 4; do
    timeout 240 $G/train_speed step --batch $b --seq 8192 --steps 3 --warmup 1 --variants fused --mem 2>&1 | tee -a $O/long.log
  done
fi
if has agree; then
  timeout 300 $G/train_speed agree 2>&1 | tee $O/agree.log
fi
if has anchor; then
  python3 - $G/train_anchor.py <<'EOF'
import sys
s = open(sys.argv[1]).read()
# Only the compiled bf16 variant under --compile (the eager loop above it keeps both dtypes).
head, sep, tail = s.partition("cm = torch.compile(model)")
tail = tail.replace('[("f32", torch.float32), ("bf16 autocast", torch.bfloat16)]', '[("bf16 autocast", torch.bfloat16)]', 1)
open("/tmp/anchor.py", "w").write(head + sep + tail)
EOF
  PYTHONUNBUFFERED=1 timeout 540 python3 /tmp/anchor.py --compile 2>&1 | grep -v Warning | tee $O/anchor.log
  timeout 120 $G/train_speed step --batch 4 --seq 1024 --steps 10 --variants fused 2>&1 | tee -a $O/anchor.log
fi
echo "== summary"
cat $O/gpu.txt
grep -hE "test result|RESULT|MEM|AGREE|ms/step" $O/*.log
