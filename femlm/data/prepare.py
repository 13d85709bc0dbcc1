"""Prepare a domain corpus at any size: read, deduplicate, sample, split, tokenize in parallel, write token
files that training memory-maps (`femlm.data.tokens`).

Pipeline (`prepare_corpus`):

1. `femlm.data.sources.plan_units` cuts every source into units (files' pieces, Hub shards) in canonical order.
2. With ``domain.max_documents``, a *scan* pass hashes every document (8 bytes each are all the parent keeps)
   and picks the sample (`femlm.data.sample`: uniform, seeded, independent of workers and order); units
   without a sampled document are not read again.
3. A *tokenize* pass: workers tokenize their units' documents (all, or the sampled ones) into one token file
   per unit and return each document's hash and length.
4. The parent walks the units in canonical order, keeps each distinct document's first occurrence, assigns
   it to train or validation by hash, and appends its tokens to ``train.bin`` / ``validation.bin``.
5. ``meta.json`` is written last, in a temporary directory renamed into place: a reader never sees half a
   corpus, and two processes preparing the same corpus at once both end with the same complete directory.

A stop request (SIGTERM, SIGUSR1/2, Ctrl-C: femlm.stop) is polled by the parent: per batch of documents when it
tokenizes itself, every quarter second while workers run (it then kills them: they ignore the signals, which a
cluster sends to every process of the job), and per unit while it assembles the split files. The temporary
directory is removed, nothing reaches the cache, and the same command run again prepares the corpus; corpora
already prepared stay in the cache.

Compared with run_mlm.py's ``datasets.map(tokenize) + group_texts`` (benchmarks/bench_corpus.py): no Arrow
round-trip of the tokenized documents, no per-1,000-document Python list concatenation, ids written as
uint16, and ``encode_batch_fast`` (no offsets). Under ``torchrun`` one process per node prepares and the others
wait on the file system (`prepare_shared`), never in a collective that would time out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from queue import Empty
from typing import Any

import numpy as np

from femlm.data import sample, workers
from femlm.data.config import DomainConfig, DownloadConfig
from femlm.data.local import describe_sources
from femlm.data.plan import is_stand_in, stand_in_note
from femlm.data.progress import Progress
from femlm.data.sources import Unit, plan_units, source_key
from femlm.data.tokens import STORAGE_FORMAT, PreparedCorpus, corpus_fingerprints, is_prepared, token_dtype
from femlm.errors import UserError
from femlm.stop import StopRequested, check, requested

log = logging.getLogger(__name__)
READERS_VERSION = 1  # bump when a corpus reader's output changes (invalidates prepared corpora)
MIN_PARALLEL_BYTES = 16 * 2**20  # below this (and without hf: sources) workers cost more than they save
PROGRESS_ROWS = 10_000  # show the bar from this many rows on (below it the bar is noise before an error)
COPY_TOKENS = 16 * 2**20  # tokens copied per step when assembling the split files


def _backend(tokenizer: Any) -> Any:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UserError(f"tokenizer {type(tokenizer).__name__} is not a fast tokenizer; load one with "
                        "femlm.data.tokenizer.load_tokenizer")
    return backend


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of everything that decides token ids: the fast tokenizer's full JSON plus its class."""
    digest = hashlib.sha256(_backend(tokenizer).to_str().encode())
    digest.update(type(tokenizer).__name__.encode())
    return digest.hexdigest()


def splitting_fingerprint(tokenizer: Any) -> str:
    """A hash of the fast tokenizer's full JSON alone (normaliser, pre-tokeniser, model, vocabulary, special
    tokens): equal for the same tokenizer loaded as another class. transformers loads a ModernBERT checkpoint's
    tokenizer as its generic class whatever tokenizer_config.json names (its MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
    in 5.x), so a checkpoint saved with a BERT WordPiece vocabulary comes back as another class with the same ids."""
    return hashlib.sha256(_backend(tokenizer).to_str().encode()).hexdigest()


def corpus_key(domain: DomainConfig, tokenizer: Any, block_size: int, download: DownloadConfig,
               seed: int) -> dict[str, Any]:
    """Everything that changes the prepared corpus (resolving Hub sources to their commit)."""
    key = {"storage": STORAGE_FORMAT, "readers": READERS_VERSION,
           "sources": [source_key(spec, download) for spec in domain.sources],
           "tokenizer": tokenizer_fingerprint(tokenizer), "block_size": block_size,
           "max_documents": domain.max_documents, "seed": seed, "validation_fraction": domain.validation_fraction}
    if domain.validation_sources:  # only then: the keys (and cache directories) of other corpora stay as they were
        key.update(validation_sources=[source_key(spec, download) for spec in domain.validation_sources],
                   validation_fraction=None)
    return key


