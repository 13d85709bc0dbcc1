"""Sub-word masking: exact budgets, FE disjointness and uniformity (Lemma 2), 80/10/10, reproducibility."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from femlm.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    MaskingConfigError,
    MaskingError,
    build_masker,
    make_generator,
    mask_budget,
)
from femlm.masking.sampling import mix_seed

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIALS = [PAD, CLS, SEP, MASK]
VOCAB = 100
HYP = settings(max_examples=40, deadline=None, derandomize=True)


def make_batch(n_valid: list[int], length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[CLS] w_1..w_n [SEP] [PAD]...`` with random non-special ids; returns (input_ids, attention)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(n_valid), length), PAD, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, n in enumerate(n_valid):
        ids[i, 0] = CLS
        ids[i, 1 : n + 1] = torch.randint(len(SPECIALS), VOCAB, (n,), generator=g)
        ids[i, n + 1] = SEP
        att[i, : n + 2] = 1
    return ids, att


def masker_for(strategy: str = "random", granularity: str = "subword", **kw: object):
    cfg = MaskingConfig(name="t", strategy=strategy, granularity=granularity, **kw)  # type: ignore[arg-type]
    return build_masker(cfg, mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIALS)


def tau_of(n: int, ratio: float, k: int = 1) -> int:
    tau = max(1, math.floor(n * ratio + 0.5))
    return min(tau, n // k) if k > 1 else tau


# ---------------------------------------------------------------------------------------------- budgets
def test_mask_budget_rounds_half_up_and_caps_for_k_copies() -> None:
    n = torch.tensor([0, 1, 3, 10, 30, 100, 10])
    assert mask_budget(n, 0.15).tolist() == [0, 1, 1, 2, 5, 15, 2]
    # ratio 0.25 x K 4 on n=10: round(2.5)=3 would need 12 > 10 tokens, so tau is capped at 10 // 4 = 2
    assert mask_budget(torch.tensor([10, 12]), 0.25, copies=4).tolist() == [2, 3]


# ---------------------------------------------------------------------------------------------- FE properties
@HYP
@given(
    k=st.integers(1, 6),
    ratio_frac=st.floats(0.05, 1.0),
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    seed=st.integers(0, 2**31),
)
def test_fully_explored_subword_partition_properties(
    k: int, ratio_frac: float, lengths: list[int], seed: int
) -> None:
    ratio = ratio_frac / k  # K * ratio <= 1
    n_valid = [k + x for x in lengths]  # every row fits K masks
    ids, att = make_batch(n_valid, max(n_valid) + 2 + 3, seed)
    masker = masker_for("fully_explored", ratio=ratio, num_masks=k)
    sel = masker.select(ids, att, make_generator(seed, 0))
    out = masker(ids, att, make_generator(seed, 0))
    valid = att.bool() & ~torch.isin(ids, torch.tensor(SPECIALS))
    assert sel.shape == (len(n_valid), k, ids.shape[1])
    for b, n in enumerate(n_valid):
        tau = tau_of(n, ratio, k)
        assert sel[b].sum(dim=1).tolist() == [tau] * k  # each copy exactly tau
        assert not (sel[b] & ~valid[b]).any()  # specials and padding never masked
        for i, j in itertools.combinations(range(k), 2):  # pairwise disjoint: Hamming distance exactly 2 tau
            assert int((sel[b, i] ^ sel[b, j]).sum()) == 2 * tau
    # the emitted batch agrees with the selection: labels exactly at selected positions, inputs untouched elsewhere
    flat = sel.reshape(-1, ids.shape[1])
    rep = ids.repeat_interleave(k, 0)
    assert torch.equal(out["labels"] != IGNORE_INDEX, flat)
    assert torch.equal(out["labels"][flat], rep[flat])
    assert torch.equal(out["input_ids"][~flat], rep[~flat])
    assert torch.equal(out["attention_mask"], att.repeat_interleave(k, 0))
    assert out["sequence_index"].tolist() == [b for b in range(len(n_valid)) for _ in range(k)]
    assert out["copy_index"].tolist() == list(range(k)) * len(n_valid)


def test_fe_single_mask_is_uniform_over_all_tau_subsets() -> None:
    """Lemma 2: each copy of M_FE(tau) is marginally Unif(M(tau)); chi-square over all C(8,2)=28 subsets."""
    n, k, draws = 8, 4, 14_000
    ids, att = make_batch([n] * draws, n + 2)
    sel = masker_for("fully_explored", ratio=0.25, num_masks=k).select(ids, att, make_generator(7, 0))
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(1, n + 1), 2))}
    for copy in range(k):
        pos = sel[:, copy].nonzero()[:, 1].view(draws, 2)
        counts = torch.bincount(torch.tensor([subsets[tuple(p)] for p in pos.tolist()]), minlength=28)
        assert stats.chisquare(counts.numpy()).pvalue > 1e-3, f"copy {copy} not uniform: {counts.tolist()}"


@pytest.mark.parametrize("strategy", ["fully_explored", "random", "iid"])
def test_per_position_marginal_is_uniform(strategy: str) -> None:
    n, draws = 20, 5_000
    k = 1 if strategy == "random" else 4
    ids, att = make_batch([n] * draws, n + 2)
    sel = masker_for(strategy, ratio=0.15, num_masks=k).select(ids, att, make_generator(3, 1))
    for copy in range(k):
        freq = sel[:, copy, 1 : n + 1].sum(0).numpy()
        assert freq.sum() == draws * 3
        assert stats.chisquare(freq).pvalue > 1e-3
    # sanity: the test detects a biased selector (first tau positions always chosen)
    biased = sel[:, 0, 1 : n + 1].sum(0).numpy().copy()
    biased[:3] += draws // 10
    assert stats.chisquare(biased).pvalue < 1e-3


def test_iid_copies_overlap_but_fe_never_do() -> None:
    ids, att = make_batch([20] * 200, 22)
    iid = masker_for("iid", ratio=0.25, num_masks=4).select(ids, att, make_generator(0, 0))
    fe = masker_for("fully_explored", ratio=0.25, num_masks=4).select(ids, att, make_generator(0, 0))
    assert (iid.sum(1) > 1).any()
    assert (iid.sum(-1) == 5).all()  # iid copies still hold exactly tau each
    assert (fe.sum(1) <= 1).all()


def test_bernoulli_count_varies_exact_does_not() -> None:
    n, draws = 100, 300
    ids, att = make_batch([n] * draws, n + 2)
    exact = masker_for("random", ratio=0.15).select(ids, att, make_generator(0, 0)).sum(-1).flatten()
    bern_m = masker_for("random", ratio=0.15, count="bernoulli")
    bern_sel = bern_m.select(ids, att, make_generator(0, 0))
    bern = bern_sel.sum(-1).flatten().float()
    assert exact.unique().tolist() == [15]
    assert len(bern.unique()) > 5
    assert abs(bern.mean().item() - 15) < 4 * math.sqrt(n * 0.15 * 0.85 / draws)
    assert not (bern_sel[:, 0] & ~(att.bool() & ~torch.isin(ids, torch.tensor(SPECIALS)))).any()


@pytest.mark.parametrize(("p_mask", "p_rand"), [(0.8, 0.1), (0.5, 0.5), (1.0, 0.0), (0.0, 0.3)])
def test_replacement_split(p_mask: float, p_rand: float) -> None:
    vocab = 30_000  # large, so a random replacement rarely equals the original token
    cfg = MaskingConfig(ratio=0.5, mask_replace_prob=p_mask, random_replace_prob=p_rand)
    masker = build_masker(cfg, mask_token_id=MASK, vocab_size=vocab, special_ids=SPECIALS)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab, (400, 128), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    out = masker(ids, None, make_generator(1, 0))
    chosen = out["labels"] != IGNORE_INDEX
    total = int(chosen.sum())
    assert total == 400 * 63
    new, orig = out["input_ids"][chosen], ids[chosen]
    frac_mask = (new == MASK).float().mean().item()
    frac_keep = (new == orig).float().mean().item()
    frac_rand = 1 - frac_mask - frac_keep
    tol = 4 * math.sqrt(0.25 / total) + 1e-3
    assert abs(frac_mask - p_mask) < tol
    assert abs(frac_rand - p_rand) < tol
    assert abs(frac_keep - (1 - p_mask - p_rand)) < tol
    assert int(new.min()) >= 0 and int(new.max()) < vocab


# ---------------------------------------------------------------------------------------------- reproducibility
def test_make_generator_is_deterministic_and_mixes_all_inputs() -> None:
    draw = lambda *a: torch.rand(4, generator=make_generator(*a)).tolist()  # noqa: E731
    assert draw(0, 5) == draw(0, 5)
    variants = [(0, 5), (0, 6), (1, 5), (0, 5, 1), (0, 5, 0, 1), (5, 0), (0, 0, 5)]
    assert len({tuple(draw(*v)) for v in variants}) == len(variants)
    assert len({mix_seed(*v) for v in itertools.product(range(4), repeat=4)}) == 256
    assert mix_seed(-1, 2**40) >= 0


@pytest.mark.parametrize(
    ("strategy", "granularity", "count"),
    [
        ("random", "subword", "exact"),
        ("random", "subword", "bernoulli"),
        ("fully_explored", "subword", "exact"),
        ("iid", "subword", "exact"),
        ("fully_explored", "span", "exact"),
        ("random", "whole_word", "exact"),
    ],
)
def test_same_seed_same_masks_other_step_other_masks(strategy: str, granularity: str, count: str) -> None:
    k = 1 if strategy == "random" else 4
    m = masker_for(strategy, granularity, ratio=0.15, num_masks=k, count=count)
    ids, att = make_batch([60, 45, 30], 64)
    a = m(ids, att, make_generator(11, 100))
    b = m(ids, att, make_generator(11, 100))
    c = m(ids, att, make_generator(11, 101))
    for key in a:
        assert torch.equal(a[key], b[key])
    assert not torch.equal(a["labels"], c["labels"])


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"strategy": "fully_explored", "num_masks": 4, "ratio": 0.3}, "num_masks * masking.ratio"),
        ({"ratio": 0.0}, "masking.ratio"),
        ({"ratio": -0.1}, "masking.ratio"),
        ({"ratio": 1.5}, "masking.ratio"),
        ({"strategy": "iid", "num_masks": 0}, "masking.num_masks"),
        ({"mask_replace_prob": 1.2}, "masking.mask_replace_prob"),
        ({"random_replace_prob": -0.1}, "masking.random_replace_prob"),
        (
            {"mask_replace_prob": 0.8, "random_replace_prob": 0.3},
            "mask_replace_prob + masking.random_replace_prob",
        ),
        ({"span_p": 0.0}, "masking.span_p"),
        ({"span_p": 1.5}, "masking.span_p"),
        ({"span_min": 5, "span_max": 2}, "masking.span_min"),
        ({"strategy": "fully_explored", "num_masks": 2, "count": "bernoulli"}, "masking.count"),
        ({"granularity": "span", "count": "bernoulli"}, "masking.count"),
        ({"strategy": "fe"}, "masking.strategy"),
        ({"granularity": "char"}, "masking.granularity"),
        ({"count": "poisson"}, "masking.count"),
    ],
)
def test_invalid_config_gives_one_line_error(kwargs: dict, key: str) -> None:
    with pytest.raises(MaskingConfigError) as err:
        MaskingConfig(**kwargs).validate()
    msg = str(err.value)
    assert key in msg and "allowed" in msg and "\n" not in msg
    assert isinstance(err.value, ValueError)


def test_random_strategy_forces_one_split_and_fe_keeps_k() -> None:
    cfg = MaskingConfig(strategy="random", num_masks=4, ratio=0.15).validate()
    assert cfg.num_masks == 1 and cfg.num_copies == 1
    assert MaskingConfig(strategy="fully_explored", num_masks=4, ratio=0.25).validate().num_copies == 4


@pytest.mark.parametrize("strategy", ["fully_explored", "iid"])
def test_too_short_sequence_raises_naming_row_and_lengths(strategy: str) -> None:
    ids, att = make_batch([30, 3, 20], 34)
    masker = masker_for(strategy, ratio=0.15, num_masks=4)
    with pytest.raises(MaskingError, match=r"row 1 has n_valid=3 .*K=4"):
        masker(ids, att, make_generator(0, 0))
    masker(ids[[0, 2]], att[[0, 2]], make_generator(0, 0))  # the same masker works once the row is gone
