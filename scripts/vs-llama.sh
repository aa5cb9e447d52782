#!/usr/bin/env bash
# Ours vs llama.cpp on the same GGUF and machine, side by side in one run, ROUNDS times; prints
# each pair and the median ratio.
#   prefill: dense tokens/s at 512 tokens, `focus-lens bench forward --lengths 512` (median of
#            REPEATS passes) against llama-bench's pp512 (`-p 512 -n 0 -r REPEATS`);
#   decode:  dense tokens/s at short context, `focus-lens bench decode --contexts 1 --steps 128`
#            (the median of 128 steps from an almost empty cache) against llama-bench's tg128
#            (`-n 128 -p 0`, 128 tokens from an empty cache).
# LLAMA_ARGS are passed to llama-bench (`--repack 0` where its repacking path crashes, as in this
# project's container); scripts/build-llama-cpp.sh builds llama-bench.
# FOCUS_ARGS are passed to focus-lens (`--products int8` for llama.cpp's integer route).
# Usage: scripts/vs-llama.sh prefill|decode [MODEL.gguf...]
#        (LLAMA_BENCH, FOCUS_LENS, ROUNDS, REPEATS, THREADS, LLAMA_ARGS, FOCUS_ARGS; default model: SmolLM2)
set -euo pipefail
MODE=${1:?usage: scripts/vs-llama.sh prefill|decode [MODEL.gguf...]}
shift
[ $# -gt 0 ] || set -- "$HOME/.cache/focus-lens/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_BENCH=${LLAMA_BENCH:-llama-bench}
FOCUS_LENS=${FOCUS_LENS:-target/release/focus-lens}
ROUNDS=${ROUNDS:-3}
REPEATS=${REPEATS:-2}
THREADS=${THREADS:-$(nproc)}
case "$MODE" in
  prefill) ours_args=(bench forward --lengths 512 --repeats "$REPEATS" --json); key=dense_tokens_per_s
           llama_args=(-p 512 -n 0 -r "$REPEATS"); field=n_prompt; what=pp512 ;;
  decode)  ours_args=(bench decode --contexts 1 --steps 128 --json); key=dense_tokens_per_s
           llama_args=(-n 128 -p 0); field=n_gen; what=tg128 ;;
  *) echo "usage: scripts/vs-llama.sh prefill|decode [MODEL.gguf...]" >&2; exit 2 ;;
esac
echo "$MODE, $THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), flags: $(grep -m1 -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | xargs)"
for MODEL in "$@"; do
  echo "model $MODEL"
  ratios=()
  for r in $(seq "$ROUNDS"); do
    # shellcheck disable=SC2086
    ours=$(RAYON_NUM_THREADS=$THREADS "$FOCUS_LENS" "${ours_args[@]}" --model "$MODEL" ${FOCUS_ARGS:-} \
      | python3 -c "import json,sys; print(json.load(sys.stdin)['rows'][0]['$key'])")
    # shellcheck disable=SC2086
    theirs=$("$LLAMA_BENCH" -m "$MODEL" "${llama_args[@]}" -t "$THREADS" ${LLAMA_ARGS:-} -o json \
      | python3 -c "import json,sys; print([r for r in json.load(sys.stdin) if r['$field'] > 0][0]['avg_ts'])")
    ratio=$(python3 -c "print(f'{$ours / $theirs:.3f}')")
    ratios+=("$ratio")
    printf 'round %d: focus-lens %.1f tok/s, llama-bench %s %.1f tok/s, ratio %s\n' "$r" "$ours" "$what" "$theirs" "$ratio"
  done
  python3 -c "import statistics,sys; print('median ratio', statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
done
