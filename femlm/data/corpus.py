"""Domain corpora: documents in memory (small corpora), and the prepared token blocks training reads.

`prepare_blocks` is the entry point training and analysis use: it returns the domain's `PreparedCorpus`
(``corpus["train"]`` / ``corpus["validation"]`` are memory-mapped ``[n, block_size]`` blocks), preparing it
first when it is not cached (`femlm.data.prepare`: parallel, streaming, any size). It follows run_mlm.py's
recipe (each document tokenized with the tokenizer's special tokens, ``[CLS] doc [SEP]`` for BERT and
``<s> doc </s>`` for RoBERTa, concatenated, cut into ``block_size`` pieces) with differences, each for a reason:

* train/validation are split by **document** (seeded, by content hash) before tokenization, so validation
  text is unseen; exact duplicates are dropped first, so none straddles the split;
* ``domain.max_documents`` is a seeded, exactly uniform sample of distinct documents (`femlm.data.sample`);
* only the last partial block of each split is dropped (run_mlm.py drops one per 1,000 documents);
* the result is cached under ``<cache>/blocks/<domain>-<key>``, the key hashing everything that changes the
  blocks (sources and their sha256 / Hub commit, reader versions, the tokenizer's full serialization, block
  size, max_documents, seed, validation fraction).

`load_documents` returns the same documents (same dedup, same sample) as a Python list, for the few callers
that need text in memory (training a WordPiece vocabulary on a small corpus, tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from femlm.data import sample
from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.prepare import (
    corpus_dir,
    corpus_key,
    no_documents,
    prepare_corpus,
    sample_too_large,
    tokenizer_fingerprint,
    too_few_documents,
)
from femlm.data.sources import iter_documents
from femlm.data.tokens import PreparedCorpus, read_meta
from femlm.errors import UserError

__all__ = ["blocks_dir", "blocks_meta", "load_documents", "prepare_blocks", "tokenizer_fingerprint"]


def load_documents(domain: DomainConfig, download: DownloadConfig, seed: int = 0) -> list[str]:
    """The domain's documents in memory: every source's, stripped, empty ones and exact duplicates dropped,
    in source order; with ``domain.max_documents`` the seeded sample `prepare_blocks` would use. The documents of
    ``domain.validation_sources`` (a corpus's own held-out split) are not among them."""
    if not domain.sources:
        raise UserError(f"domain.sources is empty (domain {domain.name}): list registry corpora, "
                        "file:<path or glob> or hf:<dataset>")
    docs = list(dict.fromkeys(doc for _, doc in iter_documents(list(domain.sources), download)))
    if not docs:
        raise no_documents(domain)
    if domain.max_documents is not None:
        hashes = sample.hash_docs(docs)
        if domain.max_documents > len(docs):
            raise sample_too_large(domain, len(docs))
        keep = sample.member(hashes, sample.sample_hashes(hashes, domain.max_documents, seed))
        docs = [d for d, k in zip(docs, keep, strict=True) if k]
    return docs


def _split_documents(docs: list[str], fraction: float, seed: int, domain: DomainConfig | None = None
                     ) -> dict[str, list[str]]:
    """Train/validation documents as `prepare_blocks` splits them (by content hash, seeded), in order."""
    if len(docs) < 2:
        raise too_few_documents(domain or DomainConfig("corpus", ["?"]), len(docs))
    hashes = sample.hash_docs(docs)
    val = sample.member(hashes, sample.validation_hashes(np.unique(hashes), fraction, seed))
    return {"train": [d for d, v in zip(docs, val, strict=True) if not v],
            "validation": [d for d, v in zip(docs, val, strict=True) if v]}


def blocks_dir(domain: DomainConfig, tokenizer: Any, block_size: int, download: DownloadConfig,
               cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Where `prepare_blocks` caches these blocks (it may not exist yet)."""
    return corpus_dir(corpus_key(domain, tokenizer, block_size, download, seed), domain, download, cache_dir)


def prepare_blocks(domain: DomainConfig, tokenizer: Any, block_size: int, download: DownloadConfig,
                   cache_dir: str | Path | None = None, num_proc: int = 2, seed: int = 0) -> PreparedCorpus:
    """The domain's token blocks: ``corpus["train"]``, ``corpus["validation"]`` (memory-mapped, `block_size`
    ids per row), prepared on first use. Checking `block_size` against the model's positions is the caller's."""
    return prepare_corpus(domain, tokenizer, block_size, download, cache_dir, num_proc=num_proc, seed=seed)


def blocks_meta(path: str | Path) -> dict[str, Any]:
    """The meta.json of a prepared corpus (documents, tokens, blocks per split, key, stand_in, seconds)."""
    return read_meta(path)
