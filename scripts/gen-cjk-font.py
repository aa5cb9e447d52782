#!/usr/bin/env python3
"""Makes assets/fonts/DroidSansFallback-subset.ttf, the CJK fallback font the app embeds
(app/src/gui/paint/fonts.rs).

Source: Debian's fonts-droid-fallback (DroidSansFallbackFull.ttf, Android's CJK fallback font,
Apache-2.0 like this project; assets/fonts/README.md). Kept: the ideographs of GB2312 (levels
1 and 2), JIS X 0208 (levels 1 and 2) and Big5 level 1, kana, CJK punctuation and symbols,
full-width forms, and the symbols of those character sets from U+2E80 on (Latin, Greek and
Cyrillic are left to the app's own fonts). About 13,300 characters, 1.5 MB; the font has no
Hangul syllables (Korean comes from the system's fonts, as does every character not kept).

Usage: scripts/gen-cjk-font.py [OUT]   (needs apt-get and fonttools' pyftsubset:
`pip install fonttools`)
"""
import os
import subprocess
import sys
import tempfile

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "assets", "fonts", "DroidSansFallback-subset.ttf")


def decode_all(encoding, his, los):
    """Every character a two-byte encoding maps the byte pairs his x los to."""
    out = set()
    for hi in his:
        for lo in los:
            try:
                c = bytes([hi, lo]).decode(encoding)
            except UnicodeDecodeError:
                continue
            if len(c) == 1:
                out.add(ord(c))
    return out


def characters():
    s = set()
    s |= decode_all("gb2312", range(0xA1, 0xF8), range(0xA1, 0xFF))  # symbols, kana, hanzi levels 1-2
    s |= decode_all("euc_jp", range(0xA1, 0xF5), range(0xA1, 0xFF))  # JIS X 0208: symbols, kana, kanji levels 1-2
    s |= decode_all("big5", range(0xA1, 0xC7), range(0x40, 0xFF))  # Big5 symbols and level 1 hanzi
    for a, b in [(0x3000, 0x303F), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF00, 0xFFEF)]:
        s |= set(range(a, b + 1))  # CJK punctuation, hiragana, katakana, full-width forms
    return sorted(c for c in s if c >= 0x2E80)


def main():
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["apt-get", "download", "fonts-droid-fallback"], cwd=d, check=True)
        deb = next(f for f in os.listdir(d) if f.endswith(".deb"))
        subprocess.run(["dpkg", "-x", deb, "x"], cwd=d, check=True)
        src = os.path.join(d, "x/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf")
        chars = os.path.join(d, "chars.txt")
        with open(chars, "w") as f:
            f.write("\n".join("U+%04X" % c for c in characters()))
        os.makedirs(os.path.dirname(os.path.abspath(OUT)), exist_ok=True)
        subprocess.run(
            ["pyftsubset", src, f"--unicodes-file={chars}", f"--output-file={OUT}", "--no-hinting", "--desubroutinize", "--layout-features=", "--name-IDs=*"],
            check=True,
        )
    print(f"{OUT}: {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
