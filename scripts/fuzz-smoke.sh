#!/usr/bin/env bash
# A short run of every fuzz target (CI): one build with comparison tracing for all eleven, then
# RUNS executions each (default 2000) from the committed seeds. Any crash, leak of the 2 GiB
# memory cap or 10 s timeout fails it (libFuzzer exits non-zero), with the input kept in
# fuzz/artifacts/TARGET. The long campaigns and their figures: docs/development.md#fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-2000}
export FUZZ_TRACE_COMPARES=1
for t in gguf safetensors_model adapter hf_config tokenizer_gguf tokenizer_json text forward chat_template hub_id index_reader; do
    echo "== fuzz smoke: $t ($runs runs)"
    log=$(mktemp)
    if ! scripts/fuzz.sh "$t" 300 -runs="$runs" > "$log" 2>&1; then
        tail -n 40 "$log"
        echo "fuzz smoke: $t failed (a crash's input is kept in fuzz/artifacts/$t)"
        exit 1
    fi
    grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$log"
    rm -f "$log"
done
