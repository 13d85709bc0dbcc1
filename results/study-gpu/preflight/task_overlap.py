"""How much of the downstream tasks' text appears in the ACL papers: for each ACL-ARC and SciERC example, the share
of its word 8-grams (lower-cased alphanumeric words; SciERC's entity marks and bracket tokens removed) found among
the 8-grams of the ACL train (or valid) papers.

    .venv/bin/python results/study-gpu/preflight/task_overlap.py > results/study-gpu/preflight/task_overlap.txt
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.corpus import load_documents
from femlm.data.sample import hash_docs

WORD = re.compile(r"[a-z0-9]+")
MARKS = re.compile(r"\[\[|\]\]|<<|>>|-[LR][RSC]B-")
MIRROR = Path(os.environ.get("FEMLM_MIRROR", "../shared/data"))


def grams(text: str, n: int = 8) -> list[str]:
    words = WORD.findall(MARKS.sub(" ", text.lower()))
    return [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]


def main() -> None:
    cfg = DownloadConfig(mirror=str(MIRROR), offline=True, verify=False)
    for split in ("train", "valid"):
        docs = load_documents(DomainConfig("acl", [f"acl_scisumm:{split}"]), cfg)
        corpus = np.unique(np.concatenate([hash_docs(grams(d)) for d in docs]))
        for task in ("citation_intent", "sciie"):
            for task_split in ("train", "dev", "test"):
                lines = (MIRROR / "dapt" / task / f"{task_split}.jsonl").read_text().splitlines()
                some = half = 0
                for line in lines:
                    g = hash_docs(grams(json.loads(line)["text"]))
                    if not len(g):
                        continue
                    pos = np.minimum(np.searchsorted(corpus, g), len(corpus) - 1)
                    share = float((corpus[pos] == g).mean())
                    some, half = some + (share > 0), half + (share >= 0.5)
                print(f"acl {split} vs {task} {task_split}: {len(lines)} examples, {some} share an 8-gram with the "
                      f"papers, {half} have at least half their 8-grams there")


if __name__ == "__main__":
    main()
