"""The statistics of the evidence study (`make study`): pure functions of numbers, no files, no torch.

Pre-training (issue 17, part 3). Each run gives a held-out MLM loss curve against training FLOPs: the eval
records of its metrics.jsonl, (train_flops, eval_loss) at every evaluation. Per arm (a masking strategy in one
equal-compute mode) there are n pre-training seeds.

* curves are compared on a common FLOP grid: the union of every curve's evaluation FLOPs inside the range all
  curves cover, each curve linearly interpolated onto it (`common_grid`, `interpolate`). Linear interpolation
  between evaluation points is exact for the piecewise-linear curve the points define, so the area below is
  the trapezoid rule over each curve's own knots;
* mean curve and band: the t-interval of the n seeds' values at every grid point (`band`);
* final loss: the value at the end of the common range; area under the curve: the mean loss over the common
  FLOP range (trapezoid area / range width, in loss units, `mean_loss`), so a lower value means lower loss on
  average over the whole budget, not only at its end;
* compute to reach a target loss (`flops_to_reach`): the first FLOPs at which the curve reaches the target,
  linearly interpolated between the two evaluations around the crossing; ``None`` when the curve never gets
  there inside its budget (censored: the run would need more than its budget);
* targets: the MLM arm's mean loss at 50% and 75% of the common FLOP range (`targets_from`);
* ratios of compute to target, arm / MLM: runs of one seed share the warmed-up weights, the data order
  (a K-copy arm reads a prefix of the same stream) and the evaluation set, so seeds pair the arms. The
  interval is a t-interval of the per-seed log ratios (paired) or a Welch interval of the two arms' log values
  (unpaired), back-transformed: a delta-method interval on the log scale, the geometric-mean ratio at its
  centre. With a censored run the ratio has only a bound (`log_ratio_interval` says which); with n = 3 seeds the
  t quantile is 4.30 (2 degrees of freedom), so only large effects can be told from noise, and the intervals
  say so by their width. A seed bootstrap is not used: with 3 seeds it has at most 10 distinct resamples per
  arm and its percentile interval is too narrow (it ignores the t-correction);
* differences of final loss and mean loss, arm - MLM: paired t-interval over seeds (`paired`), and Welch's
  interval for comparison (`welch`).

Downstream (part 4). Per arm x task the fine-tuning seeds' test scores: mean, sample std, t-interval; the
majority class; the difference to MLM (and to the no-continual baseline) with Welch's t-test (`welch`).

No function here reads a number: every reading (favours FE, against FE, lower, higher, not decided) is
femlm.study.verdicts', made from these intervals and p-values under the study's multiplicity rule. Every interval
here is a per-comparison 95% interval.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from femlm.analysis.intervals import Interval  # femlm's one interval type (analysis sits below study)

LEVEL = 0.95
NAN = float("nan")


def _finite(values: Sequence[float | None]) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    return arr


def t_quantile(df: float, level: float = LEVEL) -> float:
    return float(sps.t.ppf(0.5 + level / 2, df)) if df > 0 else NAN


def _scipy_test(test: Any, *samples: np.ndarray, **kwargs: Any) -> Any:
    """A scipy t-test, without its warning about nearly identical values (the numbers are the textbook formulas',
    which femlm printed silently before it used scipy)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        return test(*samples, **kwargs)


def t_interval(values: Sequence[float | None], level: float = LEVEL) -> Interval:
    """Mean of the values with the Student-t interval and p-value (scipy's one-sample t-test: sample std, n - 1
    degrees of freedom); NaN bounds when fewer than 2 values, a zero-width interval when they are all equal."""
    x = _finite(values)
    n = len(x)
    if n == 0:
        return Interval(NAN, NAN, NAN, 0, method="t")
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, NAN, NAN, 1, method="t")
    std = float(x.std(ddof=1))
    if std == 0:  # scipy's t statistic is then 0/0 or infinite
        return Interval(mean, mean, mean, n, std=std, p=1.0 if mean == 0 else 0.0, df=n - 1, method="t")
    test = _scipy_test(sps.ttest_1samp, x, 0.0)
    low, high = test.confidence_interval(level)
    return Interval(mean, float(low), float(high), n, std=std, p=float(test.pvalue), df=n - 1, method="t")


