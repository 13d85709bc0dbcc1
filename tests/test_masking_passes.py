"""Fully-explored masking across passes (femlm/masking/passes.py): K disjoint masks per cycle, one per visit.

Claims tested: the three masking files compose with K = floor(1/ratio) and one copy per visit; over a cycle every
maskable token is masked exactly once when K tau = n (at most once otherwise) and each visit holds tau tokens; a
visit's mask is uniform over positions (chi-square) and distributed as exact-count MLM, uniform over all tau-subsets
(chi-square over the C(n, tau) subsets); a new cycle draws a new partition; a row's mask depends only on
(seed, key, visit), not on the batch around it; whole words and spans come from FE's own samplers (copy k of
the cycle's draw); ratio schedules keep a cycle disjoint; bad settings are refused in one line naming the key.
"""

from __future__ import annotations

import math
from itertools import combinations
from pathlib import Path

import pytest
import torch
import yaml
from scipy import stats

from femlm import CONF_DIR
from femlm.masking import MaskingConfig, MaskingConfigError, MaskingError, build_masker, make_generator
from femlm.masking.passes import STREAM_CYCLE, mask_visits, sequence_key, visit_selection
from femlm.masking.sampling import mask_budget, select_word_level
from femlm.masking.spans import select_spans

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 60
ALPHA = 1e-3  # every draw is seeded: each goodness-of-fit check is deterministic


def passes(ratio: float = 0.2, granularity: str = "subword", **kw) -> MaskingConfig:
    return MaskingConfig(name="fe_passes", strategy="fully_explored_passes", num_masks=kw.pop("num_masks", None),
                         ratio=ratio, granularity=granularity, **kw).validate()


def masker_for(cfg: MaskingConfig, word_starts: torch.Tensor | None = None):
    return build_masker(cfg, MASK, VOCAB, [PAD, CLS, SEP, MASK], word_starts=word_starts)


def row(n: int, seed: int = 0) -> torch.Tensor:
    """[CLS] + n ordinary tokens + [SEP]."""
    body = torch.randint(4, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))
    return torch.cat([torch.tensor([CLS]), body, torch.tensor([SEP])])


def cycle(masker, ids: torch.Tensor, key: int, first_visit: int = 0, seed: int = 0, **kw) -> torch.Tensor:
    k = masker.cfg.num_masks
    return torch.stack([visit_selection(masker, ids, seed, key, v, **kw) for v in range(first_visit, first_visit + k)])


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(("name", "granularity"), [("fe_passes_subword", "subword"), ("fe_passes_word", "whole_word"),
                                                   ("fe_passes_span", "span")])
def test_masking_files_default_to_the_most_disjoint_masks_the_ratio_allows(name: str, granularity: str) -> None:
    data = yaml.safe_load((Path(CONF_DIR) / "masking" / f"{name}.yaml").read_text())
    assert data["name"] == name and data["strategy"] == "fully_explored_passes"
    for ratio, k in [(0.15, 6), (0.2, 5), (0.3, 3), (0.5, 2)]:
        cfg = MaskingConfig.from_dict({**data, "ratio": ratio}).validate()
        assert (cfg.granularity, cfg.num_masks, cfg.num_copies) == (granularity, k, 1)
    explicit = MaskingConfig.from_dict({**data, "num_masks": 4}).validate()
    assert (explicit.num_masks, explicit.num_copies) == (4, 1)


def test_a_linear_schedule_takes_k_from_its_peak() -> None:
    cfg = passes(ratio=0.3, ratio_schedule="linear", ratio_final=0.15)
    assert cfg.num_masks == 3


@pytest.mark.parametrize(("settings", "key"), [
    ({"count": "bernoulli"}, "masking.count"),
    ({"granularity": "span", "ratio_schedule": "linear", "ratio_final": 0.1}, "masking.ratio_schedule"),
    ({"num_masks": 7}, "masking.num_masks"),  # 7 x 0.2 > 1
    ({"num_masks": "many"}, "masking.num_masks"),
])
def test_undefined_settings_are_refused_in_one_line(settings: dict, key: str) -> None:
    with pytest.raises(MaskingConfigError) as err:
        passes(**settings)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_null_num_masks_is_only_for_this_strategy() -> None:
    with pytest.raises(MaskingConfigError, match="masking.num_masks=None"):
        MaskingConfig(strategy="fully_explored", num_masks=None).validate()


