"""Exact checks of the gradient study on a model small enough to enumerate every mask.

A softmax masked-LM over n = 6 positions with tau = 2 (|M(tau)| = 15; `helpers.enumerated.Enumerated`): each
masked position is predicted from a weighted sum of the *unmasked* context embeddings, so g(m) depends on the
whole mask (not additive).
Every per-mask gradient is computed exactly, so Cov(H), Var(g(m)) and the K-mask variances under i.i.d. and
fully-explored sampling are known by enumeration; the Monte-Carlo estimators must converge to them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from femlm.analysis.estimators import Reference, kmask_terms, reference_stats
from femlm.analysis.masks import all_masks, hamming, hamming_strata, max_hamming, sample_kmasks, sample_pairs
from femlm.analysis.studies import covariance_study, make_reference, resolve_variance_tau, variance_study
from helpers.enumerated import Enumerated

torch.set_num_threads(1)
N, TAU = 6, 2  # the defaults of helpers.enumerated.Enumerated


@pytest.fixture(scope="module")
def model() -> Enumerated:
    return Enumerated()


def exact_reference(model: Enumerated) -> Reference:
    """g-bar known exactly: correction 0 (count huge)."""
    return Reference(mean=model.table.mean(dim=1), trace_var=torch.zeros(model.table.shape[0]), count=1)


# ---------------------------------------------------------------------------------------------- theorem 1
def test_fixture_covariance_decreases_with_hamming(model: Enumerated) -> None:
    cov = model.exact_cov()
    values = [cov[h] for h in sorted(cov)]
    assert sorted(cov) == [0, 2, 4]
    assert values[0] > values[1] > values[2]  # Assumption 1 holds on this model (a precondition below)


@pytest.mark.parametrize("k", [2, 3])
def test_theorem1_identity_exact(model: Enumerated, k: int) -> None:
    cov = model.exact_cov()
    var1 = cov[0]
    # i.i.d.: Cov of independent masks is |E(g - g-bar)|^2 = 0, so Var_K = Var / K.
    assert model.exact_kmask_var(k, "iid") == pytest.approx(var1 / k, rel=1e-12, abs=1e-15)
    # Fully-explored (Lemma 3): the pair covariance is the one of disjoint masks, H = 2 tau.
    assert model.exact_kmask_var(k, "fe") == pytest.approx(var1 / k + (1 - 1 / k) * cov[2 * TAU], rel=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_fe_variance_below_iid_when_covariance_decreases(model: Enumerated, k: int) -> None:
    assert model.exact_kmask_var(k, "fe") < model.exact_kmask_var(k, "iid")


def test_identity_holds_for_estimates_from_draws(model: Enumerated) -> None:
    """Direct K-mask variance estimate == (1/K) single + (1 - 1/K) cross from the same draws."""
    ref = make_reference(model.grad_fn, model.valid, TAU, 10, seed=3, chunk=8)
    res = variance_study(model.grad_fn, model.valid, [2, 3], TAU, 50, ref, seed=3, chunk=8, n_boot=0)
    for row in res.rows:
        assert row["identity_fe"] == pytest.approx(row["var_fe"], rel=1e-9, abs=1e-12)
        assert row["identity_iid"] == pytest.approx(row["var_iid"], rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------------------------------------- estimators
def test_covariance_estimates_match_exact(model: Enumerated) -> None:
    res = covariance_study(model.grad_fn, model.valid, TAU, 3000, 3, exact_reference(model), seed=1,
                           chunk=64, n_boot=200)
    exact = model.exact_cov()
    covs = np.array([r["cov"] for r in res.rows])
    hams = np.array([r["hamming"] for r in res.rows])
    for h, value in exact.items():
        vals = covs[hams == h]
        se = vals.std(ddof=1) / np.sqrt(vals.size)
        assert abs(vals.mean() - value) < 4 * se + 1e-12, (h, vals.mean(), value, se)
    assert res.spearman["rho_bins"] == -1.0
    assert res.spearman["rho_pairs"] < 0 and res.spearman["ci_pairs"][1] < 0
    assert res.stats["var_single"] == pytest.approx(exact[0], rel=0.05)


def test_reference_correction_is_unbiased(model: Enumerated) -> None:
    """E[(g1 - g-hat)^T (g2 - g-hat)] - correction == Cov exactly, averaged over many reference draws."""
    c = model.centred()
    i, j = 0, 14  # a fixed pair of masks
    truth = float((c[:, i] * c[:, j]).sum(dim=-1).mean())
    vals = []
    for rep in range(400):
        ref = make_reference(model.grad_fn, model.valid, TAU, 5, seed=100 + rep, chunk=16)
        g1, g2 = model.table[:, i] - ref.mean, model.table[:, j] - ref.mean
        vals.append(float(((g1 * g2).sum(dim=-1) - ref.correction).mean()))
    vals_np = np.array(vals)
    assert abs(vals_np.mean() - truth) < 4 * vals_np.std(ddof=1) / np.sqrt(vals_np.size)


def test_reference_matches_two_pass_statistics(model: Enumerated) -> None:
    masks = sample_kmasks(model.valid, TAU, 7, "iid", 1, torch.Generator().manual_seed(0))[0]  # [S, 7, L]
    ref = reference_stats(model.grad_fn, masks, chunk=3)
    grads = torch.stack([model.grad_fn(torch.full((7,), s), masks[s]).double() for s in range(2)])
    assert torch.allclose(ref.mean, grads.mean(dim=1), atol=1e-6)
    two_pass = ((grads - grads.mean(dim=1, keepdim=True)) ** 2).sum(dim=(1, 2)) / 6
    assert torch.allclose(ref.trace_var, two_pass, rtol=1e-5)


def test_variance_estimates_match_exact(model: Enumerated) -> None:
    ref = make_reference(model.grad_fn, model.valid, TAU, 400, seed=2, chunk=256)
    res = variance_study(model.grad_fn, model.valid, [2, 3], TAU, 3000, ref, seed=2, chunk=256, n_boot=200)
    for row in res.rows:
        k = row["K"]
        assert row["var_iid"] == pytest.approx(model.exact_kmask_var(k, "iid"), rel=0.1)
        assert row["var_fe"] == pytest.approx(model.exact_kmask_var(k, "fe"), rel=0.1)
        assert row["ratio"] < 1 and row["ci_high"] < 1
        assert row["ci_low"] < row["ratio"] < row["ci_high"]
        assert row["theorem1_prediction"] == pytest.approx(
            model.exact_kmask_var(k, "fe") / model.exact_kmask_var(k, "iid"), rel=0.15)
    assert abs(res.stats["cov_iid"]) < 0.1 * res.stats["var_single"]
    assert res.stats["cov_fe"] == pytest.approx(model.exact_cov()[2 * TAU], rel=0.15)


def test_kmask_terms_on_hand_made_gram() -> None:
    grams = torch.tensor([[[[2.0, 1.0], [1.0, 4.0]]]], dtype=torch.float64)  # one draw, one sequence
    ref = Reference(mean=torch.zeros(1, 1), trace_var=torch.tensor([0.5]), count=5)
    terms = kmask_terms(grams, ref, 2)
    assert float(terms["var"][0]) == pytest.approx(8 / 4 - 0.1)
    assert float(terms["single"][0]) == pytest.approx(3 - 0.1)
    assert float(terms["cross"][0]) == pytest.approx(1 - 0.1)


# ---------------------------------------------------------------------------------------------- samplers
@settings(max_examples=60, deadline=None)
@given(st.integers(2, 40), st.data())
def test_pair_sampler_hits_requested_distance(n: int, data: st.DataObject) -> None:
    tau = data.draw(st.integers(1, n - 1))
    pad = data.draw(st.integers(0, 5))
    valid = torch.zeros(3, n + pad, dtype=torch.bool)
    for s in range(3):  # valid positions scattered among invalid ones (specials, padding)
        valid[s, torch.randperm(n + pad, generator=torch.Generator().manual_seed(s))[:n]] = True
    hams = torch.tensor(data.draw(st.lists(st.integers(0, max_hamming(n, tau) // 2), min_size=1, max_size=6))) * 2
    m1, m2 = sample_pairs(valid, tau, hams, torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    assert bool((hamming(m1, m2) == hams[:, None]).all())
    for m in (m1, m2):
        assert bool((m.sum(dim=-1) == tau).all()) and not bool((m & ~valid).any())


def test_pair_sampler_uniform_marginals_and_conditional() -> None:
    valid = torch.ones(1, N, dtype=torch.bool)
    masks = all_masks(N, TAU)
    index = {Enumerated.code(m): i for i, m in enumerate(masks)}
    draws = 6000
    m1, m2 = sample_pairs(valid, TAU, torch.full((draws,), 2), torch.Generator().manual_seed(7))
    first = np.bincount([index[Enumerated.code(m)] for m in m1[:, 0]], minlength=15)
    second = np.bincount([index[Enumerated.code(m)] for m in m2[:, 0]], minlength=15)
    assert stats.chisquare(first).pvalue > 1e-3 and stats.chisquare(second).pvalue > 1e-3
    # Uniform given H: every ordered pair at H = 2 (15 * tau * (n - tau) = 120 of them) equally likely.
    pairs = np.bincount([index[Enumerated.code(a)] * 15 + index[Enumerated.code(b)]
                         for a, b in zip(m1[:, 0], m2[:, 0], strict=True)], minlength=225)
    at_h = hamming(masks[:, None], masks[None, :]).flatten().numpy() == 2
    assert pairs[~at_h].sum() == 0 and at_h.sum() == 120
    assert stats.chisquare(pairs[at_h]).pvalue > 1e-3


def test_hamming_strata_cover_bins_evenly() -> None:
    hams, bins, edges = hamming_strata(126, 16, 8, 64, torch.Generator().manual_seed(0))
    assert bool((hams % 2 == 0).all()) and int(hams.max()) <= 32
    assert np.bincount(bins.numpy()).tolist() == [8] * 8
    for h, b in zip(hams.tolist(), bins.tolist(), strict=True):
        assert edges[b][0] <= h <= edges[b][1]
    assert edges[0][0] == 0 and edges[-1][1] == 32
    hams, bins, edges = hamming_strata(6, 2, 8, 9, torch.Generator().manual_seed(0))
    assert len(edges) == 3  # only H in {0, 2, 4} exists


def test_fe_draws_disjoint_and_uniform() -> None:
    valid = torch.ones(1, N, dtype=torch.bool)
    fe = sample_kmasks(valid, TAU, 3, "fully_explored", 3000, torch.Generator().manual_seed(1))[:, 0]
    assert bool((fe.sum(dim=1) <= 1).all())  # pairwise disjoint
    codes = {Enumerated.code(m): i for i, m in enumerate(all_masks(N, TAU))}
    counts = np.bincount([codes[Enumerated.code(m)] for m in fe[:, 1]], minlength=15)
    assert stats.chisquare(counts).pvalue > 1e-3  # marginal of a single FE mask: Unif(M(tau)) (Lemma 2)


def test_resolve_variance_tau() -> None:
    assert resolve_variance_tau(510, 128, None, [2, 4, 6, 8]) == 63
    assert resolve_variance_tau(126, 16, None, [2, 4, 6, 8]) == 15
    assert resolve_variance_tau(126, 16, 10, [2, 4]) == 10
    assert resolve_variance_tau(126, 16, None, [2], ratio=0.3) == 38  # round(37.8): a point of a schedule
    assert resolve_variance_tau(128, 16, None, [2, 4, 8], ratio=0.125) == 16
    with pytest.raises(ValueError, match=r"analysis.ratio=0.3 gives tau=38 of 126 .* K=4 disjoint masks need 152"):
        resolve_variance_tau(126, 16, None, [2, 4], ratio=0.3)
    with pytest.raises(ValueError, match="K=8"):
        resolve_variance_tau(126, 16, 16, [2, 8])
