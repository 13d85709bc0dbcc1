"""The masker: ``input_ids [B, L] -> K masked copies [B*K, L]`` with labels, pure tensor code.

Row layout of the output is sequence-major: row ``b*K + k`` is copy ``k`` of input sequence ``b``
(``sequence_index = arange(B).repeat_interleave(K)``, ``copy_index = arange(K).repeat(B)``), so the K copies
of a sequence are adjacent and a batch can be split into micro-batches without separating them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from .bounds import Shape, WordLengths, label_bound, needs_words
from .config import PASSES, MaskingConfig, MaskingError
from .sampling import (
    mask_budget,
    select_subword_bernoulli,
    select_subword_exact,
    select_word_level,
    truncated_geometric_pmf,
)
from .spans import select_spans, span_law
from .words import select_word_bernoulli, word_ids_from_starts

IGNORE_INDEX = -100  # PyTorch/HF cross-entropy ignore value: unmasked positions carry no loss


def apply_replacement(
    input_ids: torch.Tensor,
    selected: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    mask_replace_prob: float,
    random_replace_prob: float,
    generator: torch.Generator,
    per_span: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 on the selected positions; returns ``(inputs, labels)`` for ``[N, L]`` tensors.

    Per token (default): the same draws, in the same order, as HF ``torch_mask_tokens``:
    ``bernoulli(mask_replace_prob)`` picks the [MASK] positions, ``bernoulli(random_replace_prob / (1 -
    mask_replace_prob))`` picks random-token positions among the rest, and random ids are uniform over
    ``[0, vocab_size)`` (like HF's ``len(tokenizer)``).

    ``per_span``: SpanBERT's ``--replacement-method span``, ONE draw per run of selected tokens (see
    :func:`span_starts`): the run is wholly [MASK] (prob ``mask_replace_prob``), wholly random ids -- one per
    token, uniform like the per-token path (SpanBERT draws from its token list) -- (prob
    ``random_replace_prob``), or wholly kept.

    Labels hold the original id at every selected position (also the kept ones) and -100 elsewhere.
    The draws (`replacement_draws`) and their use (`replace_from_draws`) are apart so that FE across passes
    (femlm.masking.passes) can draw row by row, each row with its own generator, and replace the batch at once.
    """
    draws = empty_draws(input_ids.shape, per_span, generator.device)
    probs = None if per_span else replacement_probs(input_ids.shape, mask_replace_prob, random_replace_prob,
                                                    generator.device)
    replacement_draws(draws, probs, vocab_size, generator, per_span)
    draws = tuple(d.to(input_ids.device) for d in draws)
    return replace_from_draws(input_ids, selected, draws, mask_token_id, mask_replace_prob, random_replace_prob,
                              per_span)


def replacement_probs(shape: Any, mask_replace_prob: float, random_replace_prob: float,
                      device: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The per-token law's Bernoulli probabilities over `shape`: [MASK], then random ids among the rest (None when
    the law draws no random ids, as HF skips them)."""
    p_mask = torch.full(shape, float(mask_replace_prob), device=device)
    if mask_replace_prob >= 1.0 or random_replace_prob <= 0.0:
        return p_mask, None
    return p_mask, torch.full(shape, min(1.0, random_replace_prob / (1.0 - mask_replace_prob)), device=device)


def empty_draws(shape: Any, per_span: bool, device: Any = None) -> tuple[torch.Tensor, ...]:
    """Tensors for `replacement_draws`: per span (uniform draws, random ids), per token ([MASK] draws,
    random-position draws, random ids)."""
    ids = torch.zeros(shape, dtype=torch.long, device=device)
    if per_span:
        return torch.empty(shape, dtype=torch.float64, device=device), ids
    return torch.empty(shape, device=device), torch.zeros(shape, device=device), ids


def replacement_draws(out: tuple[torch.Tensor, ...], probs: tuple[torch.Tensor, torch.Tensor | None] | None,
                      vocab_size: int, generator: torch.Generator, per_span: bool = False) -> None:
    """Fill `out` (from `empty_draws`, or rows of it) with the 80/10/10 draws of one generator, in HF's order;
    `probs`: `replacement_probs` of `out`'s shape (unused per span)."""
    if per_span:
        draw, words = out
        torch.rand(draw.shape, generator=generator, dtype=torch.float64, out=draw)
        torch.randint(vocab_size, words.shape, generator=generator, out=words)
        return
    assert probs is not None, "the per-token law needs its probabilities (replacement_probs)"
    (replaced, random_pos, words), (p_mask, p_random) = out, probs
    torch.bernoulli(p_mask, generator=generator, out=replaced)
    if p_random is not None:
        torch.bernoulli(p_random, generator=generator, out=random_pos)
        torch.randint(vocab_size, words.shape, generator=generator, out=words)


