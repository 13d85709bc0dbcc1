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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from femlm.data.config import DownloadConfig
from femlm.data.sample import hash_docs, member
from femlm.data.sources import Unit, read_unit

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
    _STATE.clear()
    _STATE["job"] = job
    if job.tokenizer_json is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(job.tokenizer_json)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        _STATE["tokenizer"] = tokenizer
    _STATE["keep"] = np.load(job.keep_path) if job.keep_path else None
    if report is not None:
        _STATE["report"] = report
    elif queue is not None:
        _STATE["report"] = lambda rows, docs, tokens: queue.put((rows, docs, tokens))
    else:
        _STATE["report"] = lambda rows, docs, tokens: None


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
    encodings = _STATE["tokenizer"].encode_batch_fast(docs, add_special_tokens=True)
    ids = [e.ids for e in encodings]
    counts = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.dtype(dtype), count=int(counts.sum()))
    handle.write(flat.tobytes())
    return counts
