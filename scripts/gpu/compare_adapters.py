#!/usr/bin/env python3
"""Max abs difference between the tensors of two adapters (safetensors read by hand: an 8-byte
little-endian header length, a JSON header, raw little-endian data). Exit 1 above the tolerance.
Usage: compare_adapters.py A_DIR B_DIR [TOL]"""
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


a, b = load(sys.argv[1]), load(sys.argv[2])
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-3
assert a.keys() == b.keys()
worst = max((max(abs(x - y) for x, y in zip(a[k], b[k])), k) for k in a)
scale = max(max(abs(x) for x in a[k]) for k in a)
print(json.dumps({"max_abs_diff": worst[0], "tensor": worst[1], "max_abs_value": scale, "tolerance": tol, "agree": worst[0] <= tol}))
sys.exit(0 if worst[0] <= tol else 1)
