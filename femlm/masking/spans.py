"""Span masking by *segment-then-deal*: the same span-length law for MLM-span, FE-span and the iid control.

Why not grow spans until a budget is met?  The anchor-and-grow sampler (``sample_word_spans``) packs K
disjoint sets of spans into ``K * tau`` tokens; spans are cut short whenever they run into an earlier span or
into the budget, and the denser the packing the shorter they get (issue 15: mean 3.51 words for MLM-span,
2.93 for FE-span at K=4, 2.17 at K=8). FE+Span vs MLM+Span then differs in span lengths as well as overlap.

The sampler below follows the paper's description instead: the sequence is first divided at random into
non-overlapping parts and each copy masks one part (the paper's "segments" are our copies; the units dealt to
them are spans, called segments here):

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
* Budget: a window holds the words whose *end* falls in its ``tau`` line offsets: the word straddling its
  first cut is in, the one straddling its last cut is out, so ``tau - b < size < tau + a`` with ``a``, ``b``
  the lengths of those two words -- over *or* short by less than one word, exactly ``tau`` when words are
  single tokens, and ``E[size] = tau`` exactly.
* Same span law for every K: a copy is one window of a uniformly rotated random layout, so its law depends
  on ``(row, tau)`` only. MLM-span (K=1), each FE copy and each iid copy have the same span-length law,
  exactly (at K=8 the cap ``tau <= n // K`` of ``mask_budget`` can make tau one token smaller than MLM's).
  A copy's spans are whole segments except at most two pieces of the segments straddling its two cuts;
  with ``tau`` = 76 tokens (~16 spans) that is ~1.5 cut spans per copy, plus the segments cut by run ends
  -- the documented truncation of the law: mean 3.55 words on 512-token CS blocks vs 3.80 for the pmf
  (SpanBERT's own sampler truncates its last span at the budget; the old sampler gave 3.44 for MLM-span).
* Exchangeable: the K labels are a uniform permutation of the windows.
* Pieces shorter than ``span_min`` (when ``span_min > 1``) appear only where a segment is cut: at a run's
  start or end, or at a window edge.

Adjacent segments dealt to the same copy touch, as touching spans do in SpanBERT (which merges them before
its per-span replacement draw); "spans" below are the placed pieces (segment ∩ window).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from .sampling import numpy_rng


class SpanLaw(NamedTuple):
    """Cumulative distributions of the segment law and of a run's first segment (built once per masker)."""

    lengths: np.ndarray
    cdf: np.ndarray
    delays: np.ndarray
    delay_cdf: np.ndarray


class SpanDraw(NamedTuple):
    """A draw over words (one row, or a batch's rows concatenated): copy of each word (-1: unmasked), segment id."""

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


def span_law(lengths: np.ndarray, pmf: np.ndarray) -> SpanLaw:
    """:class:`SpanLaw` of segment lengths ``lengths`` (words) with probabilities ``pmf``."""
    delays, delay_pmf = forward_recurrence_pmf(np.asarray(lengths), np.asarray(pmf))
    return SpanLaw(np.asarray(lengths), np.cumsum(pmf), delays, np.cumsum(delay_pmf))