def corpus_dir(key: dict[str, Any], domain: DomainConfig, download: DownloadConfig,
               cache_dir: str | Path | None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    root = Path(cache_dir).expanduser() if cache_dir is not None else download.cache_path()
    return root / "blocks" / f"{domain.name}-{digest}"


def _where(domain: DomainConfig) -> str:
    return f"domain {domain.name} (sources {describe_sources(domain.all_sources)}): "


def no_documents(domain: DomainConfig) -> UserError:
    return UserError(f"domain {domain.name}: sources {describe_sources(list(domain.sources))} hold no documents "
                     "(every document is empty); domain.sources needs at least 2 non-empty documents: add text "
                     "(local .txt: documents separated by blank lines) or other sources")


def too_few_documents(domain: DomainConfig, n: int) -> UserError:
    return UserError(f"{_where(domain)}the corpus has {n} document(s); at least 2 are needed (one for validation); "
                     "add sources or raise domain.max_documents (local .txt files are split into documents at "
                     "blank lines)")


def sample_too_large(domain: DomainConfig, distinct: int) -> UserError:
    paper = f" (the paper's sample is {domain.paper_documents:,})" if domain.paper_documents else ""
    return UserError(f"{_where(domain)}domain.max_documents={domain.max_documents:,} exceeds the corpus's "
                     f"{distinct:,} distinct documents{paper}; lower it, add sources, or set it to null for every "
                     "document")


# ---------------------------------------------------------------------------------------------- workers
def _worker_count(units: list[Unit], num_proc: int) -> int:
    if num_proc <= 1 or len(units) <= 1:
        return 1
    if all(u.kind != "hf" for u in units) and sum(u.nbytes for u in units) < MIN_PARALLEL_BYTES:
        return 1
    return min(num_proc, len(units))


def _run_units(job: workers.Job, units: list[Unit], n_workers: int, progress: Progress) -> list[workers.UnitResult]:
    """Every unit through `workers.run_unit`, in `n_workers` spawned processes (1: here); results in order."""
    results: list[Any] = [None] * len(units)
    where = f"data preparation ({job.mode})"
    if n_workers <= 1:
        def report(rows: int, docs: int, tokens: int) -> None:  # after each batch of documents
            progress.update(rows, docs, tokens)
            check(where)

        workers.init_worker(job, report=report, in_process=True)
        for i, unit in enumerate(units):
            results[i] = workers.run_unit(i, unit)
            progress.unit_done(i, results[i].rows)
        return results
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    pool = ProcessPoolExecutor(n_workers, mp_context=ctx, initializer=workers.init_worker, initargs=(job, queue))
    futures = {pool.submit(workers.run_unit, i, unit): i for i, unit in enumerate(units)}
    pending = set(futures)
    try:
        while pending:
            check(where)
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            _drain(queue, progress)
            for future in done:
                i = futures[future]
                results[i] = future.result()  # a worker's UserError is re-raised here, as one line
                progress.unit_done(i, results[i].rows)
        _drain(queue, progress)
    except BaseException as err:
        running = list((getattr(pool, "_processes", None) or {}).values())  # shutdown() forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in running:  # stop units already running, now (SIGKILL: workers ignore the stop signals)
            process.kill()
        for process in running:  # gone before the caller removes the directory they write into
            process.join(timeout=10)
        if requested() is not None and not isinstance(err, StopRequested):
            # a worker killed by the same signal before it could ignore it (while it started): still a stop
            raise StopRequested(f"stopped during {where}") from err
        raise
    pool.shutdown()
    return results


def _drain(queue: Any, progress: Progress) -> None:
    while True:
        try:
            progress.update(*queue.get_nowait())
        except Empty:
            return


# ---------------------------------------------------------------------------------------------- prepare
def prepare_corpus(domain: DomainConfig, tokenizer: Any, block_size: int, download: DownloadConfig,
                   cache_dir: str | Path | None = None, num_proc: int = 2, seed: int = 0,
                   progress: bool | None = None) -> PreparedCorpus:
    """The domain's prepared corpus: loaded when cached, else built (see the module docstring).

    `progress`: None shows the bar for corpora of `PROGRESS_ROWS` rows and more (and only on stderr)."""
    if block_size < 2:
        raise UserError(f"block_size={block_size}: must be at least 2")
    if not domain.sources:
        raise UserError(f"domain.sources is empty (domain {domain.name}): list registry corpora, file:<path or "
                        "glob> or hf:<dataset>")
    key = corpus_key(domain, tokenizer, block_size, download, seed)
    final = corpus_dir(key, domain, download, cache_dir)
    if is_prepared(final):
        log.info("corpus for domain %s: prepared at %s", domain.name, final)
        return PreparedCorpus(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        meta = _build(domain, tokenizer, block_size, download, seed, num_proc, progress, tmp)
        meta.update(key=key, path=str(final))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished the same corpus first: theirs is identical
            if not is_prepared(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("blocks for domain %s: %s", domain.name, {k: meta[k] for k in ("train", "validation")})
    return PreparedCorpus(final)


def _build(domain: DomainConfig, tokenizer: Any, block_size: int, download: DownloadConfig, seed: int,
           num_proc: int, progress: bool | None, tmp: Path) -> dict[str, Any]:
    start = time.perf_counter()
    units = plan_units(domain.all_sources, download)
    n_workers = _worker_count(units, num_proc)
    expected = sum(u.rows or (u.nbytes // 2000) for u in units)
    show = progress if progress is not None else expected >= PROGRESS_ROWS or any(u.kind == "hf" for u in units)
    vocab = tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = token_dtype(vocab)
    job = workers.Job("tokenize", download, str(tmp), tokenizer.backend_tokenizer.to_str(), dtype.name)
    rows: list[int | None] | None = None
    sampled: dict[str, Any] | None = None
    if domain.max_documents is not None:
        bar = Progress(f"scanning {domain.name}", units, bool(show))
        try:
            scan = _run_units(workers.Job("scan", download), units, n_workers, bar)
        finally:
            bar.close()
        _check_sources(domain, scan)
        distinct, held_out = _sample_pool(domain, scan)
        if domain.max_documents > len(distinct):
            raise sample_too_large(domain, len(distinct))
        keep = np.union1d(sample.sample_hashes(distinct, domain.max_documents, seed), held_out)
        np.save(tmp / "keep.npy", keep)
        job = workers.Job("tokenize", download, str(tmp), job.tokenizer_json, dtype.name, str(tmp / "keep.npy"))
        needed = [i for i, r in enumerate(scan) if sample.member(r.hashes, keep).any()]
        units, rows = [units[i] for i in needed], [scan[i].rows for i in needed]
        sampled = {"max_documents": domain.max_documents, "distinct_documents": int(len(distinct)),
                   "rows_read": int(sum(r.rows for r in scan)), "seed": seed}
    bar = Progress(f"tokenizing {domain.name}", units, bool(show), rows)
    try:
        results = _run_units(job, units, n_workers, bar)
    finally:
        bar.close()
    if sampled is None:
        _check_sources(domain, results)
    meta = _assemble(domain, results, tmp, block_size, dtype, seed)
    elapsed = time.perf_counter() - start
    tokens = meta["train"]["tokens"] + meta["validation"]["tokens"]
    if domain.validation_sources:
        meta.update(validation_sources=list(domain.validation_sources))
    meta.update(storage=STORAGE_FORMAT, domain=domain.name, dtype=dtype.name, block_size=block_size,
                vocab_size=vocab, sources=list(domain.sources), sample=sampled, workers=n_workers,
                rows_read=int(sum(r.rows for r in results)), seconds=round(elapsed, 3),
                tokens_per_s=round(tokens / max(elapsed, 1e-9), 1), stand_in=is_stand_in(list(domain.sources)),
                stand_in_note=stand_in_note(domain, meta["documents"]))
    meta["sha256"] = corpus_fingerprints({}, tmp)  # the same whatever the workers (tests/test_determinism.py)
    return meta


def _sample_pool(domain: DomainConfig, scan: list[workers.UnitResult]) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct documents `max_documents` samples from, the held-out documents every sample keeps): every
    document, and none, unless the domain has `validation_sources`: then its training documents, and every
    held-out document that is not also a training one."""
    hashes = np.concatenate([r.hashes for r in scan]) if scan else np.empty(0, np.uint64)
    if not domain.validation_sources:
        return hashes[sample.first_occurrence(hashes)], np.empty(0, np.uint64)
    held = _held_out_mask(domain, scan)
    train = np.unique(hashes[~held])
    return train, np.setdiff1d(hashes[held], train)


def _held_out_mask(domain: DomainConfig, results: list[workers.UnitResult]) -> np.ndarray:
    """Per document of `results` (in order): read from one of `validation_sources`."""
    n_train = len(domain.sources)
    parts = [np.full(len(r.hashes), r.source >= n_train) for r in results]
    return np.concatenate(parts) if parts else np.empty(0, bool)


def _check_sources(domain: DomainConfig, results: list[workers.UnitResult]) -> None:
    """An hf: source whose filter kept nothing is an error (a typo in a filter would otherwise go unnoticed);
    so is a corpus without any document."""
    from femlm.data import hub
    from femlm.data.sources import kind_of

    sources = domain.all_sources
    kept = [0] * len(sources)
    rows = [0] * len(sources)
    for r in results:
        kept[r.source] += r.nonempty
        rows[r.source] += r.rows
    for i, spec in enumerate(sources):
        if kind_of(spec) == "hf" and kept[i] == 0:
            h = hub.parse_hub(spec)
            what = f"the filter {' and '.join(map(str, h.filters))} kept none" if h.filters else "no document in any"
            raise UserError(f"domain source {spec!r}: {what} of its {rows[i]:,} rows; check the filter's field and "
                            "value (values are compared as text; ~= matches a substring)")
    if not sum(kept):
        raise no_documents(domain)


def _assemble(domain: DomainConfig, results: list[workers.UnitResult], tmp: Path, block_size: int,
              dtype: np.dtype, seed: int) -> dict[str, Any]:
    """train.bin / validation.bin from the units' token files, in canonical order; counts per split."""
    hashes = np.concatenate([r.hashes for r in results]) if results else np.empty(0, np.uint64)
    first = sample.first_occurrence(hashes)
    distinct = hashes[first]
    if len(distinct) < 2:
        raise too_few_documents(domain, len(distinct))
    if domain.validation_sources:  # the corpus's own split: by source
        is_val = _held_out_mask(domain, results) & first
    else:
        is_val = sample.member(hashes, sample.validation_hashes(distinct, domain.validation_fraction, seed)) & first
    is_train = first & ~is_val
    counts = {s: {"documents": 0, "tokens": 0} for s in ("train", "validation")}
    offset = 0
    with open(tmp / "train.bin", "wb") as train, open(tmp / "validation.bin", "wb") as val:
        for r in results:
            check("data preparation (writing the split files)")
            n = len(r.hashes)
            path = workers.unit_file(tmp, r.index)
            masks = {"train": is_train[offset:offset + n], "validation": is_val[offset:offset + n]}
            if n:
                written = _copy_unit(path, dtype, r.lengths, masks, {"train": train, "validation": val})
                for split in counts:
                    counts[split]["documents"] += int(masks[split].sum())
                    counts[split]["tokens"] += written[split]
            path.unlink(missing_ok=True)
            offset += n
    total = counts["train"]["tokens"] + counts["validation"]["tokens"]
    if total < block_size:
        raise UserError(f"{_where(domain)}the corpus has {total} tokens in {len(distinct)} documents, shorter than "
                        f"one block of {block_size} tokens; add documents or lower block_size")
    for split, c in counts.items():
        c["blocks"], c["dropped"] = c["tokens"] // block_size, c["tokens"] % block_size
        if c["blocks"] == 0:
            raise UserError(f"{_where(domain)}the {split} split has {c['documents']} documents and {c['tokens']} "
                            f"tokens, shorter than one block of {block_size}; add documents (domain.max_documents /"
                            " sources), lower block_size or raise domain.validation_fraction")
    return {"documents": int(len(distinct)), "duplicates": int(len(hashes) - len(distinct)), **counts}


def _copy_unit(path: Path, dtype: np.dtype, lengths: np.ndarray, masks: dict[str, np.ndarray],
               handles: dict[str, Any]) -> dict[str, int]:
    """Append the tokens of each split's documents of one unit file, a bounded chunk of documents at a time
    (a unit can be a whole multi-GB .txt.gz file: it is memory-mapped, never read whole)."""
    written = dict.fromkeys(masks, 0)
    total = int(lengths.sum())
    if not total:
        return written
    tokens = np.memmap(path, dtype=dtype, mode="r", shape=(total,))
    ends = np.cumsum(lengths)
    first = 0
    while first < len(lengths):
        check("data preparation (writing the split files)")
        start = int(ends[first - 1]) if first else 0
        last = int(np.searchsorted(ends, start + COPY_TOKENS, side="right"))
        last = max(last, first + 1)
        chunk = np.asarray(tokens[start:int(ends[last - 1])])
        for split, mask in masks.items():
            picked = chunk[np.repeat(mask[first:last], lengths[first:last])]
            picked.tofile(handles[split])
            written[split] += len(picked)
        first = last
    del tokens
    return written
