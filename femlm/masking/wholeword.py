"""Whole-word masks: MLM whole-word's law, and K disjoint FE copies that follow it (issue 27, item 5).

**The MLM whole-word law** (``strategy: random``, ``granularity: whole_word``, exact count; ``mlm_wwm``).
The maskable words of a row, with ``word_len[w]`` tokens, are walked in ONE uniformly random order; a word is
taken when it fits the remaining budget (``word_len[w] <= r``, ``r`` starting at tau) and skipped otherwise;
the walk stops at ``r == 0`` or at the end of the words. This is Google BERT's rule (``create_pretraining_data.py``
skips a word that would overflow ``num_to_predict``). Equivalently: the next word is uniform among the words not
yet taken that fit ``r``. So a mask has exactly tau tokens unless no remaining word fits (never while a 1-token
word is left), and it is *maximal*: no word outside it fits the room left. Call this law ``mu``.

**The FE copies** (``strategy: fully_explored``): one uniform order ``sigma`` of the words is cut into K blocks
of ``n_words // K`` (or one more) consecutive places. Copy ``k`` walks place by place along its own walk order
-- its block forwards, then the other blocks *backwards from their ends* (blocks ``k+1, k+2, ...`` cyclically)
-- with MLM's rule, skipping also words that an earlier copy took. The K labels are then permuted uniformly.

Law of one copy (exact statement, proved in three lines): a walk order is a fixed permutation of the places,
so ``sigma`` read along it is again a uniform order and copy ``k`` *alone* would be an MLM mask ``X_k ~ mu``.
Call it a **conflict** when some copy meets a word that fits it but was taken by an earlier copy; without a
conflict every copy equals its ``X_k``. Hence for every copy label ``TV(law of the copy, mu) <= P(conflict)``:
the copy is distributed exactly as MLM whole-word when conflicts cannot happen, and in general off by at most
the conflict probability. (The walks' backward overflow uses the tails of the other blocks, the places least
likely taken, which is what keeps conflicts rare.) Copies are disjoint, never exceed tau and are exchangeable.

Exactness is not always possible: disjointness forces ``sum_k P(w in copy k) <= 1``, so ``K * p_w <= 1`` for
every word's MLM inclusion probability ``p_w`` is necessary. Words of 1, 1, 2, 2 tokens, tau 2, K 3: under MLM
each 1-token word is in the mask with probability 1/2 > 1/3. Measured (``tests/test_masking_wholeword.py``,
exact enumeration of all orders):

* 1, 1, 2, 2 / tau 2 / K 3: TV 1/6 (the minimum any disjoint sampler can reach: a copy holds a 1-token word
  with probability at most 1/3), every copy full; the previous sampler: TV 1/3, a copy under budget w.p. 1/3.
* 1, 1, 1, 1, 1, 2, 2, 3, 1 / tau 4 / K 2: TV 0.0099 (P(conflict) 0.0198); previous sampler 0.0198.
* real text (bert-base-uncased, wikitext-2, 128-token blocks, ratio 0.15): no conflict observed at K <= 4, so
  each copy is an MLM whole-word mask; at K = 6 (K * ratio = 0.9) P(conflict) ~ 0.02 bounds the TV and the
  per-word masking probability by word length agrees with MLM within simulation error (see the tests).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np


def walk_orders(n_words: int, copies: int) -> list[list[int]]:
    """Copy ``k``'s walk over the places ``0..n_words-1``: its block forwards, then blocks k+1, k+2, ...
    (cyclically) each backwards from its end. Each walk is a fixed permutation of the places."""
    return [list(walk) for walk in _walks(n_words, copies)]


@functools.lru_cache(maxsize=4096)
def _walks(n_words: int, copies: int) -> tuple[tuple[int, ...], ...]:
    """:func:`walk_orders`, built once per (words, copies): every row of a batch has one of a few word counts."""
    cuts = [(k * n_words) // copies for k in range(copies + 1)]
    orders = []
    for k in range(copies):
        walk = list(range(cuts[k], cuts[k + 1]))
        for j in range(1, copies):
            other = (k + j) % copies
            walk.extend(range(cuts[other + 1] - 1, cuts[other] - 1, -1))
        orders.append(tuple(walk))
    return tuple(orders)


def deal_whole_words(
    word_len: Sequence[int], tau: int, copies: int, order: Sequence[int]
) -> tuple[list[int], bool]:
    """The deterministic core: ``(owner, conflict)`` for one order of the words (``order[place] = word``).

    ``owner[w]`` is the copy (walk) that took word ``w``, -1 if none; ``conflict`` is True when a copy met a
    word that fit its remaining budget but was already taken (then some copy differs from its solo MLM walk).
    """
    n_words = len(word_len)
    owner = [-1] * n_words
    conflict = False
    for k, walk in enumerate(_walks(n_words, copies) if copies > 1 else [range(n_words)]):
        room = tau
        for place in walk:
            if room <= 0:
                break
            word = order[place]
            size = word_len[word]
            if size > room:
                continue
            if owner[word] >= 0:
                conflict = True
                continue
            owner[word] = k
            room -= size
    return owner, conflict


def sample_whole_words(
    word_len: Sequence[int], tau: int, copies: int, rng: np.random.Generator
) -> np.ndarray:
    """Copy of every word (``-1``: unmasked) for K disjoint whole-word masks of at most ``tau`` tokens each.

    Draws one uniform order of the words (the same single draw as the MLM mask: with ``copies = 1`` this IS the
    MLM whole-word mask, draw for draw) and, for ``copies > 1``, one uniform permutation of the copy labels.
    """
    n_words = len(word_len)
    if n_words == 0 or tau <= 0:
        return np.full(n_words, -1, dtype=np.int64)
    order = rng.permutation(n_words).tolist()
    owner, _ = deal_whole_words(word_len, int(tau), copies, order)
    out = np.asarray(owner, dtype=np.int64)
    if copies > 1:
        labels = rng.permutation(copies)
        out = np.where(out >= 0, labels[np.maximum(out, 0)], -1)
    return out
