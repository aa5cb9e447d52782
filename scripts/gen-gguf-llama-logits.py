#!/usr/bin/env python3
"""llama.cpp's logits for every tiny GGUF (issue 49): tests/fixtures/gguf_tiny/NAME.llama.json.

For each tests/fixtures/gguf_tiny/NAME.gguf (llama.cpp's own converter's f32 GGUF of the tiny
random checkpoint tests/fixtures/hf_tiny/NAME, scripts/make_tiny_families.py), the token ids that
core/tests/families.rs feeds it (`input_ids` of hf_tiny/NAME/reference.safetensors, as they are:
no BOS added) are decoded by libllama in one batch, logits for every position, with
scripts/llama_ref.c's `logits` command: CPU, 2 threads, no weight repacking (llama-perplexity's
--no-repack: ggml's repacking path crashes in this project's container), f32 KV cache, no flash
attention. core/tests/families.rs `the_converters_ggufs_match_llama_cpp` compares ours to them.

Writes {"llama_cpp": VERSION, "ids": [...], "positions": [FIRST, END), "logits": [[...], ...]}:
logits[i] is position FIRST + i's (all positions unless a file would pass MAX_BYTES, then only
the last ones, and "note" says so). Floats as llama_ref printed them (%.9g: f32 round-trips).

Rerun (stdlib only):
    scripts/build-llama-cpp.sh /work/llama.cpp     # llama-cpp-python 0.3.36's vendored llama.cpp
    python3 scripts/gen-gguf-llama-logits.py [--llama-cpp /work/llama.cpp] [NAME ...]
which builds llama_ref into a temporary folder with
    gcc -O2 -I$L/src/include -I$L/src/ggml/include scripts/llama_ref.c \
        -L$L/lib -lllama -lggml-base -Wl,-rpath,$L/lib -lm
($L the --llama-cpp folder, default $LLAMA_CPP_DIR or ~/.cache/focus-lens/llama.cpp). The version
string is the first words of $L/READY (written by build-llama-cpp.sh) and ggml's own version.
"""
import argparse
import array
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
GGUF = ROOT / "tests/fixtures/gguf_tiny"
HF = ROOT / "tests/fixtures/hf_tiny"
MAX_BYTES = 60_000


def input_ids(name):
    """`input_ids` of hf_tiny/NAME/reference.safetensors (I64, 1 x T), read without numpy."""
    b = (HF / name / "reference.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    t = json.loads(b[8:8 + n])["input_ids"]
    assert t["dtype"] == "I64", t
    s, e = t["data_offsets"]
    a = array.array("q")
    a.frombytes(b[8 + n + s:8 + n + e])
    if sys.byteorder != "little":
        a.byteswap()
    return list(a)


def build(llama, out):
    inc = ["-I", str(llama / "src/include"), "-I", str(llama / "src/ggml/include")]
    lib = str(llama / "lib")
    exe = out / "llama_ref"
    subprocess.run(["gcc", "-O2", *inc, str(ROOT / "scripts/llama_ref.c"), "-o", str(exe),
                    "-L" + lib, "-lllama", "-lggml-base", "-Wl,-rpath," + lib, "-lm"], check=True)
    return exe


def version(llama, exe):
    ready = (llama / "READY").read_text().strip() if (llama / "READY").exists() else "llama.cpp"
    ready = ready.split(", built")[0]
    ggml = subprocess.run([str(exe), "version"], check=True, capture_output=True, text=True).stdout.strip()
    return f"{ready}; {ggml}; libllama with use_extra_bufts=false, CPU, 2 threads, f32 KV cache, no flash attention"


def dump(doc):
    """JSON with one position's logits a line."""
    head = "".join(f" {json.dumps(k)}: {json.dumps(v)},\n" for k, v in doc.items() if k != "logits")
    lines = ",\n".join("  [" + ", ".join(row) + "]" for row in doc["logits"])
    return "{\n" + head + ' "logits": [\n' + lines + "\n ]\n}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=pathlib.Path,
                    default=pathlib.Path(os.environ.get("LLAMA_CPP_DIR", "~/.cache/focus-lens/llama.cpp")).expanduser())
    ap.add_argument("names", nargs="*", help="families (default: every tests/fixtures/gguf_tiny/*.gguf)")
    a = ap.parse_args()
    names = a.names or sorted(p.stem for p in GGUF.glob("*.gguf"))
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(a.llama_cpp, pathlib.Path(tmp))
        ver = version(a.llama_cpp, exe)
        for name in names:
            ids = input_ids(name)
            r = subprocess.run([str(exe), "logits", str(GGUF / f"{name}.gguf"), ",".join(map(str, ids))],
                               capture_output=True, text=True)
            if r.returncode != 0:
                err = [l for l in r.stderr.splitlines() if l.strip()][-3:]
                print(f"{name}: llama.cpp failed (exit {r.returncode}): {' | '.join(err)}", file=sys.stderr)
                failed.append(name)
                continue
            rows = [l.split() for l in r.stdout.splitlines()]
            assert len(rows) == len(ids) and len({len(x) for x in rows}) == 1, (name, len(rows))
            for row in rows:  # every entry a finite number as printed
                for x in row:
                    assert float(x) == float(x) and abs(float(x)) != float("inf"), (name, x)
            doc = {"llama_cpp": ver, "gguf": f"{name}.gguf", "ids": ids, "positions": [0, len(ids)], "logits": rows}
            text = dump(doc)
            first = 0
            while len(text.encode()) > MAX_BYTES and first < len(ids) - 1:
                first += 1
                doc = dict(doc, positions=[first, len(ids)], logits=rows[first:],
                           note=f"only the last {len(ids) - first} positions' logits, to keep the file small")
                text = dump(doc)
            json.loads(text)  # well-formed
            (GGUF / f"{name}.llama.json").write_text(text)
            print(f"{name}: {len(ids)} ids, vocab {len(rows[0])}, positions {first}..{len(ids)}, {len(text)} bytes")
    if failed:
        print("llama.cpp could not run: " + ", ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