def test_k_disjoint_masks_that_do_not_fit_a_row_are_refused() -> None:
    masker = masker_for(passes(ratio=0.25))  # K = 4; 30 tokens: tau = round(7.5) = 8 and 4 x 8 > 30
    with pytest.raises(MaskingError) as err:
        visit_selection(masker, row(30), 0, 1, 0)
    assert "masking.num_masks=4" in str(err.value) and "\n" not in str(err.value)


def test_the_batch_masker_refuses_instead_of_drawing_plain_mlm() -> None:
    with pytest.raises(MaskingError, match="fully_explored_passes"):
        masker_for(passes())(row(30)[None])


# ---------------------------------------------------------------------------------------------- one cycle
@pytest.mark.parametrize(("ratio", "n"), [(0.2, 30), (0.15, 30), (0.25, 64)])
def test_a_cycle_masks_every_token_exactly_once_with_tau_per_visit(ratio: float, n: int) -> None:
    masker = masker_for(passes(ratio=ratio))
    k, tau = masker.cfg.num_masks, int(mask_budget(torch.tensor([n]), ratio)[0])
    assert k * tau == n  # a full partition
    ids = row(n)
    for key in range(20):
        sel = cycle(masker, ids, key)
        assert sel.sum(dim=1).tolist() == [tau] * k
        assert sel.sum(dim=0)[1:-1].tolist() == [1] * n and not sel[:, [0, -1]].any()  # specials never


def test_with_room_to_spare_a_cycle_masks_each_token_at_most_once() -> None:
    masker = masker_for(passes(ratio=0.15))  # K 6, n 126: tau 19, 114 of 126 tokens per cycle
    sel = cycle(masker, row(126), key=3)
    assert sel.sum(dim=1).tolist() == [19] * 6 and int(sel.sum(dim=0).max()) == 1


def test_each_cycle_draws_a_fresh_partition_and_visits_are_pure() -> None:
    masker = masker_for(passes())
    ids = row(30)
    first, second = cycle(masker, ids, 5, 0), cycle(masker, ids, 5, 5)
    assert not torch.equal(first, second)
    assert torch.equal(first, cycle(masker, ids, 5, 0))  # same (seed, key, visit): same masks
    assert not torch.equal(first, cycle(masker, ids, 5, 0, seed=1))
    assert not torch.equal(first, cycle(masker, ids, 6, 0))


def test_a_rows_mask_does_not_depend_on_the_batch_around_it() -> None:
    masker = masker_for(passes())
    ids = torch.stack([row(30, seed=s) for s in range(6)])
    keys, visits = [11, 12, 13, 14, 15, 16], [0, 3, 7, 1, 9, 4]
    batch = mask_visits(masker, ids, keys, visits, seed=0)
    order = [4, 0, 5, 2, 1, 3]
    shuffled = mask_visits(masker, ids[order], [keys[i] for i in order], [visits[i] for i in order], seed=0)
    for j, i in enumerate(order):
        for name in ("input_ids", "labels"):
            assert torch.equal(shuffled[name][j], batch[name][i])
        alone = mask_visits(masker, ids[i:i + 1], [keys[i]], [visits[i]], seed=0)
        assert torch.equal(alone["labels"][0], batch["labels"][i])
    assert batch["copy_index"].tolist() == [v % 5 for v in visits]
    assert ((batch["labels"] != -100).sum(dim=1) == 6).all()


# ---------------------------------------------------------------------------------------------- the law of a visit
def test_each_visit_is_uniform_over_positions() -> None:
    masker = masker_for(passes())  # n 30, tau 6, K 5
    n, tau, draws = 30, 6, 3000
    ids = row(n)
    for visit in (0, 3, 7):
        counts = torch.zeros(n)
        for key in range(draws):
            counts += visit_selection(masker, ids, 0, key, visit)[1:-1].float()
        # A tau-subset's indicators are negatively correlated: the Pearson statistic has mean n - tau, not n - 1;
        # rescaled it is chi-square with n - 1 degrees of freedom.
        expected = draws * tau / n
        statistic = float(((counts - expected) ** 2 / expected).sum()) * (n - 1) / (n - tau)
        assert stats.chi2.sf(statistic, n - 1) > ALPHA, f"visit {visit}: {counts.tolist()}"


