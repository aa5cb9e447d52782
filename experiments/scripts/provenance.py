"""The corpus part of a shipped adapter's training provenance, shared by ship_adapter.py and
ship_sweep_adapter.py: the data and held-out files relative to the corpus, and the split."""


def corpus_provenance(t):
    """From a run's adapter_config.json `training` (absolute paths under .../corpus/)."""
    rel = lambda p: p.split("/corpus/", 1)[-1]
    return {
        "data": "corpus/train/* from scripts/fetch_corpus.py ({} Austen novels, {} Shakespeare plays and poems, {} State of the Union addresses 1790-2000{})".format(
            *(sum(f"/{w}__" in p for p in t["data"]) for w in ("austen", "shakespeare", "sotu")),
            # The wider mix (issue 28) adds the Linux kernel's documentation, one work per folder.
            "".join(f", {n} folders of the Linux kernel's documentation" for n in [sum("/linux__" in p for p in t["data"])] if n)),
        "data_files": [rel(p) for p in t["data"]],
        "heldout_files": [rel(p) for p in t["heldout"]],
        "split": "by whole works: held out Persuasion; Hamlet, Macbeth, The Tempest, Twelfth Night; SOTU 2001-2021" + ("; the kernel's process and admin-guide documentation" if any("/linux__" in p for p in t["heldout"]) else ""),
    }