def _draw(values: np.ndarray, cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws of ``values`` for uniforms ``u`` (index clipped against float round-off in ``cdf``)."""
    return values[np.minimum(np.searchsorted(cdf, u, side="right"), values.size - 1)]


def segment_words(new_run: np.ndarray, rng: np.random.Generator, law: SpanLaw) -> np.ndarray:
    """Segment id of every word (step 1 of the module doc), vectorised over all runs of all rows.

    ``new_run[w]`` is true where word ``w`` starts a run (first word of a row or first after a special).
    Each run gets a forward-recurrence delay and, slot for slot, one i.i.d. length per word of the run (the
    segments of a run of ``R`` words never need more than ``R`` draws); a segment starts at the run's first
    word, after the delay, and after every further length, as long as that falls inside the run. The run's
    last segment is cut at its end. One ``rng.random`` call in all: the runs' delays, then the words' lengths.
    """
    runs = int(new_run.sum())
    u = rng.random(runs + new_run.size)
    return _segments(new_run, law, u[:runs], u[runs:])


def _segments(new_run: np.ndarray, law: SpanLaw, u_delay: np.ndarray, u_pool: np.ndarray) -> np.ndarray:
    """:func:`segment_words` given its uniforms: one per run (the delays), one per word (the pool of lengths)."""
    n_words = new_run.size
    run_first = np.flatnonzero(new_run)
    run_words = np.diff(run_first, append=n_words)
    run_of_word = np.cumsum(new_run) - 1
    delay = _draw(law.delays, law.delay_cdf, u_delay)
    pool = _draw(law.lengths, law.cdf, u_pool)
    ends = np.cumsum(pool)
    # offset (from its run's first word) of the segment start that pool slot ``w`` produces
    rel = delay[run_of_word] + ends - (ends - pool)[run_first][run_of_word]
    starts = np.zeros(n_words, dtype=bool)
    starts[run_first] = True
    inside = delay < run_words
    starts[run_first[inside] + delay[inside]] = True
    inside = rel < run_words[run_of_word]
    starts[run_first[run_of_word[inside]] + rel[inside]] = True
    return np.cumsum(starts) - 1


def deal_windows(
    word_len: np.ndarray,
    word_row: np.ndarray,
    word_segment: np.ndarray,
    tau: np.ndarray,
    copies: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Copy label per word, -1 = unmasked (step 2 of the module doc), vectorised over rows.

    Per row: a uniformly random order of its segments (sorting by row, then by a U[0,1) key, keeps rows
    contiguous), the line offsets that order gives every word's end, a uniform rotation ``u`` of the
    circle of the row's ``n`` tokens, windows of ``tau`` tokens, and a random permutation of the K labels.
    ``word_row`` (non-decreasing) and ``word_segment`` index rows of ``tau`` and segments. Draws, in order: one
    key per segment, one rotation per row, K label keys per row (none when K = 1).
    """
    n_segments = int(word_segment[-1]) + 1 if word_segment.size else 0
    u_order, u_rotation = rng.random(n_segments), rng.random(tau.size)
    u_labels = rng.random((tau.size, copies)) if copies > 1 else None
    return _deal(word_len, word_row, word_segment, tau, copies, u_order, u_rotation, u_labels)


def _deal(word_len: np.ndarray, word_row: np.ndarray, word_segment: np.ndarray, tau: np.ndarray, copies: int,
          u_order: np.ndarray, u_rotation: np.ndarray, u_labels: np.ndarray | None) -> np.ndarray:
    """:func:`deal_windows` given its uniforms (one per segment, one per row, ``[rows, K]`` or None for K = 1)."""
    n_rows = tau.size
    seg_first = np.flatnonzero(np.diff(word_segment, prepend=-1))
    seg_row = word_row[seg_first]
    seg_tokens = np.add.reduceat(word_len, seg_first)
    n = np.bincount(word_row, weights=word_len, minlength=n_rows).astype(np.int64)
    row_base = np.cumsum(n) - n  # tokens of all earlier rows
    order = np.lexsort((u_order, seg_row))
    line_start = np.empty_like(seg_tokens)
    line_start[order] = np.cumsum(seg_tokens[order]) - seg_tokens[order] - row_base[seg_row[order]]
    word_end = np.cumsum(word_len) - row_base[word_row]  # 1-based offset of each word's end within its row
    seg_offset = word_end[seg_first] - word_len[seg_first]  # where the segment starts within its row
    line_end = (line_start - seg_offset)[word_segment] + word_end
    rotation = np.floor(u_rotation * n).astype(np.int64)
    n_safe, tau_safe = np.maximum(n, 1), np.maximum(tau, 1)
    window = ((line_end - rotation[word_row] - 1) % n_safe[word_row]) // tau_safe[word_row]
    labels = np.argsort(u_labels, axis=1) if copies > 1 else np.zeros((n_rows, 1), int)
    in_copy = (window < copies) & (tau[word_row] > 0)
    return np.where(in_copy, labels[word_row, np.minimum(window, copies - 1)], -1)


def draw_rows(
    word_len: np.ndarray,
    new_run: np.ndarray,
    word_row: np.ndarray,
    tau: np.ndarray,
    copies: int,
    rng: np.random.Generator | Sequence[np.random.Generator],
    law: SpanLaw,
) -> SpanDraw:
    """Steps 1-2 for a batch of rows given as flat word arrays (see :func:`segment_words`, :func:`deal_windows`).

    ``rng``: one generator for the batch, or one per row (``femlm.masking.passes``: a row's stream is its own);
    then each row draws from its own what it would draw alone, in the same order: its runs' delays and its words'
    lengths, then its segments' keys, its rotation and its label keys.
    """
    if word_len.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SpanDraw(empty, empty)
    if isinstance(rng, np.random.Generator):
        word_segment = segment_words(new_run, rng, law)
        return SpanDraw(deal_windows(word_len, word_row, word_segment, tau, copies, rng), word_segment)
    n_rows = tau.size
    runs = np.bincount(word_row[new_run], minlength=n_rows).tolist()
    words = np.bincount(word_row, minlength=n_rows).tolist()
    u = [g.random(r + w) for g, r, w in zip(rng, runs, words, strict=True)]
    word_segment = _segments(new_run, law, np.concatenate([x[:r] for x, r in zip(u, runs, strict=True)]),
                             np.concatenate([x[r:] for x, r in zip(u, runs, strict=True)]))
    seg_first = np.flatnonzero(np.diff(word_segment, prepend=-1))
    segments = np.bincount(word_row[seg_first], minlength=n_rows).tolist()
    u_order = np.concatenate([g.random(s) for g, s in zip(rng, segments, strict=True)])
    u_rotation = np.array([g.random() for g in rng])
    u_labels = np.stack([g.random(copies) for g in rng]) if copies > 1 else None
    return SpanDraw(_deal(word_len, word_row, word_segment, tau, copies, u_order, u_rotation, u_labels), word_segment)


def sample_segment_spans(
    word_len: np.ndarray, adjacent: np.ndarray, tau: int, copies: int, rng: np.random.Generator, law: SpanLaw
) -> SpanDraw:
    """One row: segment the words, then deal K disjoint copies of ~``tau`` tokens (module doc, steps 1-2).

    ``word_len[w]``: tokens of maskable word ``w``; ``adjacent[w]``: word ``w+1`` follows word ``w`` with no
    special token between them. ``copies=1`` is MLM-span; FE draws once with K copies, the iid control K
    times with one copy each.
    """
    word_len = np.asarray(word_len, dtype=np.int64)
    new_run = np.concatenate(([True], ~np.asarray(adjacent, dtype=bool)))
    row = np.zeros(word_len.size, dtype=np.int64)
    return draw_rows(word_len, new_run, row, np.array([tau]), copies, rng, law)


def placed_spans(draw: SpanDraw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(copy, first_word, n_words)`` of every placed span: a maximal piece of one segment in one copy."""
    copy, seg = draw.word_copy, draw.word_segment
    start = np.ones(copy.size, dtype=bool)
    start[1:] = (copy[1:] != copy[:-1]) | (seg[1:] != seg[:-1])
    first = np.flatnonzero(start)
    n_words = np.diff(first, append=copy.size)
    keep = copy[first] >= 0
    return copy[first][keep], first[keep], n_words[keep]


def batch_words(word_ids: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, ...]:
    """Flat word arrays of a batch: ``(tok_row, tok_pos, tok_word, word_len, new_run, word_row)``.

    Tokens are the valid positions in row-major order; a word is a maximal stretch of tokens of one row with
    one word id; a run starts at a row's first word and wherever the word ids jump (a special in between).
    """
    tok_row, tok_pos = np.nonzero(valid)
    wid = word_ids[tok_row, tok_pos]
    new_word = np.ones(tok_row.size, dtype=bool)
    new_word[1:] = (wid[1:] != wid[:-1]) | (tok_row[1:] != tok_row[:-1])
    first = np.flatnonzero(new_word)
    word_len = np.diff(first, append=tok_row.size)
    word_row, word_wid = tok_row[first], wid[first]
    new_run = np.ones(first.size, dtype=bool)
    new_run[1:] = (word_wid[1:] != word_wid[:-1] + 1) | (word_row[1:] != word_row[:-1])
    return tok_row, tok_pos, np.cumsum(new_word) - 1, word_len, new_run, word_row


def select_spans(
    word_ids: torch.Tensor,
    valid: torch.Tensor,
    tau: torch.Tensor,
    copies: int,
    strategy: str,
    law: SpanLaw,
    generator: torch.Generator,
) -> torch.Tensor:
    """Span selection ``BoolTensor[B, K, L]`` for all three strategies, vectorised over the batch.

    ``fully_explored``: one draw with K copies per row; ``random`` (K = 1) and ``iid``: each copy is an
    independent one-copy draw (the batch is repeated K times; iid copies may overlap). Only valid tokens
    are selected.
    """
    bsz, length = valid.shape
    rng = numpy_rng(generator)
    valid_np, wid_np, tau_np = valid.cpu().numpy(), word_ids.cpu().numpy(), tau.cpu().numpy().astype(np.int64)
    per_draw = copies if strategy == "fully_explored" else 1
    if per_draw == 1 and copies > 1:  # iid: K independent rows per sequence
        valid_np, wid_np, tau_np = (np.repeat(x, copies, axis=0) for x in (valid_np, wid_np, tau_np))
    tok_row, tok_pos, tok_word, word_len, new_run, word_row = batch_words(wid_np, valid_np)
    word_copy = draw_rows(word_len, new_run, word_row, tau_np, per_draw, rng, law).word_copy
    tok_copy = word_copy[tok_word]
    hit = tok_copy >= 0
    if per_draw == 1:  # row ``b * copies + k`` of the (repeated) batch is copy k of sequence b
        out = np.zeros((bsz * copies, length), dtype=bool)
        out[tok_row[hit], tok_pos[hit]] = True
    else:
        out = np.zeros((bsz, copies, length), dtype=bool)
        out[tok_row[hit], tok_copy[hit], tok_pos[hit]] = True
    return torch.from_numpy(out.reshape(bsz, copies, length)).to(valid.device)
