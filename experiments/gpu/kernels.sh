#!/usr/bin/env bash
# On the GPU machine, from a folder holding focus-lens, core-tests (the test binary of
# `cargo test --release --features cuda -p focus-core --lib --no-run`), gpu-prelude.sh and
# sdpa_bench.py: checks the CUDA kernels against the masked-dense reference, then benchmarks
# them and PyTorch's SDPA flash attention in the same session.
#   kernels.sh [LENGTHS] [TILE_ROWS...]
set -uo pipefail
source ./gpu-prelude.sh
L=${1:-4096,8192,16384,32768,65536,131072,262144,524288,1048576}
shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
./core-tests cuda_ --test-threads 1 2>&1 | grep -E "^test |test result"
for rows in ${@:-128}; do
  ./focus-lens bench attention --device cuda --dtype bf16 --tile-rows $rows --lengths $L \
    --groups 4,8 --k 1,2 --repeats 3 --json > bench_bf16_r$rows.jsonl
  ./focus-lens bench attention --device cuda --dtype bf16 --tile-rows $rows --lengths 4096,65536 \
    --groups 8 --k 1 --repeats 3 2>&1 | tail -3
done
python3 sdpa_bench.py --lengths $L > sdpa.jsonl
./focus-lens bench attention --device cuda --dtype f32 --lengths 4096,16384,65536 --groups 8 --k 1,2 \
  --repeats 3 --json > bench_f32.jsonl
python3 - <<'PY'
import json, glob
sdpa = {r["n"]: r["sdpa_flash_ms"] for r in map(json.loads, open("sdpa.jsonl"))}
for f in sorted(glob.glob("bench_*.jsonl")):
    print(f)
    for r in map(json.loads, open(f)):
        s = sdpa.get(r["n"])
        extra = f" sdpa {s:.3f} dense/sdpa {r['dense_ms']/s:.2f} sdpa/focus {s/r['focus_ms']:.2f}" if s and r["dtype"] == "bf16" else ""
        print(f"  n={r['n']:>7} K={r['groups']} k={r['k']} dense {r['dense_ms']:.3f} focus {r['focus_ms']:.3f} "
              f"x{r['speedup']:.2f} bound {r['bound']:.2f} eff {r['efficiency']:.2f}{extra}")
PY
