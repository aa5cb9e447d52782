#!/usr/bin/env python3
"""Copy a run of the paper-scale sweep (experiments/results/sweep_h200/RUN, weights in WEIGHTS)
into sample_adapters/DEST with its provenance and measured results in adapter_config.json: the
data files relative to the corpus, the split, the schedule, the command, the held-out
perplexities (the run's ppl.json, H200), the last evaluation's dominance and category structure
(train_log.jsonl), and the CPU analysis of STATS (focus-lens analyze --mode topk --k 2 JSON).
RUN may also be a path to a run's folder (another model's sweep, e.g.
experiments/results/gemma3_h200/g3all); MODEL (env) names the base model's file in the command,
SHARED (env) how many other runs shared the GPU (default two), DATE the run's date, PROBE_NOTE
what the training log's probe was, PPL_FILE what the run's ppl.json measured (default the
60,000-byte Persuasion fixture) and PPL_ARGS its train_paper flags, LAUNCHER the script that
started it (default experiments/gpu/launch.sh). A ppl.json of several contexts (--ctx
1024,4096,8192) gives results.ppl one entry per context.
A run that fine-tuned a saved adapter (`train_paper --from`, its config's training.init "from
/root/stage/X") is recorded as the last stage of a chain: X is either a run of RUN's folder
(`runs/NAME`, the stage before, recorded the same way) or a shipped adapter, whose training
record is read from git at FROM_COMMIT (env, default HEAD: the adapter the run replaces; to
re-run after the shipping commit, FROM_COMMIT=THAT_COMMIT^).
training.tokens_seen and steps are then the whole chain's, training.stages lists each stage,
and training.command is the last stage's train_paper command (started by
experiments/gpu/launch.sh; SHARED as above, PROBE_FILES the --probe books).
CALL is the sweep.sh call folder that ran it, or the whole command (a launch.sh line).
Usage: ship_sweep_adapter.py RUN WEIGHTS DEST STATS CALL"""
import json, os, shutil, subprocess, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from provenance import corpus_provenance
from results_log import open_log  # a stored run's train_log.jsonl may be train_log.jsonl.xz

