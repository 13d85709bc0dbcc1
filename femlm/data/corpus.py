"""Domain corpora: plain documents, then fixed-length token blocks for pre-training (cached on disk).

`prepare_blocks` follows run_mlm.py's recipe (tokenize each document with the tokenizer's special
tokens, i.e. ``[CLS] doc [SEP]`` for BERT and ``<s> doc </s>`` for RoBERTa, concatenate, cut into
``block_size`` pieces) with three differences, each for a reason:

* train/validation are split by **document** (seeded) before tokenization, so validation text is unseen;
* grouping is one vectorised reshape over the flattened Arrow column instead of Python list concatenation
  per 1,000 documents; only the last partial block of each split is dropped (run_mlm.py drops one per
  1,000 documents);
* the result is saved under ``<cache>/blocks/<domain>-<key>`` where the key hashes everything that
  changes the blocks (sources and their sha256, reader version, the tokenizer's full serialization,
  block size, max_documents, seed, validation fraction), written to a temporary directory and renamed, so
  a second call (or another process) loads it without tokenizing and a killed run leaves no half cache.

Sources are registry corpora (``s2orc:cs``) or local files (``file:<path|dir|glob>``, `femlm.data.local`:
``.txt`` documents separated by blank lines, ``.jsonl`` with a ``"text"`` field); a local file's key part
is its path, size and sha256 (or mtime when large), so editing it rebuilds the blocks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, Features, List, Value, load_from_disk
from transformers import PreTrainedTokenizerBase

from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.documents import READERS
from femlm.data.fetch import resolve_files, sha256_file
from femlm.data.local import describe_sources, is_local_source, local_source_key, read_local_corpus
from femlm.data.registry import ALIASES, REGISTRY, get_entry
from femlm.errors import UserError

log = logging.getLogger(__name__)
# Progress bars only where they help: a split this long takes seconds to tokenize. Below it the bars are
# noise, and noise on stderr before a one-line UserError (a corpus shorter than one block) breaks the CLI's
# one-line error contract.
PROGRESS_DOCUMENTS = 10_000


@contextmanager
def _progress(show: bool) -> Iterator[None]:
    """datasets' progress bars on (as configured) or off for the duration of the block."""
    enabled = datasets.is_progress_bar_enabled()
    if enabled and not show:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled and not show:
            datasets.enable_progress_bars()
BLOCKS_FORMAT = 1  # bump when the block layout changes
READERS_VERSION = 1  # bump when a corpus reader's output changes (invalidates cached blocks)


def _split_source(spec: str) -> tuple[str, str | None]:
    name, _, option = spec.partition(":")
    return name, option or None


def _source_files(spec: str, download: DownloadConfig) -> tuple[str, dict[str, Path]]:
    name, _ = _split_source(spec)
    path_like = "/" in name or name.startswith(("~", ".")) or name.endswith((".txt", ".jsonl", ".gz"))
    if path_like and name not in REGISTRY and name not in ALIASES:
        raise UserError(f"domain source {spec!r} looks like a file path, not a registry corpus; write "
                        f"file:{spec} for local files")
    entry = get_entry(name)
    if entry.format not in READERS:
        raise UserError(f"domain source {spec!r} is a {entry.kind} ({entry.format}), not a corpus; corpus "
                        f"sources are {', '.join(sorted(n for n, e in _corpus_entries()))} or "
                        "file:<path, directory or glob> for local .txt/.jsonl files")
    return entry.format, resolve_files(entry.name, download)


def _read_source(spec: str, download: DownloadConfig) -> list[str]:
    if is_local_source(spec):
        return read_local_corpus(spec)
    fmt, paths = _source_files(spec, download)
    return READERS[fmt](paths, _split_source(spec)[1])


def _corpus_entries() -> list[tuple[str, Any]]:
    return [(n, e) for n, e in REGISTRY.items() if e.format in READERS]


