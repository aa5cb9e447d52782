#!/usr/bin/env bash
# Fetch the default model if needed, build, and run Focus Lens on the embedded default:
# SmolLM2-135M-Instruct + the sample adapter + the sample text. Extra arguments go to focus-lens.
set -euo pipefail
cd "$(dirname "$0")"
scripts/fetch-model.sh >/dev/null
exec cargo run --release -q -p focus-lens -- "$@"