run, weights, dest, stats, call = sys.argv[1:6]
src = Path(run) if "/" in run else Path("experiments/results/sweep_h200") / run
model_flag = f"--model {os.environ['MODEL']} " if os.environ.get("MODEL") else ""
shared = {"0": "alone", "1": "sharing the GPU with one other run", "2": "sharing the GPU with two other runs"}.get(os.environ.get("SHARED", "2"), f"sharing the GPU with {os.environ.get('SHARED')} other runs")
cfg = json.load(open(src / "adapter_config.json"))
t = cfg["training"]
rows = [json.loads(l) for l in open_log(src / "train_log.jsonl") if l.strip()]
last = [r for r in rows if "categories" in r][-1]
K = cfg["groups"]
cfg["training"] = {
    **corpus_provenance(t),
    "steps": t["steps"], "seq_len": t["seq_len"], "batch": t["batch"], "tokens_seen": t["tokens_seen"],
    "lr": t["lr"], "cosine_decay": t["cosine_decay"], "weight_decay": t["weight_decay"], "seed": t["seed"],
    "optimizer": t["optimizer"], "sinkhorn_grad": t["sinkhorn_grad"], "device": t["device"],
    "seconds": t["seconds_this_run"], "heldout_ppl_final": t["heldout_ppl"], "heldout_mode": t["heldout_mode"],
    # Runs before Gemma 3's fused step (stop 31) name no trainer: Gemma 3 ran the composed step.
    "trainer": f"{t.get('trainer') or 'core/examples/train_paper.rs (' + ('the composed step: head dim 256' if cfg['base_model']['arch'] == 'gemma3' else 'the fused training step') + ')'}, {shared}",
    "time_limit_min": t.get("time_limit_min"),
    # CALL: a sweep.sh call folder, or the whole command that started the run (launch.sh).
    "command": call if call.startswith("bash ") or "launch.sh" in call else f"bash experiments/gpu/sweep.sh {call}",
    "same_as": (f"focus-lens train --device cuda {model_flag}--data corpus/train --heldout corpus/heldout --groups {K} --gate {cfg['gate']} "
                f"--score {cfg['score']} --tau {cfg['tau']} --sinkhorn-iters {cfg['sinkhorn_iters']} --seq-len {t['seq_len']} "
                f"--batch {t['batch']} --lr {t['lr']} --cosine-decay --steps {t['steps']} --seed {t['seed']}"
                + (f" --router-layers {cfg['router_layers']}" if cfg.get("router_layers", "all") != "all" else "")
                + (f" --lambda {cfg['lambda']:g}" if cfg["gate"] == "paper" else "")
                + (f" --sink {cfg['sink']}" if cfg.get("sink", 0) else "")
                + (" --input-scale" if cfg.get("input_scale") else "")
                + {"pca": " --pca-init", "pca-white": " --pca-init --whiten", "kmeans": " --kmeans-init"}.get(t.get("init") or "", "")
                + (f" --init-gain {cfg['init'].split('multiplied by ')[1].split(' ')[0]}" if "W_g multiplied by" in cfg.get("init", "") else "")
                + (" --freeze-projection" if t.get("freeze_projection") else "") + (" --freeze-centroids" if t.get("freeze_centroids") else "")
                + (f" --sharpen {t['sharpen']:g}" if t.get("sharpen") else "") + (f" --balance {t['balance']:g}" if t.get("balance") else "")
                + (f" (its cosine schedule was set for {os.environ['PLANNED_STEPS']} steps; the time budget stopped it)" if os.environ.get("PLANNED_STEPS") else "")),
    "date": os.environ.get("DATE", "2026-12-01"),
}
# A fine-tuning run (train_paper --from): the chain of stages back to a shipped adapter.
def stages_of(run_dir):
    """The stages that made run_dir's adapter, first to last (the first: the shipped adapter's
    own training record, read from git, or its stages where it was itself a chain), a line
    naming what they start from, and how many of the stages that line already names."""
    full = json.load(open(run_dir / "adapter_config.json"))
    c = full["training"]
    parent = c["init"][len("from "):].split("/root/stage/", 1)[-1]
    derived, started_from, derive_cmd = "", parent, ""
    if parent.startswith("adapters/") and full.get("derived_from"):
        # A shipped adapter with its settings changed (`focus-lens adapter derive`, the weights
        # the same): the chain goes on from the shipped one, the change named in the stage.
        d = full["derived_from"]
        derived = f" with {', '.join(d['changed'])} (focus-lens adapter derive)"
        parent = d["adapter"].split("/root/stage/", 1)[-1]
        flags = " ".join("--" + ch.split(" ")[0].replace("_", "-") + " " + ch.split(" -> ")[1] for ch in d["changed"])
        derive_cmd = f"focus-lens adapter derive {parent} --out {started_from} {flags}; "
    if parent.startswith("runs/"):
        # The output of an earlier stage of the same session: its configs are beside this run's.
        before, origin, named = stages_of(run_dir.parent / parent[len("runs/"):])
    else:
        at = os.environ.get("FROM_COMMIT", "HEAD")
        git = lambda *a: subprocess.run(["git", *a], check=True, capture_output=True, text=True).stdout.strip()
        commit = git("log", "-1", "--format=%h", at, "--", f"{parent}/adapter_config.json")
        shipped = json.loads(git("show", f"{commit}:{parent}/adapter_config.json"))["training"]
        run_note = f": {os.environ['FROM_RUN']}" if os.environ.get("FROM_RUN") else ""
        origin = f"{parent} as shipped by commit {commit} ({shipped['tokens_seen']:,} tokens{run_note}){derived}"
        if shipped.get("stages"):
            # The shipped adapter was a chain itself: its stages, and the line naming them.
            before, origin = shipped["stages"], shipped["from"] + f" (as shipped by commit {commit}){derived}"
        else:
            before = [{"adapter": f"{parent} as shipped by commit {commit}", "run": os.environ.get("FROM_RUN"),
                       **{k: v for k, v in shipped.items() if k not in ("data", "data_files", "heldout_files", "split")}}]
        named = len(before)
    probe = f" --probe {os.environ['PROBE_FILES']}" if os.environ.get("PROBE_FILES") else ""
    terms = (f" --sharpen {c['sharpen']:g}" if c.get("sharpen") else "") + (f" --balance {c['balance']:g}" if c.get("balance") else "")
    shape = (f" --seq {c['seq_len']}" if c["seq_len"] != 1024 else "") + (f" --batch {c['batch']}" if c["batch"] != 4 else "")
    extra = f" --straight-through {c['straight_through']}" if c.get("straight_through") else ""
    this = {
        "run": str(run_dir), "from": parent + derived + (f" (the output of {run_dir.parent / parent[len('runs/'):]})" if parent.startswith("runs/") else ""), "steps": c["steps"], "tokens_seen": c["tokens_seen"], "lr": c["lr"], "cosine_decay": c["cosine_decay"],
        "sharpen": c.get("sharpen", 0.0), "balance": c.get("balance", 0.0), "seconds": c["seconds_this_run"], "time_limit_min": c.get("time_limit_min"),
        "heldout_ppl_final": c["heldout_ppl"], "heldout_mode": c["heldout_mode"],
        "command": (f"{derive_cmd}train_paper --model {os.environ.get('MODEL', 'SmolLM2-135M-Instruct.Q4_1.gguf')} --data corpus/train --heldout corpus/heldout "
                    f"--out runs/{run_dir.name} --from {started_from}{shape} --steps {os.environ.get('PLANNED_STEPS', c['steps'])} --minutes {c['time_limit_min']:g} "
                    f"--eval-every {int(os.environ.get('PLANNED_STEPS', c['steps'])) // 4} {os.environ.get('PPL_ARGS', '--ppl tests/fixtures/ppl_persuasion_60k.txt --ctx 1024')}{probe} "
                    f"--lr {c['lr']:g}{terms}{extra} (started by {os.environ.get('LAUNCHER', 'experiments/gpu/launch.sh')})"),
        "same_as": (f"{derive_cmd}focus-lens train --device cuda --init {started_from} --data corpus/train --heldout corpus/heldout --seq-len {c['seq_len']} "
                    f"--batch {c['batch']} --lr {c['lr']:g}{' --cosine-decay' if c['cosine_decay'] else ''} --steps {os.environ.get('PLANNED_STEPS', c['steps'])} --seed {c['seed']}{terms}"
                    f"{' --straight-through ' + str(c['straight_through']) if c.get('straight_through') else ''}"
                    f"{' --time-limit-min ' + format(c['time_limit_min'], 'g') if os.environ.get('PLANNED_STEPS') and c.get('time_limit_min') else ''}"),
    }
    return before + [this], origin, named

