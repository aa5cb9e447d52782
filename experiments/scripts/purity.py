#!/usr/bin/env python3
"""Category structure and balance of `focus-lens analyze --out stats.json` outputs, one line per
file: token-weighted centroid purity averaged over layers (range, best layer), how many centroids
hold >= 50 tokens and how many of those are >= 60% / >= 80% pure, dominance mean and worst layer,
mean confidence (docs/RESULTS.md, the shipped adapters and linguistic categories).
Usage: purity.py STATS.json..."""
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    per = []; p60 = p80 = n50 = 0; best = None
    for L in d['profiles']:
        cs = L['centroids']; tot = sum(c['tokens'] for c in cs)
        pur = sum(c['tokens'] * (c['purity'] or 0) for c in cs) / max(tot, 1)
        per.append(pur)
        for c in cs:
            if c['tokens'] >= 50:
                n50 += 1; p60 += (c['purity'] or 0) >= 0.6; p80 += (c['purity'] or 0) >= 0.8
    dom = [L['dominance'] for L in d['layers']]; conf = [L['mean_confidence'] for L in d['layers']]
    b = max(range(len(per)), key=lambda i: per[i])
    print(f"{f}: purity mean {sum(per)/len(per):.3f} ({min(per):.3f}-{max(per):.3f}, best layer {b}); centroids>=50 tokens: {n50}, >=60% pure {p60}, >=80% pure {p80}; dominance mean {sum(dom)/len(dom):.3f} worst {max(dom):.3f}; confidence mean {sum(conf)/len(conf):.3f}")
