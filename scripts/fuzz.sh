#!/usr/bin/env bash
# Runs one fuzz target for SECONDS: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
# Targets: gguf safetensors_model adapter hf_config tokenizer_gguf tokenizer_json text forward
# chat_template hub_id index_reader.
# Needs the nightly toolchain and cargo-fuzz (installed here on first use). Seeds come from
# fuzz/corpus/TARGET (committed, small); what the run discovers goes to fuzz/work/TARGET
# (ignored); crashes to fuzz/artifacts/TARGET. Memory is capped at 2 GiB per input, and the
# kernels run on one thread (RAYON_NUM_THREADS=1) so that parallel runs do not oversubscribe.
# The targets that run numeric code (forward, tokenizer_gguf, gguf: a whole model load) are
# built without comparison tracing, in their own target directory: tracing every loop bound
# in the kernels and the regex engine costs them 2-4x the executions per second. Set
# FUZZ_TRACE_COMPARES=1 to build every target alike (one build, as the CI smoke does).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS}
secs=${2:-60}
shift $(( $# >= 2 ? 2 : $# ))
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
work=fuzz/work/$target
mkdir -p "$work" "fuzz/corpus/$target"
if [ "$target" = safetensors_model ]; then
    # The real tiny checkpoints seed it (too large to keep twice in the repository).
    for m in tests/fixtures/hf_tiny/*/; do cp "$m/model.safetensors" "$work/$(basename "$m").safetensors"; done
fi
build=()
case "$target" in
    forward | tokenizer_gguf | gguf)
        [ "${FUZZ_TRACE_COMPARES:-0}" = 1 ] || build=(--no-trace-compares --target-dir target-nocmp) ;;
esac
cd fuzz
export RAYON_NUM_THREADS=${RAYON_NUM_THREADS:-1}
exec cargo +nightly fuzz run --sanitizer none "${build[@]}" "$target" "work/$target" "corpus/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "$@"
