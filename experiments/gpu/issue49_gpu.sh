#!/usr/bin/env bash
# On the GPU machine (issues 48 and 49), from the repository root:
#   tests  the CUDA tests of the model, analysis and train crates (those moved beside their code
#          by issue 48, and the bf16 weights of issue 49: the `_bf16` row kernels, bf16 decode
#          against the CPU's f32 forward);
#   8b     the Llama-3.1-8B-shaped stand-in as a bf16 Hugging Face directory, made here
#          (scripts/make-standin.py, numpy only), analysed over 2,048 tokens on the GPU with the
#          device's memory sampled every 100 ms, then a short generation.
# Files in $G (carried, .stage is ignored), gpu-prelude.sh and for the tests
# {model,analysis,train}_test.xz (release test binaries built with --features cuda), for the 8B
# focus-lens.xz, tokenizer-128256.json.xz (written here by an --hf-bf16 run) and t2048.txt.
# PART=tests or PART=8b runs one half (the working tree that travels is limited to 64 MiB);
# both by default. Writes $OUT/*.log and prints the figures last.
set -uo pipefail
G=${G:-.stage/g49}
O=${OUT:-/tmp/out}
mkdir -p "$O"
source "$G/gpu-prelude.sh"
# The binaries were linked against stubs (scripts/cuda/cuda-env.sh): the real libraries load first.
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
for f in "$G"/*.xz; do xz -dkf "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee "$O/gpu.txt"
PART=${PART:-all}
if [ "$PART" != 8b ]; then
  for t in model analysis train; do
    [ -x "$G/${t}_test" ] || continue
    echo "== $t" >> "$O/tests.log"
    timeout 300 "$G/${t}_test" cuda --test-threads 1 --nocapture >> "$O/tests.log" 2>&1
    echo "exit $?" >> "$O/tests.log"
  done
  grep -E "^test |test result|panicked|^exit|bf16 GPU decode" "$O/tests.log" | tail -60
fi
[ "$PART" = tests ] && exit 0
# The 8B stand-in, bf16 (16 GB): numpy alone writes it.
t0=$(date +%s)
python3 scripts/make-standin.py llama-3.1-8b --hf-bf16 /tmp/8b --tokenizer-from "$G/tokenizer-128256.json" 2>&1 | tail -2
echo "made in $(( $(date +%s) - t0 )) s"
B=$G/focus-lens
$B info /tmp/8b --tokens 2048 | tee "$O/info8b.txt"
$B adapter init -m /tmp/8b --out /tmp/ad8b 2>&1 | tail -1
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$O/mem_analyze.csv" &
smi=$!
/usr/bin/time -f "analyze 8B bf16 on cuda: %e s, host peak RSS %M KB" \
  $B analyze -m /tmp/8b --device cuda --adapter /tmp/ad8b "$G/t2048.txt" --out "$O/a8b.json" > "$O/analyze8b.log" 2>&1
kill $smi; wait $smi 2>/dev/null
tail -3 "$O/analyze8b.log"
peak=$(sort -n "$O/mem_analyze.csv" | tail -1)
echo "device memory: ${base} MiB before, peak ${peak} MiB during the analysis (nvidia-smi, 100 ms samples)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$O/mem_generate.csv" &
smi=$!
/usr/bin/time -f "generate 8B bf16 on cuda: %e s, host peak RSS %M KB" \
  $B generate -m /tmp/8b --device cuda --max-tokens 64 --prompt "It was a truth universally acknowledged" > "$O/generate8b.log" 2>&1
kill $smi; wait $smi 2>/dev/null
tail -4 "$O/generate8b.log"
echo "device memory peak during generation: $(sort -n "$O/mem_generate.csv" | tail -1) MiB"