def paired(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean of a_i - b_i over pairs (both finite) with the paired t-interval and p-value (scipy's ttest_rel is the
    one-sample test of the differences)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)
             if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
    out = t_interval(diffs, level)
    out.method = "paired t"
    return out


def welch(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """mean(a) - mean(b) with Welch's interval (Welch-Satterthwaite degrees of freedom) and p-value: scipy's
    ttest_ind(equal_var=False)."""
    x, y = _finite(a), _finite(b)
    if len(x) < 2 or len(y) < 2:
        est = float(x.mean() - y.mean()) if len(x) and len(y) else NAN
        return Interval(est, NAN, NAN, min(len(x), len(y)), method="welch")
    est = float(x.mean() - y.mean())
    if x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y) == 0:  # no spread: scipy's statistic is 0/0 or infinite
        p = 1.0 if est == 0 else 0.0
        return Interval(est, est, est, min(len(x), len(y)), p=p, df=NAN, method="welch")
    test = _scipy_test(sps.ttest_ind, x, y, equal_var=False)
    low, high = test.confidence_interval(level)
    return Interval(est, float(low), float(high), min(len(x), len(y)), p=float(test.pvalue), df=float(test.df),
                    method="welch")


# ------------------------------------------------------------------------------------------ curves
Curve = tuple[Sequence[float], Sequence[float]]  # (flops, loss), flops increasing


