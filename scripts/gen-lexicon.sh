#!/usr/bin/env bash
# Regenerates crates/analysis/data/wordnet-pos.txt (the embedded open-class lexicon) from WordNet 3.0 as
# packaged by Debian (wordnet-base 1:3.0-37): apt-get download (no root needed), sha256 check,
# dpkg-deb -x into a temporary directory, then scripts/gen-lexicon.py. Not needed to build or
# test: the derived table is committed. Needs apt-get, dpkg-deb, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="1:3.0-37"
SHA256="61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download "wordnet-base=$VERSION")
deb="$(ls "$tmp"/wordnet-base_*.deb)"
echo "$SHA256  $deb" | sha256sum -c -
dpkg-deb -x "$deb" "$tmp/x"
python3 scripts/gen-lexicon.py "$tmp/x/usr/share/wordnet" crates/analysis/data/wordnet-pos.txt
