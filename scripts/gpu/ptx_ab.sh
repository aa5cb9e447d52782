#!/usr/bin/env bash
# On the GPU machine, from the kernels.sh folder plus PTX files of kernel variants (nvcc --ptx
# of core/kernels/focus_attention.cu with different -D flags): times every variant with the same
# binary (FOCUS_LENS_PTX) and SDPA flash in one session, for an A/B of a kernel change.
#   ptx_ab.sh LENGTHS NAME=FILE.ptx...      (JSONL per variant: ab_NAME.jsonl, sdpa_ab.jsonl)
set -uo pipefail
source ./gpu-prelude.sh
L=${1:?lengths}; shift
for v in "$@"; do
  name=${v%%=*}; file=${v#*=}
  FOCUS_LENS_PTX=$PWD/$file ./focus-lens bench attention --device cuda --dtype bf16 --tile-rows 128 \
    --lengths $L --groups 8 --k 1,2 --repeats 3 --json > ab_$name.jsonl
done
python3 sdpa_bench.py --lengths $L > sdpa_ab.jsonl
python3 - "$@" <<'PY'
import json, sys
sdpa = {r["n"]: r["sdpa_flash_ms"] for r in map(json.loads, open("sdpa_ab.jsonl"))}
for v in sys.argv[1:]:
    name = v.split("=")[0]
    for r in map(json.loads, open(f"ab_{name}.jsonl")):
        s = sdpa.get(r["n"], float("nan"))
        print(f"{name:>8} n={r['n']:>7} K={r['groups']} k={r['k']} dense {r['dense_ms']:9.3f} focus {r['focus_ms']:8.3f} "
              f"dense/sdpa {r['dense_ms']/s:.3f} sdpa/focus {s/r['focus_ms']:.2f} bound {r['bound']:.2f}")
PY
