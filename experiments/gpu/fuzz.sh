#!/usr/bin/env bash
# On the GPU machine's CPUs (16 cores; the fuzz targets need no GPU): the libFuzzer binaries of
# `scripts/fuzz.sh` (built here by `cargo +nightly fuzz build --sanitizer none`, packed with
# their seed corpora as fuzz.tar.xz: bin/TARGET, corpus/TARGET) run in fork mode, several at
# once, each for SECS with -rss_limit_mb=2048 as scripts/fuzz.sh runs them. Prints per target
# the executions, crashes/OOMs/timeouts and the peak RSS of its processes; crash inputs are
# kept in $DEST/artifacts. Usage: fuzz.sh DEST SECS TARGET:FORKS...   (run under setsid to
# outlive the call; results in DEST)
set -uo pipefail
D=${1:?dest}; SECS=${2:?seconds}; shift 2
S=/root/stage/fuzz
mkdir -p $D/artifacts
# One thread per fork (the kernels' rayon pool would otherwise put 16 threads on each core).
export RAYON_NUM_THREADS=1
pids=(); mon=()
for tf in "$@"; do
  t=${tf%%:*}; forks=${tf#*:}
  mkdir -p $D/work/$t
  ( while sleep 2; do ps -C $t -o rss= | sort -n | tail -n 1; done ) > $D/$t.rss 2>/dev/null &
  mon+=($!)
  $S/bin/$t -fork=$forks -max_total_time=$SECS -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix=$D/artifacts/$t- $D/work/$t $S/corpus/$t > $D/$t.log 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
kill "${mon[@]}" 2>/dev/null
for tf in "$@"; do
  t=${tf%%:*}
  last=$(grep -E '^#[0-9]+' $D/$t.log | tail -n 1)
  peak=$(sort -n $D/$t.rss | tail -n 1)
  echo "$t: $last | peak RSS $((${peak:-0} / 1024)) MB | artifacts $(ls $D/artifacts | grep -c "^$t-")"
done | tee $D/summary.txt
