"""Intervals over units (issue 27, item 1): at the production size (`MIN_UNITS` units, the study's 1,000
resamples) the expanded percentile interval covers a known answer at its nominal 95% within simulation error;
below the threshold the plain percentile interval does not, which is why femlm prints none there. Also the
gates of item 2 on hand-made summaries. Seconds on one core.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from femlm.analysis.decomposition import PoolTerms, term_estimates
from femlm.analysis.gates import (
    AGREE_FACTOR,
    apply_gates,
    decomposition_gates,
    not_measured,
    null_model_gates,
)
from femlm.analysis.intervals import LEVEL, MIN_UNITS, expanded_levels, median_of_means, unit_interval

SAMPLES, RESAMPLES = 600, 1000
SE = np.sqrt(LEVEL * (1 - LEVEL) / SAMPLES)  # simulation error of a coverage at the nominal rate


def mean_coverage(n: int, rng: np.random.Generator, expanded: bool, skewed: bool = False) -> float:
    x = rng.exponential(size=(SAMPLES, n)) - 1.0 if skewed else rng.normal(size=(SAMPLES, n))  # the mean is 0
    means = x[:, rng.integers(0, n, size=(RESAMPLES, n))].mean(axis=2)  # [SAMPLES, RESAMPLES]
    levels = expanded_levels(n) if expanded else ((1 - LEVEL) / 2, (1 + LEVEL) / 2)
    low, high = np.quantile(means, levels, axis=1)
    return float(np.mean((low <= 0) & (high >= 0)))


def test_at_the_threshold_skewed_data_are_covered_at_least_90_percent() -> None:
    """intervals.py's claim for skewed data (exponential: skewness 2): at MIN_UNITS the expanded interval covers at
    least 0.90 (simulated 0.90-0.92); a threshold lowered to where it does not (0.83 at n = 4) fails here."""
    cover = mean_coverage(MIN_UNITS, np.random.default_rng(2), expanded=True, skewed=True)
    assert cover > 0.90 - 3 * np.sqrt(0.9 * 0.1 / SAMPLES), cover


def test_production_size_interval_of_a_mean_covers_at_the_nominal_rate() -> None:
    cover = mean_coverage(MIN_UNITS, np.random.default_rng(0), expanded=True)
    assert abs(cover - LEVEL) < 3 * SE, cover


def test_below_the_threshold_a_percentile_interval_undercovers() -> None:
    cover = mean_coverage(4, np.random.default_rng(1), expanded=False)
    assert cover < LEVEL - 3 * SE, cover  # about 0.79: why femlm prints no interval from 4 units


def synthetic_pool(n: int, rng: np.random.Generator, sd2: float, sm2: float, c: float) -> PoolTerms:
    """A pool whose terms are known: sequence means spread sd2 (in 16 dimensions) observed through J' = 14 masks,
    per-sequence mask variances (their estimates chi-square) around sm2, copy covariances around c."""
    dims, pooled = 16, 14
    v = sm2 * rng.lognormal(-0.045, 0.3, size=n)
    mu = rng.normal(size=(n, dims)) * np.sqrt(sd2 / dims)
    mu_hat = mu + rng.normal(size=(n, dims)) * np.sqrt(v / pooled / dims)[:, None]
    v_hat = v * rng.chisquare(pooled - 1, size=n) / (pooled - 1)
    c_s = c + 0.1 * rng.normal(size=n)
    x = mu_hat - mu_hat[0]
    zero = np.zeros(n)
    return PoolTerms(num_masks=[2], tau=1, reference=8, pooled=pooled, draws=1, mask_var=v_hat, c_fe=c_s[:, None],
                     c_iid=zero[:, None], c_fe_all=c_s, c_iid_all=zero, single_fe=v_hat, gram=x @ x.T,
                     between=float((x * x).sum() - x.sum(0) @ x.sum(0) / n), pool_mean=torch.zeros(1),
                     sketch_dim=0)


def test_production_size_interval_of_the_decomposition_ratio_covers() -> None:
    """FE / MLM per unit compute at K = 2 (the decomposition's verdict) from the production estimator and
    bootstrap (`term_estimates` over resampled pool sequences), on pools of MIN_UNITS sequences."""
    rng = np.random.default_rng(2)
    sd2, sm2, c, k = 0.08, 0.64, -0.09, 2
    truth = (k * sd2 + sm2 + (k - 1) * c) / (sd2 + sm2)
    samples, hits = 300, 0
    for _ in range(samples):
        terms = synthetic_pool(MIN_UNITS, rng, sd2, sm2, c)
        counts = rng.multinomial(MIN_UNITS, np.full(MIN_UNITS, 1 / MIN_UNITS), size=RESAMPLES)
        e = term_estimates(terms, counts)
        low, high = unit_interval((k * e["sigma_d2"] + e["sigma_m2"] + (k - 1) * e["c_fe"])
                                  / (e["sigma_d2"] + e["sigma_m2"]), MIN_UNITS).bounds
        hits += low <= truth <= high
    se = np.sqrt(LEVEL * (1 - LEVEL) / samples)
    assert abs(hits / samples - LEVEL) < 3 * se, hits / samples


def test_median_of_means_resists_one_heavy_unit() -> None:
    values = np.ones(12)
    values[3] = 1000.0  # one sequence carries almost all of the sum
    assert values.mean() > 80 and median_of_means(values) == pytest.approx(1.0)
    assert np.isnan(median_of_means(np.ones(4)))


# ---------------------------------------------------------------------------------------------- gates
def terms(d2: float, m2: float, fe: float) -> dict:
    return {"sigma_d2": {"estimate": d2}, "sigma_m2": {"estimate": m2}, "sigma_m2_from_fe_masks": {"estimate": fe}}


def test_decomposition_gates() -> None:
    assert decomposition_gates(terms(0.4, 4.7, 5.6), 40) == []
    assert "too few units: 4 pool sequences" in decomposition_gates(terms(0.4, 4.7, 5.6), 4)[0]
    assert "sigma_d2" in decomposition_gates(terms(-0.1, 4.7, 5.6), 40)[0]
    (reason,) = decomposition_gates(terms(0.3, 23.3, 5.85), 40)  # the 0.30 run of study-base
    assert "disagree" in reason and f"factor {AGREE_FACTOR:g}" in reason
    robust = {"sigma_m2": {"median_of_means": 1.0}}
    assert "median of means" in decomposition_gates(terms(0.4, 4.0, 4.0), 40, robust)[0]


def test_null_model_gates() -> None:
    ok = {"d2_mean": 50.4, "additive_share_of_var": 0.63, "var_single": 11.4}
    assert null_model_gates(ok, 12) == []
    assert null_model_gates(ok, 4) == ["too few units: 4 sequences (intervals need >= 12)"]
    bad = null_model_gates({"d2_mean": -7.29, "additive_share_of_var": -0.29, "var_single": 4.5}, 12)
    assert len(bad) == 2 and "D2" in bad[0] and "outside [0, 1]" in bad[1]


def test_apply_gates_keeps_the_interval_reading_and_is_idempotent() -> None:
    verdicts = {"2": {"fe": {"verdict": "inconclusive"}, "iid": {"verdict": "i.i.d. increases"}, "fe_vs_iid": {}}}
    apply_gates(verdicts, ["too few units"])
    assert verdicts["2"]["fe"]["verdict"] == not_measured(["too few units"]) == "not measured: too few units"
    assert verdicts["2"]["fe"]["interval_reading"] == "inconclusive"
    apply_gates(verdicts, [])
    assert verdicts["2"]["iid"]["verdict"] == "i.i.d. increases"
