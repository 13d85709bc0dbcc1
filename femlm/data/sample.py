"""Which documents a prepared corpus holds: duplicates dropped, a seeded uniform sample, a validation split.

Every decision is a function of the documents' *content*, never of their position, so it is the same whatever
the number of worker processes, the shard order, or the order workers finish in:

* a document's identity is a 64-bit hash of its stripped text (`doc_hash`); equal texts are one document
  (the first occurrence in source order is the one kept, which only matters for where its tokens sit);
* ``domain.max_documents=N`` keeps the N distinct documents with the smallest *seeded rank*, a bijective
  mix (splitmix64) of the hash and the seed. That is a bottom-k sample: for a fixed seed every N-subset is
  equally likely over the hash's randomness, samples are nested (N < N' keeps a subset), and it needs only
  the hashes, which a first pass over the sources computes in bounded memory (8 bytes a document);
* the validation documents are the ``round(fraction * n)`` (at least 1, at most n - 1) with the smallest rank
  of a second, independent stream, so the split is exact in size and whole documents stay on one side.

Hash collisions (two different texts with the same 64-bit hash) would merge them; for 20M documents the
chance is about 1e-5, and the only effect is one document fewer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

_MASK = (1 << 64) - 1
SAMPLE_STREAM = 0x5A3C_9E37_79B9_7F4A  # rank stream of the document sample
SPLIT_STREAM = 0x1B87_3593_C2B2_AE35  # rank stream of the validation split


def doc_hash(text: str) -> int:
    """64-bit identity of a document (its text as given; callers strip it first)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def hash_docs(texts: Iterable[str]) -> np.ndarray:
    """`doc_hash` of each text, as uint64."""
    return np.fromiter((doc_hash(t) for t in texts), dtype=np.uint64)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        x += np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def seeded_rank(hashes: np.ndarray, seed: int, stream: int = SAMPLE_STREAM) -> np.ndarray:
    """A pseudo-random uint64 per hash, fixed by (hash, seed, stream)."""
    key = _splitmix64(np.array([(int(seed) ^ stream) & _MASK], dtype=np.uint64))[0]
    return _splitmix64(np.asarray(hashes, dtype=np.uint64) ^ key)


def first_occurrence(hashes: np.ndarray) -> np.ndarray:
    """Boolean mask: True at the first position of each distinct hash."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    keep = np.zeros(len(hashes), dtype=bool)
    if len(hashes):
        _, first = np.unique(hashes, return_index=True)
        keep[first] = True
    return keep


def smallest_ranks(distinct: np.ndarray, k: int, seed: int, stream: int) -> np.ndarray:
    """The `k` hashes of `distinct` (no repeats) with the smallest seeded rank, sorted by hash value."""
    distinct = np.asarray(distinct, dtype=np.uint64)
    if k >= len(distinct):
        return np.sort(distinct)
    if k <= 0:
        return np.empty(0, dtype=np.uint64)
    rank = seeded_rank(distinct, seed, stream)
    chosen = np.argpartition(rank, k - 1)[:k]
    return np.sort(distinct[chosen])


def sample_hashes(distinct: np.ndarray, n: int, seed: int) -> np.ndarray:
    """The uniform seeded sample of `n` documents (bottom-n of the sample rank); sorted hashes."""
    return smallest_ranks(distinct, n, seed, SAMPLE_STREAM)


def validation_size(n_docs: int, fraction: float) -> int:
    """Documents held out: round(fraction * n), at least one, and at least one left for training."""
    return min(max(1, round(fraction * n_docs)), n_docs - 1)


def validation_hashes(distinct: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """The validation documents among `distinct` (sorted hashes); the rest are training documents."""
    return smallest_ranks(distinct, validation_size(len(distinct), fraction), seed, SPLIT_STREAM)


def member(hashes: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which `hashes` are in `sorted_set` (a sorted uint64 array)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    if not len(sorted_set) or not len(hashes):
        return np.zeros(len(hashes), dtype=bool)
    pos = np.searchsorted(sorted_set, hashes)
    pos[pos == len(sorted_set)] = 0
    return sorted_set[pos] == hashes
