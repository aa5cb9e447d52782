#!/usr/bin/env python3
"""Pack files for the GPU machine into carry-sized call folders. A call carries one folder
(the 64 MiB carry limit includes the ~13 MiB checkout), so the files, in the order given, are
cut into pieces and packed greedily into folders of at most CAP MiB: earlier files arrive in
earlier calls (put the binary and the small model first so work can start while the rest is
staged). Every folder holds manifest.txt (name, pieces, sha256 of each file); unstage.py on the
GPU machine reassembles each file as soon as all its pieces are there.
Usage: pack.py OUTDIR CAP_MIB FILE...      e.g. pack.py .stage/calls 48 focus-lens.xz corpus.tar.xz ..."""
import hashlib, os, shutil, sys

out, cap, files = sys.argv[1], int(sys.argv[2]) << 20, sys.argv[3:]
shutil.rmtree(out, ignore_errors=True)
manifest = [(os.path.basename(path), open(path, "rb").read()) for path in files]
# Greedy packing: a running offset over the concatenation of all files.
calls, cur, used = [], [], 0
for name, data in manifest:
    off, idx = 0, 0
    while off < len(data):
        take = min(cap - used, len(data) - off)
        cur.append((name, idx, data[off:off + take]))
        off, idx, used = off + take, idx + 1, used + take
        if used == cap:
            calls.append(cur); cur, used = [], 0
if cur:
    calls.append(cur)
counts = {}
for c in calls:
    for name, idx, _ in c:
        counts[name] = max(counts.get(name, 0), idx + 1)
lines = "".join(f"{name} {counts[name]} {hashlib.sha256(data).hexdigest()}\n" for name, data in manifest)
for i, c in enumerate(calls, 1):
    d = os.path.join(out, f"c{i:02d}")
    os.makedirs(d)
    open(os.path.join(d, "manifest.txt"), "w").write(lines)
    for name, idx, chunk in c:
        open(os.path.join(d, f"{name}.piece{idx:03d}"), "wb").write(chunk)
    print(d, sum(len(x[2]) for x in c) >> 20, "MiB:", " ".join(f"{n}#{j}" for n, j, _ in c))
