"""The registry's data: one `DatasetEntry` per dataset, corpus and tokenizer (catalog.yaml); its files are the
rows of files.csv with its name.

``files.csv`` (package data) lists every file: the dataset and role it belongs to, its relative ``path`` (the
layout of a local mirror such as ``shared/data``, and of the download cache), the ``url`` whose bytes match its
``sha256`` (for mirrored files: the public GitHub blob at the pinned commit it was copied from, so a download
can be verified), its size, and, for archives, the ``member`` to extract. The checksums are the mirror
manifest's (``shared/data/MANIFEST.md``): hard-coding them is the point of a checksum. A `DatasetEntry`
records the canonical source the paper used (``source``; e.g. DAPT's S3 jsonl), which is not always
byte-identical to the pinned copy; see ``notes``. Adding a dataset is one entry in catalog.yaml and its rows in
files.csv. Look entries up through `femlm.data.registry`.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, field
from importlib import resources

from femlm.errors import UserError


@dataclass(frozen=True)
class FileEntry:
    dataset: str
    role: str  # a split name (train, dev, test, dev_matched, ...) or a part (articles, classes, vocab, ...)
    path: str  # relative to the mirror root and to the cache root
    url: str | None  # where these exact bytes come from; None: not downloadable
    sha256: str | None = None  # None: unknown (not mirrored), used unverified
    size: int | None = None
    member: str | None = None  # path inside the archive at `url` (.zip, .tgz)
    optional: bool = False  # the dataset works without it (e.g. AG's train CSV)


@functools.cache
def _file_table() -> dict[str, tuple[FileEntry, ...]]:
    rows: dict[str, list[FileEntry]] = {}
    with resources.files("femlm.data").joinpath("files.csv").open(encoding="utf-8", newline="") as handle:
        for r in csv.DictReader(handle):
            rows.setdefault(r["dataset"], []).append(FileEntry(
                r["dataset"], r["role"], r["path"], r["url"] or None, r["sha256"] or None,
                int(r["size"]) if r["size"] else None, r["member"] or None, r["optional"] == "yes"))
    return {name: tuple(files) for name, files in rows.items()}


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    group: str  # dapt | glue | corpora | tokenizers
    kind: str  # task | corpus | tokenizer
    title: str
    source: str  # canonical source the paper used
    format: str  # reader key, see femlm.data.readers / femlm.data.documents
    text_fields: tuple[str, ...] = ()
    labels: tuple[str, ...] | None = None  # label strings as they appear in the files, in index order
    sizes: dict[str, int] = field(default_factory=dict)  # expected examples per split (as loaded)
    notes: str = ""
    files: tuple[FileEntry, ...] = ()  # its rows of files.csv

    def file(self, role: str) -> FileEntry:
        for entry in self.files:
            if entry.role == role:
                return entry
        raise UserError(f"dataset {self.name} has no file for {role!r}: it has "
                        f"{', '.join(f.role for f in self.files)}")


@functools.cache
def load_catalog() -> dict[str, DatasetEntry]:
    """Every entry of catalog.yaml, by name, in file order."""
    import yaml

    text = resources.files("femlm.data").joinpath("catalog.yaml").read_text(encoding="utf-8")
    out = {}
    for name, d in yaml.safe_load(text).items():
        out[name] = DatasetEntry(name, d["group"], d["kind"], d["title"], d["source"], d["format"],
                                 tuple(d.get("text_fields", ())), tuple(d["labels"]) if "labels" in d else None,
                                 dict(d.get("sizes", {})), d.get("notes", ""), _file_table().get(name, ()))
    return out
