"""Bring-your-own data: local corpus files as domain sources, local directories as tasks (no registry entry).

**Corpus sources.** A ``domain.sources`` entry ``file:<path>`` reads local files; it mixes freely with
registry names (``domain.sources=[file:/data/my_corpus/*.txt,arxiv_cs]``). ``<path>`` is a file, a
directory (its ``.txt``/``.jsonl``/``.txt.gz``/``.jsonl.gz`` files, not recursive) or a glob (``*``, ``?``,
``[...]``; ``**`` recurses), with ``~`` expanded and relative paths taken from the working directory.
Matches are read in sorted order; directories a glob matches are skipped. Formats, by extension:

* ``.txt`` (``.txt.gz``): documents are separated by one or more blank (or whitespace-only) lines; the
  lines of a document are joined with a newline. A file with no blank line is ONE document (a warning is
  logged when such a file has several lines): for one document per line, put a blank line between them.
* ``.jsonl`` (``.jsonl.gz``): one JSON object per line with a string ``"text"`` (other keys ignored, blank
  lines skipped, ``"text": null`` is an empty document).
* ``.parquet``: a string column ``text`` (other columns ignored; for another column, or a filter, read the
  directory as an ``hf:`` source: ``hf:/data/corpus?text=body``).

Files of any size are read piece by piece (`femlm.data.streams`: parquet row groups, 64 MiB ranges of plain
``.jsonl``), so preparation never holds a whole file and several processes share one large file.

Files are UTF-8 (a byte-order mark is dropped). Empty documents and exact duplicates are dropped as for
every source. The block cache key holds, per file, its absolute path, size and sha256 (files up to
`HASH_LIMIT` bytes per source in all) or mtime (beyond), so editing, adding or removing a file rebuilds the
blocks.

**Tasks.** ``task.dataset`` that is a path (absolute, or starting with ``./``, ``../`` or ``~``, or holding
a ``/``) names a local directory with ``train`` and ``dev`` files and optionally ``test``, each one of
``<split>.jsonl`` (one object per line: the ``task.text_fields`` keys, e.g. ``text``, or ``sentence1`` and
``sentence2`` for pairs, plus ``label``), ``<split>.tsv`` or ``<split>.csv`` (a header row naming the text
fields and ``label``; standard CSV quoting). Labels are mapped through ``task.labels`` (JSON numbers are
compared as their text, e.g. ``1`` -> ``"1"``); with ``task.labels: null`` (regression) they are floats.
Nothing is downloaded or checksummed; `local_task_notes` records the directory and each file's sha256.
(Hydra needs quotes around a value starting with ``~``: ``'task.dataset="~/data/mytask"'``.)
"""

from __future__ import annotations

import csv
import glob
import gzip
import json
import logging
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from femlm.data.config import TaskConfig
from femlm.data.fetch import sha256_file
from femlm.data.readers import Rows, iter_jsonl
from femlm.data.registry import ALIASES, REGISTRY
from femlm.errors import UserError

log = logging.getLogger(__name__)
LOCAL_PREFIX = "file:"
LOCAL_READER_VERSION = 1  # bump when the local readers' output changes (invalidates cached blocks)
HASH_LIMIT = 32 * 2**20  # a source's files are keyed by sha256 up to this many bytes in all, the rest by mtime
CORPUS_SUFFIXES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz", ".parquet")
TASK_SPLITS = ("train", "dev", "test")  # train and dev are required
TASK_SUFFIXES = (".jsonl", ".tsv", ".csv")


@contextmanager
def _reading(path: Path) -> Iterator[TextIO]:
    """`path` opened as UTF-8 text (gzip when it ends in .gz); decoding and gzip errors as UserError."""
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:
            yield handle
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text ({err.reason}); save it as UTF-8") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise UserError(f"{path}: not a valid gzip file ({err})") from None
    except OSError as err:
        raise UserError(f"{path}: cannot be read ({err.strerror or err})") from None


def _keys(obj: dict) -> str:
    keys = sorted(map(str, obj))
    return str(keys[:10])[:-1] + (", ...]" if len(keys) > 10 else "]")


# --- corpus sources -----------------------------------------------------------------------------------

def is_local_source(spec: str) -> bool:
    return spec.startswith(LOCAL_PREFIX)


