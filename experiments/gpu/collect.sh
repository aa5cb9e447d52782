#!/usr/bin/env bash
# On the GPU machine: wait up to WAIT seconds for the detached runs of launch.sh to finish (less
# if they all end sooner), print each run's evaluations so far, and bring back every run's
# output (logs without the step-timing lines, configs, training logs, perplexities, weights) as
# $OUT/runs.tgz. Usage: collect.sh WAIT
set -uo pipefail
WAIT=${1:?seconds}; S=/root/stage; R=$S/runs
end=$((SECONDS + WAIT))
while pgrep -x train_paper > /dev/null && [ $SECONDS -lt $end ]; do sleep 10; done
echo "running: $(pgrep -x train_paper | wc -l) train_paper"
for log in $R/*.log; do
  echo "== $(basename $log .log)"
  grep -E "^(training|starting|TRAINED|PPL|TIMING)|^step [0-9]+ loss|rror|panick" $log | tail -12
done
tail -2 $R/smi.txt 2>/dev/null
tar czf $OUT/runs.tgz -C $S --exclude='*.pid' runs
