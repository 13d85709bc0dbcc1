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

Speed (issue 46). :func:`mask_visits` works on the whole batch: budgets, the random orders' ranks, the selection
and the 80/10/10 replacement are batch tensor operations. Only what the mask law ties to a row stays per row:
its two generators (seeded from ``(seed, key, cycle)`` and ``(seed, key, visit)``, the seeds mixed for all rows at
once) and their draws, in the shapes and order of the per-row code it replaced, so the masks are bit for bit
those of that code (kept as the reference in tests/helpers/passes_reference.py). Spans are segmented and dealt
for the whole batch, each row drawing from its own numpy stream; whole words walk row by row (FE's walk).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .config import PASSES, MaskingError
from .maskers import empty_draws, replace_from_draws, replacement_draws, replacement_probs
from .sampling import mask_budget, mix_seeds, numpy_rng, ranks_from_keys
from .spans import batch_words, draw_rows
from .wholeword import sample_whole_words
from .words import word_ids_from_starts

# micro_step streams of make_generator(seed, key, cycle-or-visit, stream): partitions, and replacement draws
STREAM_CYCLE, STREAM_VISIT = 28_001, 28_002


def sequence_key(token_ids: Sequence[int] | torch.Tensor) -> int:
    """A 63-bit key from a sequence's token ids (for callers without a sequence index, e.g. a drop-in)."""
    ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
    digest = hashlib.blake2b(",".join(map(str, ids)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def visit_budgets(masker: Any, n_valid: torch.Tensor, ratio: float | None = None,
                  visits: torch.Tensor | None = None) -> torch.Tensor:
    """``tau`` per row of ``n_valid`` maskable tokens: MLM's exact count. The first row with a negative
    visit, or with ``K * tau > n`` without the masker's ``allow_short_rows``, is refused in one line (naming
    ``masking.num_masks`` for the budget); with it, FE mode's rule for short rows (module doc)."""
    k_all, resolved = int(masker.cfg.num_masks), masker.resolve_ratio(ratio)
    tau = mask_budget(n_valid, resolved)  # MLM's exact count: no cap
    bad_budget = torch.zeros_like(n_valid, dtype=torch.bool) if masker.allow_short_rows else k_all * tau > n_valid
    bad_visit = torch.zeros_like(bad_budget) if visits is None else visits < 0
    bad = (bad_budget | bad_visit).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        if bad_visit[row]:
            raise MaskingError(f"visit={int(visits[row])} is invalid; allowed: 0, 1, 2, ... (the pass in which the "
                               "row is read)")
        n_row, tau_row = int(n_valid[row]), int(tau[row])
        raise MaskingError(
            f"masking.num_masks={k_all} is invalid for a row of {n_row} maskable tokens: {k_all} disjoint masks "
            f"of tau={tau_row} need {k_all * tau_row}; allowed: num_masks <= {n_row // max(tau_row, 1)} at "
            f"masking.ratio={resolved} (or longer rows)"
        )
    if not masker.allow_short_rows:
        return tau
    return torch.where(n_valid < k_all, n_valid.clamp(max=1), torch.minimum(tau, n_valid // k_all))


def visit_selection(masker: Any, input_ids: torch.Tensor, seed: int, key: int, visit: int,
                    valid: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                    ratio: float | None = None) -> torch.Tensor:
    """BoolTensor[L]: the positions one row masks at its visit ``visit`` (module doc); a pure function.

    ``masker``: a :class:`femlm.masking.Masker` of a ``fully_explored_passes`` config; ``input_ids`` ``[L]``;
    ``valid`` (default: the masker's rule: not special, attended) and ``word_ids`` (default: from the masker's
    word-start table) may be given when the caller has them; ``ratio``: a schedule's value at this visit's step.
    """
    _check_strategy(masker)
    ids = input_ids.reshape(1, -1).long()
    valid = masker.valid_mask(ids) if valid is None else valid.reshape(1, -1).bool()
    visits = torch.tensor([int(visit)])
    tau = visit_budgets(masker, valid.sum(dim=1).cpu(), ratio, visits)
    wid = None if word_ids is None else word_ids.reshape(1, -1)
    return _selection(masker, ids, valid, tau, np.array([int(key)]), visits, seed, wid)[0]


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
    _check_strategy(masker)
    input_ids = input_ids.long()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    keys_np = np.asarray(keys.tolist() if isinstance(keys, torch.Tensor) else [int(x) for x in keys], dtype=np.int64)
    visits_t = torch.as_tensor(visits.tolist() if isinstance(visits, torch.Tensor) else [int(x) for x in visits],
                               dtype=torch.long).reshape(-1)
    if not keys_np.size == visits_t.numel() == input_ids.shape[0]:
        raise MaskingError(f"{input_ids.shape[0]} rows need one key and one visit each; got {keys_np.size} keys "
                           f"and {visits_t.numel()} visits")
    valid = masker.valid_mask(input_ids, attention_mask, special_mask)
    n_valid = valid.sum(dim=1).cpu()
    cfg = masker.cfg
    if masker.allow_short_rows:  # FE mode's count: a row with fewer maskable tokens than K, per visit
        masker.short_rows += int((n_valid < int(cfg.num_masks)).sum())
    tau = visit_budgets(masker, n_valid, ratio, visits_t)
    sel = _selection(masker, input_ids, valid, tau, keys_np, visits_t, seed, word_ids)
    inputs, labels = _replace(masker, input_ids, sel, mix_seeds(seed, keys_np, visits_t.numpy(), STREAM_VISIT))
    device = input_ids.device
    return {"input_ids": inputs, "attention_mask": attention_mask, "labels": labels,
            "sequence_index": torch.arange(input_ids.shape[0], device=device),
            "copy_index": (visits_t % int(cfg.num_masks)).to(device)}


def _check_strategy(masker: Any) -> None:
    if masker.cfg.strategy != PASSES:
        raise MaskingError(f"mask_visits needs masking.strategy={PASSES!r}, got {masker.cfg.strategy!r}")


def _selection(masker: Any, input_ids: torch.Tensor, valid: torch.Tensor, tau: torch.Tensor, keys: np.ndarray,
               visits: torch.Tensor, seed: int, word_ids: torch.Tensor | None) -> torch.Tensor:
    """BoolTensor[B, L]: row b's mask at visit ``visits[b]``: slot ``visit mod K`` of its cycle's partition, drawn
    from the row's generator ``make_generator(seed, key, cycle, STREAM_CYCLE)``."""
    k_all = int(masker.cfg.num_masks)
    cycles, slot = visits // k_all, visits % k_all
    seeds = mix_seeds(seed, keys, cycles.numpy(), STREAM_CYCLE)
    gen, valid_cpu = torch.Generator(), valid.cpu()
    if masker.cfg.granularity == "subword":  # random_ranks' draw per row, then one argsort for the batch
        rank_keys = torch.empty(valid.shape, dtype=torch.float64)
        for row, row_seed in zip(rank_keys.split(1), seeds, strict=True):
            torch.rand(row.shape, generator=gen.manual_seed(row_seed), dtype=torch.float64, out=row)
        ranks = ranks_from_keys(rank_keys, valid_cpu)
        width = (valid_cpu.sum(dim=1) // k_all).clamp(min=1)  # >= 1: a short row (n < K) masks rank k at visit k < n
        first = (slot * width)[:, None]
        return ((ranks >= first) & (ranks < first + tau[:, None]) & valid_cpu).to(valid.device)
    if word_ids is None:
        word_ids = word_ids_from_starts(input_ids, masker.word_starts, ~valid)
    # The batch's words once (as select_spans / select_word_level find them row by row), then FE's sampler on
    # each row's words with the row's own numpy stream (numpy_rng of its generator, as those functions draw it).
    tok_row, tok_pos, tok_word, word_len, new_run, word_row = batch_words(word_ids.cpu().numpy(), valid_cpu.numpy())
    tau_np = tau.numpy().astype(np.int64)
    rngs = [numpy_rng(gen.manual_seed(row_seed)) for row_seed in seeds]
    if masker.cfg.granularity == "span":  # segment-then-deal for the batch, each row from its own stream
        word_copy = draw_rows(word_len, new_run, word_row, tau_np, k_all, rngs, masker.span_law).word_copy
    else:  # whole words: FE's walk, row by row
        word_copy = np.full(word_len.size, -1, dtype=np.int64)
        cuts = np.searchsorted(word_row, np.arange(len(seeds) + 1)).tolist()
        for b, rng in enumerate(rngs):
            words = slice(cuts[b], cuts[b + 1])
            if words.start < words.stop and tau_np[b] > 0:
                word_copy[words] = sample_whole_words(word_len[words].tolist(), int(tau_np[b]), k_all, rng)
    hit = word_copy[tok_word] == slot.numpy()[tok_row]
    out = np.zeros(valid.shape, dtype=bool)
    out[tok_row[hit], tok_pos[hit]] = True
    return torch.from_numpy(out).to(valid.device)


def _replace(masker: Any, input_ids: torch.Tensor, selected: torch.Tensor,
             seeds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``femlm.masking.maskers.apply_replacement`` of every row with its own generator (``seeds[b]``): each row's
    draws in their shapes and order, the replacement itself for the whole batch."""
    cfg, gen = masker.cfg, torch.Generator()
    per_span = cfg.replacement == "span"
    ids, sel = input_ids.cpu(), selected.cpu()
    draws = empty_draws(ids.shape, per_span)
    probs = None if per_span else replacement_probs((1, ids.shape[1]), cfg.mask_replace_prob,
                                                    cfg.random_replace_prob)  # one row's
    for row, row_seed in zip(zip(*(d.split(1) for d in draws), strict=True), seeds, strict=True):
        replacement_draws(row, probs, masker.vocab_size, gen.manual_seed(row_seed), per_span)
    inputs, labels = replace_from_draws(ids, sel, draws, masker.mask_token_id, cfg.mask_replace_prob,
                                        cfg.random_replace_prob, per_span)
    return inputs.to(input_ids.device), labels.to(input_ids.device)