def local_corpus_files(spec: str) -> list[Path]:
    """The readable files a ``file:`` source names (absolute, sorted); UserError naming the pattern/file."""
    raw = spec[len(LOCAL_PREFIX):].strip()
    if not raw:
        raise UserError(f"domain source {spec!r}: give a file, directory or glob after file:, "
                        "e.g. file:/data/my_corpus/*.txt")
    pattern = os.path.expanduser(raw)
    if glob.has_magic(pattern):
        matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))]
        files = [p for p in matches if not p.is_dir()]
        if not files:
            what = f"only directories ({len(matches)})" if matches else "nothing"
            raise UserError(f"domain source {spec!r}: the pattern {pattern} matches {what}; expected "
                            f"{', '.join(CORPUS_SUFFIXES)} files")
    else:
        path = Path(pattern)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.name.endswith(CORPUS_SUFFIXES) and not p.is_dir())
            if not files:
                raise UserError(f"domain source {spec!r}: the directory {path} holds no "
                                f"{', '.join(CORPUS_SUFFIXES)} files")
        elif path.exists() or path.is_symlink():
            files = [path]
        else:
            raise UserError(f"domain source {spec!r}: {path} does not exist")
    out = []
    for path in files:
        path = path.absolute()
        if not path.name.endswith(CORPUS_SUFFIXES):
            raise UserError(f"{path} (domain source {spec!r}): unsupported file type; local corpus files end "
                            f"in {', '.join(CORPUS_SUFFIXES)} (narrow the pattern to leave others out)")
        if not path.is_file():
            raise UserError(f"{path} (domain source {spec!r}): not a readable file (a broken link or a "
                            "special file)")
        if not os.access(path, os.R_OK):
            raise UserError(f"{path} (domain source {spec!r}): not readable (permission denied)")
        out.append(path)
    return out


def local_source_key(spec: str) -> dict[str, Any]:
    """What the block cache key holds for a ``file:`` source: each file's path, size and sha256 or mtime.

    Files are hashed while the source's hashed bytes stay within `HASH_LIMIT`; the rest are keyed by mtime, so
    starting a run on a prepared multi-GB corpus of many small files costs stats, not a read of every file."""
    files = []
    hashed = 0
    for path in local_corpus_files(spec):
        try:
            size = path.stat().st_size
            if hashed + size <= HASH_LIMIT:
                stamp: dict[str, Any] = {"sha256": sha256_file(path)}
                hashed += size
            else:
                stamp = {"mtime_ns": path.stat().st_mtime_ns}
        except OSError as err:
            raise UserError(f"{path} (domain source {spec!r}): cannot be read ({err.strerror or err})") from None
        files.append({"path": str(path), "bytes": size, **stamp})
    return {"reader": LOCAL_READER_VERSION, "files": files}


def describe_sources(sources: list[str]) -> str:
    """The sources for an error message, each ``file:`` source with the files it matched."""
    out = []
    for spec in sources:
        if not is_local_source(spec):
            out.append(spec)
            continue
        try:
            names = [p.name for p in local_corpus_files(spec)]
        except UserError:
            names = []
        shown = ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
        out.append(f"{spec} ({shown})" if names else spec)
    return "[" + ", ".join(out) + "]"


# --- tasks --------------------------------------------------------------------------------------------

def is_local_task(dataset: str) -> bool:
    """True when ``task.dataset`` is a path (not a registry name): starts with /, ./, ../ or ~, or holds /."""
    if dataset in REGISTRY or dataset in ALIASES:
        return False
    return dataset.startswith(("./", "../", "~")) or "/" in dataset or dataset in (".", "..")