if t.get("init", "").startswith("from "):
    stages, origin, named = stages_of(src)
    for k in ("seconds", "command", "same_as", "time_limit_min", "date"):
        cfg["training"].pop(k)
    cfg["training"].update({
        "from": f"{origin}, then " + ", then ".join(f"{s['run']} ({s['tokens_seen']:,} tokens)" for s in stages[named:]),
        "stages": stages,
        "steps": sum(s["steps"] for s in stages), "tokens_seen": sum(s["tokens_seen"] for s in stages),
        "tokens_this_run": t["tokens_seen"], "sharpen": t.get("sharpen", 0.0), "balance": t.get("balance", 0.0),
        "seconds_this_run": t["seconds_this_run"], "time_limit_min": t.get("time_limit_min"),
        "trainer": f"core/examples/train_paper.rs (the fused training step); each stage fine-tunes the one before with its own cosine schedule (lr to lr/10); the last stage {shared}",
        "command": stages[-1]["command"], "same_as": stages[-1]["same_as"],
        "date": os.environ.get("DATE", "2026-12-01"),
    })
if cfg.get("derived_from"):
    cfg["derived_from"]["adapter"] = cfg["derived_from"]["adapter"].split("/root/stage/", 1)[-1]
ppl_rows = json.load(open(src / "ppl.json"))
ppl_by_ctx = {}
for p in ppl_rows:
    ppl_by_ctx.setdefault(p["ctx"], {})[p["mode"]] = p["ppl"]
