"""Estimators of the gradient study: the mean gradient g-bar, centred Gram matrices, bootstrap intervals.

Everything is unbiased by construction, so that Monte-Carlo estimates converge to the exact values the
tests enumerate:

* ``g-bar`` is estimated per sequence from J i.i.d. uniform masks (``Reference``), independent of every
  mask being studied. Centring at the estimate instead of the truth adds ``E|g-hat - g-bar|^2 =
  tr Var(g(m)) / J`` to every inner product ``(g(m1) - g-hat)^T (g(m2) - g-hat)`` (cross terms vanish by
  independence); ``Reference.correction`` is the unbiased estimate of that term and is subtracted.
* All statistics are functions of *centred Gram matrices* ``G[k, l] = (g_k - g-hat)^T (g_l - g-hat)`` of
  small groups of masks (a pair, or the K masks of one draw), so gradients are never stored: memory is
  O(chunk x P) whatever the budget.
* For a K-mask draw, ``|mean_k (g_k - g-hat)|^2 = (1/K^2) (sum_k G_kk + sum_{k != l} G_kl)``: the direct
  variance estimate and Theorem 1's ``(1/K) Var + (1 - 1/K) Cov`` built from the same draws agree to
  rounding error, which is the theorem's identity (Lemma 3 extends it to disjoint masks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from scipy import stats

from femlm.stop import check

from .intervals import Interval, percentile_interval

# grad_fn(seq_idx[N], masks[N, L]) -> Tensor[N, P]: per-row gradients (see gradients.MaskedLMGradients).
GradFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Progress(Protocol):
    def update(self, n: int) -> Any: ...


@dataclass
class Reference:
    """Per-sequence estimate of g-bar from ``count`` i.i.d. uniform masks."""

    mean: torch.Tensor  # [S, P] float64
    trace_var: torch.Tensor  # [S] unbiased estimate of tr Var(g(m)) = E|g(m) - g-bar|^2
    count: int

    @property
    def correction(self) -> torch.Tensor:
        """[S]: unbiased estimate of E|g-hat - g-bar|^2, the bias of centring at the estimate."""
        return self.trace_var / self.count


def reference_stats(grad_fn: GradFn, masks: torch.Tensor, chunk: int,
                    progress: Progress | None = None) -> Reference:
    """Mean and trace variance per sequence from ``masks[S, J, L]`` (J i.i.d. masks of each sequence).

    Streams chunks with Chan's parallel update of (mean, sum of squared deviations): a one-pass
    ``sum|g|^2 - J |mean|^2`` would cancel catastrophically because |g-bar| is much larger than the spread.
    """
    seqs, count, _ = masks.shape
    seq_idx = torch.arange(seqs).repeat_interleave(count)
    flat = masks.reshape(seqs * count, -1)
    mean: torch.Tensor | None = None
    m2 = torch.zeros(seqs, dtype=torch.float64)
    seen = torch.zeros(seqs, dtype=torch.float64)
    for start in range(0, len(flat), chunk):
        idx = seq_idx[start:start + chunk]
        grads = grad_fn(idx, flat[start:start + chunk]).double()
        if mean is None:
            mean = torch.zeros(seqs, grads.shape[1], dtype=torch.float64, device=grads.device)
        for s in idx.unique().tolist():
            rows = grads[(idx == s).to(grads.device)]
            n_b = float(len(rows))
            mean_b = rows.mean(dim=0)
            m2_b = float(((rows - mean_b) ** 2).sum())
            delta = mean_b - mean[s]
            total = seen[s] + n_b
            m2[s] += m2_b + float(delta @ delta) * seen[s] * n_b / total
            mean[s] += delta * (n_b / total)
            seen[s] = total
        if progress is not None:
            progress.update(len(idx))
    assert mean is not None
    return Reference(mean=mean, trace_var=(m2 / (count - 1)).to(mean.device), count=count)


def group_grams(grad_fn: GradFn, masks: torch.Tensor, ref: Reference, chunk: int,
                progress: Progress | None = None) -> torch.Tensor:
    """Centred Gram matrix of each group: ``masks[G, S, m, L] -> Tensor[G, S, m, m]`` (float64, CPU).

    A group is the ``m`` masks (a pair, or one K-mask draw) of one sequence; whole groups are batched into
    calls of about ``chunk`` rows so that a group's gradients are on hand together.
    """
    groups, seqs, m, length = masks.shape
    flat = masks.reshape(groups * seqs, m, length)
    seq_of_group = torch.arange(seqs).repeat(groups)
    out = torch.empty(groups * seqs, m, m, dtype=torch.float64)
    step = max(1, chunk // m)
    for start in range(0, groups * seqs, step):
        gsl = slice(start, start + step)
        seq_idx = seq_of_group[gsl].repeat_interleave(m)
        grads = grad_fn(seq_idx, flat[gsl].reshape(-1, length)).double()
        centred = (grads - ref.mean[seq_idx.to(grads.device)]).view(-1, m, grads.shape[1])
        out[gsl] = (centred @ centred.transpose(1, 2)).cpu()
        if progress is not None:
            progress.update(len(seq_idx))
    return out.view(groups, seqs, m, m)


def kmask_terms(grams: torch.Tensor, ref: Reference, k: int) -> dict[str, torch.Tensor]:
    """Per-draw estimates from the first ``k`` masks of each draw, averaged over the mini-batch: ``[D]``.

    ``var``: |mean_k (g_k - g-hat)|^2 - correction, unbiased for Var(g(m_1..m_k)) (per sequence, averaged
    over sequences; the mini-batch gradient's variance is this / S). ``single``: mean_k G_kk - correction
    (Var(g(m))). ``cross``: mean_{k != l} G_kl - correction (Cov(g(m_1), g(m_2)) of the draw's pairs).
    """
    g = grams[..., :k, :k]
    corr = ref.correction.cpu().view(1, -1)
    total = g.sum(dim=(-1, -2))
    trace = g.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    out = {"var": total / k**2 - corr, "single": trace / k - corr}
    out["cross"] = ((total - trace) / (k * (k - 1)) - corr) if k > 1 else torch.full_like(trace, float("nan"))
    return {key: value.mean(dim=1) for key, value in out.items()}


# ---------------------------------------------------------------------------------------------- bootstrap
def _rank_rows(values: np.ndarray) -> np.ndarray:
    """Ranks along the last axis (ties broken by order: bin means are continuous, ties have measure 0)."""
    return values.argsort(axis=-1).argsort(axis=-1).astype(np.float64)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(axis=-1) / den


def bin_bootstrap(values: np.ndarray, bins: np.ndarray, n_boot: int,
                  rng: np.random.Generator) -> np.ndarray:
    """``[n_boot, B]`` bin means of stratified resamples (pairs resampled within their bin)."""
    labels = np.unique(bins)
    out = np.empty((n_boot, labels.size))
    for j, label in enumerate(labels):
        vals = values[bins == label]
        out[:, j] = vals[rng.integers(0, vals.size, size=(n_boot, vals.size))].mean(axis=1)
    return out


def spearman_summary(hams: np.ndarray, covs: np.ndarray, bins: np.ndarray, n_boot: int,
                     rng: np.random.Generator) -> dict[str, Any]:
    """Spearman correlation of H with the covariance, with percentile bootstrap 95% intervals.

    ``bins``: rank correlation of the bin order (H increasing) with the per-bin mean covariance -- the
    monotonicity of Figure 3's curve that Assumption 1 states. ``pairs``: rank correlation over all pairs
    (noisier; no p-value: pairs of one sequence share it and are not independent, so a p-value that treats
    them as independent would overstate the evidence). Resampling is stratified by bin, so every bootstrap
    replicate keeps every bin; it is conditional on g-hat, which shifts all covariances by one constant
    and so cannot change any rank.
    """
    labels = np.unique(bins)
    means = np.array([covs[bins == b].mean() for b in labels])
    out: dict[str, Any] = {"bins": int(labels.size), "pairs": int(covs.size)}
    rho_bins = float(stats.spearmanr(labels, means).statistic) if labels.size >= 3 else float("nan")
    pair_test = stats.spearmanr(hams, covs) if np.ptp(hams) > 0 else None
    out["rho_bins"] = rho_bins
    out["rho_pairs"] = float(pair_test.statistic) if pair_test is not None else float("nan")
    if n_boot > 0:
        boot_means = bin_bootstrap(covs, bins, n_boot, rng)
        rho_b = _pearson_rows(_rank_rows(boot_means), np.arange(labels.size, dtype=np.float64)[None, :])
        out["ci_bins"] = percentile_interval(rho_b).bounds if labels.size >= 3 else [float("nan")] * 2
        rho_p = np.empty(n_boot)
        for i in range(n_boot):
            check("the analysis's bootstrap")
            idx = np.concatenate([rng.choice(np.flatnonzero(bins == b), size=int((bins == b).sum()))
                                  for b in labels])
            rho_p[i] = stats.spearmanr(hams[idx], covs[idx]).statistic if np.ptp(hams[idx]) > 0 else np.nan
        out["ci_pairs"] = percentile_interval(rho_p).bounds
        out["bin_ci"] = [percentile_interval(boot_means[:, j]).bounds for j in range(labels.size)]
    return out


def bootstrap_mean_interval(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> Interval:
    """The mean of ``values`` with its percentile bootstrap 95% interval (the values resampled)."""
    mean = float(values.mean()) if values.size else float("nan")
    if n_boot == 0 or values.size == 0:
        return Interval(mean, float("nan"), float("nan"), int(values.size), method="percentile bootstrap")
    boot = values[rng.integers(0, values.size, size=(n_boot, values.size))].mean(axis=1)
    return percentile_interval(boot, mean, int(values.size))


def bootstrap_ratio_interval(num: np.ndarray, den: np.ndarray, n_boot: int,
                             rng: np.random.Generator) -> Interval:
    """``mean(num) / mean(den)`` with its percentile bootstrap 95% interval; the two arms are independent draws,
    so each is resampled on its own."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = float(num.mean() / den.mean())
    if n_boot == 0:
        return Interval(ratio, float("nan"), float("nan"), int(min(num.size, den.size)), method="percentile bootstrap")
    a = num[rng.integers(0, num.size, size=(n_boot, num.size))].mean(axis=1)
    b = den[rng.integers(0, den.size, size=(n_boot, den.size))].mean(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return percentile_interval(a / b, ratio, int(min(num.size, den.size)))
