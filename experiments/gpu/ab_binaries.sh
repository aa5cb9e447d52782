#!/usr/bin/env bash
# On the GPU machine, from the kernels.sh folder: an A/B of two builds (host code changes that
# ptx_ab.sh cannot swap in), alternated ROUNDS times in one session next to SDPA flash, then a
# per-kernel time breakdown of the last build with ncu (one call per variant, at NCU_N tokens).
#   ab_binaries.sh LENGTHS KS ROUNDS NAME=BINARY...     (JSONL: ab_NAME_ROUND.jsonl, sdpa_ab.jsonl)
set -uo pipefail
source ./gpu-prelude.sh
L=${1:?lengths}; KS=${2:?k list}; ROUNDS=${3:?rounds}; shift 3
for round in $(seq 1 $ROUNDS); do
  for v in "$@"; do
    name=${v%%=*}; bin=${v#*=}
    $bin bench attention --device cuda --dtype bf16 --tile-rows 128 --lengths $L --groups 8 --k $KS \
      --repeats 3 --json > ab_${name}_$round.jsonl
  done
done
python3 sdpa_bench.py --lengths $L > sdpa_ab.jsonl
python3 "$(dirname "$0")/ab_table.py" sdpa_ab.jsonl $(for r in $(seq 1 $ROUNDS); do for v in "$@"; do echo ab_${v%%=*}_$r.jsonl; done; done)
last=${!#}; bin=${last#*=}
if command -v ncu >/dev/null; then
  for k in ${KS//,/ }; do
    ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      $bin bench attention --device cuda --dtype bf16 --tile-rows 128 --lengths ${NCU_N:-262144} --groups 8 --k $k \
      --repeats 1 --no-warmup > ncu_k$k.csv 2> ncu_k$k.err
    python3 - ncu_k$k.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; ki = head.index("Kernel Name"); vi = head.index("Metric Value"); ui = head.index("Metric Unit")
tot = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    if not r[ki].startswith("focus_"): continue
    x = float(r[vi].replace(",", "")) / {"ns": 1e6, "nsecond": 1e6, "us": 1e3, "usecond": 1e3}.get(r[ui], 1.0)
    tot[r[ki]] += x; n[r[ki]] += 1
print(sys.argv[1])
for k in tot: print(f"  {k:28} {n[k]} calls {tot[k]:9.3f} ms")
PY
  done
fi
# Where the tile kernels spend their time: ncu sections for one dense and one group launch.
if command -v ncu >/dev/null && [ -n "${NCU_SECTIONS:-}" ]; then
  for kern in focus_dense_bf16_m2 focus_group_bf16_m2; do
    ncu --clock-control none -k $kern -c 1 --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      $bin bench attention --device cuda --dtype bf16 --tile-rows 128 --lengths ${NCU_N:-262144} --groups 8 --k 1 \
      --repeats 1 --no-warmup > ncu_$kern.txt 2>&1
    grep -E "Duration|Throughput|Pipe|Occupancy|Stall|Warp Cycles|Issued|Eligible|Registers|L2 Hit|L1/TEX Hit" ncu_$kern.txt | head -40
  done
fi
