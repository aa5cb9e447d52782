#!/usr/bin/env bash
# Dense decode tokens/s at short context, ours vs llama.cpp on the same GGUF and machine, in one
# run: `focus-lens bench decode --contexts 1 --steps 128` (the median of 128 steps from an
# almost empty cache, as llama-bench's tg128 generates 128 tokens from an empty one) alternated
# with `llama-bench -n 128 -p 0`, ROUNDS times; prints each pair and the median ratio.
# LLAMA_ARGS are passed to llama-bench (`--repack 0` where its repacking path crashes).
# Usage: scripts/decode-vs-llama.sh [MODEL.gguf]   (LLAMA_BENCH, FOCUS_LENS, ROUNDS, THREADS, LLAMA_ARGS)
set -euo pipefail
MODEL=${1:-$HOME/.cache/focus-lens/SmolLM2-135M-Instruct.Q4_1.gguf}
LLAMA_BENCH=${LLAMA_BENCH:-llama-bench}  # llama.cpp's, on PATH or named here
FOCUS_LENS=${FOCUS_LENS:-target/release/focus-lens}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
echo "model $MODEL, $THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
ratios=()
for r in $(seq "$ROUNDS"); do
  ours=$(RAYON_NUM_THREADS=$THREADS "$FOCUS_LENS" bench decode --model "$MODEL" --contexts 1 --steps 128 --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["dense_tokens_per_s"])')
  # shellcheck disable=SC2086
  theirs=$("$LLAMA_BENCH" -m "$MODEL" -n 128 -p 0 -t "$THREADS" ${LLAMA_ARGS:-} -o json \
    | python3 -c 'import json,sys; print([r for r in json.load(sys.stdin) if r["n_gen"] > 0][0]["avg_ts"])')
  ratio=$(python3 -c "print(f'{$ours / $theirs:.3f}')")
  ratios+=("$ratio")
  printf 'round %d: focus-lens %.1f tok/s, llama-bench tg128 %.1f tok/s, ratio %s\n' "$r" "$ours" "$theirs" "$ratio"
done
python3 -c "import statistics,sys; print('median ratio', statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
