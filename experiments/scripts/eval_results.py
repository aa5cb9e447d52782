#!/usr/bin/env python3
"""Record `focus-lens eval --json` results in a shipped adapter's config (results.eval) and print
them as a markdown table: each mode's accuracy and score beside the base model's, and whether
every one is within the base model's standard error (issue 52's zero-degradation bar).

The JSON files are those of experiments/gpu/length52_round3.sh's evals: soft (`--suite all`, the
base model's rows beside), topk (`--suite all --no-base`), and the same two with `--suite
truthfulqa-mc --few-shot` (suite truthfulqa-mc-6shot); any may be missing (then the table and
the config's `not_run` say which were not run). Plain or .xz.
Usage: eval_results.py ADAPTER_DIR MEASURED_ON EVAL.json[.xz]... [--base=EVAL.json[.xz]]... [--write]"""
import json, lzma, sys
from pathlib import Path

args = [a for a in sys.argv[1:] if a != "--write" and not a.startswith("--base=")]
adapter, measured_on, files = Path(args[0]), args[1], args[2:]
# --base=FILE: only the base model's (dense) rows of FILE, e.g. another adapter's run of a suite
# whose base rows this adapter's runs lack (the base model's scores do not depend on the adapter).
bases = [a[len("--base="):] for a in sys.argv[1:] if a.startswith("--base=")]
rows = []
for f in files + bases:
    d = json.loads((lzma.open if f.endswith(".xz") else open)(f, "rt").read())
    for r in d["results"]:
        if f in bases and r["mode"] != "dense":
            continue
        rows.append({k: r[k] for k in ("suite", "mode", "items", "accuracy", "accuracy_se", "score", "score_se")})
# What the round runs for every adapter: a suite or mode without results is listed as not run.
SUITES = ["truthfulqa-mc", "cloze", "long-cloze", "truthfulqa-mc-6shot"]
base = {r["suite"]: r for r in rows if r["mode"] == "dense"}
modes = sorted({r["mode"] for r in rows if r["mode"] != "dense"} | {"soft", "topk(2)"})
within, no_worse, missing = True, True, [f"{suite} (every mode)" for suite in SUITES if suite not in base]
print(f"| {adapter.name}: suite | dense, accuracy ± s.e. (score ± s.e.) | " + " | ".join(modes) + " |")
print("|---|---|" + "---|" * len(modes))
for suite, b in base.items():
    cells = []
    for m in modes:
        r = next((r for r in rows if r["suite"] == suite and r["mode"] == m), None)
        if r is None:
            cells.append("not run"); missing.append(f"{suite} {m}"); continue
        ok = abs(r["accuracy"] - b["accuracy"]) <= b["accuracy_se"] and abs(r["score"] - b["score"]) <= b["score_se"]
        # Outside the base model's s.e. on the better side only (higher accuracy and score) is
        # still outside: the bar is "within", but the table says which way it went.
        worse = r["accuracy"] < b["accuracy"] - b["accuracy_se"] or r["score"] < b["score"] - b["score_se"]
        within &= ok
        no_worse &= not worse
        cells.append(f"{r['accuracy']:.3f} ({r['score']:.3f})" + ("" if ok else " **outside s.e., worse**" if worse else " **outside s.e., better**"))
    print(f"| {suite}, {b['items']} items | {b['accuracy']:.3f} ± {b['accuracy_se']:.3f} ({b['score']:.3f} ± {b['score_se']:.3f}) | " + " | ".join(cells) + " |")
print(f"every score within the base model's standard error: {within}; none below it by more: {no_worse}" + (f" (not run: {', '.join(missing)})" if missing else ""))
if "--write" in sys.argv:
    p = adapter / "adapter_config.json"
    cfg = json.loads(p.read_text())
    cfg.setdefault("results", {})["eval"] = {
        "command": f"focus-lens eval --device cuda --adapter {adapter} --mode soft|topk --k 2 --suite all --long-cloze-text corpus/heldout/austen__persuasion.txt --json; then --suite truthfulqa-mc --few-shot",
        "measured_on": measured_on,
        # Undecided (null) while a suite or mode has not run; then what those that ran show.
        "within_standard_error": within if not missing else None,
        "none_worse_than_standard_error": no_worse if not missing else None,
        **({"not_run": missing, "within_standard_error_of_those_run": within, "none_worse_of_those_run": no_worse} if missing else {}),
        "suites": rows,
    }
    p.write_text(json.dumps(cfg, indent=2) + "\n")
    print("wrote", p)