def _clean(curve: Curve) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(curve[0], dtype=float), np.asarray(curve[1], dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def common_range(curves: Sequence[Curve]) -> tuple[float, float]:
    """[max of the starts, min of the ends]: the FLOP range every curve covers."""
    cleaned = [_clean(c) for c in curves]
    cleaned = [c for c in cleaned if len(c[0])]
    if not cleaned:
        return NAN, NAN
    return max(float(x[0]) for x, _ in cleaned), min(float(x[-1]) for x, _ in cleaned)


def common_grid(curves: Sequence[Curve], rel_tol: float = 1e-9) -> np.ndarray:
    """The union of every curve's FLOP points inside the common range (near-equal points merged)."""
    lo, hi = common_range(curves)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        return np.zeros(0)
    pts = np.concatenate([_clean(c)[0] for c in curves] + [np.array([lo, hi])])
    pts = np.unique(pts[(pts >= lo) & (pts <= hi)])
    merged: list[float] = []
    for p in pts:
        if not merged or p - merged[-1] > rel_tol * max(abs(hi), 1.0):
            merged.append(float(p))
    merged[-1] = hi
    return np.asarray(merged)


def interpolate(curve: Curve, grid: np.ndarray) -> np.ndarray:
    """The curve at the grid's FLOPs (linear between evaluations; NaN outside the curve's range)."""
    x, y = _clean(curve)
    if len(x) == 0:
        return np.full(len(grid), NAN)
    out = np.interp(grid, x, y)
    out[(grid < x[0] - 1e-9 * max(abs(x[0]), 1)) | (grid > x[-1] + 1e-9 * max(abs(x[-1]), 1))] = NAN
    return out


def band(curves: Sequence[Curve], grid: np.ndarray, level: float = LEVEL) -> dict[str, np.ndarray]:
    """Per grid point: mean, t-interval low/high and n over the curves."""
    values = np.stack([interpolate(c, grid) for c in curves]) if curves else np.zeros((0, len(grid)))
    mean, low, high, n = (np.full(len(grid), NAN) for _ in range(4))
    finite = np.isfinite(values)
    columns: dict[bytes, list[int]] = {}  # grid points with the same curves present, tested together
    for j in range(len(grid)):
        columns.setdefault(finite[:, j].tobytes(), []).append(j)
    for group in columns.values():
        cols = np.asarray(group)
        # one row per grid point, contiguous: each reduced as t_interval reduces its 1-D sample (same bits)
        block = np.ascontiguousarray(values[finite[:, cols[0]]][:, cols].T)
        n[cols] = block.shape[1]
        if block.shape[1] == 0:
            continue
        mean[cols] = block.mean(axis=1)
        if block.shape[1] < 2:
            continue
        spread = block.std(axis=1, ddof=1) > 0
        low[cols[~spread]] = high[cols[~spread]] = mean[cols[~spread]]  # all equal: a zero-width interval
        if spread.any():
            test = _scipy_test(sps.ttest_1samp, block[spread], 0.0, axis=1)
            low[cols[spread]], high[cols[spread]] = test.confidence_interval(level)
    return {"flops": grid, "mean": mean, "low": low, "high": high, "n": n}


def mean_loss(curve: Curve, lo: float, hi: float) -> float:
    """Area under the curve over [lo, hi] divided by hi - lo (trapezoid over the curve's knots)."""
    x, y = _clean(curve)
    if len(x) == 0 or not hi > lo or lo < x[0] - 1e-9 * abs(x[0]) or hi > x[-1] + 1e-9 * abs(x[-1]):
        return NAN
    inner = x[(x > lo) & (x < hi)]
    xs = np.concatenate([[lo], inner, [hi]])
    ys = np.interp(xs, x, y)
    return float(np.trapezoid(ys, xs) / (hi - lo))


def value_at(curve: Curve, flops: float) -> float:
    return float(interpolate(curve, np.asarray([flops]))[0])


def flops_to_reach(curve: Curve, target: float) -> float | None:
    """First FLOPs at which the loss is <= target (linear between evaluations); None if never reached."""
    x, y = _clean(curve)
    below = np.nonzero(y <= target)[0]
    if len(below) == 0:
        return None
    i = int(below[0])
    if i == 0:
        return float(x[0])
    x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
    return float(x0 + (y0 - target) / (y0 - y1) * (x1 - x0))


def targets_from(mlm_curves: Sequence[Curve], fractions: Sequence[float]) -> dict[float, float]:
    """Target losses: the MLM arm's mean loss at each fraction of the common FLOP range (from its start)."""
    lo, hi = common_range(mlm_curves)
    out = {}
    for f in fractions:
        at = lo + f * (hi - lo)
        out[f] = float(np.nanmean([value_at(c, at) for c in mlm_curves]))
    return out


def log_ratio_interval(arm: Sequence[float | None], ref: Sequence[float | None], budget_arm: Sequence[float],
                       budget_ref: Sequence[float], paired_by_seed: bool = True, level: float = LEVEL) -> Interval:
    """Ratio of compute-to-target, arm / ref, as a geometric-mean ratio with a log-scale t-interval.

    ``None`` entries did not reach the target within their budget: they enter at their budget (the least they
    could need), and the result is flagged as a bound -- ``lower`` when only arm runs are censored (the arm
    needs at least this much more), ``upper`` when only ref runs are, and no interval when both are.
    """
    a = [v if v is not None else b for v, b in zip(arm, budget_arm, strict=True)]
    r = [v if v is not None else b for v, b in zip(ref, budget_ref, strict=True)]
    cens_a, cens_r = any(v is None for v in arm), any(v is None for v in ref)
    if any(v is None or not v > 0 for v in a + r):
        return Interval(NAN, NAN, NAN, 0, method="log t")
    la, lr = np.log(a), np.log(r)
    if paired_by_seed:
        ci = paired(la.tolist(), lr.tolist(), level)
        method = "paired t on log ratios"
    else:
        ci = welch(la.tolist(), lr.tolist(), level)
        method = "Welch t on log values"
    out = Interval(math.exp(ci.estimate), math.exp(ci.low) if math.isfinite(ci.low) else NAN,
                   math.exp(ci.high) if math.isfinite(ci.high) else NAN, ci.n, p=ci.p, df=ci.df, method=method)
    if cens_a and cens_r:
        out.low = out.high = NAN
        out.bound = "both censored"
    elif cens_a:
        out.bound = "lower"
    elif cens_r:
        out.bound = "upper"
    return out


# ------------------------------------------------------------------------------------------ arms
@dataclass
class ArmCurves:
    """The runs of one arm: per seed its (flops, loss) curve."""

    name: str
    seeds: list[int]
    curves: list[Curve]


def compare_pretraining(arms: dict[str, ArmCurves], reference: str, fractions: Sequence[float] = (0.5, 0.75),
                        level: float = LEVEL) -> dict[str, Any]:
    """Everything part 3 reports for a set of arms compared with `reference` (the MLM arm) at equal compute.

    Returns ``{"range", "grid", "bands", "per_run", "arms", "targets", "comparisons"}``: per arm the final loss
    and the mean loss over the common range (t-intervals over seeds), per target the FLOPs to reach it per run
    and the ratio to the reference (paired by seed where both arms have the seed), and per non-reference arm
    the paired and Welch differences of final and mean loss.
    """
    all_curves = [c for arm in arms.values() for c in arm.curves]
    lo, hi = common_range(all_curves)
    grid = common_grid(all_curves)
    out: dict[str, Any] = {"range": [lo, hi], "grid": grid.tolist(), "bands": {}, "per_run": [], "arms": {},
                           "targets": {}, "comparisons": {}}
    per_seed: dict[str, dict[int, dict[str, Any]]] = {}
    for name, arm in arms.items():
        b = band(arm.curves, grid, level)
        out["bands"][name] = {k: v.tolist() for k, v in b.items()}
        per_seed[name] = {}
        for seed, curve in zip(arm.seeds, arm.curves, strict=True):
            row = {"arm": name, "seed": seed, "final_loss": value_at(curve, hi), "mean_loss": mean_loss(curve, lo, hi),
                   "budget": float(_clean(curve)[0][-1])}
            per_seed[name][seed] = row
        rows = list(per_seed[name].values())
        out["arms"][name] = {"seeds": arm.seeds,
                             "final_loss": t_interval([r["final_loss"] for r in rows], level).as_dict(),
                             "mean_loss": t_interval([r["mean_loss"] for r in rows], level).as_dict()}
    ref = arms[reference]
    targets = targets_from(ref.curves, fractions)
    for f, target in targets.items():
        key = f"{int(round(f * 100))}%"
        out["targets"][key] = {"fraction": f, "loss": target, "at_flops": lo + f * (hi - lo)}
        for name, arm in arms.items():
            for seed, curve in zip(arm.seeds, arm.curves, strict=True):
                per_seed[name][seed][f"flops_to_{key}"] = flops_to_reach(curve, target)
    for rows in per_seed.values():
        out["per_run"].extend(rows.values())
    for name, arm in arms.items():
        if name == reference:
            continue
        common = [s for s in arm.seeds if s in per_seed[reference]]
        a = [per_seed[name][s] for s in common]
        r = [per_seed[reference][s] for s in common]
        comp: dict[str, Any] = {"paired_seeds": common}
        for metric in ("final_loss", "mean_loss"):
            pd = paired([x[metric] for x in a], [y[metric] for y in r], level)
            wd = welch([x[metric] for x in per_seed[name].values()],
                       [y[metric] for y in per_seed[reference].values()], level)
            comp[metric] = {"paired": pd.as_dict(), "welch": wd.as_dict()}
        for key in out["targets"]:
            ci = log_ratio_interval([x[f"flops_to_{key}"] for x in a], [y[f"flops_to_{key}"] for y in r],
                                    [x["budget"] for x in a], [y["budget"] for y in r], True, level)
            comp[f"ratio_to_{key}"] = {**ci.as_dict(),
                                       "not_reached": {"arm": sum(x[f"flops_to_{key}"] is None for x in a),
                                                       "reference": sum(y[f"flops_to_{key}"] is None for y in r)}}
        out["comparisons"][name] = comp
    return out


# ------------------------------------------------------------------------------------------ downstream
def compare_scores(scores: dict[str, Sequence[float]], reference: str, level: float = LEVEL) -> dict[str, Any]:
    """Per row (arm or baseline) mean ± std and t-interval of fine-tuning seeds' scores; each other row's
    difference to `reference` with Welch's interval and p-value."""
    out: dict[str, Any] = {"rows": {}, "comparisons": {}}
    for name, values in scores.items():
        out["rows"][name] = t_interval(values, level).as_dict()
    for name, values in scores.items():
        if name == reference or reference not in scores:
            continue
        ci = welch(values, scores[reference], level)
        out["comparisons"][name] = ci.as_dict()
    return out
