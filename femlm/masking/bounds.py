"""How many labelled positions a masking law puts in a micro-batch: the fixed shapes of a compiled run.

A compiled step has one shape for the whole run (femlm/train/batches.py): ``size`` labelled positions per
micro-batch of ``rows`` rows and ``width`` query slots per row (plus one spare slot for padding). The bound
comes from the law that draws the masks, beside its sampler; a batch beyond it still runs, in more label chunks
of the same shape (counted in every train record), so a loose bound costs padding and a tight one costs nothing.
``tau = round_half_up(peak ratio * length)`` (capped at ``length // K`` for K copies, as the maskers do):

* exact sub-word and exact whole-word masks hold at most ``tau`` tokens per row (whole words: a word that does
  not fit the room left is skipped, ``femlm.masking.wholeword``), so ``size = rows * tau`` and ``width = tau``,
  both reached;
* exact spans hold ``tau`` tokens give or take the two words cut by the window's ends (``femlm.masking.spans``:
  ``tau - b < size < tau + a``): ``width = tau + longest word - 1``; the micro-batch's excess over ``rows * tau``
  is a sum of per-row excesses of mean 0, bounded by a normal quantile at ``TAIL`` with their variance from the
  measured word lengths (below);
* Bernoulli sub-words: Binomial(length, p) per row, Binomial(rows * length, p) per micro-batch: their quantiles
  at ``TAIL`` (per row: ``TAIL / rows``);
* Bernoulli words (each word with probability p): the token count has mean ``p * n`` and variance
  ``p (1 - p) n E[len^2] / E[len]``, ``len`` a word's length in tokens; the bound is the binomial's quantile in
  "words" of ``r = E[len^2] / E[len]`` tokens (``r`` times Binomial(n / r, p): the same mean and variance).

Word lengths are measured once, on up to ``SAMPLE_ROWS`` blocks spread over the data the masker will see
(:meth:`WordLengths.measure`), by the masker's own word rule; a longer word elsewhere only adds a chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .config import MaskingConfig
from .sampling import mask_budget
from .spans import batch_words
from .words import word_ids_from_starts

TAIL = 1e-9  # probability that a micro-batch needs a second chunk (a few in a 1M-step run: a negligible cost)
SAMPLE_ROWS = 4096  # blocks whose words are measured (spread evenly over the corpus)


@dataclass(frozen=True)
class Shape:
    """The fixed shape of every label chunk of a run's micro-batches: rows, labelled positions, query slots per
    row (including the spare slot padding entries use)."""

    rows: int
    size: int
    width: int


@dataclass(frozen=True)
class WordLengths:
    """Moments of the maskable words' lengths in tokens (each word counted once) and the longest word."""

    mean: float = 1.0
    mean_square: float = 1.0
    mean_cube: float = 1.0
    longest: int = 1

    @classmethod
    def measure(cls, masker: Any, blocks: Any, sample_rows: int = SAMPLE_ROWS) -> WordLengths:
        """The words of up to ``sample_rows`` of ``blocks`` ([N, L] token ids, a tensor or memory-mapped blocks),
        evenly spaced, split by the masker's word rule (its word-start table; no table: every token a word)."""
        if masker.word_starts is None or blocks.shape[0] == 0:
            return cls()
        index = torch.linspace(0, blocks.shape[0] - 1, min(int(blocks.shape[0]), sample_rows)).round().long()
        ids = torch.as_tensor(blocks[index]).long()
        valid = masker.valid_mask(ids)
        word_ids = word_ids_from_starts(ids, masker.word_starts, ~valid)
        lengths = batch_words(word_ids.numpy(), valid.numpy())[3].astype(np.float64)
        if lengths.size == 0:
            return cls()
        return cls(float(lengths.mean()), float((lengths**2).mean()), float((lengths**3).mean()), int(lengths.max()))

    @property
    def variance_ratio(self) -> float:
        """``E[len^2] / E[len]``: a Bernoulli-words token count's variance over a binomial's in tokens."""
        return self.mean_square / self.mean

    @property
    def cut_variance(self) -> float:
        """Variance of the tokens a window boundary cuts off a word: the boundary falls at a uniformly random
        token, in a word of length ``len`` with probability ``len / n`` and after ``0 .. len - 1`` of its tokens."""
        first = (self.mean_square - self.mean) / (2 * self.mean)
        second = (2 * self.mean_cube - 3 * self.mean_square + self.mean) / (6 * self.mean)
        return max(second - first**2, 0.0)


def needs_words(cfg: MaskingConfig) -> bool:
    """Whether `label_bound` reads measured word lengths: spans and Bernoulli whole words do; sub-word laws and
    exact whole words (tau tokens per row whatever the words) do not."""
    return cfg.granularity != "subword" and not (cfg.count == "exact" and cfg.granularity == "whole_word")


def label_bound(cfg: MaskingConfig, rows: int, length: int, copies: int = 1,
                words: WordLengths | None = None) -> Shape:
    """The fixed shape for micro-batches of ``rows`` rows of ``length`` tokens under ``cfg`` (module doc);
    ``words``: the measured word lengths (word-level laws; default: every word one token)."""
    from scipy.stats import binom, norm

    words = words or WordLengths()
    ratio = cfg.peak_ratio
    tau = int(mask_budget(torch.tensor([length]), ratio, copies)[0])
    if cfg.count == "exact" and cfg.granularity in ("subword", "whole_word"):
        return Shape(rows, rows * tau, tau + 1)
    if cfg.count == "exact":  # spans: within one word of tau per row
        width = min(tau + words.longest - 1, length)
        spread = math.sqrt(2 * words.cut_variance * rows)  # a row's excess: the tokens its first cut adds minus
        # those its last cut leaves out, alike in law (mean 0); rows are independent
        size = min(rows * width, rows * tau + math.ceil(float(norm.isf(TAIL)) * spread))
        return Shape(rows, size, width + 1)
    unit = words.variance_ratio if cfg.granularity == "whole_word" else 1.0  # tokens per binomial "trial"

    def quantile(n_rows: int, tail: float) -> int:
        return math.ceil(unit * float(binom.isf(tail, math.ceil(n_rows * length / unit), ratio))) + 1

    size, width = quantile(rows, TAIL), min(quantile(1, TAIL / rows), length)
    return Shape(rows, min(size, rows * length), width + 1)
