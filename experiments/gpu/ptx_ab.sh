#!/usr/bin/env bash
# On the GPU machine, from the kernels.sh folder plus PTX files of kernel variants (nvcc --ptx
# of crates/kernels/cuda/focus_attention.cu with different -D flags): times every variant with the same
# binary (FOCUS_LENS_PTX) and SDPA flash in one session, for an A/B of a kernel change
# (ab_table.py beside it prints the table).
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
python3 "$(dirname "$0")/ab_table.py" sdpa_ab.jsonl $(for v in "$@"; do echo ab_${v%%=*}.jsonl; done)
