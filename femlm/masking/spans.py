"""Span masking by *segment-then-deal*: the same span-length law for MLM-span, FE-span and the iid control.

Why not grow spans until a budget is met?  The anchor-and-grow sampler (``sample_word_spans``) packs K
disjoint sets of spans into ``K * tau`` tokens; spans are cut short whenever they run into an earlier span or
into the budget, and the denser the packing the shorter they get (issue 15: mean 3.51 words for MLM-span,
2.93 for FE-span at K=4, 2.17 at K=8). FE+Span vs MLM+Span then differs in span lengths as well as overlap.

The sampler below follows the paper's description instead ("the sequence is randomly divided into
non-overlapping segments, ... one segment is masked per copy"):

1. **Segment.** Every *run* of adjacent maskable words (a stretch between special tokens) is cut into
   consecutive segments whose lengths in words are i.i.d. truncated geometric on ``span_min..span_max``
   (SpanBERT's law). The first segment of a run is drawn from the stationary forward-recurrence law
   ``P(D = d) ∝ P(L >= d)``, so the run is a window onto a stationary segmentation: boundaries are not
   anchored at the run's first word and every word is equally likely to start a segment. The last segment
   is cut by the run's end. Segments never cross a special token.
2. **Deal.** The segments are laid end to end in uniformly random order -- a line of the row's ``n``
   maskable tokens -- and the line is closed into a circle. With ``u`` uniform on ``{0..n-1}``, a word
   whose last token sits at line offset ``e`` (1-based) belongs to window ``j = ((e - u - 1) mod n) // tau``.
   Copies are windows ``0..K-1`` under a uniformly random relabelling; windows ``>= K`` stay unmasked.
   ``mask_budget`` guarantees ``K * tau <= n``, so the K windows always fit: there is no pool to exhaust,
   also at ``K * tau == n`` (every token then lies in some copy, up to the ``n - K*tau`` spare tokens).

Properties (tested in ``tests/test_masking_spans.py``):

* Disjoint and word-aligned by construction: each word gets one window.
* Uniform marginal, exactly: ``(e - u - 1) mod n`` is uniform whatever the layout, so every maskable token
  is in a given copy with probability exactly ``tau / n`` -- for every copy label and every K.
* Budget: a window holds the words whose *end* falls in its ``tau`` line offsets, so its size is ``tau``
  minus the part of the word straddling its first cut plus the part straddling its last cut:
  ``tau - a < size < tau + b`` with ``a``, ``b`` the lengths of those words (over *or* short by less than
  one word), exactly ``tau`` when words are single tokens, and ``E[size] = tau`` exactly.
* Same span law for every K: a copy is one window of a uniformly rotated random layout, so its law depends
  on ``(row, tau)`` only. MLM-span (K=1), each FE copy and each iid copy have the same span-length law,
  exactly. A copy's spans are whole segments except at most two pieces of the segments straddling its two
  cuts; with ``tau`` = 77 tokens (~16 segments) that is ~1.5 cut spans per copy, plus the segments cut by
  run ends -- the documented truncation of the law (mean ~3.5 words vs 3.8 for the untruncated pmf).
* Exchangeable: the K labels are a uniform permutation of the windows.

Adjacent segments dealt to the same copy touch, as touching spans do in SpanBERT (which merges them before
its per-span replacement draw); "spans" below are the placed pieces (segment ∩ window).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .sampling import numpy_rng, row_words


class SpanDraw(NamedTuple):
    """One row's draw: ``word_copy[w]`` = copy label of word ``w`` (-1: unmasked), ``word_segment[w]`` = segment id."""

    word_copy: np.ndarray
    word_segment: np.ndarray


