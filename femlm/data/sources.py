"""Corpus sources of every kind, cut into *units* of work read the same way in any process.

A ``domain.sources`` entry is one of

* a registry corpus, optionally with a reader option: ``s2orc:cs``, ``csabstruct``, ``realnews`` (the offline
  mirror's samples of the paper's corpora: *stand-ins*, see `femlm.data.plan`);
* ``file:<path|dir|glob>``: local ``.txt`` / ``.jsonl`` (``.gz`` too) / ``.parquet`` files of any size
  (`femlm.data.local`, `femlm.data.streams`);
* ``hf:<dataset>[?options]``: a Hugging Face dataset, streamed (`femlm.data.hub`).

`plan_units` lists the units of all sources in a fixed *canonical order* (sources in the order given, files
sorted, pieces and shards in order). Preparation reads units in parallel but assembles their results in this
order, so what a corpus holds never depends on how many processes read it or which finished first. A unit is
a small frozen dataclass: it travels to worker processes, which open the file or dataset themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from femlm.data import hub
from femlm.data.config import DownloadConfig
from femlm.data.documents import READERS
from femlm.data.fetch import resolve_files, sha256_file
from femlm.data.local import is_local_source, local_corpus_files, local_source_key
from femlm.data.registry import ALIASES, REGISTRY, get_entry
from femlm.data.streams import pieces, read_piece
from femlm.errors import UserError

REGISTRY_BATCH = 1000  # documents of a registry corpus handed on at a time


@dataclass(frozen=True)
class Unit:
    source: int  # index into the sources planned (domain.all_sources: sources, then validation_sources)
    spec: str  # the source as written (messages)
    kind: str  # registry | file | hf
    path: str = ""  # the file (kind file)
    part: int = 0  # parquet row group / jsonl piece / hf shard
    start: int = 0  # byte range of a jsonl piece
    stop: int = -1
    rows: int | None = None  # rows known before reading (progress); None: unknown
    nbytes: int = 0


def split_source(spec: str) -> tuple[str, str | None]:
    name, _, option = spec.partition(":")
    return name, option or None


def kind_of(spec: str) -> str:
    if is_local_source(spec):
        return "file"
    return "hf" if hub.is_hub_source(spec) else "registry"


def _corpus_names() -> list[str]:
    return sorted(n for n, e in REGISTRY.items() if e.format in READERS)


def registry_files(spec: str, download: DownloadConfig) -> tuple[str, dict[str, Path]]:
    """(reader format, files by role) of a registry corpus source; UserError for non-corpora and paths."""
    name, _ = split_source(spec)
    path_like = "/" in name or name.startswith(("~", ".")) or name.endswith((".txt", ".jsonl", ".gz", ".parquet"))
    if path_like and name not in REGISTRY and name not in ALIASES:
        raise UserError(f"domain source {spec!r} looks like a file path, not a registry corpus; write "
                        f"file:{spec} for local files, or hf:{spec} for a dataset directory in Hub layout")
    entry = get_entry(name)
    if entry.format not in READERS:
        raise UserError(f"domain source {spec!r} is a {entry.kind} ({entry.format}), not a corpus; corpus "
                        f"sources are {', '.join(_corpus_names())}, file:<path, directory or glob> for local "
                        ".txt/.jsonl/.parquet files, or hf:<owner>/<name>[?...] for a Hugging Face dataset")
    return entry.format, resolve_files(entry.name, download)


def read_registry(spec: str, download: DownloadConfig) -> list[str]:
    fmt, paths = registry_files(spec, download)
    return READERS[fmt](paths, split_source(spec)[1])


def hf_cache(download: DownloadConfig) -> Path:
    """Where non-streaming hf: sources are downloaded and converted (inside femlm's cache)."""
    return download.cache_path() / "hf"


def plan_units(sources: list[str], download: DownloadConfig) -> list[Unit]:
    """Every unit of every source, in canonical order (opens Hub datasets to count their shards)."""
    units: list[Unit] = []
    for index, spec in enumerate(sources):
        kind = kind_of(spec)
        if kind == "registry":
            registry_files(spec, download)  # fail early: unknown name, not a corpus, file missing
            units.append(Unit(index, spec, "registry"))
        elif kind == "file":
            for path in local_corpus_files(spec):
                for piece in pieces(path):
                    units.append(Unit(index, spec, "file", str(path), piece["part"], piece["start"], piece["stop"],
                                      piece["rows"], piece["nbytes"]))
        else:
            h = hub.parse_hub(spec)
            shards = hub.shard_count(h, hf_cache(download))
            declared = hub.declared_rows(h)  # the card's split size: progress only (shards are not equal)
            for shard in range(shards):
                units.append(Unit(index, spec, "hf", h.path, shard, rows=declared // shards if declared else None))
    return units


def read_unit(unit: Unit, download: DownloadConfig) -> Iterator[tuple[list[str], int]]:
    """Batches of (raw documents, rows read) of one unit; documents are not stripped nor deduplicated."""
    if unit.kind == "registry":
        docs = read_registry(unit.spec, download)
        for start in range(0, len(docs), REGISTRY_BATCH):  # a Wikipedia split is one unit: tokenize it in batches
            batch = docs[start:start + REGISTRY_BATCH]
            yield batch, len(batch)
    elif unit.kind == "file":
        for batch in read_piece(Path(unit.path), unit.part, unit.start, unit.stop):
            yield batch, len(batch)
    else:
        yield from hub.read_shard(hub.parse_hub(unit.spec), unit.part, hf_cache(download))


def iter_documents(sources: list[str], download: DownloadConfig) -> Iterator[tuple[int, str]]:
    """(source index, stripped non-empty document) of every source in canonical order, in this process."""
    for unit in plan_units(sources, download):
        for docs, _ in read_unit(unit, download):
            for doc in docs:
                doc = (doc or "").strip()
                if doc:
                    yield unit.source, doc


def source_key(spec: str, download: DownloadConfig) -> Any:
    """What the corpus cache key holds for a source: whatever changes its documents."""
    kind = kind_of(spec)
    if kind == "file":
        return [spec, local_source_key(spec)]
    if kind == "hf":
        return [spec, hub.hub_key(hub.parse_hub(spec), hf_cache(download))]
    name, _ = split_source(spec)
    _, paths = registry_files(spec, download)
    shas = {f.role: f.sha256 or sha256_file(paths[f.role]) for f in get_entry(name).files if f.role in paths}
    return [spec, sorted(shas.items())]


def check_sources(domain: Any, download: DownloadConfig) -> None:
    """Every source of a domain exists or is reachable: the first check of any command that reads a corpus, so
    an unreachable Hub corpus is one line before any model is loaded."""
    for spec in domain.all_sources:
        check_source(spec, domain.name, download)


def check_source(spec: str, domain: str = "", download: DownloadConfig | None = None) -> None:
    """Cheap validation of a source's syntax (and, for hf:, that it can be reached, or was when a corpus was
    prepared from it: `hub.remembered_commit`); no reading."""
    if kind_of(spec) == "hf":
        h = hub.parse_hub(spec)
        if h.local or download is None or hub.remembered_commit(h, hf_cache(download)) is None:
            hub.check_available(h, domain)
    elif kind_of(spec) == "file":
        local_corpus_files(spec)
