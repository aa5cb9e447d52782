#!/usr/bin/env bash
# Issue 32 on the GPU machine, one call, from the repository root:
#   experiments/gpu/decode_device.sh STAGE_DIR
# STAGE_DIR holds focus-lens.xz and core-tests.xz (release builds with the cuda feature; the
# test binary is `cargo test --release --features cuda -p focus-core --lib --no-run`'s),
# gpu-prelude.sh (scripts/cuda/) and wheels/ (gguf and what it may lack, for the anchor).
# The models: MODEL_SMOL, MODEL_QWEN (default ~/stage/SmolLM2-135M-Instruct.Q4_1.gguf and
# ~/stage/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf).
# Runs (1) the GPU tests of decode and device routing (device routing = host routing on random
# inputs and on SmolLM2's steps; GPU generation = the CPU's), (2) `bench decode --device cuda`,
# dense vs top-k with the per-step split, SmolLM2 at 1024 and 8150, Qwen2.5 at 1024 and 32000,
# (3) the transformers anchor on the same GGUFs and contexts, then prints one table.
# Everything goes under $OUT/decode32; at most 8 minutes on one H200 (each part has a timeout:
# tests 110 s, benches 80 + 120 s, anchor 170 s, which starts no variant after 110 s).
set -uo pipefail
S=${1:?usage: decode_device.sh STAGE_DIR}
S=$(cd "$S" && pwd)
O=${OUT:-/tmp/out}/decode32
mkdir -p "$O"
MODEL_SMOL=${MODEL_SMOL:-$HOME/stage/SmolLM2-135M-Instruct.Q4_1.gguf}
MODEL_QWEN=${MODEL_QWEN:-$HOME/stage/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf}
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$O/log.txt"; }

B=$(mktemp -d /tmp/decode32.XXXX)
for f in focus-lens core-tests; do
  if [ -f "$S/$f.xz" ]; then
    xz -dc "$S/$f.xz" > "$B/$f" && chmod +x "$B/$f" || { echo "cannot unpack $S/$f.xz"; exit 1; }
  else
    echo "no $S/$f.xz: its part is skipped"
  fi
done
source "$S/gpu-prelude.sh"
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$O/gpu.txt"
for m in "$MODEL_SMOL" "$MODEL_QWEN"; do [ -f "$m" ] || stamp "MISSING model $m"; done

# (1) Tests: the routing kernel, the real-model generation, and every decode test (GPU and CPU).
stamp "tests"
if [ -x "$B/core-tests" ]; then
  FOCUS_LENS_TEST_GGUF=$MODEL_SMOL timeout 110 "$B/core-tests" --test-threads 1 cuda_route cuda_topk_generation decode > "$O/tests.txt" 2>&1
  echo "rc $?" >> "$O/tests.txt"
fi
[ -f "$O/tests.txt" ] && grep -E "^test |test result|SKIPPED|panicked|^rc" "$O/tests.txt" | tail -n 25

# (2) Our decode: dense vs top-k (k=2, random K=8 causal adapter, window 128) with the split.
bench() { # NAME MODEL CONTEXTS STEPS TIMEOUT
  stamp "bench $1"
  timeout "$5" "$B/focus-lens" bench decode --device cuda --model "$2" --contexts "$3" --steps "$4" --json > "$O/bench_$1.json" 2> "$O/bench_$1.err"
  echo "rc $?" >> "$O/bench_$1.err"
}
bench smollm2 "$MODEL_SMOL" 1024,8150 32 80
bench qwen "$MODEL_QWEN" 1024,32000 24 120

# (3) The anchor: transformers on the same GGUFs (gguf from the staged wheels when missing).
stamp "anchor"
PY=$O/py
mkdir -p "$PY"
unset LD_PRELOAD
for mod in gguf requests urllib3 idna certifi charset_normalizer; do
  if ! PYTHONPATH=$PY python3 -c "import $mod" 2>/dev/null; then
    python3 -m pip install --quiet --no-index --no-deps --target "$PY" "$S"/wheels/${mod}-*.whl || stamp "cannot install the $mod wheel"
  fi
done
PYTHONPATH=$PY timeout 170 python3 experiments/gpu/decode_anchor.py --model "$MODEL_SMOL:1024,8150" --model "$MODEL_QWEN:1024,32000" \
  --steps 32 --compile --budget-s 110 --json "$O/anchor.json" > "$O/anchor.txt" 2> "$O/anchor.err"
echo "rc $?" >> "$O/anchor.err"
stamp "done"

python3 - "$O" <<'PY' | tee "$O/summary.txt"
import json, os, sys
o = sys.argv[1]
def load(f):
    try:
        return json.load(open(os.path.join(o, f)))
    except Exception as e:
        print(f"{f}: unreadable ({e})"); return None
anchor = {}
a = load("anchor.json")
for r in (a or {}).get("rows", []):
    if "tokens_per_s" in r:
        anchor[(r["model"].split("-")[0], r["context"], r["variant"])] = r["tokens_per_s"]
print(f"{'model':>10} {'ctx':>6} | {'dense':>8} {'top-k':>8} {'top-k/dense':>11} | {'HF eager':>8} {'HF compiled':>11} | split ms: dense route/attn/rest ; top-k route/attn/rest")
for name in ["smollm2", "qwen"]:
    d = load(f"bench_{name}.json")
    for r in (d or {}).get("rows", []):
        key = "SmolLM2" if name == "smollm2" else "Qwen2.5"
        he, hc = anchor.get((key, r["context"], "eager")), anchor.get((key, r["context"], "compiled"))
        f = lambda x: f"{x:8.1f}" if x else f"{'-':>8}"
        sp = lambda s: "/".join(f"{1e3 * s[k]:.2f}" for k in ("routing_s", "attention_s", "rest_s")) if s else "-"
        print(f"{key:>10} {r['context']:>6} | {r['dense_tokens_per_s']:8.1f} {r['topk_tokens_per_s']:8.1f} {r['topk_over_dense_speed']:10.2f}x | {f(he)} {f(hc):>11} | {sp(r.get('dense_split'))} ; {sp(r.get('topk_split'))}")
PY
tail -n 2 "$O"/bench_*.err "$O/anchor.err"
grep -h "^#" "$O/anchor.err" | head -n 12
rm -rf "$B"
