"""Prepared token blocks on disk, read through a memory map.

A prepared corpus is a directory (``<cache>/blocks/<domain>-<key>``) holding, per split, one flat file of
token ids (``train.bin``, ``validation.bin``: the documents' tokens concatenated in source order, each document
wrapped in the tokenizer's special tokens) and a ``meta.json`` with the dtype, block size, counts and each token file's sha256 (`corpus_fingerprints`). The
dtype is uint16 when every id fits (vocabularies up to 65,536 entries: BERT's 30,522, RoBERTa's 50,265), else
int32: half the disk and page cache of int32 for both paper models.

`TokenBlocks` views a split as ``[n_blocks, block_size]`` (the last partial block is not part of the view),
backed by the file (``array`` is its ``np.memmap``): nothing is read until rows are indexed, and indexing
copies only those rows, so a Wikipedia-sized corpus costs the training process page cache, not resident
memory. It answers the slice of the tensor API the training code uses (``shape``, ``len``, ``blocks[index]``
with an int, slice, index tensor or array), returning int32 tensors as the in-memory blocks did.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

SPLITS = ("train", "validation")
STORAGE_FORMAT = 2  # 1: a datasets DatasetDict (before memory-mapped blocks); 2: flat token files


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id of a `vocab_size` vocabulary fits, else int32."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


class TokenBlocks:
    """A split's token blocks, ``[n_blocks, block_size]``, backed by its token file.

    ``array`` is the ``np.memmap`` view (slicing, analysis, tools). Indexing (``blocks[index]``, what training
    does every step) copies just the asked-for rows with positional reads (``os.preadv``) instead of touching
    the map: mapped file pages count as the process's resident memory, so random reads through the map would
    make a long run's RSS creep up towards the corpus size (clean, reclaimable pages, but indistinguishable
    from a leak in every monitor). Read this way, the kernel's page cache holds the file once, shared by all
    ranks, and each process holds only the rows of its current step.
    """

    def __init__(self, path: Path, n_blocks: int, block_size: int, dtype: np.dtype | str) -> None:
        self.path, self.block_size, self.dtype = Path(path), int(block_size), np.dtype(dtype)
        self.n_blocks = int(n_blocks)
        self._array: np.ndarray | None = None
        self._fd: int | None = None
        self._row_bytes = self.block_size * self.dtype.itemsize

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = (np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.n_blocks, self.block_size))
                           if self.n_blocks else np.empty((0, self.block_size), dtype=self.dtype))
        return self._array

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_blocks, self.block_size)

    def __len__(self) -> int:
        return self.n_blocks

    def _rows(self, index: Any) -> np.ndarray:
        """Row numbers (int64, bounds-checked) for an int, slice, list, array or tensor index."""
        if isinstance(index, slice):
            return np.arange(self.n_blocks, dtype=np.int64)[index]
        if hasattr(index, "detach"):  # a torch tensor
            index = index.detach().cpu().numpy()
        rows = np.asarray(index, dtype=np.int64).reshape(-1)
        rows = np.where(rows < 0, rows + self.n_blocks, rows)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_blocks):
            raise IndexError(f"block index out of range for {self.n_blocks} blocks")
        return rows

    def read(self, index: Any) -> np.ndarray:
        """The rows of `index` as a new array of the file's dtype (one read per run of consecutive rows)."""
        rows = self._rows(index)
        out = np.empty((len(rows), self.block_size), dtype=self.dtype)
        if not len(rows):
            return out
        if not hasattr(os, "pread"):  # no positional reads (Windows): through the map
            out[:] = self.array[rows]
            return out
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        for start, stop in zip(np.r_[0, breaks], np.r_[breaks, len(rows)], strict=True):
            self._read_into(memoryview(out[start:stop]).cast("B"), int(rows[start]) * self._row_bytes)
        return out

    def _read_into(self, view: memoryview, offset: int) -> None:
        got = 0
        while got < len(view):
            if hasattr(os, "preadv"):
                n = os.preadv(self._fd, [view[got:]], offset + got)
            else:
                chunk = os.pread(self._fd, len(view) - got, offset + got)
                view[got:got + len(chunk)] = chunk
                n = len(chunk)
            if n <= 0:
                raise OSError(f"{self.path}: unexpected end of file (the corpus file is truncated)")
            got += n

    def __getitem__(self, index: Any) -> Any:
        """Rows as an int32 torch tensor (a copy of just those rows): int, slice, index tensor/array/list."""
        import torch

        rows = self.read(index).astype(np.int32)
        return torch.from_numpy(rows[0] if isinstance(index, (int, np.integer)) else rows)

    def numpy(self, index: Any = slice(None)) -> np.ndarray:
        """Rows as an int64 numpy array (a copy)."""
        return self.read(index).astype(np.int64)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process opens its own descriptor
        return {**self.__dict__, "_fd": None, "_array": None}

    def __repr__(self) -> str:
        return f"TokenBlocks({self.path.name}, shape={self.shape}, dtype={self.dtype.name})"


class PreparedCorpus(Mapping):
    """A prepared corpus directory: ``corpus["train"]`` / ``corpus["validation"]`` are `TokenBlocks`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.meta: dict[str, Any] = read_meta(self.path)
        dtype, block = self.meta["dtype"], self.meta["block_size"]
        self._splits = {split: TokenBlocks(self.path / f"{split}.bin", self.meta[split]["blocks"], block, dtype)
                        for split in SPLITS}

    @property
    def train(self) -> TokenBlocks:
        return self._splits["train"]

    @property
    def validation(self) -> TokenBlocks:
        return self._splits["validation"]

    def __getitem__(self, split: str) -> TokenBlocks:
        return self._splits[split]

    def __iter__(self) -> Iterator[str]:
        return iter(self._splits)

    def __len__(self) -> int:
        return len(self._splits)


def read_meta(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / "meta.json").read_text())


def is_prepared(path: str | Path) -> bool:
    """A finished corpus of this storage format: written last, so its presence means complete."""
    meta = Path(path) / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("storage") == STORAGE_FORMAT
    except (OSError, ValueError):
        return False


def file_sha256(path: str | Path, chunk: int = 2**24) -> str:
    """sha256 of a file, read in chunks (token files can be GBs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def corpus_fingerprints(meta: dict[str, Any], path: str | Path | None = None) -> dict[str, str] | None:
    """sha256 of each split's token file (``train.bin``, ``validation.bin``): recorded in meta.json when the
    corpus is prepared, hashed here for a corpus prepared before femlm recorded it (None: its files are gone)."""
    if meta.get("sha256"):
        return dict(meta["sha256"])
    root = Path(path or meta.get("path") or "")
    files = {split: root / f"{split}.bin" for split in SPLITS}
    if not all(f.is_file() for f in files.values()):
        return None
    return {split: file_sha256(f) for split, f in files.items()}
