#!/usr/bin/env python3
"""On the GPU machine: take the pieces of one carried call folder (pack.py) into /root/stage and
reassemble every file whose pieces are now all there: check its sha256, then unpack it (*.xz is
decompressed, *.tar.xz extracted, `focus-lens` made executable). Idempotent; prints what is ready.
Usage: unstage.py CALL_FOLDER"""
import glob, hashlib, os, shutil, subprocess, sys

S = os.environ.get("STAGE", "/root/stage")
os.makedirs(f"{S}/pieces", exist_ok=True)
src = sys.argv[1]
for p in glob.glob(f"{src}/*.piece*"):
    shutil.copy(p, f"{S}/pieces/")
shutil.copy(f"{src}/manifest.txt", S)
for line in open(f"{S}/manifest.txt"):
    name, n, sha = line.split()
    done = f"{S}/{name}.ok"
    if os.path.exists(done):
        print("ready", name); continue
    parts = [f"{S}/pieces/{name}.piece{i:03d}" for i in range(int(n))]
    missing = [p for p in parts if not os.path.exists(p)]
    if missing:
        print(f"waiting {name}: {int(n) - len(missing)}/{n} pieces"); continue
    h = hashlib.sha256()
    with open(f"{S}/{name}", "wb") as out:
        for p in parts:
            data = open(p, "rb").read(); h.update(data); out.write(data)
    if h.hexdigest() != sha:
        sys.exit(f"error: {name} sha256 mismatch")
    for p in parts:
        os.remove(p)
    if name.endswith(".tar.xz"):
        subprocess.run(["tar", "xJf", name], cwd=S, check=True)
    elif name.endswith(".xz"):
        subprocess.run(["xz", "-d", "-f", "-T0", name], cwd=S, check=True)
        if name == "focus-lens.xz":
            os.chmod(f"{S}/focus-lens", 0o755)
    open(done, "w").close()
    print("ready", name, "(now)")