def load_documents(domain: DomainConfig, download: DownloadConfig, seed: int = 0) -> list[str]:
    """The domain's local corpus: every source's documents, exact duplicates removed, in source order;
    with ``domain.max_documents`` a seeded document-level subsample (kept in corpus order)."""
    if not domain.sources:
        raise UserError(f"domain.sources is empty (domain {domain.name}): list registry corpora or "
                        "file:<path or glob>")
    docs: list[str] = []
    for spec in domain.sources:
        docs.extend(_read_source(spec, download))
    # Duplicates (e.g. the same arXiv abstract twice) would straddle the train/validation split.
    docs = [d for d in dict.fromkeys(d.strip() for d in docs) if d]
    if not docs:
        raise UserError(f"domain {domain.name}: sources {describe_sources(list(domain.sources))} hold no "
                        "documents (every document is empty); domain.sources needs at least 2 non-empty documents: add text "
                        "(local .txt: documents separated by blank lines) or other sources")
    if domain.max_documents is not None and len(docs) > domain.max_documents:
        keep = np.sort(np.random.default_rng(seed).choice(len(docs), domain.max_documents, replace=False))
        docs = [docs[i] for i in keep]
    return docs


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of everything that decides token ids: the fast tokenizer's full JSON (vocab, merges,
    normalizer, pre-tokenizer, special-token template) plus its class."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UserError(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; load one with "
                        "femlm.data.tokenizer.load_tokenizer")
    digest = hashlib.sha256(backend.to_str().encode())
    digest.update(type(tokenizer).__name__.encode())
    return digest.hexdigest()


def _cache_key(domain: DomainConfig, tokenizer: PreTrainedTokenizerBase, block_size: int,
               download: DownloadConfig, seed: int) -> dict[str, Any]:
    sources = []
    for spec in domain.sources:
        if is_local_source(spec):
            sources.append([spec, local_source_key(spec)])
            continue
        name, _ = _split_source(spec)
        _, paths = _source_files(spec, download)
        shas = {f.role: f.sha256 or sha256_file(paths[f.role]) for f in get_entry(name).files if f.role in paths}
        sources.append([spec, sorted(shas.items())])
    return {"format": BLOCKS_FORMAT, "readers": READERS_VERSION, "sources": sources,
            "tokenizer": tokenizer_fingerprint(tokenizer), "block_size": block_size,
            "max_documents": domain.max_documents, "seed": seed,
            "validation_fraction": domain.validation_fraction}


def _tokenize(batch: dict[str, list], tokenizer: PreTrainedTokenizerBase) -> dict[str, list]:
    # Special tokens per document, as run_mlm.py; no truncation (verbose=False silences the
    # "longer than the maximum length" warning: documents are cut into blocks afterwards).
    out = tokenizer(batch["text"], add_special_tokens=True, return_attention_mask=False,
                    return_token_type_ids=False, verbose=False)
    return {"input_ids": out["input_ids"]}


def _blocks(tokenized: Dataset, block_size: int) -> tuple[Dataset, int, int]:
    """Concatenate every document's ids and cut into `block_size` rows; return (blocks, tokens, dropped)."""
    column = tokenized.data.column("input_ids")
    flat = pc.list_flatten(column).combine_chunks() if column.num_chunks else pa.array([], pa.int32())
    flat = flat.cast(pa.int32())
    n_blocks = len(flat) // block_size
    kept = flat.slice(0, n_blocks * block_size)
    # A fixed-size list column: datasets reads it as List(Value("int32"), length=block_size) with no cast.
    table = pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(kept, block_size)})
    return Dataset(table), len(flat), len(flat) - n_blocks * block_size


def _split_documents(docs: list[str], fraction: float, seed: int, where: str = "") -> dict[str, list[str]]:
    if len(docs) < 2:
        raise UserError(f"{where}the corpus has {len(docs)} document(s); at least 2 are needed (one for "
                        "validation); add sources or raise domain.max_documents (local .txt files are split "
                        "into documents at blank lines)")
    # A stream separate from load_documents' subsample, so changing max_documents moves few documents.
    order = np.random.default_rng([seed, 1]).permutation(len(docs))
    n_val = min(max(1, round(fraction * len(docs))), len(docs) - 1)
    return {"train": [docs[i] for i in np.sort(order[n_val:])],
            "validation": [docs[i] for i in np.sort(order[:n_val])]}


