"""What one preparation worker does with one unit: hash its documents, or tokenize them to a token file.

Workers are *spawned* processes (not forked: the parent may hold CUDA, NCCL or tokenizer threads, which fork
copies in a broken state). Each starts with `init_worker`, which rebuilds the fast tokenizer from its JSON
(the `tokenizers` backend only: no transformers or torch import, so a worker is up in well under a second)
and turns off the tokenizer's own thread pool, so N workers use N cores. With one worker everything runs in
the calling process, through the same functions.

Tokenization calls ``Tokenizer.encode_batch_fast`` on batches of 1,000 documents with the tokenizer's special
tokens (``[CLS] doc [SEP]`` for BERT, ``<s> doc </s>`` for RoBERTa, exactly what ``tokenizer(text)`` gives,
a test checks), and appends the ids to the unit's token file as uint16 / int32 as they come: a worker holds
one batch, never a unit.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from femlm.data.config import DownloadConfig
from femlm.data.sample import hash_docs, member
from femlm.data.sources import Unit, read_unit
from femlm.stop import ignore

Report = Callable[[int, int, int], None]  # (rows read, documents kept, tokens) since the last report
_STATE: dict[str, Any] = {}


@dataclass(frozen=True)
class Job:
    mode: str  # "scan": hash documents only; "tokenize": hash and tokenize (optionally only `keep`)
    download: DownloadConfig
    out_dir: str = ""  # where tokenize writes u<index>.bin
    tokenizer_json: str | None = None
    dtype: str = "uint16"
    keep_path: str | None = None  # .npy of sorted uint64 hashes: tokenize only these documents


@dataclass
class UnitResult:
    index: int
    source: int
    rows: int = 0  # rows read (before filters, empty documents and the keep set)
    hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))  # one per kept document
    lengths: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # tokens per kept document
    nonempty: int = 0  # non-empty documents read (before the keep set)


def init_worker(job: Job, queue: Any = None, report: Report | None = None, in_process: bool = False) -> None:
    """Per-process state: the tokenizer, the keep set, and where progress goes (a queue or a callback)."""
    if not in_process:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per worker process
        ignore()  # the parent polls the stop signals and stops its workers (femlm.data.prepare)
    _STATE.clear()
    _STATE["job"] = job
    if job.tokenizer_json is not None:
        _STATE["tokenizer"], _STATE["ascii_tokenizer"] = build_tokenizers(job.tokenizer_json)
    _STATE["keep"] = np.load(job.keep_path) if job.keep_path else None
    if report is not None:
        _STATE["report"] = report
    elif queue is not None:
        _STATE["report"] = lambda rows, docs, tokens: queue.put((rows, docs, tokens))
    else:
        _STATE["report"] = lambda rows, docs, tokens: None


def build_tokenizers(tokenizer_json: str) -> tuple[Any, Any]:
    """The backend tokenizer, and (BERT-style only) an equivalent one for plain-ASCII documents.

    ``BertNormalizer(clean_text, handle_chinese_chars, lowercase)`` removes control characters, maps whitespace
    to spaces, pads CJK characters and strips accents: on a document that is ASCII with no control character
    but tab, newline and carriage return, all it does is lower-case (the pre-tokenizer splits on every kind of
    whitespace alike). Such documents (most English text) go through a ``Lowercase`` normalizer instead, about
    a third less tokenization time for identical ids (tests/test_data_workers.py checks); every other document
    takes the full pipeline. None for tokenizers without that normalizer (RoBERTa's byte-level BPE has none)."""
    import json

    from tokenizers import Tokenizer, normalizers

    tokenizer = Tokenizer.from_str(tokenizer_json)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    norm = json.loads(tokenizer_json).get("normalizer") or {}
    bert = (norm.get("type") == "BertNormalizer" and norm.get("clean_text") and norm.get("lowercase")
            and norm.get("handle_chinese_chars") and norm.get("strip_accents") in (None, True))
    if not bert:
        return tokenizer, None
    ascii_tokenizer = Tokenizer.from_str(tokenizer_json)
    ascii_tokenizer.no_truncation()
    ascii_tokenizer.no_padding()
    ascii_tokenizer.normalizer = normalizers.Lowercase()
    return tokenizer, ascii_tokenizer


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def encode(docs: list[str]) -> list[list[int]]:
    """Token ids of each document with special tokens, plain-ASCII documents by the lower-casing fast path."""
    full, fast = _STATE["tokenizer"], _STATE.get("ascii_tokenizer")
    if fast is None:
        return [e.ids for e in full.encode_batch_fast(docs, add_special_tokens=True)]
    plain = [d.isascii() and _CONTROL.search(d) is None for d in docs]
    out: list[list[int]] = [[] for _ in docs]
    for use, tokenizer in ((True, fast), (False, full)):
        picked = [i for i, p in enumerate(plain) if p is use]
        if picked:
            for i, enc in zip(picked, tokenizer.encode_batch_fast([docs[i] for i in picked], add_special_tokens=True),
                              strict=True):
                out[i] = enc.ids
    return out


def unit_file(out_dir: str | Path, index: int) -> Path:
    return Path(out_dir) / f"u{index:07d}.bin"


def run_unit(index: int, unit: Unit) -> UnitResult:
    """Hash (scan) or tokenize (tokenize) every non-empty document of `unit`."""
    job: Job = _STATE["job"]
    report: Report = _STATE["report"]
    keep = _STATE["keep"]
    result = UnitResult(index, unit.source)
    hashes: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    handle = open(unit_file(job.out_dir, index), "wb") if job.mode == "tokenize" else None  # noqa: SIM115
    try:
        for raw, rows in read_unit(unit, job.download):
            docs = [d.strip() for d in raw if d and d.strip()]
            result.rows += rows
            result.nonempty += len(docs)
            batch_hashes = hash_docs(docs)
            if keep is not None:
                chosen = member(batch_hashes, keep)
                docs = [d for d, k in zip(docs, chosen, strict=True) if k]
                batch_hashes = batch_hashes[chosen]
            hashes.append(batch_hashes)
            tokens = 0
            if handle is not None and docs:
                counts = _tokenize_into(docs, handle, job.dtype)
                lengths.append(counts)
                tokens = int(counts.sum())
            report(rows, len(docs), tokens)
    finally:
        if handle is not None:
            handle.close()
    result.hashes = np.concatenate(hashes) if hashes else result.hashes
    result.lengths = np.concatenate(lengths) if lengths else result.lengths
    return result


def _tokenize_into(docs: list[str], handle: Any, dtype: str) -> np.ndarray:
    """Append the ids of `docs` to `handle`; tokens per document."""
    ids = encode(docs)
    counts = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.dtype(dtype), count=int(counts.sum()))
    handle.write(flat.tobytes())
    return counts