st = json.load(open(stats))
# Only the layers the adapter routes (router_layers: global leaves the others dense).
routed = [L.get("routed", True) for L in st["layers"]]
dom = [L["dominance"] for L, r in zip(st["layers"], routed) if r]
pur = []
for L, r in zip(st["profiles"], routed):
    if not r:
        pur.append(0.0)
        continue
    cs = L["centroids"]; tot = sum(c["tokens"] for c in cs)
    pur.append(sum(c["tokens"] * (c["purity"] or 0) for c in cs) / max(tot, 1))
cfg["results"] = {
    "ppl_file": os.environ.get("PPL_FILE", "tests/fixtures/ppl_persuasion_60k.txt (held-out Persuasion; llama-perplexity convention)"),
    "ppl": {f"ctx{ctx}": {"dense": ppl["dense"], "soft": ppl["soft"]} | {f"topk{k}": ppl[f"topk({k})"] for k in (1, 2, 3) if f"topk({k})" in ppl}
            for ctx, ppl in sorted(ppl_by_ctx.items())},
    "measured_on": f"ppl: {cfg['training']['device'].removeprefix('cuda (').removesuffix(')')}, CUDA build (the CPU reproduces per-chunk NLL: tests/trained_adapters.rs); analysis: this project's 2-core CPU",
    "probe_categories_last_eval": last["categories"],
    "probe_note": (os.environ.get("PROBE_NOTE") or "train_log.jsonl's last evaluation: the first 4,000 bytes of Persuasion, soft mode; pure = >= 20 tokens"),
    "analysis": {
        "command": "focus-lens analyze FIRST_25000_BYTES_OF_THE_FIXTURE --adapter A --mode topk --k 2 --segment 1024 --out stats.json",
        "dominance_mean": sum(dom) / len(dom), "dominance_worst": max(dom), "dominance_target": 1.3 / K,
        "purity_mean": sum(pur) / len(dom), "purity_best_layer": max(range(len(pur)), key=lambda i: pur[i]), "purity_best": max(pur),
        "pairs_retained_mean": sum(L["pairs"]["retained"] for L, r in zip(st["layers"], routed) if r) / len(dom),
        "routed_layers": [L["layer"] for L, r in zip(st["layers"], routed) if r],
    },
}
# The structure beside the untrained twin (analysis::structure), where the run logged it and
# where focus-lens analyze measured it (issue 28: every shipped config carries its table).
if last.get("structure"):
    first = [r for r in rows if r.get("structure")][0]
    cfg["results"]["probe_structure"] = {"step0": first["structure"], "last": last["structure"], "step": last["step"]}
if st.get("structure"):
    cfg["results"]["analysis"]["structure"] = st["structure"]
if "stages" in cfg["training"] and "probe_structure" in cfg["results"]:
    cfg["results"]["probe_structure"]["of"] = f"the last stage, {src} (step0: the adapter it started from)"
d = Path("sample_adapters") / dest
d.mkdir(parents=True, exist_ok=True)
(d / "adapter_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
shutil.copy(weights, d / "adapter_model.safetensors")
print(d, json.dumps(cfg["results"]["ppl"]), json.dumps(cfg["results"]["analysis"]))
