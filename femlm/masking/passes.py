"""Fully-explored masking across passes: K disjoint masks per sequence and cycle, one per visit.

Strategy ``fully_explored_passes`` (issue 28). A sequence read on several passes over the corpus gets, on its
visit ``v``, mask ``v mod K`` of the partition of cycle ``v // K``: K disjoint masks drawn once per cycle by the
same sampler as ``fully_explored``, seeded by ``(seed, key, cycle)`` alone. One masked copy per visit, so a visit
costs what an MLM row costs; over the K visits of a cycle every maskable unit is masked at most once (exactly
once when ``K * tau = n``), and each visit's mask is marginally an exact-count MLM mask of ``tau`` tokens (a
uniform ``tau``-subset for sub-words, the paper's Lemma 2: unbiased).

The mask is a pure function of ``(seed, key, visit)`` and the row's tokens (:func:`visit_selection`):

* ``key`` names the sequence: femlm's trainer passes the block index, the drop-in collator can pass a hash of
  the sequence's token ids (any integer; see ``sequence_key``);
* ``visit`` is the pass over the corpus in which the sequence is read (femlm's trainer: the epoch of its data
  order, ``femlm.train.core.DataOrder``; a drop-in: the epoch given by ``set_epoch``).

Nothing else (batch composition, rank, worker, micro-batch, step) enters, so a resumed run, DDP ranks and
DataLoader workers draw exactly the masks of one uninterrupted process. The 80/10/10 replacement of a visit
is drawn from its own stream ``(seed, key, visit)``, so whole rows (inputs and labels) are reproducible too.

Budgets. ``tau = round_half_up(ratio * n)``, MLM's exact count (no cap): K disjoint masks need ``K * tau <= n``,
and a row where they do not fit is refused (one line naming ``masking.num_masks``), never masked with overlap.
Short rows (only with the masker's ``allow_short_rows``, which the drop-in collator sets; femlm's trainer keeps
refusing): FE mode's rule, never overlap either -- ``tau`` is capped at ``n // K``, and a row with fewer than K
maskable tokens gets ``tau = 1`` at visits ``k < n`` and no mask (all labels -100) at visits ``k >= n``; such a
visit counts in the masker's ``short_rows`` (:func:`mask_visits`).

Granularity. Sub-words: one uniform random order of the row's maskable positions per cycle; visit ``k`` masks
the ``tau`` lowest ranks of slot ``k``, the ranks ``[k w, (k + 1) w)`` with ``w = max(1, n // K)``. Whole words and
spans: one call of the ``fully_explored`` selection (``sample_word_spans`` for whole words, the segment-then-deal
sampler for spans) with K copies per cycle, copy ``k`` at visit ``k``; each visit has that sampler's per-copy law.

Ratio schedules (sub-words only; whole words and spans are refused by ``MaskingConfig.validate``): the slots are
fixed per cycle, ``tau`` follows the schedule at the step of the visit, so visit ``k`` masks the ``tau_k``
lowest ranks of slot ``k``: disjoint within a cycle whenever ``K * tau <= n`` at every step (checked).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch

from .config import PASSES, MaskingError
from .maskers import apply_replacement
from .sampling import make_generator, mask_budget, random_ranks, select_word_level
from .spans import select_spans
from .words import word_ids_from_starts

# micro_step streams of make_generator(seed, key, cycle-or-visit, stream): partitions, and replacement draws
STREAM_CYCLE, STREAM_VISIT = 28_001, 28_002


def sequence_key(token_ids: Sequence[int] | torch.Tensor) -> int:
    """A 63-bit key from a sequence's token ids (for callers without a sequence index, e.g. a drop-in)."""
    ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
    digest = hashlib.blake2b(",".join(map(str, ids)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def visit_budget(masker: Any, n_row: int, ratio: float | None = None) -> tuple[int, bool]:
    """``(tau, short)`` of a row of ``n_row`` maskable tokens: MLM's exact count; ``K * tau > n`` is refused in one
    line naming ``masking.num_masks`` unless the masker has ``allow_short_rows`` (the module doc's short rows)."""
    k_all = int(masker.cfg.num_masks)
    tau_row = int(mask_budget(torch.tensor([n_row]), masker.resolve_ratio(ratio))[0])  # MLM's exact count: no cap
    if not masker.allow_short_rows:
        if k_all * tau_row > n_row:
            raise MaskingError(
                f"masking.num_masks={k_all} is invalid for a row of {n_row} maskable tokens: {k_all} disjoint masks "
                f"of tau={tau_row} need {k_all * tau_row}; allowed: num_masks <= {n_row // max(tau_row, 1)} at "
                f"masking.ratio={masker.resolve_ratio(ratio)} (or longer rows)"
            )
        return tau_row, False
    tau_row = min(tau_row, n_row // k_all) if n_row >= k_all else min(1, n_row)  # FE mode's rule
    return tau_row, n_row < k_all


def visit_selection(masker: Any, input_ids: torch.Tensor, seed: int, key: int, visit: int,
                    valid: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                    ratio: float | None = None) -> torch.Tensor:
    """BoolTensor[L]: the positions one row masks at its visit ``visit`` (module doc); a pure function.

    ``masker``: a :class:`femlm.masking.Masker` of a ``fully_explored_passes`` config; ``input_ids`` ``[L]``;
    ``valid`` (default: the masker's rule: not special, attended) and ``word_ids`` (default: from the masker's
    word-start table) may be given when the caller has them; ``ratio``: a schedule's value at this visit's step.
    """
    cfg = masker.cfg
    if cfg.strategy != PASSES:
        raise MaskingError(f"visit_selection needs masking.strategy={PASSES!r}, got {cfg.strategy!r}")
    if visit < 0:
        raise MaskingError(f"visit={visit} is invalid; allowed: 0, 1, 2, ... (the pass in which the row is read)")
    ids = input_ids.reshape(1, -1).long()
    valid = masker.valid_mask(ids) if valid is None else valid.reshape(1, -1).bool()
    k_all = int(cfg.num_masks)
    n_row = int(valid.sum())
    tau_row, _ = visit_budget(masker, n_row, ratio)
    tau = torch.tensor([tau_row])
    cycle, k = divmod(int(visit), k_all)
    gen = make_generator(seed, key, cycle, STREAM_CYCLE)
    if cfg.granularity == "subword":
        width = max(1, n_row // k_all)  # >= 1: a short row (n < K) masks rank k at visit k < n
        ranks = random_ranks(valid, gen)[0]
        return (ranks >= k * width) & (ranks < k * width + tau_row) & valid[0]
    if word_ids is None:
        word_ids = word_ids_from_starts(ids, masker.word_starts, ~valid)
    word_ids = word_ids.reshape(1, -1)
    if cfg.granularity == "span":
        sel = select_spans(word_ids, valid, tau, k_all, "fully_explored", masker.span_law, gen)
    else:
        sel = select_word_level(word_ids, valid, tau, k_all, "fully_explored", masker.span_lengths,
                                masker.span_pmf, gen)
    return sel[0, k]


def mask_visits(masker: Any, input_ids: torch.Tensor, keys: Sequence[int] | torch.Tensor,
                visits: Sequence[int] | torch.Tensor, seed: int, attention_mask: torch.Tensor | None = None,
                special_mask: torch.Tensor | None = None, ratio: float | None = None,
                word_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Mask row ``b`` of ``input_ids [B, L]`` at its visit ``visits[b]``; one copy per row, the masker's layout.

    ``special_mask`` (e.g. a tokenizer's ``special_tokens_mask``) and ``word_ids [B, L]`` (e.g. from
    ``offset_mapping``, :func:`femlm.masking.word_ids_from_offsets`) may be given, as to the masker; without them
    the masker's own rules apply. Returns ``input_ids``, ``attention_mask``, ``labels`` (-100 where unmasked),
    ``sequence_index`` (``arange(B)``) and ``copy_index`` (``visits mod K``: which mask of the cycle each row got),
    each with ``B`` rows. With ``allow_short_rows`` the masker's ``short_rows`` counts the short rows masked.
    """
    if input_ids.dim() != 2:
        raise MaskingError(f"input_ids must be [B, L], got shape {tuple(input_ids.shape)}")
    input_ids = input_ids.long()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    keys_l = [int(x) for x in (keys.tolist() if isinstance(keys, torch.Tensor) else keys)]
    visits_l = [int(x) for x in (visits.tolist() if isinstance(visits, torch.Tensor) else visits)]
    if not len(keys_l) == len(visits_l) == input_ids.shape[0]:
        raise MaskingError(f"{input_ids.shape[0]} rows need one key and one visit each; got {len(keys_l)} keys "
                           f"and {len(visits_l)} visits")
    valid = masker.valid_mask(input_ids, attention_mask, special_mask)
    if masker.cfg.granularity == "subword":
        word_ids = None
    elif word_ids is None:
        word_ids = word_ids_from_starts(input_ids, masker.word_starts, ~valid)
    cfg = masker.cfg
    if masker.allow_short_rows:  # FE mode's count: a row with fewer maskable tokens than K, per visit
        masker.short_rows += int((valid.sum(dim=1) < int(cfg.num_masks)).sum())
    inputs, labels = torch.empty_like(input_ids), torch.empty_like(input_ids)
    for b, (key, visit) in enumerate(zip(keys_l, visits_l, strict=True)):
        sel = visit_selection(masker, input_ids[b], seed, key, visit, valid[b],
                              None if word_ids is None else word_ids[b], ratio)
        row_in, row_lab = apply_replacement(
            input_ids[b:b + 1], sel[None], masker.mask_token_id, masker.vocab_size, cfg.mask_replace_prob,
            cfg.random_replace_prob, make_generator(seed, key, visit, STREAM_VISIT),
            per_span=cfg.replacement == "span")
        inputs[b], labels[b] = row_in[0], row_lab[0]
    bsz = input_ids.shape[0]
    return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels,
            "sequence_index": torch.arange(bsz, device=input_ids.device),
            "copy_index": torch.tensor(visits_l, dtype=torch.long, device=input_ids.device) % int(cfg.num_masks)}
