#!/usr/bin/env bash
# On the GPU machine after unstage.py, with focus-lens and core-tests (the test binary of
# `cargo test --release --features cuda -p focus-core --lib --no-run`) built with the cuda
# feature and the SmolLM2 and Qwen2.5-Coder GGUFs staged: (1) the GPU decode tests (the kernel
# against the CPU's decode, and generation with the cache on the GPU against the CPU's full
# forward on the tiny checkpoints), (2) `bench decode` on the GPU: SmolLM2 at 1K, 4K and 8K,
# Qwen2.5-Coder-0.5B at 16K and 32K, k=2 and k=1. Run from the repository root; writes $OUT/decode.
set -uo pipefail
S=/root/stage; O=$OUT/decode; mkdir -p $O
source $S/gpu-prelude.sh
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/focus-lens
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/gpu.txt
[ -f $S/core-tests ] && { chmod +x $S/core-tests; $S/core-tests --test-threads 1 decode 2>&1 | tee $O/tests.txt; }
B="$S/focus-lens bench decode --device cuda"
SM=$S/SmolLM2-135M-Instruct.Q4_1.gguf; QW=$S/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
$B --model $SM --contexts 1,1024,4096,8150 --steps 32 --json > $O/smollm2_k2.json 2> $O/smollm2_k2.err
$B --model $SM --contexts 1024,8150 --steps 32 --k 1 --json > $O/smollm2_k1.json 2> $O/smollm2_k1.err
[ -f $QW ] && $B --model $QW --contexts 16384,32000 --steps 16 --json > $O/qwen_k2.json 2> $O/qwen_k2.err
[ -f $QW ] && $B --model $QW --contexts 16384,32000 --steps 16 --k 1 --json > $O/qwen_k1.json 2> $O/qwen_k1.err
python3 - $O <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    for r in d["rows"]:
        print(f"{d['model']:>28} ctx {r['context']:>6} k {r['k']}: dense {r['dense_tokens_per_s']:8.1f} tok/s, top-k {r['topk_tokens_per_s']:8.1f} tok/s, top-k/dense {r['topk_over_dense_speed']:.2f}x, read {100 * r['topk_read_fraction']:.1f}%")
PY
tail -n 3 $O/*.err
