#!/usr/bin/env python3
"""Derive crates/analysis/data/wordnet-pos.txt from WordNet 3.0 (Debian package wordnet-base).

Usage: scripts/gen-lexicon.py WORDNET_DIR OUT_FILE
  WORDNET_DIR = usr/share/wordnet of the extracted wordnet-base .deb (scripts/gen-lexicon.sh does
  the download, sha256 check and extraction).

Output (UTF-8 text; '#' lines are comments):
  section "%lemmas": one line per single-word lemma, `lemma<TAB>POSCOUNT...`, where POS is one of
    n v a r (adjective satellites fold into a) and COUNT is the lemma's total frequency in the
    WordNet semantically tagged corpora for that part of speech (sum of the tag counts of its
    senses in cntlist.rev); the count is omitted when it is 0. Example: `house\tn155v3`.
  section "%exceptions": irregular inflections from noun/verb/adj/adv.exc, `form<TAB>POS<TAB>base`.
Multi-word collocations (containing '_') and entries with characters other than ASCII letters,
apostrophe, hyphen or period are left out: the categoriser looks up single words.
"""
import collections
import os
import re
import sys

WORD = re.compile(r"^[a-z][a-z'.-]*$")
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
SS_TYPE = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}

LICENCE = """\
# Derived from WordNet 3.0 (Debian package wordnet-base 1:3.0-37) by scripts/gen-lexicon.py.
#
# WordNet 3.0 Copyright 2006 by Princeton University.  All rights reserved.
#
# Permission to use, copy, modify and distribute this software and database and its
# documentation for any purpose and without fee or royalty is hereby granted, provided that you
# agree to comply with the following copyright notice and statements, including the disclaimer,
# and that the same appear on ALL copies of the software, database and documentation, including
# modifications that you make for internal use or for distribution.
#
# THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO
# REPRESENTATIONS OR WARRANTIES, EXPRESS OR IMPLIED.  BY WAY OF EXAMPLE, BUT NOT LIMITATION,
# PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES OF MERCHANT- ABILITY OR FITNESS FOR
# ANY PARTICULAR PURPOSE OR THAT THE USE OF THE LICENSED SOFTWARE, DATABASE OR DOCUMENTATION
# WILL NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS, TRADEMARKS OR OTHER RIGHTS.
#
# The name of Princeton University or Princeton may not be used in advertising or publicity
# pertaining to distribution of the software and/or database.  Title to copyright in this
# software, database and any associated documentation shall at all times remain with Princeton
# University and LICENSEE agrees to preserve same.
"""


def main(wn, out):
    counts = collections.defaultdict(int)  # (lemma, pos) -> tagged frequency
    with open(os.path.join(wn, "cntlist.rev"), encoding="utf-8") as f:
        for line in f:
            key, _sense, cnt = line.split()
            lemma, rest = key.split("%", 1)
            counts[(lemma.lower(), SS_TYPE[rest[0]])] += int(cnt)
    lemmas = collections.defaultdict(dict)  # lemma -> {pos: count}
    for pos, name in POS_FILES.items():
        with open(os.path.join(wn, "index." + name), encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue  # licence header
                lemma = line.split(" ", 1)[0]
                if WORD.match(lemma):
                    lemmas[lemma][pos] = counts.get((lemma, pos), 0)
    exceptions = []
    for pos, name in POS_FILES.items():
        with open(os.path.join(wn, name + ".exc"), encoding="utf-8") as f:
            for line in f:
                form, *bases = line.split()
                for base in bases:
                    if WORD.match(form) and WORD.match(base):
                        exceptions.append((form, pos, base))
    lines = [LICENCE, "%lemmas\n"]
    for lemma in sorted(lemmas):
        lines.append(lemma + "\t" + "".join(p + (str(c) if c else "") for p, c in lemmas[lemma].items()) + "\n")
    lines.append("%exceptions\n")
    for form, pos, base in sorted(set(exceptions)):
        lines.append(f"{form}\t{pos}\t{base}\n")
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
    os.replace(tmp, out)
    print(f"{out}: {len(lemmas)} lemmas, {len(exceptions)} exceptions", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
