"""The two studies, independent of any model: they only call ``grad_fn(seq_idx, masks) -> [N, P]``.

Covariance vs Hamming distance (Assumption 1, Figures 2-3). Cost: ``S * (J + 2 * budget)`` gradient rows
(one forward and one backward pass each): J reference masks per sequence for g-bar, then ``budget`` mask
pairs, each pair giving every one of the S sequences its own pair at the pair's distance H.

K-mask variance, fully-explored vs i.i.d. (Theorem 1, Lemma 3). Cost: ``S * (J + 2 * budget * max(K))``
rows: ``budget`` draws of ``max(K)`` masks per sequence and arm; the first K masks of a draw are a K-mask
draw, so one set of draws serves every K in ``num_masks`` (estimates at different K share draws).

Intervals are percentile bootstraps over pairs (stratified by Hamming bin) or over draws (each arm on its
own), conditional on the reference estimate of g-bar: its error is one term shared by every pair and draw
(a constant shift of all covariances, which no rank can see), of relative size about sqrt(2 / J) K / J of
Var_iid; raise ``analysis.reference`` to shrink it.

Random streams are `femlm.masking.make_generator(seed, step=0, micro_step=STREAM)` with one stream per
purpose, so changing the budget of one study never changes the masks of another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from femlm.masking import make_generator

from .estimators import (
    GradFn,
    Progress,
    Reference,
    bootstrap_mean_interval,
    bootstrap_ratio_interval,
    group_grams,
    kmask_terms,
    reference_stats,
    spearman_summary,
)
from .masks import hamming, hamming_strata, max_hamming, sample_kmasks, sample_pairs, sample_uniform

STREAM_REFERENCE, STREAM_HAMMING, STREAM_PAIRS, STREAM_IID, STREAM_FE, STREAM_BOOT = 11, 12, 13, 14, 15, 16


@dataclass
class CovarianceResult:
    rows: list[dict[str, Any]]  # one per mask pair
    summary: list[dict[str, Any]]  # one per Hamming bin
    spearman: dict[str, Any]
    stats: dict[str, Any] = field(default_factory=dict)
    # per pair and sequence [P, S]: "cov" (each row's value is its mean over sequences), "var_single"
    per_sequence: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class VarianceResult:
    rows: list[dict[str, Any]]  # one per K
    stats: dict[str, Any] = field(default_factory=dict)


def covariance_cost(seqs: int, reference: int, budget: int) -> int:
    return seqs * (reference + 2 * budget)


def variance_cost(seqs: int, reference: int, budget: int, kmax: int) -> int:
    return seqs * (reference + 2 * budget * kmax)


def make_reference(grad_fn: GradFn, valid: torch.Tensor, tau: int, count: int, seed: int, chunk: int,
                   progress: Progress | None = None) -> Reference:
    """g-bar per sequence at ``tau`` from ``count`` i.i.d. uniform masks (one stream per tau)."""
    gen = make_generator(seed, step=tau, micro_step=STREAM_REFERENCE)
    return reference_stats(grad_fn, sample_uniform(valid, tau, count, gen), chunk, progress)


def covariance_study(grad_fn: GradFn, valid: torch.Tensor, tau: int, budget: int, bins: int,
                     ref: Reference, seed: int, chunk: int, n_boot: int,
                     progress: Progress | None = None) -> CovarianceResult:
    """Cov(g(m1), g(m2)) = E[(g(m1) - g-bar)^T (g(m2) - g-bar)] for pairs at controlled distances H.

    Each pair's value is the unbiased per-sequence estimate averaged over the mini-batch. ``var_single``
    is the same from one mask of the pair with itself (an unbiased estimate of Var(g(m)), the H = 0 value).
    """
    n_min = int(valid.sum(dim=1).min())
    if not 0 < tau < n_min:
        raise ValueError(f"tau={tau} must be in [1, {n_min - 1}] (the shortest sequence has {n_min} positions)")
    hams, bin_of, edges = hamming_strata(n_min, tau, bins, budget, make_generator(seed, 0, micro_step=STREAM_HAMMING))
    m1, m2 = sample_pairs(valid, tau, hams, make_generator(seed, 0, micro_step=STREAM_PAIRS))
    realised = hamming(m1, m2)  # [P, S]
    if not bool((realised == hams[:, None]).all()):
        raise AssertionError("pair sampler missed a requested Hamming distance")
    grams = group_grams(grad_fn, torch.stack([m1, m2], dim=2), ref, chunk, progress)  # [P, S, 2, 2]
    corr = ref.correction.cpu().view(1, -1)
    cov_ps = grams[..., 0, 1] - corr  # [P, S]
    var_ps = (grams[..., 0, 0] + grams[..., 1, 1]) / 2 - corr
    cov = cov_ps.mean(dim=1).numpy()
    raw = grams[..., 0, 1].mean(dim=1).numpy()
    var1 = var_ps.mean(dim=1).numpy()
    hams_np, bins_np = hams.numpy(), bin_of.numpy()
    rows = [{"pair": p, "bin": int(bins_np[p]), "hamming": int(hams_np[p]), "overlap": tau - int(hams_np[p]) // 2,
             "cov": float(cov[p]), "cov_uncorrected": float(raw[p]), "var_single": float(var1[p])}
            for p in range(len(cov))]
    rng = np.random.default_rng(make_generator(seed, 0, micro_step=STREAM_BOOT).initial_seed())
    spear = spearman_summary(hams_np.astype(np.float64), cov, bins_np, n_boot, rng)
    var_single = float(var1.mean())
    summary = []
    for j, b in enumerate(np.unique(bins_np)):
        vals = cov[bins_np == b]
        ci = spear["bin_ci"][j] if "bin_ci" in spear else [float("nan")] * 2
        summary.append({
            "bin": int(b), "h_low": edges[b][0], "h_high": edges[b][1],
            "h_mean": float(hams_np[bins_np == b].mean()), "n": int(vals.size), "mean": float(vals.mean()),
            "ci_low": ci[0], "ci_high": ci[1], "median": float(np.median(vals)),
            "q25": float(np.quantile(vals, 0.25)), "q75": float(np.quantile(vals, 0.75)),
            "mean_over_var": float(vals.mean() / var_single) if var_single > 0 else float("nan"),
        })
    stats = {"tau": tau, "n_min": n_min, "h_max": max_hamming(n_min, tau), "pairs": len(cov),
             "var_single": var_single, "reference": ref.count,
             "reference_correction": float(ref.correction.mean())}
    return CovarianceResult(rows=rows, summary=summary, spearman=spear, stats=stats,
                            per_sequence={"cov": cov_ps.numpy(), "var_single": var_ps.numpy()})


def resolve_variance_tau(n_min: int, tau: int, variance_tau: int | None, num_masks: list[int],
                         ratio: float | None = None) -> int:
    """tau of the variance study: fully-explored draws need ``max(K) * tau <= n`` (disjoint masks).

    ``variance_tau`` None: ``min(tau, n // max(K))`` -- one tau shared by every K, so Var(g(m)) is the same
    quantity for all K (with the paper's n = 512 and K up to 8 this is 64 = 12.5% per split, the setting
    of its split-number study). ``ratio`` (``analysis.ratio``: a masking rate, e.g. a schedule's value at
    some step) sets ``tau = round_half_up(ratio * n)``. A tau that does not fit raises ``ValueError`` naming K.
    """
    kmax = max(num_masks)
    if ratio is not None:
        chosen = max(1, math.floor(ratio * n_min + 0.5))
        if kmax * chosen > n_min:
            raise ValueError(f"analysis.ratio={ratio} gives tau={chosen} of {n_min} maskable positions, and K={kmax} "
                             f"disjoint masks need {kmax * chosen}; allowed: ratio <= 1/{kmax}, or drop K={kmax} "
                             "from analysis.num_masks")
        return chosen
    if variance_tau is None:
        chosen = min(tau, n_min // kmax)
        if chosen < 1:
            raise ValueError(f"analysis.num_masks={num_masks}: {kmax} disjoint masks do not fit in {n_min} positions")
        return chosen
    if kmax * variance_tau > n_min:
        raise ValueError(f"analysis.variance_tau={variance_tau} with K={kmax} needs {kmax * variance_tau} "
                         f"maskable positions but the shortest sequence has {n_min}; lower variance_tau "
                         f"(<= {n_min // kmax}), drop K={kmax} from analysis.num_masks, or set variance_tau=null")
    return variance_tau


def variance_study(grad_fn: GradFn, valid: torch.Tensor, num_masks: list[int], tau: int, budget: int,
                   ref: Reference, seed: int, chunk: int, n_boot: int,
                   progress: Progress | None = None) -> VarianceResult:
    """Var of the K-mask gradient under i.i.d. and fully-explored draws, with Theorem 1's decomposition.

    Per K: ``var_iid``, ``var_fe`` (direct estimates), ``ratio = var_fe / var_iid`` with a bootstrap 95%
    interval over draws, and Theorem 1's predictions from one- and two-mask statistics pooled over all
    masks of all draws: ``theorem1_var_iid = Var1 / K`` (independent masks have zero covariance),
    ``theorem1_var_fe = Var1 / K + (1 - 1/K) Cov_FE`` and ``theorem1_prediction = theorem1_var_fe /
    theorem1_var_iid = 1 + (K - 1) Cov_FE / Var1``, where ``Cov_FE`` is the covariance of disjoint masks.
    ``cov_iid`` is the estimated covariance of independent masks (0 in expectation: a sanity check).
    """
    kmax = max(num_masks)
    iid = sample_kmasks(valid, tau, kmax, "iid", budget, make_generator(seed, 0, micro_step=STREAM_IID))
    fe = sample_kmasks(valid, tau, kmax, "fully_explored", budget, make_generator(seed, 0, micro_step=STREAM_FE))
    grams = {"iid": group_grams(grad_fn, iid, ref, chunk, progress),
             "fe": group_grams(grad_fn, fe, ref, chunk, progress)}
    full = {arm: kmask_terms(g, ref, kmax) for arm, g in grams.items()}
    var1 = float(torch.cat([full["iid"]["single"], full["fe"]["single"]]).mean())
    cov_fe = float(full["fe"]["cross"].mean())
    cov_iid = float(full["iid"]["cross"].mean())
    rng = np.random.default_rng(make_generator(seed, 1, micro_step=STREAM_BOOT).initial_seed())
    rows = []
    for k in sorted(num_masks):
        terms = {arm: kmask_terms(g, ref, k) for arm, g in grams.items()}
        v_iid, v_fe = terms["iid"]["var"].numpy(), terms["fe"]["var"].numpy()
        t_iid = var1 / k
        t_fe = var1 / k + (1 - 1 / k) * cov_fe
        ratio = bootstrap_ratio_interval(v_fe, v_iid, n_boot, rng)
        var_iid = bootstrap_mean_interval(v_iid, n_boot, rng)
        var_fe = bootstrap_mean_interval(v_fe, n_boot, rng)
        rows.append({
            "K": k, "tau": tau, "draws": budget,
            "var_iid": var_iid.estimate, "var_iid_ci": var_iid.bounds,
            "var_fe": var_fe.estimate, "var_fe_ci": var_fe.bounds,
            "ratio": ratio.estimate, "ci_low": ratio.low, "ci_high": ratio.high,
            "theorem1_var_iid": t_iid, "theorem1_var_fe": t_fe, "theorem1_prediction": t_fe / t_iid,
            # Theorem 1 with each arm's own one- and two-mask terms: equal to var_* up to rounding.
            "identity_fe": float((terms["fe"]["single"] / k + (1 - 1 / k) * terms["fe"]["cross"]).mean()),
            "identity_iid": float((terms["iid"]["single"] / k + (1 - 1 / k) * terms["iid"]["cross"]).mean()),
            "var_single": var1, "cov_fe": cov_fe, "cov_iid": cov_iid,
        })
    stats = {"tau": tau, "kmax": kmax, "draws": budget, "var_single": var1, "cov_fe": cov_fe,
             "cov_iid": cov_iid, "reference": ref.count, "reference_correction": float(ref.correction.mean())}
    return VarianceResult(rows=rows, stats=stats)
