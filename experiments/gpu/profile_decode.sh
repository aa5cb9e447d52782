#!/usr/bin/env bash
# On the GPU machine after unstage.py (focus-lens, core-tests, SmolLM2 staged): where a decode
# step's time goes. (1) the routing kernel alone (route_speed), (2) `bench decode` for the step
# times, (3) Nsight Compute's per-kernel durations of the same bench (one step per generator;
# ncu serialises kernels, so only the durations mean anything, not the step times it prints;
# experiments/gpu/ncu_steps.py sums them per kernel for one dense and one top-k step).
# Usage: profile_decode.sh PRELUDE [CONTEXTS]; writes $OUT/prof.tar.xz (the folder prof/).
set -uo pipefail
S=/root/stage; O=$OUT/prof; mkdir -p $O
source $1
CTX=${2:-1,8150}
export LD_PRELOAD="libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13"
chmod +x $S/focus-lens $S/core-tests
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/gpu.txt
$S/core-tests --ignored --nocapture attention::cuda::route::tests::route_speed 2>&1 | grep -v "^$" | tail -6 | tee $O/route_speed.txt
SM=$S/SmolLM2-135M-Instruct.Q4_1.gguf
B="$S/focus-lens bench decode --device cuda --model $SM"
$B --contexts $CTX --steps 16 --json > $O/bench.json 2> $O/bench.err
python3 -c "
import json; d = json.load(open('$O/bench.json'))
for r in d['rows']: print(r['context'], 'dense', round(r['dense_tokens_per_s'], 1), 'topk', round(r['topk_tokens_per_s'], 1), 'split d', r.get('dense_split'), 'split k', r.get('topk_split'))
"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for c in ${CTX//,/ }; do
  timeout 240 $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw --log-file $O/ncu_$c.csv \
    $B --contexts $c --steps 1 --json > $O/ncu_bench_$c.json 2> $O/ncu_$c.err
  echo "ncu ctx $c rc $? rows $(wc -l < $O/ncu_$c.csv)"; tail -3 $O/ncu_$c.err
  xz -T4 $O/ncu_$c.csv
done
# The device tool brings back a handful of files from $OUT: one archive of them all.
tar -C $OUT -cJf $OUT/prof.tar.xz prof && rm -rf $O
