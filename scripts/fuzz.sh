#!/usr/bin/env bash
# Runs one fuzz target for SECONDS: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
# Targets: gguf safetensors_model adapter hf_config tokenizer_gguf tokenizer_json text forward.
# Needs the nightly toolchain and cargo-fuzz (installed here on first use). Seeds come from
# fuzz/corpus/TARGET (committed, small); what the run discovers goes to fuzz/work/TARGET
# (ignored); crashes to fuzz/artifacts/TARGET. Memory is capped at 2 GiB per input.
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
cd fuzz
exec cargo +nightly fuzz run --sanitizer none "$target" "work/$target" "corpus/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "$@"
