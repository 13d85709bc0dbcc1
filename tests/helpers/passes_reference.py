"""The per-row `mask_visits` as it stood before issue 46 (femlm/masking/passes.py at a51740d), frozen.

The batched `femlm.masking.passes.mask_visits` must equal it bit for bit (tests/test_masking_passes_batched.py);
benchmarks/bench_masking.py times it as the "before" row. It loops over rows: per row a budget, a generator,
a random order (or the word-level sampler) and an 80/10/10 replacement with a second generator. Do not edit:
it is the reference, not a second implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from femlm.masking.config import MaskingError
from femlm.masking.maskers import apply_replacement
from femlm.masking.passes import STREAM_CYCLE, STREAM_VISIT
from femlm.masking.sampling import make_generator, mask_budget, random_ranks, select_word_level
from femlm.masking.spans import select_spans
from femlm.masking.words import word_ids_from_starts


def visit_budget(masker: Any, n_row: int, ratio: float | None = None) -> tuple[int, bool]:
    k_all = int(masker.cfg.num_masks)
    tau_row = int(mask_budget(torch.tensor([n_row]), masker.resolve_ratio(ratio))[0])
    if not masker.allow_short_rows:
        if k_all * tau_row > n_row:
            raise MaskingError(
                f"masking.num_masks={k_all} is invalid for a row of {n_row} maskable tokens: {k_all} disjoint masks "
                f"of tau={tau_row} need {k_all * tau_row}; allowed: num_masks <= {n_row // max(tau_row, 1)} at "
                f"masking.ratio={masker.resolve_ratio(ratio)} (or longer rows)"
            )
        return tau_row, False
    tau_row = min(tau_row, n_row // k_all) if n_row >= k_all else min(1, n_row)
    return tau_row, n_row < k_all


def visit_selection(masker: Any, input_ids: torch.Tensor, seed: int, key: int, visit: int,
                    valid: torch.Tensor | None = None, word_ids: torch.Tensor | None = None,
                    ratio: float | None = None) -> torch.Tensor:
    cfg = masker.cfg
    ids = input_ids.reshape(1, -1).long()
    valid = masker.valid_mask(ids) if valid is None else valid.reshape(1, -1).bool()
    k_all = int(cfg.num_masks)
    n_row = int(valid.sum())
    tau_row, _ = visit_budget(masker, n_row, ratio)
    tau = torch.tensor([tau_row])
    cycle, k = divmod(int(visit), k_all)
    gen = make_generator(seed, key, cycle, STREAM_CYCLE)
    if cfg.granularity == "subword":
        width = max(1, n_row // k_all)
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


def mask_visits_per_row(masker: Any, input_ids: torch.Tensor, keys: Sequence[int] | torch.Tensor,
                        visits: Sequence[int] | torch.Tensor, seed: int, attention_mask: torch.Tensor | None = None,
                        special_mask: torch.Tensor | None = None, ratio: float | None = None,
                        word_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    input_ids = input_ids.long()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    keys_l = [int(x) for x in (keys.tolist() if isinstance(keys, torch.Tensor) else keys)]
    visits_l = [int(x) for x in (visits.tolist() if isinstance(visits, torch.Tensor) else visits)]
    valid = masker.valid_mask(input_ids, attention_mask, special_mask)
    if masker.cfg.granularity == "subword":
        word_ids = None
    elif word_ids is None:
        word_ids = word_ids_from_starts(input_ids, masker.word_starts, ~valid)
    cfg = masker.cfg
    if masker.allow_short_rows:
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