def _dir_for(key: dict[str, Any], domain: DomainConfig, download: DownloadConfig,
             cache_dir: str | Path | None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    root = Path(cache_dir).expanduser() if cache_dir is not None else download.cache_path()
    return root / "blocks" / f"{domain.name}-{digest}"


def blocks_dir(domain: DomainConfig, tokenizer: PreTrainedTokenizerBase, block_size: int,
               download: DownloadConfig, cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Where `prepare_blocks` caches these blocks (it may not exist yet)."""
    return _dir_for(_cache_key(domain, tokenizer, block_size, download, seed), domain, download, cache_dir)


def prepare_blocks(domain: DomainConfig, tokenizer: PreTrainedTokenizerBase, block_size: int,
                   download: DownloadConfig, cache_dir: str | Path | None = None, num_proc: int = 2,
                   seed: int = 0) -> DatasetDict:
    """DatasetDict(train, validation), column ``input_ids`` of exactly `block_size` int32 ids per row.

    Loaded from ``<cache_dir>/blocks/...`` when present (no reading, no tokenizing); otherwise built
    and saved there. `cache_dir` defaults to the download cache. Checking `block_size` against the
    model's maximum positions is the caller's job.
    """
    if block_size < 2:
        raise UserError(f"block_size={block_size}: must be at least 2")
    key = _cache_key(domain, tokenizer, block_size, download, seed)
    final = _dir_for(key, domain, download, cache_dir)
    if (final / "meta.json").is_file():
        log.info("blocks for domain %s: cached at %s", domain.name, final)
        return load_from_disk(str(final))
    start = time.perf_counter()
    docs = load_documents(domain, download, seed)
    where = f"domain {domain.name} (sources {describe_sources(list(domain.sources))}): "
    parts = _split_documents(docs, domain.validation_fraction, seed, where)
    out: dict[str, Dataset] = {}
    meta: dict[str, Any] = {"key": key, "domain": domain.name, "documents": len(docs)}
    for split, texts in parts.items():
        ds = Dataset.from_dict({"text": texts})
        # One worker per 1,000 documents at most: a process per tiny shard costs more than it saves.
        workers = max(1, min(num_proc, -(-len(texts) // 1000)))
        with _progress(len(texts) >= PROGRESS_DOCUMENTS):
            tokenized = ds.map(_tokenize, batched=True, batch_size=1000,
                               num_proc=workers if workers > 1 else None,
                               remove_columns=["text"], fn_kwargs={"tokenizer": tokenizer},
                               features=Features({"input_ids": List(Value("int32"))}),
                               new_fingerprint=hashlib.sha256(f"{final.name}-{split}".encode()).hexdigest()[:16],
                               desc=f"tokenizing {domain.name}/{split}")
        blocks, tokens, dropped = _blocks(tokenized, block_size)
        out[split] = blocks
        meta[split] = {"documents": len(texts), "tokens": tokens, "blocks": len(blocks), "dropped": dropped}
    total = sum(meta[split]["tokens"] for split in parts)
    if total < block_size:
        raise UserError(f"{where}the corpus has {total} tokens in {len(docs)} documents, shorter than one "
                        f"block of {block_size} tokens; add documents or lower block_size")
    for split in parts:
        if meta[split]["blocks"] == 0:
            raise UserError(f"{where}the {split} split has {meta[split]['documents']} documents and "
                            f"{meta[split]['tokens']} "
                            f"tokens, shorter than one block of {block_size}; add documents (domain."
                            "max_documents / sources), lower block_size or raise domain.validation_fraction")
    meta["seconds"] = round(time.perf_counter() - start, 3)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with _progress(len(docs) >= PROGRESS_DOCUMENTS):
        DatasetDict(out).save_to_disk(str(tmp))
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    try:
        os.rename(tmp, final)
    except OSError:  # another process finished the same blocks first: theirs are identical
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("blocks for domain %s: %s", domain.name, {k: meta[k] for k in ("train", "validation")})
    return load_from_disk(str(final))


def blocks_meta(path: str | Path) -> dict[str, Any]:
    """The meta.json of a cached blocks directory (documents, tokens, blocks per split, key, seconds)."""
    return json.loads((Path(path) / "meta.json").read_text())
