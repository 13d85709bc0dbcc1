"""Masking configuration: the typed schema of the `masking` section, and its checks.

A plain dataclass (Hydra registers it as the schema; ``conf/masking/<arm>.yaml`` holds only what an arm
changes), so the masking package stays usable without Hydra: ``MaskingConfig.from_dict`` accepts a dict or
``DictConfig`` and rejects unknown keys, so a typo fails loudly instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PASSES = "fully_explored_passes"  # K disjoint masks per sequence and cycle, one per visit (femlm.masking.passes)
STRATEGIES = ("random", "fully_explored", "iid", PASSES)
GRANULARITIES = ("subword", "whole_word", "span")
COUNTS = ("exact", "bernoulli")
REPLACEMENTS = ("token", "span")
RATIO_SCHEDULES = ("constant", "linear")
# What an arm is in a comparison, from its strategy (its one home): the paper's FE-MLM in one step or across passes
# is "fe", one random mask per sequence is "mlm" (a study's reference arm is one of these, named by its plan), and
# K independent masks are the "control" that isolates the non-overlap (femlm.study.verdicts reads these).
ROLES = {"random": "mlm", "fully_explored": "fe", PASSES: "fe", "iid": "control"}

# Tolerance for ``num_masks * ratio <= 1``: 4 * 0.25 is exactly 1 but 8 * 0.125 etc. must not fail on float noise.
_EPS = 1e-9


def _ratio_ok(ratio: Any) -> bool:
    return isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and math.isfinite(ratio) and 0 < ratio <= 1


class MaskingConfigError(ValueError):
    """An invalid masking setting; the message is one line naming the key, its value and the allowed range."""


class MaskingError(ValueError):
    """A batch that cannot be masked as configured (e.g. a row too short for K disjoint masks)."""


@dataclass
class MaskingConfig:
    """How to choose masked positions and how many masked copies to emit per sequence.

    Fields (all are YAML keys):
      name: free label used in run names and logs.
      label: how tables and figures name the arm (e.g. ``FE across passes``); empty: the name. Display only:
        it changes no mask, and a run resumes whatever its label. The arm's *role* in a comparison comes from
        its strategy (:attr:`role`).
      strategy: ``random`` (one mask per sequence, the MLM baseline), ``fully_explored`` (K disjoint masks,
        M_FE of the paper) or ``iid`` (K independent masks that may overlap: the control isolating
        non-overlap from merely having K copies) or ``fully_explored_passes`` (the K disjoint masks of a cycle
        of K visits of the sequence, one masked copy per visit: mask k at the k-th visit; femlm.masking.passes).
      granularity: ``subword`` (tokens), ``whole_word`` (all pieces of a word together) or ``span``
        (SpanBERT: geometric span lengths in words).
      ratio: masking ratio; each mask holds tau = round_half_up(ratio * n_valid) tokens, at least 1. With a
        schedule, the ratio at the first step.
      ratio_schedule: ``constant`` (``ratio`` throughout) or ``linear`` (from ``ratio`` at the first step to
        ``ratio_final`` at the last, Ankner et al. 2024: 0.30 -> 0.15). K stays fixed; tau follows the ratio.
      ratio_final: the ratio at the last step of a ``linear`` schedule (null for ``constant``).
      num_masks: K, the number of masks (masked copies) per sequence -- the paper's "number of splits". For
        ``strategy: random`` it is forced to 1 by :meth:`validate` (documented decision: the baseline has one
        mask, so a shared sweep override of ``num_masks`` cannot silently turn the baseline into K-copy
        training). For ``fully_explored_passes`` it is the number of visits per cycle (masks per partition);
        null there means floor(1 / ratio) at the schedule's peak, the most disjoint masks the ratio allows.
      count: ``exact`` (fixed-size mask set M(tau), the paper) or ``bernoulli`` (each valid token -- with
        ``whole_word`` granularity each word -- independently with probability ``ratio``: Hugging Face
        ``DataCollatorForLanguageModeling``, with and without ``whole_word_mask``); not with
        ``fully_explored``, ``fully_explored_passes`` or ``span``.
      mask_replace_prob / random_replace_prob: of the chosen positions, the share replaced by the mask
        token / by a uniformly random token id; the rest keep the original token (BERT's 80/10/10).
      span_p, span_min, span_max: truncated geometric law of span lengths in words (SpanBERT: 0.2, 1, 10).
      replacement: ``token`` (an 80/10/10 draw per masked token, BERT) or ``span`` (one draw per run of
        masked tokens, SpanBERT's ``--replacement-method span``); ``span`` needs whole_word/span granularity.
    """

    name: str = "mlm_subword"
    label: str = ""
    strategy: str = "random"
    granularity: str = "subword"
    ratio: float = 0.15
    ratio_schedule: str = "constant"
    ratio_final: float | None = None
    num_masks: int | None = 1
    count: str = "exact"
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    span_p: float = 0.2
    span_min: int = 1
    span_max: int = 10
    replacement: str = "token"

    @property
    def role(self) -> str:
        """``fe`` (FE-MLM, in one step or across passes), ``mlm`` (one random mask) or ``control`` (K i.i.d.
        masks), from the strategy (``ROLES``)."""
        return ROLES.get(self.strategy, "other")

    @property
    def num_copies(self) -> int:
        """The number of masked rows emitted per input sequence: K, or 1 for the random baseline and for
        ``fully_explored_passes`` (one copy per visit; its K masks are spread over K visits)."""
        return 1 if self.strategy in ("random", PASSES) else int(self.num_masks)

    @property
    def peak_ratio(self) -> float:
        """The largest ratio the schedule reaches (a linear schedule peaks at one of its ends)."""
        return max(self.ratio, self.ratio_final) if self.ratio_schedule == "linear" else self.ratio

    def ratio_at(self, step: int, total: int) -> float:
        """The ratio at step ``step`` (1-based) of ``total``: ``ratio`` at step 1, ``ratio_final`` at ``total``.

        A pure function of (step, total), so a run resumed at any step draws what an uninterrupted one would.
        """
        if self.ratio_schedule == "constant" or total <= 1:
            return float(self.ratio)
        progress = min(max(step - 1, 0), total - 1) / (total - 1)
        return float(self.ratio + (self.ratio_final - self.ratio) * progress)

    def validate(self) -> MaskingConfig:
        """Check every field; force ``num_masks = 1`` for ``strategy: random``; return ``self`` for chaining.

        Raises :class:`MaskingConfigError` with a one-line message on the first problem found.
        """

        def bad(key: str, value: Any, allowed: str) -> MaskingConfigError:
            return MaskingConfigError(f"masking.{key}={value!r} is invalid; allowed: {allowed}")

        if self.strategy not in STRATEGIES:
            raise bad("strategy", self.strategy, " | ".join(STRATEGIES))
        if self.granularity not in GRANULARITIES:
            raise bad("granularity", self.granularity, " | ".join(GRANULARITIES))
        if self.count not in COUNTS:
            raise bad("count", self.count, " | ".join(COUNTS))
        if self.num_masks is None and self.strategy == PASSES:
            self._validate_schedule()
            self.num_masks = max(1, math.floor(1.0 / self.peak_ratio + _EPS)) if _ratio_ok(self.ratio) else 1
        if isinstance(self.num_masks, bool) or not isinstance(self.num_masks, int):
            allowed = "an integer >= 1" + (" or null (floor(1 / ratio))" if self.strategy == PASSES else "")
            raise bad("num_masks", self.num_masks, allowed)
        if self.num_masks < 1:
            raise bad("num_masks", self.num_masks, "an integer >= 1")
        if self.strategy == "random":
            self.num_masks = 1
        ratio = self.ratio
        if not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or not 0.0 < ratio <= 1.0:
            raise bad("ratio", ratio, "0 < ratio <= 1")
        self._validate_schedule()
        peak = self.peak_ratio
        if self.num_masks * peak > 1.0 + _EPS:
            key = "ratio" if peak == ratio else "ratio_final"
            raise MaskingConfigError(
                f"masking.num_masks * masking.{key} = {self.num_masks} * {peak} = {self.num_masks * peak:g} is "
                "invalid; allowed: num_masks * ratio <= 1 at the schedule's peak (K disjoint masks of ratio*n "
                "tokens must fit in n tokens)"
            )
        for key in ("mask_replace_prob", "random_replace_prob"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise bad(key, value, "a probability in [0, 1]")
        total = self.mask_replace_prob + self.random_replace_prob
        if total > 1.0 + _EPS:
            raise MaskingConfigError(
                f"masking.mask_replace_prob + masking.random_replace_prob = {total:g} is invalid; allowed: sum <= 1"
            )
        if not isinstance(self.span_p, (int, float)) or not 0.0 < self.span_p <= 1.0:
            raise bad("span_p", self.span_p, "0 < span_p <= 1")
        for key in ("span_min", "span_max"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(key, value, "an integer >= 1")
        if self.span_min > self.span_max:
            raise MaskingConfigError(
                f"masking.span_min={self.span_min} > masking.span_max={self.span_max} is invalid; "
                "allowed: 1 <= span_min <= span_max"
            )
        if self.count == "bernoulli" and self.strategy in ("fully_explored", PASSES):
            raise MaskingConfigError(
                f"masking.count='bernoulli' is invalid with masking.strategy={self.strategy!r}; allowed: count=exact "
                "(disjoint masks need a fixed size tau per copy)"
            )
        if self.strategy == PASSES and self.ratio_schedule != "constant" and self.granularity != "subword":
            raise MaskingConfigError(
                f"masking.ratio_schedule={self.ratio_schedule!r} is invalid with masking.strategy={PASSES!r} and "
                f"masking.granularity={self.granularity!r}; allowed: ratio_schedule=constant, or granularity=subword "
                "(whole words and spans are dealt in windows of one tau per cycle)"
            )
        if self.count == "bernoulli" and self.granularity == "span":
            raise MaskingConfigError(
                "masking.count='bernoulli' is invalid with masking.granularity='span'; "
                "allowed: granularity subword | whole_word"
            )
        if self.replacement not in REPLACEMENTS:
            raise bad("replacement", self.replacement, " | ".join(REPLACEMENTS))
        if self.replacement == "span" and self.granularity == "subword":
            raise MaskingConfigError(
                "masking.replacement='span' is invalid with masking.granularity='subword'; "
                "allowed: replacement=token (per-span replacement needs granularity whole_word | span)"
            )
        return self

    def _validate_schedule(self) -> None:
        if self.ratio_schedule not in RATIO_SCHEDULES:
            raise MaskingConfigError(
                f"masking.ratio_schedule={self.ratio_schedule!r} is invalid; allowed: {' | '.join(RATIO_SCHEDULES)}"
            )
        final = self.ratio_final
        if self.ratio_schedule == "constant":
            if final is not None and final != self.ratio:
                raise MaskingConfigError(
                    f"masking.ratio_final={final!r} is invalid with masking.ratio_schedule='constant'; allowed: "
                    "ratio_final=null, or ratio_schedule=linear"
                )
            return
        if isinstance(final, bool) or not isinstance(final, (int, float)) or not 0.0 < final <= 1.0:
            raise MaskingConfigError(
                f"masking.ratio_final={final!r} is invalid with masking.ratio_schedule='linear'; allowed: "
                "0 < ratio_final <= 1 (the ratio at the last step)"
            )

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MaskingConfig:
        """Build from a mapping (dict or OmegaConf ``DictConfig``); unknown keys raise MaskingConfigError."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(k) for k in data if k not in names)
        if unknown:
            raise MaskingConfigError(f"masking keys {unknown} are invalid; allowed: {', '.join(names)}")
        return cls(**{str(k): v for k, v in data.items()})
