"""Reading the logs stored under experiments/results: the large ones (train_log.jsonl and other
*.jsonl over 20 KB) are kept xz-compressed beside their name (train_log.jsonl.xz), the small
ones plain. Shared by the summary / table scripts of experiments/results and
ship_sweep_adapter.py; fresh logs written on a GPU machine stay plain and read the same way."""
import glob
import lzma
import os


def open_log(path):
    """PATH as text: PATH itself, or PATH.xz where only the compressed copy exists (a path ending in
    .xz is read through xz)."""
    path = os.fspath(path)
    if path.endswith(".xz"):
        return lzma.open(path, "rt")
    if not os.path.exists(path) and os.path.exists(path + ".xz"):
        return lzma.open(path + ".xz", "rt")
    return open(path)


def glob_logs(pattern):
    """The logs matching PATTERN (e.g. DIR/*/train_log.jsonl), plain or as PATTERN.xz: one path per
    log (the plain file where both exist), sorted by the plain name as sorted(glob(PATTERN))."""
    found = {}
    for p in glob.glob(pattern + ".xz") + glob.glob(pattern):
        found[p[:-3] if p.endswith(".xz") else p] = p
    return [found[k] for k in sorted(found)]