def forward_recurrence_pmf(lengths: np.ndarray, pmf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(delays, pmf) of the first segment of a run: ``P(D = d) = P(L >= d) / E[L]`` on ``1..max(lengths)``.

    That is the distance from a fixed point to the next boundary of a stationary renewal process with
    segment law ``pmf``; starting each run with it makes the boundary process shift-invariant.
    """
    delays = np.arange(1, int(lengths.max()) + 1)
    survival = np.array([pmf[lengths >= d].sum() for d in delays])
    return delays, survival / survival.sum()


def _draw(values: np.ndarray, cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws of ``values`` for uniforms ``u`` (index clipped against float round-off in ``cdf``)."""
    return values[np.minimum(np.searchsorted(cdf, u, side="right"), values.size - 1)]


def segment_runs(
    run_words: np.ndarray, rng: np.random.Generator, lengths: np.ndarray, pmf: np.ndarray
) -> np.ndarray:
    """Segment lengths in words tiling runs of ``run_words`` words, in row order (step 1 of the module doc).

    One ``rng.random`` call: a forward-recurrence delay per run, then a pool of i.i.d. lengths consumed run
    by run (``run_words.sum()`` draws always suffice since every segment has at least one word).
    """
    delays, delay_pmf = forward_recurrence_pmf(lengths, pmf)
    n_runs, total = run_words.size, int(run_words.sum())
    u = rng.random(n_runs + total)
    first = _draw(delays, np.cumsum(delay_pmf), u[:n_runs])
    pool = _draw(lengths, np.cumsum(pmf), u[n_runs:])
    out, used = [], 0
    for r, words in enumerate(run_words.tolist()):
        # enough draws: the delay plus at most ``words - 1`` further segments cover the run
        seq = np.concatenate(([first[r]], pool[used : used + words - 1]))
        ends = np.cumsum(seq)
        count = int(np.searchsorted(ends, words)) + 1  # segments needed to reach the run's end
        ends = np.minimum(ends[:count], words)
        out.append(np.diff(ends, prepend=0))
        used += count - 1
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def deal_windows(
    word_len: np.ndarray,
    word_segment: np.ndarray,
    tau: int,
    copies: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Copy label per word (-1 = unmasked): random segment order, circle of ``n`` tokens, K windows of ``tau``.

    Step 2 of the module doc. ``word_segment`` must be non-decreasing (segments are runs of words).
    """
    n_seg = int(word_segment[-1]) + 1
    seg_tokens = np.bincount(word_segment, weights=word_len, minlength=n_seg).astype(np.int64)
    order = rng.permutation(n_seg)
    line_start = np.empty(n_seg, dtype=np.int64)
    line_start[order] = np.cumsum(seg_tokens[order]) - seg_tokens[order]
    cum = np.cumsum(word_len)  # token offset of every word's end within the row
    seg_first = np.flatnonzero(np.diff(word_segment, prepend=-1))  # first word of every segment
    seg_before = cum[seg_first] - word_len[seg_first]
    word_end = line_start[word_segment] + cum - seg_before[word_segment]  # 1-based end offset on the line
    n = int(cum[-1])
    window = ((word_end - int(rng.integers(n)) - 1) % n) // tau
    labels = rng.permutation(copies) if copies > 1 else np.zeros(1, dtype=np.int64)
    return np.where(window < copies, labels[np.minimum(window, copies - 1)], -1)


def sample_segment_spans(
    word_len: np.ndarray,
    adjacent: np.ndarray,
    tau: int,
    copies: int,
    rng: np.random.Generator,
    lengths: np.ndarray,
    pmf: np.ndarray,
) -> SpanDraw:
    """One row: segment the words (``adjacent[w]``: word ``w+1`` follows ``w`` with no special between), then
    deal K disjoint copies of ~``tau`` tokens. ``copies=1`` is MLM-span; FE calls it once with K copies, the
    iid control K times with one copy."""
    breaks = np.flatnonzero(~np.asarray(adjacent, dtype=bool)) + 1
    run_words = np.diff(np.concatenate(([0], breaks, [len(word_len)])))
    seg_len = segment_runs(run_words, rng, lengths, pmf)
    word_segment = np.repeat(np.arange(seg_len.size), seg_len)
    return SpanDraw(deal_windows(np.asarray(word_len), word_segment, tau, copies, rng), word_segment)


def placed_spans(draw: SpanDraw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(copy, first_word, n_words)`` of every placed span: a maximal piece of one segment in one copy."""
    copy, seg = draw.word_copy, draw.word_segment
    start = np.ones(copy.size, dtype=bool)
    start[1:] = (copy[1:] != copy[:-1]) | (seg[1:] != seg[:-1])
    first = np.flatnonzero(start)
    n_words = np.diff(np.append(first, copy.size))
    keep = copy[first] >= 0
    return copy[first][keep], first[keep], n_words[keep]


def select_spans(
    word_ids: torch.Tensor,
    valid: torch.Tensor,
    tau: torch.Tensor,
    copies: int,
    strategy: str,
    lengths: np.ndarray,
    pmf: np.ndarray,
    generator: torch.Generator,
) -> torch.Tensor:
    """Span selection ``BoolTensor[B, K, L]`` for all three strategies (loops over rows).

    ``fully_explored``: one :func:`sample_segment_spans` draw with K copies; ``random`` (K = 1) and ``iid``:
    an independent one-copy draw per copy (iid copies may overlap). Only valid tokens are selected.
    """
    bsz, length = valid.shape
    rng = numpy_rng(generator)
    valid_np, wid_np, tau_np = valid.cpu().numpy(), word_ids.cpu().numpy(), tau.cpu().numpy()
    out = np.zeros((bsz, copies, length), dtype=bool)
    for b in range(bsz):
        vpos = np.flatnonzero(valid_np[b])
        if vpos.size == 0 or tau_np[b] <= 0:
            continue
        word_len, adjacent, tok_word = row_words(wid_np[b, vpos])
        tau_b = int(tau_np[b])
        if strategy == "fully_explored":
            word_copy = sample_segment_spans(word_len, adjacent, tau_b, copies, rng, lengths, pmf).word_copy
            out[b][:, vpos] = word_copy[tok_word][None, :] == np.arange(copies)[:, None]
        else:
            for k in range(copies):
                draw = sample_segment_spans(word_len, adjacent, tau_b, 1, rng, lengths, pmf)
                out[b, k, vpos] = draw.word_copy[tok_word] == 0
    return torch.from_numpy(out).to(valid.device)