def replace_from_draws(input_ids: torch.Tensor, selected: torch.Tensor, draws: tuple[torch.Tensor, ...],
                       mask_token_id: int, mask_replace_prob: float, random_replace_prob: float,
                       per_span: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, labels)`` from the draws of `replacement_draws` (on `input_ids`' device)."""
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    if per_span:
        draw, words = draws
        draw = draw.gather(-1, span_starts(selected))  # the draw at the run's first token decides the run
        to_mask = selected & (draw < mask_replace_prob)
        to_random = selected & ~to_mask & (draw < mask_replace_prob + random_replace_prob)
    else:
        replaced, random_pos, words = draws
        to_mask = replaced.bool() & selected
        to_random = random_pos.bool() & selected & ~to_mask  # all False when no random ids were drawn
    return torch.where(to_random, words, input_ids.masked_fill(to_mask, mask_token_id)), labels


def span_starts(selected: torch.Tensor) -> torch.Tensor:
    """LongTensor like ``selected``: position of the first token of the selected run each position is in.

    A run is a maximal stretch of consecutive selected positions of one row; touching spans form one run,
    as SpanBERT's ``merge_intervals`` joins touching intervals before its per-span draw. Specials are never
    selected, so runs never cross a [SEP]. Values at unselected positions are meaningless.
    """
    before = torch.zeros_like(selected)
    before[:, 1:] = selected[:, :-1]
    positions = torch.arange(selected.shape[-1], device=selected.device).expand_as(selected)
    return torch.where(selected & ~before, positions, 0).cummax(dim=-1).values


class Masker:
    """Callable implementing one :class:`MaskingConfig`; build it with :func:`build_masker`.

    ``masker(input_ids, attention_mask, generator)`` returns a dict with ``input_ids``, ``attention_mask``,
    ``labels`` (-100 where unmasked), ``sequence_index`` and ``copy_index``, each with ``B*K`` rows.

    Maskable ("valid") positions: ``attention_mask == 1``, the id is not in ``special_ids`` and the given
    ``special_mask`` (if any) is 0. Specials and padding are never masked and never counted in ``n_valid``.

    Options for Hugging Face's conventions (the drop-in :class:`femlm.DataCollatorForFullyExploredLM` sets
    both; femlm's trainer keeps the defaults):

    * ``given_mask_only``: when a ``special_mask`` is given, it alone (with the attention mask) decides which
      tokens are maskable, as HF's collator does with a ``special_tokens_mask`` -- a literal [UNK] the mask
      leaves at 0 may then be masked. Default False: the special ids are never masked, mask given or not.
    * ``allow_short_rows``: a row with fewer maskable tokens than ``K * max(1, tau)`` (an empty or one-word
      line) is masked with as many disjoint masks as it allows -- ``tau = 1``, one token per copy while tokens
      last -- and its remaining copies are left unlabelled (all -100), as HF leaves an all-special row
      unlabelled. Default False: such a row raises :class:`MaskingError` (femlm's pre-training blocks are
      full, so a short row there is a bug). Either way ``short_rows`` counts them (see :meth:`select`).
    """

    def __init__(
        self,
        cfg: MaskingConfig,
        mask_token_id: int,
        vocab_size: int,
        special_ids: Iterable[int] = (),
        word_starts: torch.Tensor | None = None,
        *,
        given_mask_only: bool = False,
        allow_short_rows: bool = False,
    ) -> None:
        self.cfg = cfg.validate()
        self.given_mask_only = bool(given_mask_only)
        self.allow_short_rows = bool(allow_short_rows)
        self.short_rows = 0  # rows seen with fewer maskable tokens than K * max(1, tau) (0 maskable with bernoulli)
        self.mask_token_id = int(mask_token_id)
        self.vocab_size = int(vocab_size)
        self.special_ids = torch.tensor(sorted({int(i) for i in special_ids}), dtype=torch.long)
        self.word_starts = None if word_starts is None else word_starts.bool().cpu()
        if cfg.granularity == "span":
            self.span_lengths, self.span_pmf = truncated_geometric_pmf(cfg.span_p, cfg.span_min, cfg.span_max)
        else:  # whole words are spans of exactly one word; unused for sub-word granularity
            self.span_lengths, self.span_pmf = np.array([1]), np.array([1.0])
        self.span_law = span_law(self.span_lengths, self.span_pmf)

    @property
    def num_copies(self) -> int:
        return self.cfg.num_copies

    def label_bound(self, rows: int, length: int, sample: Any = None) -> Shape:
        """The fixed shape of micro-batches of ``rows`` model rows of ``length`` tokens under this masker's law
        (:mod:`femlm.masking.bounds`); word-level laws measure their words on ``sample``, token blocks the masker
        will see (without it, or without a word-start table: one token per word)."""
        words = None
        if needs_words(self.cfg) and sample is not None:
            words = WordLengths.measure(self, sample)
        return label_bound(self.cfg, rows, length, self.num_copies, words)

    # ------------------------------------------------------------------ pieces (public for tests/analysis)
    def valid_mask(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        special_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """BoolTensor[B, L] of maskable positions."""
        valid = torch.ones_like(input_ids, dtype=torch.bool)
        if attention_mask is not None:
            valid &= attention_mask.bool()
        if self.special_ids.numel() and not (self.given_mask_only and special_mask is not None):
            valid &= ~torch.isin(input_ids, self.special_ids.to(input_ids.device))
        if special_mask is not None:
            valid &= ~special_mask.bool()
        return valid

    def budget(self, n_valid: torch.Tensor, ratio: float | None = None) -> torch.Tensor:
        """tau per row at ``ratio`` (default ``cfg.ratio``; see :func:`femlm.masking.sampling.mask_budget`)."""
        return mask_budget(n_valid, self.resolve_ratio(ratio), self.num_copies)

    def resolve_ratio(self, ratio: float | None = None) -> float:
        """``ratio`` (a point of the config's schedule, ``cfg.ratio_at``) checked against K, or ``cfg.ratio``."""
        if ratio is None:
            return self.cfg.ratio
        if not 0.0 < ratio <= 1.0 or self.num_copies * ratio > 1.0 + 1e-9:
            raise MaskingError(f"masking ratio {ratio} is invalid with K={self.num_copies}; allowed: 0 < K*ratio <= 1")
        return float(ratio)

    def check_fits(self, n_valid: torch.Tensor, tau: torch.Tensor) -> None:
        """K > 1 copies need ``n_valid >= K * max(1, tau)``; never silently overlap or drop copies."""
        k = self.num_copies
        if k == 1 or self.cfg.count == "bernoulli":
            return
        bad = (n_valid < k * tau.clamp(min=1)).nonzero().flatten()
        if bad.numel():
            row = int(bad[0])
            raise MaskingError(
                f"row {row} has n_valid={int(n_valid[row])} maskable tokens (specials/padding excluded) but "
                f"strategy={self.cfg.strategy} with num_masks K={k} needs at least K*max(1,tau)={k * max(1, int(tau[row]))} "
                f"({bad.numel()} row(s) too short); drop or pack short sequences, or lower masking.num_masks"
            )

    def select(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        generator: torch.Generator,
        special_mask: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        ratio: float | None = None,
    ) -> torch.Tensor:
        """BoolTensor[B, K, L]: which positions each copy masks (no replacement applied).

        Adds to ``short_rows`` the rows with fewer maskable tokens than ``K * max(1, tau)`` (with ``count:
        bernoulli``: rows with none); with ``allow_short_rows`` they get ``tau = 1`` (see the class doc).
        """
        cfg = self.cfg
        if cfg.strategy == PASSES:
            raise MaskingError(
                f"masking.strategy={PASSES!r} masks a row by its sequence key and visit, not by a batch generator: "
                "use femlm.masking.passes.mask_visits (femlm's trainer) or DataCollatorForFullyExploredLM with an "
                "int seed"
            )
        k = self.num_copies
        valid = self.valid_mask(input_ids, attention_mask, special_mask)
        n_valid = valid.sum(dim=1)
        if cfg.count == "bernoulli":
            self.short_rows += int((n_valid == 0).sum())
            if cfg.granularity == "subword":
                return select_subword_bernoulli(valid, self.resolve_ratio(ratio), k, generator)
            return select_word_bernoulli(self._word_ids(input_ids, valid, word_ids), valid,
                                         self.resolve_ratio(ratio), k, generator)
        tau = self.budget(n_valid, ratio)
        short = n_valid < k * tau.clamp(min=1)
        if not self.allow_short_rows:
            self.check_fits(n_valid, tau)
        elif k > 1 and short.any():  # one token per copy while tokens last; the samplers leave the rest empty
            tau = torch.where(short & (n_valid > 0), torch.ones_like(tau), tau)
        self.short_rows += int(short.sum())
        if cfg.granularity == "subword":
            return select_subword_exact(valid, tau, k, cfg.strategy, generator) & valid[:, None, :]
        word_ids = self._word_ids(input_ids, valid, word_ids)
        if cfg.granularity == "span":
            return select_spans(word_ids, valid, tau, k, cfg.strategy, self.span_law, generator)
        return select_word_level(
            word_ids, valid, tau, k, cfg.strategy, self.span_lengths, self.span_pmf, generator
        )

    def _word_ids(self, input_ids: torch.Tensor, valid: torch.Tensor, word_ids: torch.Tensor | None) -> torch.Tensor:
        return word_ids_from_starts(input_ids, self.word_starts, ~valid) if word_ids is None else word_ids

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        *,
        special_mask: torch.Tensor | None = None,
        word_ids: torch.Tensor | None = None,
        ratio: float | None = None,
    ) -> dict[str, torch.Tensor]:
        """Mask a batch. ``generator=None`` falls back to torch's global generator (not reproducible);
        ``ratio`` overrides ``cfg.ratio`` (a ratio schedule's value at this step, ``cfg.ratio_at(step, total)``)."""
        if input_ids.dim() != 2:
            raise MaskingError(f"input_ids must be [B, L], got shape {tuple(input_ids.shape)}")
        input_ids = input_ids.long()
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        gen = generator if generator is not None else torch.default_generator
        sel = self.select(input_ids, attention_mask, gen, special_mask, word_ids, ratio)
        bsz, k, length = sel.shape
        ids = input_ids.repeat_interleave(k, dim=0)
        inputs, labels = apply_replacement(
            ids,
            sel.reshape(bsz * k, length),
            self.mask_token_id,
            self.vocab_size,
            self.cfg.mask_replace_prob,
            self.cfg.random_replace_prob,
            gen,
            per_span=self.cfg.replacement == "span",
        )
        device = input_ids.device
        return {
            "input_ids": inputs,
            "attention_mask": attention_mask.repeat_interleave(k, dim=0),
            "labels": labels,
            "sequence_index": torch.arange(bsz, device=device).repeat_interleave(k),
            "copy_index": torch.arange(k, device=device).repeat(bsz),
        }

    def __repr__(self) -> str:
        return f"Masker({self.cfg.name}: {self.cfg.strategy}/{self.cfg.granularity}, K={self.num_copies})"


# The masker for a config: Masker(cfg, mask_token_id, vocab_size, special_ids, word_starts) validates `cfg`;
# `word_starts` (from word_start_table) is needed for real whole-word/span masking, without it every token is a word.
build_masker = Masker
