#!/usr/bin/env bash
# Runs on the GPU machine (docs/development.md#gpu-sessions): the CUDA build of focus-lens on the
# default model, compared with the CPU figures in docs/RESULTS.md. Run from the repository root:
#   experiments/gpu/smoke.sh BINARY MODEL OUTDIR
set -uo pipefail
bin=${1:?binary}; model=${2:?model}; out=${3:?outdir}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
fx=tests/fixtures/ppl_persuasion_60k.txt
ad=sample_adapters/smollm2-135m-k8-init
# The command line goes to the log only, so that each JSON file holds just the JSON.
run() { echo "+ $*" >>"$out/log.txt"; timeout 150 "$@" 2>>"$out/log.txt" | tee -a "$out/log.txt"; }
run "$bin" ppl --device cuda --model "$model" --ctx 512 --json "$fx" > "$out/ppl_dense_512.json"
run "$bin" ppl --device cuda --model "$model" --ctx 1024 --adapter "$ad" --mode soft --json "$fx" > "$out/ppl_soft_1024.json"
python3 - "$fx" <<'PY'
import sys
t = open(sys.argv[1]).read()
open('/tmp/train.txt', 'w').write(t[:45000]); open('/tmp/held.txt', 'w').write(t[45000:])
PY
run "$bin" train --device cuda --model "$model" --data /tmp/train.txt --heldout /tmp/held.txt --steps 20 --seq-len 1024 --batch 4 --window 128 --eval-every 10 --eval-seqs 2 --checkpoint-every 0 --out "$out/train"
cp "$out/train/train_log.jsonl" "$out/train_log.jsonl" 2>/dev/null
run "$bin" bench forward --device cuda --model "$model" --lengths 512,2048 --repeats 3 --json > "$out/bench_forward.json"
tail -n 30 "$out/log.txt"
