"""The batched `mask_visits` (issue 46) against the per-row code it replaced (tests/helpers/passes_reference.py):
equal bit for bit -- masked inputs, labels, copy index and the short-row count -- for sub-words, whole words and
spans, across cycles (visits 0 .. 3K), under ratio schedules, with per-span replacement and the 80/10/10 corners,
with padding, special masks and given word ids, and for short rows; bad rows refused with the same one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from femlm.masking import MaskingConfig, MaskingError, build_masker
from femlm.masking.passes import mask_visits, visit_selection
from femlm.masking.sampling import mix_seed, mix_seeds
from helpers.passes_reference import mask_visits_per_row
from helpers.passes_reference import visit_selection as reference_selection

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 80
WORD_STARTS = torch.arange(VOCAB) < 50  # ids >= 50 continue the previous word: words of 1, 2, 3, ... tokens


def passes(**settings) -> MaskingConfig:
    return MaskingConfig(name="fe_passes", strategy="fully_explored_passes",
                         num_masks=settings.pop("num_masks", None), **settings).validate()


def masker_for(cfg: MaskingConfig, **options):
    return build_masker(cfg, MASK, VOCAB, [PAD, CLS, SEP, MASK], word_starts=WORD_STARTS, **options)


def batch(rows: int, length: int, seed: int, ragged: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] body [SEP] rows (padded after [SEP] when ragged; a [SEP] inside some rows), and their attention mask."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (rows, length), generator=gen)
    ids[:, 0] = CLS
    ids[::3, length // 2] = SEP  # two segments in every third row: runs end at a special
    lengths = torch.randint(2, length + 1, (rows,), generator=gen) if ragged else torch.full((rows,), length)
    positions = torch.arange(length)[None]
    ids[positions == (lengths - 1)[:, None]] = SEP
    attention = (positions < lengths[:, None]).long()
    return ids.masked_fill(attention == 0, PAD), attention


def keys_and_visits(rows: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randint(-2**62, 2**62, (rows,), generator=gen)
    keys[:4] = torch.tensor([0, 1, 2**63 - 1, -1])
    return keys, torch.randint(0, 3 * k + 1, (rows,), generator=gen)  # visits 0 .. 3K: four cycles


def assert_same(masker, reference_masker, ids, keys, visits, **kw) -> dict[str, torch.Tensor]:
    got = mask_visits(masker, ids, keys, visits, seed=7, **kw)
    want = mask_visits_per_row(reference_masker, ids, keys, visits, seed=7, **kw)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and torch.equal(got[name], want[name]), name
    assert masker.short_rows == reference_masker.short_rows
    return got


LAWS = {
    "subword": {},
    "subword-k3": {"num_masks": 3, "ratio": 0.2},
    "subword-all-mask": {"mask_replace_prob": 1.0, "random_replace_prob": 0.0},
    "subword-no-random": {"random_replace_prob": 0.0},
    "subword-all-random": {"mask_replace_prob": 0.0, "random_replace_prob": 1.0},
    "whole-word": {"granularity": "whole_word"},
    "whole-word-span-replacement": {"granularity": "whole_word", "replacement": "span"},
    "span": {"granularity": "span"},
    "span-k2": {"granularity": "span", "num_masks": 2, "ratio": 0.3},
    "span-span-replacement": {"granularity": "span", "replacement": "span", "span_min": 2},
}


@pytest.mark.parametrize("law", list(LAWS))
def test_batched_masks_equal_the_per_row_reference_across_cycles(law: str) -> None:
    cfg = passes(**LAWS[law])
    k = cfg.num_masks
    ids, _ = batch(96, 48, seed=1)
    keys, visits = keys_and_visits(96, k, seed=2)
    out = assert_same(masker_for(cfg), masker_for(cfg), ids, keys, visits)
    assert visits.max() >= 3 * k - 1 and (out["labels"] != -100).any(dim=1).float().mean() > 0.9  # not vacuous
    alone = mask_visits(masker_for(cfg), ids[5:6], keys[5:6].tolist(), visits[5:6].tolist(), seed=7)
    assert torch.equal(alone["input_ids"][0], out["input_ids"][5])  # a row does not depend on the batch
    for b in (0, 9, 50):  # the one-row API
        want = reference_selection(masker_for(cfg), ids[b], 7, int(keys[b]), int(visits[b]))
        assert torch.equal(visit_selection(masker_for(cfg), ids[b], 7, int(keys[b]), int(visits[b])), want)


@pytest.mark.parametrize("ratio", [0.3, 0.22, 0.15])
def test_a_ratio_schedule_gives_the_reference_masks_at_each_of_its_ratios(ratio: float) -> None:
    cfg = passes(ratio=0.3, ratio_schedule="linear", ratio_final=0.15)  # K = 3 from the peak
    ids, _ = batch(64, 40, seed=3)
    keys, visits = keys_and_visits(64, 3, seed=4)
    assert_same(masker_for(cfg), masker_for(cfg), ids, keys, visits, ratio=ratio)


@pytest.mark.parametrize("granularity", ["subword", "whole_word", "span"])
def test_short_rows_padding_special_masks_and_given_word_ids_equal_the_reference(granularity: str) -> None:
    cfg = passes(granularity=granularity, ratio=0.2)  # K = 5: rows of 2 .. 24 tokens, some shorter than K
    ids, attention = batch(80, 24, seed=5, ragged=True)
    keys, visits = keys_and_visits(80, 5, seed=6)
    options = {"allow_short_rows": True, "given_mask_only": True}
    out = assert_same(masker_for(cfg, **options), masker_for(cfg, **options), ids, keys, visits,
                      attention_mask=attention)
    assert (out["labels"] == -100).all(dim=1).any()  # some short row's visit has no mask left
    special = (ids == CLS) | (ids == SEP) | (torch.rand(ids.shape, generator=torch.Generator().manual_seed(8)) < 0.1)
    word_ids = torch.arange(24).expand(80, 24) // 2  # words of two tokens, whatever the ids say
    assert_same(masker_for(cfg, **options), masker_for(cfg, **options), ids, keys, visits, attention_mask=attention,
                special_mask=special.long(), word_ids=word_ids if granularity != "subword" else None)


def test_bad_rows_are_refused_with_the_reference_line() -> None:
    masker = masker_for(passes(ratio=0.25))  # K 4: 40 maskable tokens fit (tau 10); 10 do not (tau 3, 4 x 3 > 10)
    ids = torch.randint(4, VOCAB, (6, 42), generator=torch.Generator().manual_seed(9))
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[3, 11], ids[3, 12:] = SEP, PAD  # row 3 (the first bad row, before row 5's bad visit): 10 maskable tokens
    attention = (ids != PAD).long()
    keys, visits = torch.arange(6), torch.tensor([0, 1, 2, 3, 4, -1])
    messages = []
    for fn in (mask_visits, mask_visits_per_row):
        with pytest.raises(MaskingError) as err:
            fn(masker, ids, keys, visits, seed=0, attention_mask=attention)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "masking.num_masks=4" in messages[0] and "\n" not in messages[0]
    with pytest.raises(MaskingError, match=r"visit=-1 is invalid"):
        mask_visits(masker, ids[4:], keys[4:], visits[4:], seed=0)


def test_mixed_seeds_equal_mix_seed() -> None:
    rng = np.random.default_rng(0)
    steps, ranks = rng.integers(-2**63, 2**63 - 1, 500), rng.integers(-2**40, 2**40, 500)
    for seed in (0, 5, -3, 2**64 + 1):
        assert mix_seeds(seed, steps, ranks, 28_001) == [mix_seed(seed, int(s), int(r), 28_001)
                                                          for s, r in zip(steps, ranks, strict=True)]
