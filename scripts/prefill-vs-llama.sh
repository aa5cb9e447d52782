#!/usr/bin/env bash
# Dense prefill tokens/s at 512 tokens, ours vs llama.cpp on the same GGUF and machine, in one
# run: `focus-lens bench forward --lengths 512` (the median of REPEATS passes over 512 tokens)
# alternated with llama-bench's pp512 (`-p 512 -n 0`), ROUNDS times; prints each pair and the
# median ratio. LLAMA_ARGS are passed to llama-bench (`--repack 0` where its repacking path
# crashes, as in this project's container; scripts/build-llama-cpp.sh builds llama-bench).
# Usage: scripts/prefill-vs-llama.sh MODEL.gguf...   (LLAMA_BENCH, FOCUS_LENS, ROUNDS, REPEATS, THREADS, LLAMA_ARGS)
set -euo pipefail
LLAMA_BENCH=${LLAMA_BENCH:-llama-bench}
FOCUS_LENS=${FOCUS_LENS:-target/release/focus-lens}
ROUNDS=${ROUNDS:-2}
REPEATS=${REPEATS:-2}
THREADS=${THREADS:-$(nproc)}
echo "$THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), flags: $(grep -m1 -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | xargs)"
for MODEL in "$@"; do
  echo "model $MODEL"
  ratios=()
  for r in $(seq "$ROUNDS"); do
    ours=$(RAYON_NUM_THREADS=$THREADS "$FOCUS_LENS" bench forward --model "$MODEL" --lengths 512 --repeats "$REPEATS" --json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["dense_tokens_per_s"])')
    # shellcheck disable=SC2086
    theirs=$("$LLAMA_BENCH" -m "$MODEL" -p 512 -n 0 -r "$REPEATS" -t "$THREADS" ${LLAMA_ARGS:-} -o json \
      | python3 -c 'import json,sys; print([r for r in json.load(sys.stdin) if r["n_prompt"] > 0][0]["avg_ts"])')
    ratio=$(python3 -c "print(f'{$ours / $theirs:.3f}')")
    ratios+=("$ratio")
    printf 'round %d: focus-lens %.1f tok/s, llama-bench pp512 %.1f tok/s, ratio %s\n' "$r" "$ours" "$theirs" "$ratio"
  done
  python3 -c "import statistics,sys; print('median ratio', statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
done
