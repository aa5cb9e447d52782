#!/usr/bin/env python3
"""Dense causal attention with PyTorch's scaled_dot_product_attention, flash backend only, at the
shapes of `focus-lens bench attention --device cuda --dtype bf16` (one sequence, H heads x 64,
bf16). Run on the GPU machine in the same session as our benchmark so the ratio is honest.
Prints one JSON object per length: {"n", "heads", "head_dim", "dtype", "sdpa_flash_ms"}.

usage: sdpa_bench.py [--lengths 4096,8192,...] [--heads 8] [--repeats 3]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="4096,8192,16384,32768,65536,131072,262144,524288,1048576")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    for n in [int(x) for x in a.lengths.split(",")]:
        shape = (1, a.heads, n, a.head_dim)
        q, k, v = (torch.rand(shape, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(3))
        times = []
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            for rep in range(a.repeats + 1):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                end.record()
                torch.cuda.synchronize()
                if rep > 0:  # the first call is a warm-up
                    times.append(start.elapsed_time(end))
        print(json.dumps({"n": n, "heads": a.heads, "head_dim": a.head_dim, "dtype": "bf16",
                          "sdpa_flash_ms": sorted(times)[len(times) // 2],
                          "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}), flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