def test_each_visit_is_distributed_as_exact_count_mlm() -> None:
    """MLM's exact-count law is uniform over the C(n, tau) masks: every subset must be equally frequent."""
    masker = masker_for(passes(ratio=1 / 3))  # n 6, tau 2, K 3: 15 subsets
    n, tau = 6, 2
    ids = row(n)
    index = {c: i for i, c in enumerate(combinations(range(1, n + 1), tau))}
    for visit in (0, 2, 4):
        counts = torch.zeros(len(index))
        for key in range(3000):
            sel = visit_selection(masker, ids, 0, key, visit)
            counts[index[tuple(sel.nonzero().flatten().tolist())]] += 1
        assert stats.chisquare(counts.numpy()).pvalue > ALPHA, f"visit {visit}: {counts.tolist()}"


def test_a_cycle_pair_of_visits_is_a_uniform_disjoint_pair() -> None:
    """Visits 0 and 1 of a cycle: uniform over the ordered pairs of disjoint tau-subsets (FE's joint law)."""
    masker = masker_for(passes(ratio=1 / 3))
    ids = row(6)
    pairs: dict[tuple, int] = {}
    for key in range(4500):
        a, b = (tuple(visit_selection(masker, ids, 0, key, v).nonzero().flatten().tolist()) for v in (0, 1))
        assert not set(a) & set(b)
        pairs[(a, b)] = pairs.get((a, b), 0) + 1
    assert len(pairs) == math.comb(6, 2) * math.comb(4, 2)
    assert stats.chisquare(list(pairs.values())).pvalue > ALPHA


# ---------------------------------------------------------------------------------------------- schedules
def test_a_schedule_keeps_a_cycle_disjoint_with_tau_of_each_visit() -> None:
    cfg = passes(ratio=0.3, ratio_schedule="linear", ratio_final=0.15)  # K = 3
    masker, n, ids = masker_for(cfg), 60, row(60)
    for key in range(10):
        ratios = [0.3, 0.22, 0.15]  # the ratio at the steps of the three visits
        sel = torch.stack([visit_selection(masker, ids, 0, key, v, ratio=r) for v, r in enumerate(ratios)])
        assert sel.sum(dim=1).tolist() == [int(mask_budget(torch.tensor([n]), r)[0]) for r in ratios]
        assert int(sel.sum(dim=0).max()) == 1


# ---------------------------------------------------------------------------------------------- words and spans
def words_table() -> torch.Tensor:
    return torch.arange(VOCAB) < 40  # ids >= 40 continue the previous word


@pytest.mark.parametrize("granularity", ["whole_word", "span"])
def test_words_and_spans_are_fe_samplers_copy_k_of_the_cycle(granularity: str) -> None:
    cfg = passes(ratio=0.15, granularity=granularity)  # K 6
    masker = masker_for(cfg, words_table())
    ids = row(126, seed=4)
    valid = masker.valid_mask(ids[None])
    wid = masker_word_ids(masker, ids, valid)
    tau = mask_budget(valid.sum(dim=1), 0.15)
    for key in range(5):
        for visit in range(12):
            cyc, k = divmod(visit, 6)
            gen = make_generator(0, key, cyc, STREAM_CYCLE)
            if granularity == "span":
                fe = select_spans(wid, valid, tau, 6, "fully_explored", masker.span_law, gen)
            else:
                fe = select_word_level(wid, valid, tau, 6, "fully_explored", masker.span_lengths, masker.span_pmf, gen)
            assert torch.equal(visit_selection(masker, ids, 0, key, visit), fe[0, k])
        sel = cycle(masker, ids, key)
        assert int(sel.sum(dim=0).max()) == 1  # disjoint
        for k in range(6):  # whole words: a word is in or out as a whole
            words = wid[0][sel[k]].unique()
            assert sel[k][torch.isin(wid[0], words) & valid[0]].all()


def masker_word_ids(masker, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    from femlm.masking import word_ids_from_starts

    return word_ids_from_starts(ids[None], masker.word_starts, ~valid)


def test_sequence_key_is_a_stable_function_of_the_tokens() -> None:
    a = sequence_key([2, 7, 9, 3])
    assert a == sequence_key(torch.tensor([2, 7, 9, 3])) and a != sequence_key([2, 7, 9, 4]) and 0 <= a < 2**63
