"""The additive null model of Assumption 1 (issue 17, part 2), checked exactly on the enumerable masked LM.

For a model that *is* additive (g(m) = (1/tau) sum_{i in m} a_i) the covariance at Hamming distance H must be
the closed form S2 (o n - tau^2) / (tau^2 n (n - 1)) and the residual must vanish; for the interacting model
the measured covariance must split exactly into the additive projection's and the residual's (no cross term),
with a residual that is not zero. The Monte-Carlo estimators must converge to these values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from femlm.analysis.estimators import Reference, group_grams
from femlm.analysis.masks import sample_kmasks
from femlm.analysis.null_model import additive_d2, kappa, null_model_cost, null_model_study
from femlm.analysis.studies import make_reference
from helpers.enumerated import Enumerated

torch.set_num_threads(1)
N, TAU = 8, 3  # H in {0, 2, 4, 6}


@pytest.fixture(scope="module")
def interacting() -> Enumerated:
    return Enumerated(seqs=3, seed=1, n=N, tau=TAU)


@pytest.fixture(scope="module")
def additive() -> Enumerated:
    return Enumerated(seqs=3, seed=0, n=N, tau=TAU, additive=True)


def exact_additive_curve(model: Enumerated) -> dict[int, float]:
    d2 = model.exact_d2()
    return {h: float((kappa(TAU - h // 2, N, TAU) * d2).mean()) for h in range(0, 2 * TAU + 1, 2)}


# ---------------------------------------------------------------------------------------------- exact
def test_closed_form_covariance_of_an_additive_model(additive: Enumerated) -> None:
    cov = additive.exact_cov()  # by enumeration of every pair of masks
    b = additive.contrib - additive.contrib.mean(dim=1, keepdim=True)
    s2 = (b**2).sum(dim=(1, 2))  # [S]
    for h, value in cov.items():
        o = TAU - h // 2
        assert value == pytest.approx(float((s2 * (o * N - TAU**2) / (TAU**2 * N * (N - 1))).mean()), rel=1e-10)
    assert exact_additive_curve(additive) == pytest.approx(cov, rel=1e-10)
    _, a, g_add = additive.first_order()  # the projection of an additive model is itself
    torch.testing.assert_close(g_add, additive.table)
    torch.testing.assert_close(a, additive.contrib)


def test_covariance_splits_exactly_into_additive_and_residual(interacting: Enumerated) -> None:
    model = interacting
    _, _, g_add = model.first_order()
    residual = model.table - g_add
    cov, cov_add, cov_res = model.exact_cov(), model.exact_cov(g_add), model.exact_cov(residual)
    for h in cov:
        assert cov[h] == pytest.approx(cov_add[h] + cov_res[h], rel=1e-10, abs=1e-12)  # no cross term
    assert exact_additive_curve(model) == pytest.approx(cov_add, rel=1e-10)  # kappa(o) D2
    # the residual is orthogonal to every additive function: E[m_j r(m)] = 0 for all j, E[r] = 0
    torch.testing.assert_close(torch.einsum("ci,scp->sip", model.masks.double(), residual),
                               torch.zeros(3, N, residual.shape[-1], dtype=torch.float64), atol=1e-10, rtol=0)
    # ... and it is not zero: this model has context interactions, and they fall with H too
    assert cov_res[0] > 0.2 * cov[0]
    assert cov_res[0] - cov_res[2 * TAU] > 0.1 * (cov[0] - cov[2 * TAU])


def test_d2_estimator_is_unbiased(interacting: Enumerated) -> None:
    """Mean over seeds of the group estimate (weights o - tau^2/n on centred Gram entries of independent masks,
    centred at an independent reference estimate) == sum_i |E[g | i in m] - g-bar|^2."""
    model = interacting
    exact = model.exact_d2().numpy()
    estimates = []
    for seed in range(150):
        ref = make_reference(model.grad_fn, model.valid, TAU, 4, seed=seed, chunk=64)
        masks = sample_kmasks(model.valid, TAU, 6, "iid", 4, torch.Generator().manual_seed(seed))
        grams = group_grams(model.grad_fn, masks, ref, chunk=64)
        overlaps = masks.double() @ masks.double().transpose(-1, -2)
        estimates.append(additive_d2(grams, overlaps, model.valid.sum(dim=1), TAU).mean(dim=0).numpy())
    est = np.array(estimates)  # [seeds, S]
    se = est.std(axis=0, ddof=1) / np.sqrt(len(est))
    assert (np.abs(est.mean(axis=0) - exact) < 4 * se).all(), (est.mean(axis=0), exact, se)


# ---------------------------------------------------------------------------------------------- the study
def exact_reference(model: Enumerated) -> Reference:
    return Reference(mean=model.table.mean(dim=1), trace_var=torch.zeros(model.table.shape[0]), count=1)


def test_study_on_an_additive_model_finds_no_interaction(additive: Enumerated) -> None:
    res = null_model_study(additive.grad_fn, additive.valid, TAU, 2000, 4, exact_reference(additive), groups=100,
                           group_size=8, seed=0, chunk=64, n_boot=300)
    exact = additive.exact_cov()
    s = res.summary
    assert [r["h_mean"] for r in res.rows] == [0, 2, 4, 6]
    for r in res.rows:
        assert r["measured"] == pytest.approx(exact[int(r["h_mean"])], abs=0.05 * exact[0])
        assert r["additive"] == pytest.approx(exact[int(r["h_mean"])], abs=0.05 * exact[0])
        assert abs(r["residual"]) < 0.05 * s["measured_decrease"]
    assert s["fraction_explained_ci"][0] < 1 < s["fraction_explained_ci"][1]
    assert s["residual_decrease_ci"][0] < 0 < s["residual_decrease_ci"][1]
    assert s["additive_share_of_var"] == pytest.approx(1.0, abs=0.05)


def test_study_on_the_interacting_model_finds_the_residual(interacting: Enumerated) -> None:
    model = interacting
    ref = make_reference(model.grad_fn, model.valid, TAU, 100, seed=1, chunk=64)
    res = null_model_study(model.grad_fn, model.valid, TAU, 2000, 4, ref, groups=100, group_size=8, seed=1, chunk=64,
                           n_boot=300)
    _, _, g_add = model.first_order()
    cov, cov_add = model.exact_cov(), model.exact_cov(g_add)
    cov_res = model.exact_cov(model.table - g_add)
    for r in res.rows:
        h = int(r["h_mean"])
        assert r["additive"] == pytest.approx(cov_add[h], abs=0.05 * cov[0])
        assert r["residual"] == pytest.approx(cov_res[h], abs=0.05 * cov[0])
        assert r["measured"] == pytest.approx(r["additive"] + r["residual"])
    s = res.summary
    exact_fraction = (cov_add[0] - cov_add[6]) / (cov[0] - cov[6])
    assert s["fraction_explained"] == pytest.approx(exact_fraction, abs=0.05)
    assert s["fraction_explained_ci"][1] < 1  # the additive model does not explain all of the decrease
    assert s["residual_decrease_ci"][0] > 0
    exact_rho = stats.spearmanr(range(4), [cov_res[h] for h in (0, 2, 4, 6)]).statistic  # -0.4: not monotone
    assert s["residual_rho_bins"] == pytest.approx(exact_rho)
    assert s["residual_rho_bins_ci"][0] - 1e-9 <= exact_rho <= s["residual_rho_bins_ci"][1] + 1e-9
    assert len(res.pairs) == 2000 and {"additive", "residual", "cov"} <= set(res.pairs[0])


def test_cost() -> None:
    assert null_model_cost(seqs=8, reference=16, budget=100, groups=4, group_size=16) == 8 * (16 + 200 + 64)
