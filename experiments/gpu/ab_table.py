#!/usr/bin/env python3
"""One line per row of `focus-lens bench attention --json` files, with the ratios to PyTorch's
SDPA flash measured in the same session (ptx_ab.sh, ab_binaries.sh).
usage: ab_table.py SDPA.jsonl BENCH.jsonl...   (each row is labelled with its file's stem)"""
import json
import sys
from pathlib import Path

sdpa = {r["n"]: r["sdpa_flash_ms"] for r in map(json.loads, open(sys.argv[1]))}
for f in sys.argv[2:]:
    name = Path(f).stem
    for r in map(json.loads, open(f)):
        s = sdpa.get(r["n"], float("nan"))
        print(f"{name:>10} n={r['n']:>7} K={r['groups']} k={r['k']} dense {r['dense_ms']:9.3f} focus {r['focus_ms']:8.3f} "
              f"dense/sdpa {r['dense_ms']/s:.3f} sdpa/focus {s/r['focus_ms']:.2f} bound {r['bound']:.2f}")
