"""Exact checks of `femlm analyze decomposition` (issue 17, part 1) on the enumerable masked LM.

Every per-mask gradient of `helpers.enumerated.Enumerated` is tabulated, so the data term sigma_d2, the mask
term sigma_m2, the copy covariances c_FE and c_iid and the variance of every arm's batch gradient are known
exactly; the estimators of `femlm.analysis.decomposition` must converge to them, without bias.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from femlm.analysis.config import AnalysisConfig
from femlm.analysis.decomposition import (
    arm_specs,
    decomposition_cost,
    decomposition_study,
    pool_terms,
    predicted_variance,
    term_estimates,
)
from femlm.analysis.decomposition_check import check_batches
from femlm.analysis.sketch import CountSketch
from femlm.errors import UserError
from helpers.enumerated import Enumerated

torch.set_num_threads(1)


def exact_terms(model: Enumerated) -> dict[str, float]:
    return {"sigma_d2": model.exact_sigma_d2(), "sigma_m2": model.exact_sigma_m2(), "c_fe": model.exact_c("fe"),
            "c_iid": model.exact_c("iid")}


def exact_pool_batch_var(model: Enumerated, spec: dict) -> float:
    """The exact variance of a batch resampled from the pool: Var(slot) / S (slots are independent).

    FE slots are enumerated; an iid slot of K copies has 28^K outcomes at n = 8, so its variance comes from Eq.
    (*) with the exact terms, which test_predicted_batch_variance_equals_enumeration checks by enumeration."""
    if spec["arm"] == "fe":
        return model.exact_batch_var(spec["K"], "fe", 1) / spec["sequences"]
    return predicted_variance(exact_terms(model), spec, 1 - 1 / model.table.shape[0])


# ---------------------------------------------------------------------------------------------- the formula
@pytest.mark.parametrize("k", [2, 3])
def test_predicted_batch_variance_equals_enumeration(k: int) -> None:
    """Eq. (*) with the exact terms == the variance of the batch gradient, enumerated over every batch of 2
    slots (each slot: a pool sequence and a K-mask draw), for MLM, FE and iid."""
    model = Enumerated(seqs=3, seed=1)  # n = 6, tau = 2: FE fits K <= 3
    terms = exact_terms(model)
    assert abs(terms["c_iid"]) < 1e-12 and terms["c_fe"] < 0
    pool_factor = 1 - 1 / 3  # batches resample the pool: its variance has the denominator S_p, sigma_d2 has S_p - 1
    for arm, strategy, kk in (("mlm", "iid", 1), ("fe", "fe", k), ("iid", "iid", k)):
        one = model.exact_batch_var(kk, strategy, 1)  # one slot: the law of total variance, then Theorem 1
        assert predicted_variance(terms, {"arm": arm, "K": kk, "sequences": 1}, pool_factor) == pytest.approx(one)
        if arm == "iid" and k == 3:
            continue  # 2 slots of 3 iid copies: (3 * 15^3)^2 = 10^8 batches, too many to enumerate here
        two = model.exact_batch_var(kk, strategy, 2)  # every batch of two independent slots: Var / 2
        assert predicted_variance(terms, {"arm": arm, "K": kk, "sequences": 2}, pool_factor) == pytest.approx(two)


def test_both_equal_compute_modes_give_the_same_comparison() -> None:
    """Variance x rows per step: K sigma_d2 + sigma_m2 + (K-1) c in both modes, against sigma_d2 + sigma_m2."""
    terms = {"sigma_d2": 0.7, "sigma_m2": 5.0, "c_fe": -0.9, "c_iid": 0.0}
    specs = arm_specs([2, 4, 8], rows=48)
    mlm = specs[0]
    assert (mlm["arm"], mlm["sequences"], mlm["rows"]) == ("mlm", 48, 48)
    assert predicted_variance(terms, mlm) * 48 == pytest.approx(0.7 + 5.0)
    for spec in specs[1:]:
        k = spec["K"]
        c = terms["c_fe"] if spec["arm"] == "fe" else 0.0
        per_compute = predicted_variance(terms, spec) * spec["rows"]
        assert per_compute == pytest.approx(k * 0.7 + 5.0 + (k - 1) * c)
        assert spec["sequences"] == (48 // k if spec["mode"] == "same_rows" else 48)
    # FE wins iff c_FE < -sigma_d2: here -0.9 < -0.7
    fe4 = next(s for s in specs if s["arm"] == "fe" and s["K"] == 4)
    assert predicted_variance(terms, fe4) * fe4["rows"] < predicted_variance(terms, mlm) * 48


def test_cost_formula() -> None:
    assert decomposition_cost(pool=32, reference=16, draws=8, kmax=8, batches=10, rows=48) == {
        "terms": 32 * (16 + 2 * 8 * 8), "check": 2 * 10 * 48 * 8}


# ---------------------------------------------------------------------------------------------- estimators
@pytest.fixture(scope="module")
def pool_model() -> Enumerated:
    return Enumerated(seqs=6, seed=3, n=8, tau=2)  # FE fits K <= 4


def test_terms_match_exact_values(pool_model: Enumerated) -> None:
    model = pool_model
    exact = exact_terms(model)
    res = decomposition_study(model.grad_fn, model.valid, [2, 4], 2, rows=4, reference=20, draws=300, batches=0,
                              seed=0, chunk=64, n_boot=300, sketch_dim=0)
    t = res.terms
    assert t["sigma_m2"]["estimate"] == pytest.approx(exact["sigma_m2"], rel=0.05)
    assert t["sigma_d2"]["estimate"] == pytest.approx(exact["sigma_d2"], rel=0.05)
    assert t["c_fe"]["estimate"] == pytest.approx(exact["c_fe"], rel=0.1)
    for k in ("2", "4"):  # c_FE does not depend on K at one tau
        assert t["c_fe_by_K"][k]["estimate"] == pytest.approx(exact["c_fe"], rel=0.15)
        assert abs(t["c_iid_by_K"][k]["estimate"]) < 0.05 * exact["sigma_m2"]
    assert t["sigma_m2_from_fe_masks"]["estimate"] == pytest.approx(exact["sigma_m2"], rel=0.05)
    for name in ("sigma_d2", "sigma_m2", "c_fe"):
        low, high = t[name]["ci"]
        assert low < exact[name] < high, name
    assert all(np.isnan(r["measured_var"]) for r in res.rows)  # batches = 0: no direct check


def test_estimators_are_unbiased(pool_model: Enumerated) -> None:
    """With J = 3 reference masks and D = 1 draw per sequence every estimate is noisy (and sigma_d2's
    correction large); their mean over independent seeds converges to the exact values."""
    model = pool_model
    exact = exact_terms(model)
    names = ("sigma_d2", "sigma_m2", "c_fe", "c_iid", "single_fe")
    values = {n: [] for n in names}
    for seed in range(300):
        terms = pool_terms(model.grad_fn, model.valid, [2, 4], 2, reference=3, draws=1, seed=seed, chunk=64,
                           sketch_dim=0)
        est = term_estimates(terms, np.ones((1, 6)), resampled=False)
        for n in names:
            values[n].append(float(est[n][0]))
    exact["single_fe"] = exact["sigma_m2"]
    for n in names:
        v = np.array(values[n])
        se = v.std(ddof=1) / np.sqrt(v.size)
        assert abs(v.mean() - exact[n]) < 4 * se + 1e-9, (n, v.mean(), exact[n], se)
    # the correction matters: without it sigma_d2 is biased upwards by mean_s v_s / J'
    assert np.mean(values["sigma_d2"]) < exact["sigma_d2"] + 0.5 * exact["sigma_m2"] / 7


def test_direct_check_measures_the_exact_batch_variance(pool_model: Enumerated) -> None:
    model = pool_model
    res = decomposition_study(model.grad_fn, model.valid, [2, 4], 2, rows=4, reference=20, draws=100,
                              batches=1500, seed=1, chunk=64, n_boot=200, sketch_dim=0)
    specs = {(s["arm"], s["K"], s["mode"]): s for s in arm_specs([2, 4], 4)}
    for row in res.rows:
        exact = exact_pool_batch_var(model, specs[(row["arm"], row["K"], row["mode"])])
        assert row["measured_var"] == pytest.approx(exact, rel=0.1), row
        assert row["check_predicted_var"] == pytest.approx(exact, rel=0.1), row
        assert row["measured_over_predicted"] == pytest.approx(1.0, abs=0.15), row
        low, high = row["measured_over_predicted_ci"]
        assert low < 1 < high, row
    # the same-rows and same-sequences arms give the same per-compute comparison (measured)
    for k in (2, 4):
        fe = res.verdicts[str(k)]["fe"]
        assert fe["measured_same_rows"] == pytest.approx(fe["measured_same_sequences"], rel=0.15)


def test_direct_check_is_unbiased_with_a_noisy_centre(pool_model: Enumerated) -> None:
    """With J' = 7 masks per sequence the pool mean the batches are centred at is noisy (E|mu^ - mu|^2 is ~10%
    of the smallest batch variance); the measured variance subtracts its unbiased estimate, so its mean over
    seeds is the exact batch variance."""
    model = pool_model
    specs = {(s["arm"], s["K"], s["mode"]): s for s in arm_specs([2, 4], 4)}
    keys = [("fe", 4, "same_sequences"), ("iid", 2, "same_rows")]
    values: dict[tuple, list[float]] = {key: [] for key in keys}
    for seed in range(30):
        res = decomposition_study(model.grad_fn, model.valid, [2, 4], 2, rows=4, reference=3, draws=1,
                                  batches=150, seed=100 + seed, chunk=64, n_boot=0, sketch_dim=0)
        for row in res.rows:
            if (row["arm"], row["K"], row["mode"]) in values:
                values[(row["arm"], row["K"], row["mode"])].append(row["measured_var"])
    for key in keys:
        v = np.array(values[key])
        exact = exact_pool_batch_var(model, specs[key])
        assert abs(v.mean() - exact) < 4 * v.std(ddof=1) / np.sqrt(v.size), (key, v.mean(), exact)


def test_check_batches_reads_prefixes_correctly() -> None:
    """One batch by hand: an additive model whose gradient is a one-hot of the masked positions, so every
    arm's batch gradient can be recomputed from the masks the sampler drew."""
    model = Enumerated(seqs=2, seed=0, n=8, tau=2, additive=True)
    centre = model.seq_means().mean(dim=0)
    drawn: list[tuple[torch.Tensor, torch.Tensor]] = []

    def recording(seq_idx: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        drawn.append((seq_idx.clone(), masks.clone()))
        return model.grad_fn(seq_idx, masks)

    out = check_batches(recording, model.valid, [2, 4], 2, rows=4, batches=1, centre=centre, seed=5, chunk=8)
    seq_idx = torch.cat([d[0] for d in drawn]).view(2, 4, 4)  # [arm, slot, copy]
    masks = torch.cat([d[1] for d in drawn]).view(2, 4, 4, -1)
    grads = model.table[seq_idx, model.index(masks.flatten(0, 2)).view(2, 4, 4)] - centre  # [arm, slot, copy, P]
    assert bool((masks[0].sum(dim=1) <= 1).all())  # FE: the 4 copies of a slot are disjoint

    def norm(v: torch.Tensor) -> float:
        return float((v**2).sum())

    assert out[("mlm", 1, "baseline")][0] == pytest.approx(norm(grads[1, :, 0].mean(dim=0)))
    for a, arm in enumerate(("fe", "iid")):
        for k in (2, 4):
            slots = grads[a, :, :k].mean(dim=1)  # [slot, P]
            assert out[(arm, k, "same_sequences")][0] == pytest.approx(norm(slots.mean(dim=0)))
            assert out[(arm, k, "same_rows")][0] == pytest.approx(norm(slots[: 4 // k].mean(dim=0)))


def test_verdict_follows_the_data_term() -> None:
    """FE wins at equal compute iff c_FE < -sigma_d2. Adding a fixed vector per sequence moves sigma_d2 only
    (sigma_m2 and c_FE are within-sequence): with the sequence means made equal FE must win, with them spread
    apart it must lose, and the verdicts must say so."""
    model = Enumerated(seqs=6, seed=3, n=8, tau=2)
    spread = model.seq_means() - model.seq_means().mean(dim=0)
    base = exact_terms(model)
    kwargs = dict(num_masks=[2, 4], tau=2, rows=4, reference=10, draws=100, batches=0, seed=2, chunk=64, n_boot=300,
                  sketch_dim=0)
    for scale, wins in ((0.0, True), (1.5, False)):
        model.table = model.table - model.seq_means()[:, None] + model.seq_means().mean(dim=0) + scale * spread[:, None]
        exact = exact_terms(model)
        assert exact["sigma_m2"] == pytest.approx(base["sigma_m2"]) and exact["c_fe"] == pytest.approx(base["c_fe"])
        assert exact["sigma_d2"] == pytest.approx(scale**2 * base["sigma_d2"], abs=1e-9)
        assert (exact["c_fe"] < -exact["sigma_d2"]) == wins
        res = decomposition_study(model.grad_fn, model.valid, **kwargs)
        for k in ("2", "4"):
            fe = res.verdicts[k]["fe"]
            assert (fe["ci"][1] < 1 if wins else fe["ci"][0] > 1), (scale, k, fe)
            assert fe["verdict"] == ("FE / MLM: 95% interval below 1 (unadjusted)" if wins
                                     else "FE / MLM: 95% interval above 1 (unadjusted)")
            assert (fe["c_plus_sigma_d2_ci"][1] < 0 if wins else fe["c_plus_sigma_d2_ci"][0] > 0)
            if scale:  # iid copies never help at equal compute (a tie when sigma_d2 = 0)
                assert res.verdicts[k]["iid"]["ci"][0] > 1
            assert res.verdicts[k]["fe_vs_iid"]["ci"][1] < 1  # disjoint copies beat independent ones


# ---------------------------------------------------------------------------------------------- the sketch
def test_count_sketch_inner_products_are_unbiased() -> None:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 500, generator=gen, dtype=torch.float64)
    y = 0.6 * x + y
    vals = np.array([float((lambda s: s(x[None]) @ s(y[None]).T)(CountSketch(500, 16, torch.Generator().manual_seed(i))))
                     for i in range(2000)])
    truth = float(x @ y)
    assert abs(vals.mean() - truth) < 4 * vals.std(ddof=1) / np.sqrt(vals.size)
    assert vals.std() > 0.05 * abs(truth)  # a real projection (d = 16 << 500), not the identity
    exact = CountSketch(500, 0, gen)
    assert torch.equal(exact(x[None]), x[None])


def test_sketched_pool_terms_agree_with_exact(pool_model: Enumerated) -> None:
    model = pool_model
    common = dict(num_masks=[2, 4], tau=2, reference=10, draws=20, seed=4, chunk=64)
    exact = pool_terms(model.grad_fn, model.valid, sketch_dim=0, **common)
    sketched = pool_terms(model.grad_fn, model.valid, sketch_dim=8, **common)
    ones = np.ones((1, 6))
    e = term_estimates(exact, ones, resampled=False)
    s = term_estimates(sketched, ones, resampled=False)
    for name in ("sigma_d2", "sigma_m2", "c_fe"):  # point estimates never use the sketch
        assert float(s[name][0]) == pytest.approx(float(e[name][0]), rel=1e-9)
    assert np.allclose(np.diag(exact.gram), np.diag(sketched.gram))
    assert not np.allclose(exact.gram, sketched.gram)  # off-diagonal entries are sketched (d = 8 < P = 15)
    counts = np.random.default_rng(0).multinomial(6, np.full(6, 1 / 6), size=400)
    width = {name: np.subtract(*np.quantile(term_estimates(t, counts)["sigma_d2"], [0.975, 0.025]))
             for name, t in (("exact", exact), ("sketched", sketched))}
    assert width["sketched"] == pytest.approx(width["exact"], rel=0.5)


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("bad,match", [
    ({"batch_rows": 30, "num_masks": [2, 4]}, "multiple of K=4"), ({"pool": 1}, "analysis.pool"),
    ({"check_batches": 1}, "analysis.check_batches"), ({"sketch_dim": -1}, "analysis.sketch_dim"),
    ({"null_group_size": 1}, "analysis.null_group_size"), ({"draws": 0}, "analysis.draws"),
])
def test_decomposition_config_validation(bad: dict, match: str) -> None:
    AnalysisConfig(kind="decomposition", num_masks=[2, 4, 8]).validate()
    with pytest.raises(UserError, match=match):
        AnalysisConfig(kind="decomposition", **bad).validate()
