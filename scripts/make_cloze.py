#!/usr/bin/env python3
"""Build the LAMBADA-style last-word cloze from a held-out book (default: Austen's Persuasion,
held out of training by scripts/fetch_corpus.py).

LAMBADA (Paperno et al. 2016) keeps passages whose last word humans can guess only with the
whole passage. We cannot ask humans, so we keep the property that matters for sparse attention
and can be checked mechanically: the target word occurs in the context, but NOT in its last
`--near` words, so predicting it needs a long-range look-up that the local window cannot give.

Construction, deterministic:
  * the book is cut into sentences (., !, ? followed by space/newline, quotes kept);
  * a candidate is a sentence whose last word (before the final punctuation) is alphabetic,
    at least 4 letters, not a stopword, and capitalised only if it is a proper name seen
    capitalised in the context;
  * the context is the `--context-words` words before that target (starting at a word
    boundary), and the target must occur in the context, but not in its last `--near` words;
  * the target must be the sentence's last word without leading punctuation, and the model
    scores it as ` target` (one leading space) after the context;
  * candidates closer than `--spacing` words to the previous pick are skipped, so passages
    overlap little; the first `--items` are written.
Output: JSONL of {"context", "target", "source", "target_word_index"}.
"""
import argparse, json, os, re, sys

STOP = set("""a about above after again against all am an and any are as at be because been before being
below between both but by could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my
myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours
yourself yourselves shall must might upon said every very much well""".split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--book", default=os.path.expanduser("~/.cache/focus-lens/corpus/heldout/austen__persuasion.txt"))
    ap.add_argument("--out", default="assets/eval/cloze_persuasion.jsonl")
    ap.add_argument("--context-words", type=int, default=400)
    ap.add_argument("--near", type=int, default=100)
    ap.add_argument("--spacing", type=int, default=150)
    ap.add_argument("--items", type=int, default=200)
    a = ap.parse_args()
    text = open(a.book, encoding="utf-8").read()
    # Words with their character spans, so contexts are exact substrings of the book.
    words = [(m.group(0), m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    strip = lambda w: re.sub(r"^[\W_]+|[\W_]+$", "", w)
    out, last_pick = [], -10**9
    for i, (w, s, e) in enumerate(words):
        if i < a.context_words or i - last_pick < a.spacing:
            continue
        if not re.search(r"[a-z][.!?][\"'”’]?$", w):  # sentence-final word
            continue
        target = strip(w)
        if not re.fullmatch(r"[A-Za-z]{4,}", target) or target.lower() in STOP:
            continue
        ctx_words = [strip(x[0]) for x in words[i - a.context_words:i]]
        far, near = ctx_words[: -a.near], ctx_words[-a.near:]
        if target not in far or target in near:
            continue
        start = words[i - a.context_words][1]
        if w[0] != target[0]:  # a leading quote or bracket: the target would not follow a space
            continue
        context = text[start:s]
        out.append({"context": context.rstrip(), "target": target, "source": os.path.basename(a.book), "target_word_index": i})
        last_pick = i
        if len(out) == a.items:
            break
    if len(out) < a.items:
        print(f"warning: only {len(out)} items", file=sys.stderr)
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for it in out:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    os.replace(tmp, a.out)
    print(f"{len(out)} items -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
