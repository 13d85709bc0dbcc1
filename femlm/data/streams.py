"""Local corpus files of any size, read as a stream of documents, in pieces that workers can share.

Formats (by extension; `femlm.data.local` describes them for users): ``.txt`` / ``.txt.gz`` (documents
separated by blank lines), ``.jsonl`` / ``.jsonl.gz`` (a ``"text"`` string per line), ``.parquet`` (a
``text`` string column). A file is cut into *pieces*, the unit of parallel work, so one huge file does not
serialise preparation:

* ``.parquet``: one piece per row group (read with only the ``text`` column);
* plain ``.jsonl`` above `PIECE_BYTES`: byte ranges; a piece owns every line that *starts* inside its range,
  so pieces never split or repeat a line, and concatenating them in order gives the file;
* ``.txt`` and gzip files: one piece per file (a blank-line-separated document has no cheap cut points, and
  gzip streams cannot be entered in the middle).

Pieces only ever hold one batch of documents in memory.
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from femlm.errors import UserError

log = logging.getLogger(__name__)
PIECE_BYTES = 64 * 2**20
BATCH_DOCUMENTS = 1000


def _keys(obj: dict) -> str:
    keys = sorted(map(str, obj))
    return str(keys[:10])[:-1] + (", ...]" if len(keys) > 10 else "]")


@contextmanager
def _binary(path: Path) -> Iterator[IO[bytes]]:
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            yield handle
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise UserError(f"{path}: not a valid gzip file ({err})") from None
    except OSError as err:
        raise UserError(f"{path}: cannot be read ({err.strerror or err})") from None


def _decode(raw: bytes, path: Path, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}{where}: not UTF-8 text ({err.reason}); save it as UTF-8") from None


def kind_of(path: Path) -> str:
    """txt | jsonl | parquet, from the file name (``.gz`` allowed for txt and jsonl)."""
    name = path.name.removesuffix(".gz")
    if path.name.endswith(".parquet"):
        return "parquet"
    return "jsonl" if name.endswith(".jsonl") else "txt"


def pieces(path: Path) -> list[dict[str, Any]]:
    """The pieces of a corpus file: dicts with part, start, stop (bytes, -1: end), rows (if known), nbytes."""
    size = path.stat().st_size
    kind = kind_of(path)
    if kind == "parquet":
        meta = _parquet(path).metadata
        return [{"part": i, "start": 0, "stop": -1, "rows": meta.row_group(i).num_rows,
                 "nbytes": meta.row_group(i).total_byte_size} for i in range(meta.num_row_groups)]
    if kind == "jsonl" and not path.name.endswith(".gz") and size > PIECE_BYTES:
        starts = list(range(0, size, PIECE_BYTES))
        return [{"part": i, "start": s, "stop": min(s + PIECE_BYTES, size), "rows": None,
                 "nbytes": min(s + PIECE_BYTES, size) - s} for i, s in enumerate(starts)]
    return [{"part": 0, "start": 0, "stop": -1, "rows": None, "nbytes": size}]


def _parquet(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path}: not a readable parquet file ({first}); re-export it, or leave it out of "
                        "domain.sources") from None


def read_piece(path: Path, part: int = 0, start: int = 0, stop: int = -1) -> Iterator[list[str]]:
    """Batches of raw documents (not stripped; empty ones included) of one piece of `path`."""
    kind = kind_of(path)
    if kind == "parquet":
        yield from _parquet_batches(path, part)
    elif kind == "jsonl":
        yield from _batched(_jsonl_documents(path, start, stop))
    else:
        yield from _batched(txt_documents(path))


def _batched(docs: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) >= BATCH_DOCUMENTS:
            yield batch
            batch = []
    if batch:
        yield batch


def _parquet_batches(path: Path, row_group: int) -> Iterator[list[str]]:
    import pyarrow as pa

    handle = _parquet(path)
    names = handle.schema_arrow.names
    if "text" not in names:
        raise UserError(f'{path}: no "text" column; the columns are {names[:10]} (use an hf: source with '
                        "?text=<column> to read another column)")
    try:
        table = handle.read_row_group(row_group, columns=["text"])
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
        raise UserError(f"{path}: row group {row_group} cannot be read ({str(err).splitlines()[0]}); the file "
                        "is corrupt or truncated") from None
    column = table.column("text")
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise UserError(f'{path}: the "text" column holds {column.type}, not strings')
    values = [v or "" for v in column.to_pylist()]
    for i in range(0, len(values), BATCH_DOCUMENTS):
        yield values[i:i + BATCH_DOCUMENTS]


def _jsonl_documents(path: Path, start: int = 0, stop: int = -1) -> Iterator[str]:
    """The "text" of each line starting in [start, stop); line numbers in errors when reading from byte 0."""
    with _binary(path) as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()  # the line holding byte start-1 belongs to the previous piece
        lineno = 0
        while True:
            pos = handle.tell() if stop >= 0 else 0
            if stop >= 0 and pos >= stop:
                return
            raw = handle.readline()
            if not raw:
                return
            lineno += 1
            where = f":{lineno}" if start == 0 else f" (byte {pos})"
            if lineno == 1 and start == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            yield _jsonl_text(raw, path, where)


def _jsonl_text(raw: bytes, path: Path, where: str) -> str:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}{where}: malformed JSON ({err.msg} at column {err.colno}); each line must be "
                        'one object with a "text" field') from None
    except UnicodeDecodeError as err:
        raise UserError(f"{path}{where}: not UTF-8 text ({err.reason}); save it as UTF-8") from None
    if not isinstance(obj, dict):
        raise UserError(f'{path}{where}: expected a JSON object with a "text" field, got {type(obj).__name__}')
    if "text" not in obj:
        raise UserError(f'{path}{where}: no "text" field; the object has keys {_keys(obj)}')
    text = obj["text"]
    if text is not None and not isinstance(text, str):
        raise UserError(f'{path}{where}: "text" is a {type(text).__name__}, not a string')
    return text or ""


def txt_documents(path: Path) -> Iterator[str]:
    """Documents of a .txt(.gz) file: separated by blank (or whitespace-only) lines, lines joined with a
    newline. A file with several lines and no blank line is one document (and a warning says so)."""
    current: list[str] = []
    lines = separators = 0
    with _binary(path) as handle:
        for lineno, raw in enumerate(handle, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            stripped = _decode(raw, path, f":{lineno}").strip()
            if stripped:
                current.append(stripped)
                lines += 1
            elif current:
                yield "\n".join(current)
                current = []
                separators += 1
    if current:
        yield "\n".join(current)
    if lines > 1 and separators == 0:
        log.warning("%s: no blank line, so its %d lines are read as ONE document; separate documents with "
                    "blank lines", path, lines)
