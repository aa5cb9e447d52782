#!/usr/bin/env bash
# On the GPU machine after unstage.py (focus-lens, core-tests, SmolLM2, optionally Qwen2.5
# staged): the CUDA tests, then `bench decode` (k=2 at 1-8150 and k=1 at 8150 on SmolLM2; Qwen2.5
# at 1-32000 when staged). Every command has a timeout (a hung kernel must not take the session). Usage: decode_check.sh PRELUDE [tests|bench|all]; writes $OUT/check.
set -uo pipefail
S=/root/stage; O=$OUT/check; mkdir -p $O
source $1
WHAT=${2:-all}
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/focus-lens $S/core-tests
SM=$S/SmolLM2-135M-Instruct.Q4_1.gguf; QW=$S/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
if [ "$WHAT" != bench ]; then
  timeout 300 $S/core-tests --test-threads 1 gpu_ cuda_ device_decode candle_ops > $O/tests.txt 2>&1; echo "tests rc $?"
  FOCUS_LENS_TEST_GGUF=$SM timeout 200 $S/core-tests --test-threads 1 real_model > $O/tests_real.txt 2>&1; echo "real-model tests rc $?"
  grep -h "test result\|FAILED\|panicked" $O/tests.txt $O/tests_real.txt | head -20
fi
if [ "$WHAT" != tests ]; then
  B="timeout 200 $S/focus-lens bench decode --device cuda"
  $B --model $SM --contexts 1,1024,4096,8150 --steps 32 --json > $O/smollm2_k2.json 2> $O/smollm2_k2.err
  $B --model $SM --contexts 1024,8150 --steps 32 --k 1 --json > $O/smollm2_k1.json 2> $O/smollm2_k1.err
  [ -f $QW ] && $B --model $QW --contexts 1,1024,16384,32000 --steps 16 --json > $O/qwen_k2.json 2> $O/qwen_k2.err
  [ -f $QW ] && $B --model $QW --contexts 16384,32000 --steps 16 --k 1 --json > $O/qwen_k1.json 2> $O/qwen_k1.err
  python3 - $O <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    for r in d["rows"]:
        sp = lambda s: "/".join(f"{1e3 * s[k]:.2f}" for k in ("routing_s", "attention_s", "rest_s", "host_s", "total_s")) if s else "-"
        print(f"{d['model'][:14]:>14} ctx {r['context']:>6} k {r['k']}: dense {r['dense_tokens_per_s']:6.1f} top-k {r['topk_tokens_per_s']:6.1f} = {r['topk_over_dense_speed']:.2f}x read {100 * r['topk_read_fraction']:.0f}% eager {r.get('dense_eager_tokens_per_s') or 0:.0f}/{r.get('topk_eager_tokens_per_s') or 0:.0f} split ms r/a/rest/host/tot d {sp(r.get('dense_split'))} k {sp(r.get('topk_split'))} graph {r.get('topk_graph')}")
PY
  tail -n 2 $O/*.err
fi
