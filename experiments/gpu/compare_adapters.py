#!/usr/bin/env python3
"""CPU vs CUDA agreement of two runs of the same training: per-step losses must agree to a relative
1e-4, and router weights to within what AdamW can amplify (its first updates are ~lr * sign(g), so
a gradient element that is ~0 on both devices may step either way: the bound is 2 * lr * steps; we
also report how many weights agree to 1e-5). Safetensors are read by hand (8-byte header length,
JSON header, raw little-endian data).
Usage: compare_adapters.py A_DIR B_DIR LR"""
import json, struct, sys
from array import array


def load(d):
    b = open(f"{d}/adapter_model.safetensors", "rb").read()
    n, = struct.unpack("<Q", b[:8])
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", v["dtype"]
        s, e = v["data_offsets"]
        out[k] = array("f", b[8 + n + s:8 + n + e])
    return out


def losses(d):
    return [json.loads(l)["loss"] for l in open(f"{d}/train_log.jsonl") if l.strip()]


a, b = load(sys.argv[1]), load(sys.argv[2])
la, lb = losses(sys.argv[1]), losses(sys.argv[2])
lr = float(sys.argv[3])
assert a.keys() == b.keys() and len(la) == len(lb)
diffs = [abs(x - y) for k in a for x, y in zip(a[k], b[k])]
worst = max(diffs)
loss_rel = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
bound = 2 * lr * len(la)
ok = loss_rel <= 1e-4 and worst <= bound
print(json.dumps({"steps": len(la), "loss_max_rel_diff": loss_rel, "losses_a": la, "losses_b": lb,
                  "weights_max_abs_diff": worst, "weights_bound": bound,
                  "weights_within_1e-5": sum(d <= 1e-5 for d in diffs) / len(diffs), "agree": ok}))
sys.exit(0 if ok else 1)
