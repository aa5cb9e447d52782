"""The sweep table of docs/RESULTS.md from the runs in this folder (each: train_log.jsonl,
adapter_config.json, ppl.json, NAME.log). Usage: python3 table.py"""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from results_log import open_log  # the large logs are stored as train_log.jsonl.xz
os.chdir(os.path.dirname(os.path.abspath(__file__)))
RUNS = ["paper", "cos8", "k4cos", "cos", "cos_km", "cos_t05", "cos_it30", "cos_paperg", "cos_s4096"]
print("| run | setting | tokens | min (H200) | dense / soft / top-2 / top-3 (ctx 1024) | dominance mean / worst | purity mean / best layer | centroids >= 60% / >= 80% pure |")
print("|---|---|---|---|---|---|---|---|")
for r in RUNS:
    c = json.load(open(f"{r}/adapter_config.json"))
    rows = [json.loads(l) for l in open_log(f"{r}/train_log.jsonl")]
    last = [x for x in rows if "categories" in x][-1]
    ppl = {p["mode"]: p["ppl"] for p in json.load(open(f"{r}/ppl.json"))}
    t = c["training"]
    cats = last["categories"]; dom = last["dominance"]
    pur = [x["purity"] for x in cats]
    setting = f"K={c['groups']}, {c['score']}, tau {c['tau']}, {c['sinkhorn_iters']} it, {c['gate']} gate, {'k-means' if t.get('kmeans_init') else 'random'} init, seq {t['seq_len']}"
    p = lambda m: f"{ppl[m]:.2f}" if m in ppl else "-"
    print(f"| `{r}` | {setting} | {t['tokens_seen']/1e6:.1f}M | {t['seconds_this_run']/60:.1f} | {p('dense')} / {p('soft')} / {p('topk(2)')} / {p('topk(3)')} "
          f"| {sum(dom)/len(dom):.3f} / {max(dom):.3f} | {sum(pur)/len(pur):.3f} / {max(pur):.3f} | {sum(x['pure60'] for x in cats)} / {sum(x['pure80'] for x in cats)} |")
