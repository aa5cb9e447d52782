#!/usr/bin/env python3
"""Where a pass's GPU time goes: Nsight Compute's per-launch durations (`ncu --csv --page raw
--metrics gpu__time_duration.sum --log-file F PROGRAM`, as length52_round3.sh's `profile` runs
it: a header row, a units row, a row per launch) summed by kernel name: total ms, share and
launches, the heaviest first. ncu runs each kernel alone, so the total is the kernels' time, not
the pass's wall clock. Usage: kernel_summary.py CSV [N]"""
import collections, csv, sys

MS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
with open(path, errors="replace") as f:
    rows = list(csv.reader(l for l in f if not l.startswith("==")))
if not rows or "Kernel Name" not in rows[0]:
    sys.exit(f"{path}: not ncu's raw CSV (no header with Kernel Name)")
hdr, units = rows[0], rows[1]
ki, ti = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
scale = MS[units[ti]]
total, count = collections.defaultdict(float), collections.Counter()
for row in rows[2:]:
    name = row[ki].split("(")[0][:70]
    total[name] += float(row[ti].replace(",", "")) * scale
    count[name] += 1
all_ms = sum(total.values())
print(f"{path}: {sum(count.values())} launches, {all_ms:.1f} ms of kernels")
for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:n]:
    print(f"{ms:10.2f} ms {100 * ms / all_ms:5.1f}% {count[name]:6d}x  {name}")