def local_task_files(task: TaskConfig) -> dict[str, Path]:
    """``{split: file}`` of a local task directory (train and dev required, test optional)."""
    root = Path(task.dataset).expanduser().absolute()
    where = f"task.dataset={task.dataset!r} (task {task.name})"
    expected = " and ".join(f"{s}.jsonl (or .tsv/.csv)" for s in TASK_SPLITS[:2]) + ", optionally test.jsonl"
    if not root.exists():
        raise UserError(f"{where}: the local task directory {root} does not exist; it must hold {expected}")
    if not root.is_dir():
        raise UserError(f"{where}: {root} is not a directory; it must be a directory holding {expected}")
    found: dict[str, Path] = {}
    for split in TASK_SPLITS:
        candidates = [root / f"{split}{ext}" for ext in TASK_SUFFIXES if (root / f"{split}{ext}").exists()]
        if len(candidates) > 1:
            raise UserError(f"{where}: {root} holds {' and '.join(p.name for p in candidates)}; keep one file "
                            f"per split")
        if candidates:
            found[split] = candidates[0]
    missing = [s for s in TASK_SPLITS[:2] if s not in found]
    if missing:
        present = sorted(p.name for p in root.iterdir())
        raise UserError(f"{where}: {root} has no {' or '.join(missing)} file; expected {expected}; the "
                        f"directory holds {present[:10]}")
    return found


def _need_text(value: Any, path: Path, lineno: int, name: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{path}:{lineno}: field {name!r} is a {type(value).__name__}, not a string")
    return value


def _task_jsonl(path: Path, fields: list[str]) -> Rows:
    rows = Rows(path)
    with _reading(path) as handle:
        for lineno, obj in iter_jsonl(handle, path, f"{fields} and 'label'"):
            for name in (*fields, "label"):
                if name not in obj:
                    raise UserError(f"{path}:{lineno}: missing field {name!r} (task.text_fields={fields}, plus "
                                    f"'label'); the object has keys {_keys(obj)}")
            if obj["label"] is None:
                raise UserError(f"{path}:{lineno}: label is null")
            texts = [_need_text(obj[name], path, lineno, name) for name in fields]
            label = obj["label"] if isinstance(obj["label"], str) else json.dumps(obj["label"])
            rows.add(texts[0], texts[1] if len(texts) > 1 else None, label.strip(), lineno)
    return rows


def _task_table(path: Path, fields: list[str]) -> Rows:
    rows = Rows(path)
    kind = "tab" if path.suffix == ".tsv" else "comma"
    with _reading(path) as handle:
        reader = csv.reader(handle, delimiter="\t" if kind == "tab" else ",")
        header = next(reader, None)
        if header is None:
            return rows
        header = [h.strip() for h in header]
        index = {name: i for i, name in enumerate(header)}
        missing = [name for name in (*fields, "label") if name not in index]
        if missing:
            raise UserError(f"{path}:1: the header lacks column(s) {missing} (task.text_fields={fields}, "
                            f"plus 'label'); header is {header}")
        for row in reader:
            lineno = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                lacking = [n for n in (*fields, "label") if index[n] >= len(row)]
                what = f"missing field {lacking[0]!r}" if lacking else "a delimiter inside an unquoted field?"
                raise UserError(f"{path}:{lineno}: {len(row)} {kind}-separated columns, the header has "
                                f"{len(header)} ({what}); quote fields that hold the delimiter")
            texts = [row[index[name]] for name in fields]
            rows.add(texts[0], texts[1] if len(texts) > 1 else None, row[index["label"]].strip(), lineno)
    return rows


def read_local_task(task: TaskConfig) -> dict[str, Rows]:
    """`Rows` per split of a local task directory (labels still raw strings; `load_task` maps them)."""
    out: dict[str, Rows] = {}
    for split, path in local_task_files(task).items():
        rows = _task_jsonl(path, list(task.text_fields)) if path.suffix == ".jsonl" else \
            _task_table(path, list(task.text_fields))
        if not rows:
            raise UserError(f"{path}: no examples (task {task.name}, {split} split); the file is empty or has "
                            "only a header row")
        out[split] = rows
    return out


def local_task_notes(task: TaskConfig) -> list[str]:
    """The provenance note of a local task: its directory and each split file's sha256."""
    root = Path(task.dataset).expanduser().absolute()
    paths = [root / f"{split}{ext}" for split in TASK_SPLITS for ext in TASK_SUFFIXES]
    try:
        files = ", ".join(f"{p.name} sha256 {sha256_file(p)[:16]}" for p in paths if p.is_file())
    except OSError:
        files = ""
    listed = f" ({files})" if files else ""
    return [f"Task {task.name}: data from the local directory {root}{listed}; not a registry dataset, so "
            "nothing was downloaded or checked against a published checksum."]
