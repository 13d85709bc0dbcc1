"""Mask samplers of the gradient study: pairs at a controlled Hamming distance, and K-mask draws.

A mask here is a ``BoolTensor`` over the positions of a sequence holding exactly ``tau`` ones (the paper's
M(tau)); only *valid* positions (attention 1, not a special token) are ever masked, and ``n`` is their count.

Hamming distance of two tau-masks: ``H(m1, m2) = |m1 xor m2| = 2 * (tau - |m1 and m2|)``, so H is even and
``0 <= H <= H_max = 2 * min(tau, n - tau)``. The pair sampler draws one uniform random permutation of the
valid positions per pair and takes ``m1`` = its first tau positions and ``m2`` = the first ``o = tau - H/2``
of them plus the next ``tau - o`` positions. Because the permutation is uniform, the pair is uniform over
all pairs at distance H, and each of ``m1``, ``m2`` is marginally uniform over M(tau) (tests check both).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

import torch

from femlm.masking.sampling import random_ranks, select_subword_exact


def valid_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    special_ids: Iterable[int] = ()) -> torch.Tensor:
    """``BoolTensor[S, L]``: positions that may be masked (attended, not a special token)."""
    valid = torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask is not None:
        valid &= attention_mask.bool()
    specials = torch.tensor(sorted({int(i) for i in special_ids}), dtype=input_ids.dtype)
    if specials.numel():
        valid &= ~torch.isin(input_ids, specials.to(input_ids.device))
    return valid


def hamming(m1: torch.Tensor, m2: torch.Tensor) -> torch.Tensor:
    """Hamming distance along the last dimension."""
    return (m1 ^ m2).sum(dim=-1)


def max_hamming(n: int, tau: int) -> int:
    """Largest distance two tau-subsets of n positions can have: 2 * min(tau, n - tau)."""
    return 2 * min(tau, n - tau)


def hamming_strata(n: int, tau: int, bins: int, budget: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
    """Target distances for ``budget`` pairs, stratified over ``bins`` equal-width bins of [0, H_max].

    Pair ``p`` goes to bin ``p % bins`` (so the bins hold equal counts, up to one) and gets an even H drawn
    uniformly among the even values of its bin. Stratifying instead of drawing pairs with independent
    masks matters: independent tau-masks almost always land near H = 2 tau (n - tau) / n, which leaves
    the interesting small distances (and H = 2 tau, the fully-explored case) without any sample.
    Returns ``(hamming[budget], bin[budget], edges)`` with ``edges[b] = (low, high)`` inclusive. ``bins``
    is capped at the number of distinct even distances.
    """
    h_max = max_hamming(n, tau)
    values = torch.arange(0, h_max + 1, 2)
    bins = max(1, min(bins, values.numel()))
    groups = torch.tensor_split(values, bins)  # contiguous runs of even values, sizes differ by <= 1
    edges = [(int(g[0]), int(g[-1])) for g in groups]
    bin_of = torch.arange(budget) % bins
    pick = torch.rand(budget, generator=generator, dtype=torch.float64)
    hams = torch.empty(budget, dtype=torch.long)
    for b, g in enumerate(groups):
        rows = bin_of == b
        idx = (pick[rows] * g.numel()).long().clamp(max=g.numel() - 1)
        hams[rows] = g[idx]
    return hams, bin_of, edges


def sample_pairs(valid: torch.Tensor, tau: int, hams: torch.Tensor,
                 generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask pairs at exactly the requested distances: ``(m1, m2)``, each ``BoolTensor[P, S, L]``.

    ``valid`` is ``[S, L]`` (the mini-batch); pair ``p`` gives every sequence its own independent pair at
    distance ``hams[p]``. Requires ``hams[p] <= 2 * min(tau, n_s - tau)`` for every sequence ``s``.
    """
    n_min = int(valid.sum(dim=1).min())
    if tau > n_min:
        raise ValueError(f"tau={tau} exceeds the {n_min} maskable positions of the shortest sequence")
    if hams.numel() and (int(hams.max()) > max_hamming(n_min, tau) or bool((hams % 2 != 0).any())):
        raise ValueError(f"Hamming distances must be even and <= {max_hamming(n_min, tau)}, got {hams.tolist()}")
    pairs = hams.numel()
    ranks = random_ranks(valid.unsqueeze(0).expand(pairs, *valid.shape), generator)  # [P, S, L]
    overlap = (tau - hams // 2).view(pairs, 1, 1)
    m1 = ranks < tau
    m2 = (ranks < overlap) | ((ranks >= tau) & (ranks < 2 * tau - overlap))
    return m1, m2


def sample_kmasks(valid: torch.Tensor, tau: int, k: int, strategy: str, draws: int,
                  generator: torch.Generator) -> torch.Tensor:
    """``draws`` K-mask draws per sequence: ``BoolTensor[D, S, K, L]``.

    ``strategy`` ``iid``: K independent uniform tau-masks (overlaps allowed); ``fully_explored``: the first K
    chunks of tau positions of one uniform random permutation (pairwise disjoint, each marginally uniform).
    Uses `femlm.masking`'s selection so the analysis studies exactly the masks training draws. Because a
    prefix of a draw is itself a draw, the first K' < K masks of each draw are a valid K'-mask draw.
    """
    n_min = int(valid.sum(dim=1).min())
    if strategy == "fully_explored" and k * tau > n_min:
        raise ValueError(f"{k} disjoint masks of tau={tau} need {k * tau} positions; the shortest sequence "
                         f"has {n_min}")
    seqs, length = valid.shape
    rows = valid.unsqueeze(0).expand(draws, seqs, length).reshape(draws * seqs, length)
    taus = torch.full((draws * seqs,), tau, dtype=torch.long)
    sel = select_subword_exact(rows, taus, k, strategy, generator)  # [D*S, K, L]
    return sel.view(draws, seqs, k, length)


def sample_uniform(valid: torch.Tensor, tau: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` i.i.d. uniform tau-masks per sequence: ``BoolTensor[S, count, L]``."""
    return sample_kmasks(valid, tau, count, "iid", 1, generator)[0]


def all_masks(n: int, tau: int) -> torch.Tensor:
    """Every element of M(tau) for n positions, ``BoolTensor[C(n, tau), n]`` (for exact enumeration)."""
    rows = [torch.zeros(n, dtype=torch.bool).index_fill_(0, torch.tensor(c, dtype=torch.long), True)
            for c in combinations(range(n), tau)]
    return torch.stack(rows) if rows else torch.zeros(0, n, dtype=torch.bool)
