#!/usr/bin/env python3
"""Print a `focus-lens ppl --ctx A,B --modes ... --json` table (eval::ppl::LengthTable) as
markdown rows: perplexity, % against dense, prefill tokens/s and speed against dense.
Usage: length_table.py TABLE.json"""
import json, sys

t = json.load(open(sys.argv[1]))
print(f"{t['model']} + {t.get('adapter')} on {t['text']} ({t['tokens']} tokens), {t['device']}")
print("| ctx | chunks | mode | ppl | vs dense | prefill tok/s | speed vs dense |")
print("|---|---|---|---|---|---|---|")
for r in t["rows"]:
    if r.get("skipped"):
        print(f"| {r['ctx']} | skipped: {r['skipped']} |"); continue
    for m in r["modes"]:
        f = lambda v, fmt: "" if v is None else format(v, fmt)
        print(f"| {r['ctx']} | {r['chunks']} | {m['mode']} | {f(m['ppl'], '.2f')} | {f(m['vs_dense_pct'], '+.2f')}% | "
              f"{f(m['tokens_per_s'], '.0f')} | {f(m['speed_vs_dense'], '.2f')}x |" + (f" skipped: {m['skipped']}" if m.get('skipped') else ""))
