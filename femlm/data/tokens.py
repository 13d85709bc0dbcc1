"""Prepared token blocks on disk, read through a memory map.

A prepared corpus is a directory (``<cache>/blocks/<domain>-<key>``) holding, per split, one flat file of
token ids (``train.bin``, ``validation.bin``: the documents' tokens concatenated in source order, each document
wrapped in the tokenizer's special tokens) and a ``meta.json`` with the dtype, block size and counts. The
dtype is uint16 when every id fits (vocabularies up to 65,536 entries: BERT's 30,522, RoBERTa's 50,265), else
int32: half the disk and page cache of int32 for both paper models.

`TokenBlocks` views a split as ``[n_blocks, block_size]`` over an ``np.memmap`` (the last partial block is not
part of the view): nothing is read until rows are indexed, and indexing copies only those rows, so a
Wikipedia-sized corpus costs the training process page cache, not resident memory. It answers the slice of
the tensor API the training code uses (``shape``, ``len``, ``blocks[index]`` with an int, slice, index tensor
or array), returning int32 tensors as the in-memory blocks did.
"""

from __future__ import annotations

import json
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
    """A split's token blocks, ``[n_blocks, block_size]``, memory-mapped from its token file."""

    def __init__(self, path: Path, n_blocks: int, block_size: int, dtype: np.dtype | str) -> None:
        self.path, self.block_size, self.dtype = Path(path), int(block_size), np.dtype(dtype)
        if n_blocks > 0:
            self.array: np.ndarray = np.memmap(self.path, dtype=self.dtype, mode="r",
                                               shape=(int(n_blocks), self.block_size))
        else:  # np.memmap refuses an empty map
            self.array = np.empty((0, self.block_size), dtype=self.dtype)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.array.shape[0], self.block_size)

    def __len__(self) -> int:
        return self.array.shape[0]

    def __getitem__(self, index: Any) -> Any:
        """Rows as an int32 torch tensor (a copy of just those rows): int, slice, index tensor/array/list."""
        import torch

        if isinstance(index, torch.Tensor):
            index = index.detach().cpu().numpy()
        rows = self.array[index]
        return torch.from_numpy(np.array(rows, dtype=np.int32, copy=True))

    def numpy(self, index: Any = slice(None)) -> np.ndarray:
        """Rows as an int64 numpy array (a copy)."""
        return np.array(self.array[index], dtype=np.int64, copy=True)

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
