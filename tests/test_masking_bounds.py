"""The masker's batch bound (femlm/masking/bounds.py, `Masker.label_bound`) for the word-level laws: never exceeded,
and tight -- the per-row width is reached, and where the micro-batch size is a quantile, the spread it assumes
is the spread the masks have (no guessed widening).

The corpus is synthetic with known words: 1, 2 or 4 tokens (60 / 25 / 15 % of words), so the longest word is
4 tokens and a span mask can run 3 tokens over tau."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import norm

from femlm.masking import MaskingConfig, build_masker, make_generator
from femlm.masking.bounds import TAIL, WordLengths
from femlm.masking.passes import mask_visits
from femlm.masking.sampling import mask_budget

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB, FIRST_CONTINUATION = 100, 60  # ids 5 .. 59 start a word, 60 .. 99 continue one
WORD_STARTS = torch.arange(VOCAB) < FIRST_CONTINUATION
LENGTH, ROWS, BATCHES = 66, 8, 300  # tau = round(0.15 * 66) = round(0.15 * 64 maskable) = 10


def corpus(n: int, seed: int = 0) -> torch.Tensor:
    """[n, LENGTH] blocks [CLS] words [SEP], words of 1, 2 or 4 tokens."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        tokens: list[int] = []
        while len(tokens) < LENGTH - 2:
            size = int(rng.choice([1, 2, 4], p=[0.6, 0.25, 0.15]))
            tokens += [int(rng.integers(5, FIRST_CONTINUATION))] + rng.integers(FIRST_CONTINUATION, VOCAB,
                                                                                size - 1).tolist()
        rows.append([CLS, *tokens[:LENGTH - 2], SEP])
    return torch.tensor(rows)


BLOCKS = corpus(ROWS * BATCHES)


def masker_for(**settings):
    cfg = MaskingConfig(name="law", **settings).validate()
    return build_masker(cfg, MASK, VOCAB, [PAD, CLS, SEP, MASK], word_starts=WORD_STARTS)


def label_counts(masker, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels per model row and per micro-batch of `rows` model rows, over the corpus (as the trainer draws them)."""
    per_row = []
    sequences = rows // masker.num_copies
    for b in range(BATCHES):
        ids = BLOCKS[(b * sequences) % BLOCKS.shape[0]:][:sequences]
        if masker.cfg.strategy == "fully_explored_passes":
            keys = torch.arange(b * sequences, (b + 1) * sequences)
            out = mask_visits(masker, ids, keys, keys % (2 * masker.cfg.num_masks), seed=0)
        else:
            out = masker(ids, None, make_generator(0, b))
        per_row.append((out["labels"] != -100).sum(dim=1).numpy())
    counts = np.concatenate(per_row)
    return counts, counts.reshape(-1, rows).sum(axis=1)


# MLM, K-copy FE and FE across passes: each exact word-level test runs under all three.
EXACT_LAWS = pytest.mark.parametrize("settings", [{}, {"strategy": "fully_explored", "num_masks": 4},
                                                  {"strategy": "fully_explored_passes", "num_masks": None}],
                                     ids=["mlm", "fe-k4", "fe-passes"])


def test_the_measured_words_are_the_corpus_words() -> None:
    words = WordLengths.measure(masker_for(granularity="span"), BLOCKS)
    assert words.longest == 4 and words.mean == pytest.approx(0.6 + 0.5 + 0.6, rel=0.05)
    assert words.variance_ratio == pytest.approx((0.6 + 1.0 + 2.4) / 1.7, rel=0.05)  # E[len^2] / E[len]
    assert WordLengths.measure(masker_for(granularity="span"), BLOCKS[:0]) == WordLengths()


@EXACT_LAWS
def test_exact_whole_word_masks_hold_tau_per_row_and_reach_it(settings: dict) -> None:
    masker = masker_for(granularity="whole_word", **settings)
    shape = masker.label_bound(ROWS, LENGTH, BLOCKS)
    tau = int(mask_budget(torch.tensor([LENGTH]), 0.15, masker.num_copies)[0])
    assert (shape.size, shape.width) == (ROWS * tau, tau + 1)
    per_row, per_batch = label_counts(masker, ROWS)
    assert per_row.max() == tau and per_batch.max() == shape.size  # reached, never exceeded


@EXACT_LAWS
def test_exact_span_masks_stay_within_the_longest_word_of_tau(settings: dict) -> None:
    masker = masker_for(granularity="span", **settings)
    shape = masker.label_bound(ROWS, LENGTH, BLOCKS)
    tau = int(mask_budget(torch.tensor([LENGTH]), 0.15, masker.num_copies)[0])
    assert shape.width == tau + 4 - 1 + 1  # tau plus the longest word, minus one, plus the spare slot
    per_row, per_batch = label_counts(masker, ROWS)
    assert per_row.max() == shape.width - 1  # reached
    assert per_batch.max() <= shape.size < ROWS * (shape.width - 1)
    if masker.num_copies == 1:  # independent rows: the spread the bound assumes is the spread of the batches
        z = float(norm.isf(TAIL))
        assumed = (shape.size - ROWS * tau) / z
        assert 0.8 < assumed / per_batch.std() < 1.25, (assumed, per_batch.std())
    assert masker_for(granularity="span").label_bound(ROWS, LENGTH).width == tau + 1  # no words measured: 1 token


def test_bernoulli_words_are_bounded_from_the_measured_word_lengths() -> None:
    masker = masker_for(granularity="whole_word", count="bernoulli")
    shape = masker.label_bound(ROWS, LENGTH, BLOCKS)
    per_row, per_batch = label_counts(masker, ROWS)
    assert per_row.max() <= shape.width - 1 and per_batch.max() <= shape.size
    n, p = LENGTH - 2, 0.15
    ratio = WordLengths.measure(masker, BLOCKS).variance_ratio
    assert per_row.var() / (p * (1 - p) * n) == pytest.approx(ratio, rel=0.2)  # the variance the bound uses
    z = float(norm.isf(TAIL))  # the bound's spread over the mean: near the measured one at the same tail
    assert 0.75 < (shape.size - ROWS * LENGTH * p) / z / per_batch.std() < 1.4
    words_of_one = masker_for(granularity="whole_word", count="bernoulli").label_bound(ROWS, LENGTH)
    assert words_of_one == masker_for(count="bernoulli").label_bound(ROWS, LENGTH)  # sub-word's binomial
